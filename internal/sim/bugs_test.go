package sim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// Bugs the simulation found in other packages, each kept as the seed that
// found it and a minimal reproduction. Both must pass; each failed before
// its fix. A seed replays the world that found its bug only under the op
// mix of its day: seeds 119 and 200 predate the claim races, streams, torn
// crash clones and lost etcd answers, and now run as two more seeds; the
// minimal reproductions are the regression tests proper.

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

// holdWALOpen holds a claimant inside its read-only scan of the WAL: the
// first Open of a segment file waits until released, after the claimant
// listed the directory.
type holdWALOpen struct {
	vfs.FS
	walDir string
	g      *holdGate
}

type holdGate struct {
	once          sync.Once
	held, release chan struct{}
}

func (f *holdWALOpen) Open(name string) (vfs.File, error) {
	if filepath.Dir(name) == f.walDir && strings.HasSuffix(name, ".wal") {
		first := false
		f.g.once.Do(func() { first = true; close(f.g.held) })
		if first {
			<-f.g.release
		}
	}
	return f.FS.Open(name)
}

// Bug (fixed in c8e5810; found by claim races in which a claimant stalled
// inside its claim): a claimant lists the WAL segments in its read-only
// scan (wal.ReadTail, the claim's prepare), another process wins the
// shard, flushes and removes a segment wholly below its replay cursor, and
// the claimant's Open of that listed segment failed the whole claim with
// ENOENT: Host.Open returned an error instead of reading again and waiting
// for the owner.
func TestSimulationSeed18_ReadTailMeetsRemovedSegment(t *testing.T) {
	regressionSeed(t, 18, 100)
}

func TestReadTailMeetsRemovedSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem := vfs.NewStrictMem()
	table := etcdtest.Name(t, "", 100)
	walDir := filepath.Join(dataDir, table, "shards", "s0", "wal")

	// Epoch 1 leaves a flushed segment behind.
	first := bugOptions(t, mem, table, 5*time.Second)
	first.NoFlushOnClose = false
	h1 := newBugHost(t, first)
	appendBug(t, mustOpenBug(t, h1, "s0"), "a", 3)
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The claimant is held after listing the segments.
	g := &holdGate{held: make(chan struct{}), release: make(chan struct{})}
	lo := bugOptions(t, &holdWALOpen{FS: mem, walDir: walDir, g: g}, table, 5*time.Second)
	lo.WriterID = "claimant"
	claimant := newBugHost(t, lo)
	done := make(chan error, 1)
	go func() {
		_, err := claimant.Open(ctx, "s0")
		done <- err
	}()
	<-g.held

	// Meanwhile the winner claims epoch 2, flushes (the epoch-1 segment is
	// now wholly below the replay cursor and removed) and goes.
	wo := bugOptions(t, mem, table, 5*time.Second)
	wo.WriterID = "winner"
	winner := newBugHost(t, wo)
	ws := mustOpenBug(t, winner, "s0")
	appendBug(t, ws, "b", 3)
	if _, err := ws.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if names, _ := mem.List(walDir); slices.Contains(names, fmt.Sprintf("%020d-%06d.wal", 1, 1)) {
		t.Fatalf("the epoch-1 segment is still there (%v): the reproduction proves nothing", names)
	}
	if err := winner.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatalf("the claimant's open failed once the winner removed a segment it had listed: %v", err)
	}
}

// Bug (fixed in c8e5810; found by the etcd-lost op): an open whose claim
// committed fails later (here: its replay's commit applies, the answer is
// lost and the read-back fails, so the outcome is unknown), and its one
// attempt to release the owner key failed too. The key stayed, bound to the
// host's live lease: every other host's claim waited for its DELETE, which
// did not come while the host lived, and the same host's next Open took the
// key for its own earlier claim, found the manifest moved since (by its own
// replay commit) and failed with ErrFenced ("our claim ... applied late,
// but ... moved since"). The shard was stuck until the process restarted.
func TestSimulationSeed39_FailedOpenLeavesItsOwnerKey(t *testing.T) {
	regressionSeed(t, 39, 100)
}

func TestFailedOpenLeavesItsOwnerKey(t *testing.T) {
	for _, reopen := range []string{"another host", "the same host"} {
		t.Run(reopen, func(t *testing.T) {
			ctx := context.Background()
			table := etcdtest.Name(t, "", 100)
			mem := vfs.NewStrictMem()
			// A WAL tail to replay, larger than the next writer's
			// FlushBytes, so that its replay commits a generation.
			h1 := newBugHost(t, bugOptions(t, mem, table, 5*time.Second))
			s1 := mustOpenBug(t, h1, "s0")
			for i := range 8 {
				appendBug(t, s1, fmt.Sprintf("a%d", i), 5)
			}
			if err := h1.Close(ctx); err != nil {
				t.Fatal(err)
			}

			// The replay's commit applies and its answer is lost; then etcd
			// fails the read-back that would resolve it and the release.
			faults := &etcdFaults{lost: new(atomic.Int32), fired: new(atomic.Int32)}
			faults.arm(matchCommit, 4)
			cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Server(t).Endpoints(), DialTimeout: 5 * time.Second,
				DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(faults.intercept)}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			o2 := bugOptions(t, mem, table, 2*time.Second)
			o2.Etcd, o2.FlushBytes, o2.RequestTimeout = cli, 1<<10, time.Second
			h2 := newBugHost(t, o2)
			if _, err := h2.Open(ctx, "s0"); err == nil || faults.fired.Load() != 1 {
				t.Fatalf("open with the replay's commit answer lost and its read-back failing: %v (answers lost: %d); want it to fail",
					err, faults.fired.Load())
			}

			octx, cancel := context.WithTimeout(ctx, 2*o2.LeaseTTL)
			defer cancel()
			h := h2
			if reopen == "another host" {
				o3 := bugOptions(t, mem, table, 2*time.Second)
				o3.WriterID = "other"
				h = newBugHost(t, o3)
			}
			s, err := h.Open(octx, "s0")
			if err != nil {
				t.Fatalf("%s opens the shard after the failed open: %v", reopen, err)
			}
			st := s.Status()
			rows := st.MemtableRows
			for _, g := range st.Flushed {
				rows += int(g.Rows)
			}
			if rows != 40 {
				t.Errorf("%s holds %d rows in its memtable and committed generations, want 40", reopen, rows)
			}
		})
	}
}

func newBugHost(t *testing.T, o engine.Options) *engine.Host {
	t.Helper()
	h, err := engine.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func mustOpenBug(t *testing.T, h *engine.Host, shard string) *engine.Shard {
	t.Helper()
	s, err := h.Open(context.Background(), shard)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func appendBug(t *testing.T, s *engine.Shard, prefix string, n int) {
	t.Helper()
	rows := make([]schema.Row, n)
	for i := range rows {
		rows[i] = schema.Row{"id": fmt.Sprintf("%s-%d", prefix, i), "prompt": "p", "completion": strings.Repeat("c", 100)}
	}
	if _, err := s.Append(context.Background(), rows, engine.Source{}); err != nil {
		t.Fatal(err)
	}
}
