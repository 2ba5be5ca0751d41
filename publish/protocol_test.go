package publish

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/shardmeta"
)

func u64(v uint64) *uint64 { return &v }

// oneShard writes two flushed generations of 10 rows to shard s0 (epoch 1)
// and closes the writer.
func oneShard(e *env) {
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "a", 0, 10)
	e.flush(s)
	e.appendRows(s, "a", 10, 10)
	e.flush(s)
	if err := h.Close(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) putState(st *shardmeta.BaseState) {
	e.t.Helper()
	data, err := st.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := etcdClient.Put(e.ctx, e.keys().BaseState(), string(data)); err != nil {
		e.t.Fatal(err)
	}
}

func TestLegacyStateOneConservativeTransition(t *testing.T) {
	e := newEnv(t)
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "a", 0, 10)
	e.flush(s)
	c := e.coordinator()
	e.runOnce(c)
	// Rewrite the state as a legacy coordinator left it: a cutoff, no epoch.
	st, _ := e.state()
	ms := st.Shards["s0"]
	ms.ObservedEpoch, ms.Cutoff = nil, u64(1)
	st.Shards["s0"] = ms
	e.putState(st)

	e.appendRows(s, "b", 0, 10)
	e.flush(s) // 2
	e.appendRows(s, "b", 10, 10)
	e.flush(s) // 3; active is 4
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := genFlags(p, "s0"); !f[2] || !f[3] || len(f) != 2 {
		t.Fatalf("legacy transition: plan %v, want 2 and 3 ID-checked", f)
	}
	st, _ = e.state()
	if ms := st.Shards["s0"]; ms.ObservedEpoch == nil || *ms.ObservedEpoch != 1 || *ms.Cutoff != 4 {
		t.Fatalf("after the transition: %+v, want epoch 1 cutoff 4 (the active generation)", ms)
	}
	staged, err := c.Stage(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	e.appendRows(s, "c", 0, 5)
	e.flush(s) // 4: at the cutoff
	e.appendRows(s, "c", 5, 5)
	e.flush(s) // 5: above it
	p, err = c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := genFlags(p, "s0"); !f[4] || f[5] || len(f) != 2 {
		t.Fatalf("after the transition: plan %v, want 4 checked and 5 lookup-free", f)
	}
	if st2, _ := e.state(); *st2.Shards["s0"].Cutoff != 4 {
		t.Fatalf("cutoff moved within the epoch: %d", *st2.Shards["s0"].Cutoff)
	}
	e.runOnce(c)
	e.wantAllIDs()
}

