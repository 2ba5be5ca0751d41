package engine

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/vfs"
)

// TestHostCloseStopsItsGoroutines: once Close returns, no goroutine the
// host started is left — not the watcher of each lease it granted (it waited
// for a loss that never came, one per Host), not the keepalive loop of a
// lease marked lost by a re-claim's check, not a re-claim. Each case runs
// on its own etcd client, closed before the goroutines are counted, so only
// the host's goroutines can remain.
func TestHostCloseStopsItsGoroutines(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, h *Host)
	}{
		{"open-close", func(t *testing.T, h *Host) {
			mustOpen(t, h, "s0")
		}},
		{"lease-replaced", func(t *testing.T, h *Host) {
			mustOpen(t, h, "s0")
			revoke(t, h)
			h.checkLeaseAlive(context.Background()) // marks it lost before its keepalive loop learns it
			if !h.lease.isLost() {
				t.Fatal("the revoked lease is not marked lost")
			}
			mustOpen(t, h, "s1") // grants a new lease
		}},
		{"re-claim", func(t *testing.T, h *Host) {
			h.opts.ReclaimOnFence = true
			s := mustOpen(t, h, "s0")
			revoke(t, h)
			waitFor(t, "the shard to be claimed again", func() bool {
				next, _ := h.Shard("s0")
				return next != nil && next != s
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
			opts.Etcd, opts.LeaseTTL = cli, 2*time.Second
			h := openHost(t, opts)
			c.run(t, h)
			if err := h.Close(context.Background()); err != nil {
				t.Errorf("close: %v", err)
			}
			if err := cli.Close(); err != nil {
				t.Errorf("close etcd client: %v", err)
			}
			goleak.VerifyNone(t, before)
		})
	}
}

func revoke(t *testing.T, h *Host) {
	t.Helper()
	if _, err := etcdClient.Revoke(context.Background(), h.lease.id); err != nil {
		t.Fatal(err)
	}
}
