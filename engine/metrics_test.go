package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rollwal/rollwal/vfs"
)

// TestMetricsOnInjectedRegistry: the host registers its metrics on the
// registerer it is given, and they count what happened.
func TestMetricsOnInjectedRegistry(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Registerer = reg
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("m", 0, 7), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rows("m", 5, 4), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"writer_rows_appended_total":         9,
		"writer_rows_duplicate_total":        2,
		"writer_generations_committed_total": 1,
		"writer_epoch":                       1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// sample is the value of the series name{labels} that reg serves, and
// whether it is there at all.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// wantSample fails the test unless reg serves name{labels} = want.
func wantSample(t *testing.T, who string, reg *prometheus.Registry, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := sample(t, reg, name, labels...)
	if !ok || got != want {
		t.Fatalf("%s: %s%v = %v (present %v), want %v", who, name, labels, got, ok, want)
	}
}

// TestOwnershipMetrics: writer_shard_owned, writer_epoch and
// writer_claims_total follow a shard from host to host, and the lease
// series report a lost lease. A claims the shard (owned, epoch E, one
// claim); B's claim gives up while A owns it (failed, not owned); A's lease
// is revoked, so A is fenced and owns nothing any more; B claims epoch E+1;
// B's close leaves it owning nothing.
func TestOwnershipMetrics(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.LeaseTTL = 2 * time.Second
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	aopts, bopts := opts, opts
	aopts.Registerer, bopts.Registerer = regA, regB
	a := openHost(t, aopts)
	defer a.Close(ctx)
	b := openHost(t, bopts)
	defer b.Close(ctx)

	wantSample(t, "A before any claim", regA, 0, "writer_lease_valid_seconds")
	if _, ok := sample(t, regA, "writer_shard_owned", "shard", "s0"); ok {
		t.Fatal("A serves writer_shard_owned before any claim")
	}

	sa := mustOpen(t, a, "s0")
	e := sa.Epoch()
	wantSample(t, "A after its claim", regA, 1, "writer_shard_owned", "shard", "s0")
	wantSample(t, "A after its claim", regA, float64(e), "writer_epoch", "shard", "s0")
	if err := testutil.GatherAndCompare(regA, strings.NewReader(`
# HELP writer_claims_total Claims of the shard, by result (claimed, adopted, failed).
# TYPE writer_claims_total counter
writer_claims_total{result="claimed",shard="s0"} 1
`), "writer_claims_total"); err != nil {
		t.Fatalf("A after its claim: %v", err)
	}
	if v, _ := sample(t, regA, "writer_lease_valid_seconds"); v <= 0 || v > opts.LeaseTTL.Seconds() {
		t.Fatalf("A's writer_lease_valid_seconds = %v with a live lease of TTL %v", v, opts.LeaseTTL)
	}

	// B waits for A's owner key and gives up: a failed claim, no ownership.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.Open(cctx, "s0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B's Open of the shard A owns, with a 300ms ctx: %v; want the deadline", err)
	}
	wantSample(t, "B after a claim that gave up", regB, 1, "writer_claims_total", "shard", "s0", "result", "failed")
	if v, ok := sample(t, regB, "writer_shard_owned", "shard", "s0"); ok && v != 0 {
		t.Fatalf("B: writer_shard_owned = %v after a claim that gave up", v)
	}

	// A's lease is lost: its keepalive learns it, its shard is fenced.
	if _, err := etcdClient.Revoke(ctx, a.lease.id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's writer_shard_owned to drop to 0", func() bool {
		v, _ := sample(t, regA, "writer_shard_owned", "shard", "s0")
		return v == 0
	})
	wantSample(t, "A after its lease was revoked", regA, 1, "writer_fenced", "shard", "s0")
	wantSample(t, "A after its lease was revoked", regA, 1, "writer_lease_lost_total", "reason", "expired")
	wantSample(t, "A after its lease was revoked", regA, 0, "writer_lease_valid_seconds")

	sb := mustOpen(t, b, "s0")
	if sb.Epoch() != e+1 {
		t.Fatalf("B claimed epoch %d, want %d", sb.Epoch(), e+1)
	}
	wantSample(t, "B after its claim", regB, 1, "writer_shard_owned", "shard", "s0")
	wantSample(t, "B after its claim", regB, float64(e+1), "writer_epoch", "shard", "s0")
	if err := testutil.GatherAndCompare(regB, strings.NewReader(`
# HELP writer_claims_total Claims of the shard, by result (claimed, adopted, failed).
# TYPE writer_claims_total counter
writer_claims_total{result="claimed",shard="s0"} 1
writer_claims_total{result="failed",shard="s0"} 1
`), "writer_claims_total"); err != nil {
		t.Fatalf("B after its claim: %v", err)
	}
	wantSample(t, "A after B's claim", regA, 0, "writer_shard_owned", "shard", "s0")
	wantSample(t, "A after B's claim", regA, float64(e), "writer_epoch", "shard", "s0")

	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantSample(t, "B after its close", regB, 0, "writer_shard_owned", "shard", "s0")
	wantSample(t, "B after its close", regB, 0, "writer_lease_valid_seconds")
	if _, ok := sample(t, regB, "writer_lease_lost_total"); ok {
		t.Fatal("B counts a lost lease after a clean close")
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantSample(t, "A after its close", regA, 0, "writer_shard_owned", "shard", "s0")
	wantSample(t, "A after its close", regA, 1, "writer_claims_total", "shard", "s0", "result", "claimed")
}

// hangingKeepalives makes every lease keepalive of a client hang (as a
// paused member would) while set.
type hangingKeepalives struct{ on atomic.Bool }

func (h *hangingKeepalives) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method == "/etcdserverpb.Lease/LeaseKeepAlive" && h.on.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// TestLeaseKeepaliveFailureMetrics: a keepalive that gets no answer is
// counted and the lease's validity runs down; once keepalives are answered
// again it is renewed, and nothing was lost or fenced.
func TestLeaseKeepaliveFailureMetrics(t *testing.T) {
	ctx := context.Background()
	hang := &hangingKeepalives{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(hang.intercept)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Etcd, opts.LeaseTTL = cli, 5*time.Second // keepalive every 1.67s, an attempt 1.25s, margin 1s
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	h := openHost(t, opts)
	defer h.Close(ctx)
	mustOpen(t, h, "s0")
	wantSample(t, "after the claim", reg, 0, "writer_lease_keepalive_failures_total")

	hang.on.Store(true)
	waitFor(t, "a keepalive failure to be counted", func() bool {
		v, _ := sample(t, reg, "writer_lease_keepalive_failures_total")
		return v >= 1
	})
	hang.on.Store(false)
	low, _ := sample(t, reg, "writer_lease_valid_seconds")
	waitFor(t, "the lease to be renewed", func() bool {
		v, _ := sample(t, reg, "writer_lease_valid_seconds")
		return v > low
	})
	wantSample(t, "after the renewal", reg, 1, "writer_shard_owned", "shard", "s0")
	if _, ok := sample(t, reg, "writer_lease_lost_total"); ok {
		t.Fatal("writer_lease_lost_total is served: a lease was lost")
	}
	if _, ok := sample(t, reg, "writer_fenced", "shard", "s0"); ok {
		t.Fatal("the shard was fenced")
	}
}
