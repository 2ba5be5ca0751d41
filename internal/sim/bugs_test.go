package sim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// Bugs the simulation found in other packages, each kept as the seed that
// found it and a minimal reproduction. Both must pass; each failed before
// its fix.

// regressionSeed replays a seed that once failed; it must now pass.
func regressionSeed(t *testing.T, seed uint64, steps int) {
	t.Helper()
	if !runSeed(t, etcd.Server(t), seed, steps) {
		t.Errorf("seed %d fails again", seed)
	}
}

// Bug (fixed in 5e34ed3): engine.openShard panicked (nil pointer:
// s.set.Close() on a memtable set that did not exist yet) when recover()
// failed in removeGarbage, which runs before the set is made: a filesystem
// error while listing or removing an uncommitted generation file at open
// killed the process instead of failing the open. The seed reaches a crash
// point on the Remove of a failed flush attempt's file during a claim (at
// step 50).
func TestSimulationSeed119_OpenPanicsWhenGarbageRemovalFails(t *testing.T) {
	regressionSeed(t, 119, 100)
}

func TestOpenPanicsWhenGarbageRemovalFails(t *testing.T) {
	ctx := context.Background()
	table := etcdtest.Name(t, "", 100)
	inj := &vfs.Injector{}
	fs := vfs.Inject(vfs.NewStrictMem(), inj)
	opts := bugOptions(t, fs, table, 2*time.Second)
	// Garbage, as a failed flush attempt leaves it: a temp generation file.
	dir := filepath.Join(dataDir, table, "shards", "s0", "gen")
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(filepath.Join(dir, ".tmp-g00000000000000000001-e00000000000000000001-0badf00d.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	inj.FailAt(inj.Count(vfs.OpRemove)+1, vfs.OpRemove, nil) // the garbage's removal fails
	h, err := engine.NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Open panicked instead of failing: %v\n%s", r, debug.Stack())
			}
		}()
		if _, err := h.Open(ctx, "s0"); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("Open with a failing garbage removal: %v; want the injected error", err)
		}
	}()
}

// Bug (fixed in 3be58bb): after a writer's lease was revoked, a commit that
// found the owner key gone fenced the shard before the keepalive loop
// learned the lease was lost (it renews every TTL/3). Host.Reclaim (and so
// ReclaimOnFence's background re-claim) then claimed with the host's old
// lease, because ensureLease only replaced a lease marked lost: the claim
// failed with "requested lease not found", and with ReclaimOnFence the
// background re-claim logged that and never tried again, leaving the shard
// unowned on that host for good. The seed revokes a host's lease while its
// producers fill a small memtable (so a background flush finds the fence)
// and re-claims on the same host (step 39).
func TestSimulationSeed200_ReclaimReusesRevokedLease(t *testing.T) {
	regressionSeed(t, 200, 100)
}

func TestReclaimReusesRevokedLease(t *testing.T) {
	ctx := context.Background()
	// A long TTL: the keepalive (every TTL/3) must not notice the revoke
	// before the flush does, as it often does not in production.
	for _, background := range []bool{false, true} {
		t.Run(fmt.Sprintf("reclaim-on-fence=%v", background), func(t *testing.T) {
			table := etcdtest.Name(t, "", 100)
			opts := bugOptions(t, vfs.NewStrictMem(), table, 9*time.Second)
			opts.ReclaimOnFence = background
			h, err := engine.NewHost(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(ctx)
			s, err := h.Open(ctx, "s0")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, []schema.Row{{"id": "a", "prompt": "p", "completion": "c"}}, engine.Source{}); err != nil {
				t.Fatal(err)
			}
			revokeOwner(t, opts.Etcd, table, "s0")
			if _, err := s.Flush(ctx); !errors.Is(err, engine.ErrFenced) {
				t.Fatalf("flush after the revoke: %v; want ErrFenced", err)
			}
			if !background {
				s2, err := h.Reclaim(ctx, "s0")
				if err != nil {
					t.Fatalf("Reclaim after a fence: %v; want a new lease and epoch 2", err)
				}
				if s2.Epoch() != 2 {
					t.Fatalf("Reclaim claimed epoch %d, want 2", s2.Epoch())
				}
				return
			}
			// The background re-claim has a lease TTL and more to succeed.
			deadline := time.Now().Add(2 * opts.LeaseTTL)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				if s2, ok := h.Shard("s0"); ok && s2 != s && s2.Epoch() == 2 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("ReclaimOnFence: shard s0 not claimed again within %v of the fence", 2*opts.LeaseTTL)
				}
				<-tick.C
			}
		})
	}
}

func bugOptions(t *testing.T, fs vfs.FS, table string, ttl time.Duration) engine.Options {
	t.Helper()
	return engine.Options{
		DataDir: dataDir, FS: fs, Table: table, Prefix: prefix, Etcd: etcd.Server(t).Client(),
		LeaseTTL: ttl, RequestTimeout: 5 * time.Second, FlushAge: -1, NoFlushOnClose: true,
		WALSegmentSize: 64 << 10, FlushBytes: 1 << 20, MemoryBudget: 64 << 20,
	}
}

func revokeOwner(t *testing.T, cli *clientv3.Client, table, shard string) {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.Get(ctx, shardmeta.Keys{Prefix: prefix, Table: table}.Owner(shard))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("owner key of %s: %v", shard, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}