func TestMalformedOrRegressingEpochFailsClosed(t *testing.T) {
	for name, tc := range map[string]struct {
		raw  string
		want []string
	}{
		"unparsable":      {`{"version":1,"files":[],"shards":{"s0":{"watermark":0,"observed_epoch":"x","cutoff":1}}}`, []string{"observed_epoch", "want a number"}},
		"epoch-no-cutoff": {`{"version":0,"files":[],"shards":{"s0":{"watermark":0,"observed_epoch":1}}}`, []string{`shard "s0"`, "no cutoff"}},
		"regression":      {`{"version":0,"files":[],"shards":{"s0":{"watermark":0,"observed_epoch":7,"cutoff":1}}}`, []string{`shard "s0"`, "observed epoch 7 is above the manifest's writer_epoch 1"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			oneShard(e)
			if _, err := etcdClient.Put(e.ctx, e.keys().BaseState(), tc.raw); err != nil {
				t.Fatal(err)
			}
			c := e.coordinator()
			_, err := c.Plan(e.ctx)
			if err == nil {
				t.Fatal("planned against bad state")
			}
			if !errors.Is(err, ErrInvalidState) {
				t.Fatalf("error %v is not ErrInvalidState", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if _, err := c.RunOnce(e.ctx); !errors.Is(err, ErrInvalidState) {
				t.Fatalf("RunOnce: %v", err)
			}
			resp, err := etcdClient.Get(e.ctx, e.keys().BaseState())
			if err != nil || string(resp.Kvs[0].Value) != tc.raw {
				t.Fatalf("state changed: %v %s", err, resp.Kvs[0].Value)
			}
			if _, err := os.Stat(filepath.Join(e.dir, e.table, "base", "data")); !os.IsNotExist(err) {
				t.Fatalf("base data directory written: %v", err)
			}
			if tbl := e.baseTable(); tbl.CurrentSnapshot() != nil {
				t.Fatalf("the base table has a snapshot: %s", tbl.MetadataLocation())
			}
			// Repair it (delete the state) so that the cleanup's invariant
			// check can read the base.
			if _, err := etcdClient.Delete(e.ctx, e.keys().BaseState()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRevokedCoordinatorCannotCommit(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c1 := e.coordinator()
	_, staged := e.planStage(c1)
	if _, err := etcdClient.Revoke(e.ctx, c1.Lease()); err != nil {
		t.Fatal(err)
	}
	before, rev := e.state()
	if err := c1.Commit(e.ctx, staged); !errors.Is(err, ErrLockLost) {
		t.Fatalf("revoked coordinator's commit: %v, want ErrLockLost", err)
	}
	after, rev2 := e.state()
	if after.Version != before.Version || rev2 != rev || len(e.baseFiles()) != 0 {
		t.Fatalf("a revoked coordinator changed the base: v%d→v%d, rev %d→%d", before.Version, after.Version, rev, rev2)
	}
	c2 := e.coordinator()
	if r := e.runOnce(c2); r.RowsStaged != 20 {
		t.Fatalf("successor staged %d rows, want 20", r.RowsStaged)
	}
	if r := e.runOnce(c2); r.Passes != 0 {
		t.Fatalf("second run did %d passes", r.Passes)
	}
	if err := c1.Commit(e.ctx, staged); err == nil {
		t.Fatal("the revoked coordinator committed after its successor")
	}
	e.wantAllIDs()
	// The revoked coordinator's staged files are garbage; a new coordinator
	// removes them.
	c2.Close()
	e.coordinator()
	names, _ := os.ReadDir(filepath.Join(e.dir, e.table, "base", "data", "s0"))
	if committed := e.baseFiles(); len(names) != len(committed) {
		t.Fatalf("%d files in base/data/s0, %d committed", len(names), len(committed))
	}
}

func TestCommitBeforeDrainRecovery(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c := e.coordinator()
	crash := errors.New("crash after the base commit")
	c.testHookAfterCommit = func() error { return crash }
	_, staged := e.planStage(c)
	if err := c.Commit(e.ctx, staged); !errors.Is(err, crash) {
		t.Fatal(err)
	}
	st, _ := e.state()
	if st.Version != 1 {
		t.Fatalf("version %d after the commit", st.Version)
	}
	if _, ok, _ := LatestReaderManifest(e.fs.FS, c.BaseDir()); ok {
		t.Fatal("readers' manifest written despite the crash")
	}
	c.Close()
	c2 := e.coordinator()
	if err := c2.Commit(e.ctx, staged); err != nil { // the repeat is a no-op
		t.Fatalf("repeat commit: %v", err)
	}
	r := e.runOnce(c2)
	if r.RowsStaged != 0 || r.Version != 1 {
		t.Fatalf("rerun staged %d rows at version %d", r.RowsStaged, r.Version)
	}
	if m, ok, err := LatestReaderManifest(e.fs.FS, c2.BaseDir()); !ok || err != nil || m.Version != 1 || m.Rows != 20 {
		t.Fatalf("repaired readers' manifest: %+v %v %v", m, ok, err)
	}
	// The owner's drain (simulated: the engine does it on its next commit)
	// changes nothing in the base.
	e.drain("s0", false)
	if r := e.runOnce(c2); r.Passes != 0 {
		t.Fatalf("after the drain: %+v", r)
	}
	e.wantAllIDs()
}

func TestStalePrefixRejected(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c := e.coordinator(func(o *Options) { o.MemoryBudget = 1 })
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Stage(e.ctx, p) // generation 1 only
	if err != nil {
		t.Fatal(err)
	}
	if first.Complete || first.Parts[0].Last != 1 {
		t.Fatalf("budget: %+v", first.Parts)
	}
	c.opts.MemoryBudget = 1 << 30
	whole, err := c.Stage(e.ctx, p) // generations 1 and 2
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(e.ctx, first); err != nil {
		t.Fatal(err)
	}
	err = c.Commit(e.ctx, whole)
	if !errors.Is(err, ErrStalePrefix) || !strings.Contains(err.Error(), "stale prefix; replan") || !strings.Contains(err.Error(), `shard "s0"`) {
		t.Fatalf("stale prefix: %v", err)
	}
	if err := c.Commit(e.ctx, first); err != nil {
		t.Fatalf("repeat of a landed commit: %v", err)
	}
	if st, _ := e.state(); st.Version != 1 {
		t.Fatalf("version %d", st.Version)
	}
	e.runOnce(c)
	e.wantAllIDs()
}

func TestUnknownOutcomeIsResolvedByReadBack(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c := e.coordinator()
	_, staged := e.planStage(c)
	// Lost before it reached etcd: the read-back proves it did not apply.
	c.testHookBeforeCommitTxn = func() error { return context.DeadlineExceeded }
	if err := c.Commit(e.ctx, staged); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("lost request: %v, want ErrNotApplied", err)
	}
	if st, _ := e.state(); st.Version != 0 {
		t.Fatalf("version %d after a request that never applied", st.Version)
	}
	c.testHookBeforeCommitTxn = nil
	// Applied, response lost: the read-back finds exactly the state sent.
	var txns int
	c.testHookCommit = func(err error) error {
		txns++
		if err != nil {
			return err
		}
		return context.DeadlineExceeded
	}
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatalf("applied commit with a lost response: %v", err)
	}
	if txns != 1 {
		t.Fatalf("%d commit transactions, want 1 (no blind retry)", txns)
	}
	st, _ := e.state()
	if st.Version != 1 || st.Shards["s0"].Watermark != 2 {
		t.Fatalf("state after the read-back: %+v", st)
	}
	if m, ok, _ := LatestReaderManifest(e.fs.FS, c.BaseDir()); !ok || m.Version != 1 {
		t.Fatal("readers' manifest missing after a resolved commit")
	}
	c.testHookCommit = nil
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatalf("repeat: %v", err)
	}
	e.wantAllIDs()
}

// TestUnknownOutcomeWhenReadBackFails: the commit applied, its response was
// lost and reading the state back fails too. Commit reports
// ErrUnknownOutcome and assumes nothing; the next pass finds the part
// already merged (a no-op), writes the readers' manifest, and adds no row.
func TestUnknownOutcomeWhenReadBackFails(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c := e.coordinator()
	_, staged := e.planStage(c)
	var txns int
	c.testHookCommit = func(err error) error {
		txns++
		if err != nil {
			return err
		}
		return context.DeadlineExceeded
	}
	c.testHookReadBack = func(error) error { return errors.New("etcd unreachable") }
	err := c.Commit(e.ctx, staged)
	if !errors.Is(err, ErrUnknownOutcome) || !strings.Contains(err.Error(), "etcd unreachable") {
		t.Fatalf("commit with a lost response and a failed read-back: %v, want ErrUnknownOutcome naming the read error", err)
	}
	if txns != 1 {
		t.Fatalf("%d commit transactions, want 1 (no blind retry)", txns)
	}
	if _, ok, _ := LatestReaderManifest(e.fs.FS, c.BaseDir()); ok {
		t.Fatal("readers' manifest written for an outcome nobody knows")
	}
	c.testHookCommit, c.testHookReadBack = nil, nil
	r := e.runOnce(c)
	if r.RowsStaged != 0 || r.Version != 1 {
		t.Fatalf("rerun after the unknown outcome: %+v, want nothing staged at version 1", r)
	}
	if m, ok, _ := LatestReaderManifest(e.fs.FS, c.BaseDir()); !ok || m.Version != 1 {
		t.Fatal("rerun did not repair the readers' manifest")
	}
	e.wantAllIDs()
}

// TestShardRewrittenBehindPlanIsRejected: between stage and commit the
// shard's manifest stops listing a planned generation as it was planned
// (here: an operator rewrote it). Commit refuses with ErrBaseMoved and lands
// nothing; after the manifest is restored a new pass publishes every row
// once.
func TestShardRewrittenBehindPlanIsRejected(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c := e.coordinator()
	_, staged := e.planStage(c)
	m, err := engine.LoadManifest(e.ctx, etcdClient, "rollwal", e.table, "s0")
	if err != nil {
		t.Fatal(err)
	}
	orig := m.Clone()
	m.Flushed[1].Rows++
	e.putManifest("s0", m)
	err = c.Commit(e.ctx, staged)
	if !errors.Is(err, ErrBaseMoved) || !strings.Contains(err.Error(), "generation 2") {
		t.Fatalf("commit against a rewritten shard: %v, want ErrBaseMoved naming generation 2", err)
	}
	if st, _ := e.state(); st.Version != 0 || len(e.baseFiles()) != 0 {
		t.Fatalf("state after a refused commit: %+v", st)
	}
	e.putManifest("s0", orig)
	if r := e.runOnce(c); r.RowsStaged != 20 {
		t.Fatalf("pass after the restore staged %d rows, want 20", r.RowsStaged)
	}
	e.wantAllIDs()
}

// failingManifestReads is an etcd KV whose reads of shard manifests fail
// as a timed-out request does.
type failingManifestReads struct {
	clientv3.KV
	fail *atomic.Bool
}

func (f failingManifestReads) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if f.fail.Load() && strings.HasSuffix(key, "/manifest") && strings.Contains(key, "/shards/") {
		return nil, context.DeadlineExceeded
	}
	return f.KV.Get(ctx, key, opts...)
}

// TestPlanTimeoutIsNotDamage: a shard manifest that cannot be read because
// etcd did not answer in time fails the plan with that error, not as
// ErrInvalidState (which merge --every takes for damage and stops on, as
// the soak saw when etcd stalled); the next pass merges. A manifest that
// is there and malformed is still ErrInvalidState (TestMalformedOrRegressingEpochFailsClosed).
func TestPlanTimeoutIsNotDamage(t *testing.T) {
	e := newEnv(t)
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "a", 0, 10)
	e.flush(s)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdClient.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	fail := &atomic.Bool{}
	cli.KV = failingManifestReads{KV: cli.KV, fail: fail}
	c := e.coordinator(func(o *Options) { o.Etcd = cli })
	fail.Store(true)
	_, err = c.Plan(e.ctx)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrInvalidState) {
		t.Fatalf("plan with the shard manifest unreadable: %v; want the deadline, not ErrInvalidState", err)
	}
	fail.Store(false)
	if r := e.runOnce(c); r.RowsStaged != 10 {
		t.Fatalf("the next pass staged %d rows, want 10", r.RowsStaged)
	}
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantAllIDs()
}
