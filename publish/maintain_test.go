package publish

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// smallCompaction compacts as soon as a shard has 4 small files, and only
// when the test calls Compact.
func smallCompaction(o *Options) {
	o.Compaction = Compaction{MinFiles: 4, TargetBytes: 64 << 20, Disabled: true}
}

// placed is where a row is in the base: its WAL position and epoch.
type placed struct{ seq, epoch int64 }

// rowsByID scans the base table with iceberg-go.
func (e *env) rowsByID(snapshot ...int64) map[string]placed {
	e.t.Helper()
	opts := []table.ScanOption{table.WithSelectedFields("id", "_seq", "_epoch")}
	if len(snapshot) > 0 {
		opts = append(opts, table.WithSnapshotID(snapshot[0]))
	}
	at, err := e.baseTable().Scan(opts...).ToArrowTable(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer at.Release()
	out := map[string]placed{}
	rdr := array.NewTableReader(at, 0)
	defer rdr.Release()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		col := func(name string) int { return rec.Schema().FieldIndices(name)[0] }
		ids := rec.Column(col("id")).(*array.String)
		seqs, epochs := rec.Column(col("_seq")).(*array.Int64), rec.Column(col("_epoch")).(*array.Int64)
		for i := range int(rec.NumRows()) {
			if _, dup := out[ids.Value(i)]; dup {
				e.t.Fatalf("id %s twice in the scan", ids.Value(i))
			}
			out[ids.Value(i)] = placed{seqs.Value(i), epochs.Value(i)}
		}
	}
	return out
}

// sixMerges merges six generations of 10 rows of s0, one per pass, and
// returns the replay cursor that makes a successor replay the last one.
func (e *env) sixMerges(c *Coordinator) uint64 {
	e.t.Helper()
	h := e.host(false)
	s := e.open(h, "s0")
	for i := range 6 {
		e.appendRows(s, "a", i*10, 10)
		e.flush(s)
		e.runOnce(c)
	}
	last := s.Manifest().Flushed
	if err := h.Close(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	return last[len(last)-1].SeqFirst - 1
}

// TestCompactionKeepsRowsAndTheIDCheck: compaction replaces six small
// files by one holding exactly their rows (same ids, positions, epochs),
// as a replace snapshot at a new base version; a replayed generation is
// then still ID-checked against the compacted file and adds only its new
// row.
func TestCompactionKeepsRowsAndTheIDCheck(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(smallCompaction)
	cursor := e.sixMerges(c)
	before := e.rowsByID()
	res, err := c.Compact(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups != 1 || res.FilesIn != 6 || res.Rows != 60 || res.Version != 7 {
		t.Fatalf("compaction %+v, want 6 files into 1, 60 rows, version 7", res)
	}
	if files := e.baseFiles(); len(files) != 1 {
		t.Fatalf("%d files after compaction, want 1", len(files))
	}
	if after := e.rowsByID(); !maps.Equal(before, after) {
		t.Fatalf("compaction changed the rows: %d before, %d after", len(before), len(after))
	}
	if op := e.baseTable().CurrentSnapshot().Summary.Operation; op != table.OpReplace {
		t.Fatalf("compaction's snapshot operation %q, want replace", op)
	}
	if again, err := c.Compact(e.ctx); err != nil || again.Groups != 0 || again.Version != 7 {
		t.Fatalf("a second compaction: %+v %v, want nothing to do", again, err)
	}
	e.drainTo("s0", cursor)
	h := e.host(true)
	s := e.open(h, "s0")
	e.appendRows(s, "new", 0, 1)
	e.flush(s)
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	if r := e.runOnce(c); r.Dropped != 10 || r.RowsStaged != 1 {
		t.Fatalf("replay after compaction: dropped %d, staged %d; want 10 and 1", r.Dropped, r.RowsStaged)
	}
	e.wantAllIDs()
}

// TestCompactionCrashLeavesOneSide: a crash (strict filesystem) after the
// compacted file and its metadata are written, or after the commit, leaves
// the old files or the new one — the same rows either way — and the
// successor sweeps what the crash left unreferenced and finishes.
func TestCompactionCrashLeavesOneSide(t *testing.T) {
	crash := errors.New("crash")
	for name, tc := range map[string]struct {
		arm       func(c *Coordinator)
		committed bool
	}{
		"files written": {arm: func(c *Coordinator) { c.testHookCompactTxn = func() error { return crash } }},
		"committed":     {arm: func(c *Coordinator) { c.testHookAfterCommit = func() error { return crash } }, committed: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newMemEnv(t)
			c := e.coordinator(smallCompaction)
			e.sixMerges(c)
			before := e.rowsByID()
			tc.arm(c)
			if _, err := c.Compact(e.ctx); !errors.Is(err, crash) {
				t.Fatalf("armed compaction: %v", err)
			}
			c.Close()
			e.crash()
			c = e.coordinator(smallCompaction) // sweeps
			want := map[bool]int{false: 6, true: 1}[tc.committed]
			if files, all := e.baseFiles(), e.count("data/s0"); len(files) != want || !tc.committed && all != 6 {
				t.Fatalf("after the crash: %d files in the snapshot (want %d), %d on disk", len(files), want, all)
			}
			if after := e.rowsByID(); !maps.Equal(before, after) {
				t.Fatal("the crash changed the rows")
			}
			if _, err := c.Compact(e.ctx); err != nil {
				t.Fatal(err)
			}
			if files := e.baseFiles(); len(files) != 1 {
				t.Fatalf("%d files after the successor's compaction", len(files))
			}
			e.wantAllIDs()
		})
	}
}

// TestMaintenanceNeedsTheLock: a coordinator that lost its lock (its lease
// revoked, a successor holding the lock) can neither compact nor remove
// orphans: the compaction's commit fails its guard, the sweep deletes
// nothing, and the table is unchanged.
func TestMaintenanceNeedsTheLock(t *testing.T) {
	e := newEnv(t)
	c1 := e.coordinator(smallCompaction)
	e.sixMerges(c1)
	if _, err := etcdClient.Revoke(e.ctx, c1.Lease()); err != nil {
		t.Fatal(err)
	}
	c2 := e.coordinator(smallCompaction)
	loc := e.baseTable().MetadataLocation()
	meta := e.count("metadata")
	if _, err := c1.Compact(e.ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("zombie compaction: %v, want ErrLockLost", err)
	}
	if _, err := c1.RemoveOrphans(e.ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("zombie orphan removal: %v, want ErrLockLost", err)
	}
	if e.baseTable().MetadataLocation() != loc || e.count("metadata") <= meta {
		t.Fatal("a zombie's maintenance changed the table or deleted its own garbage")
	}
	if r, err := c2.Compact(e.ctx); err != nil || r.FilesIn != 6 {
		t.Fatalf("the lock holder's compaction: %+v %v", r, err)
	}
	if _, err := c2.RemoveOrphans(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantAllIDs()
}

// TestCompactionWhileWritersFlush: writers append and flush while the
// coordinator merges and compacts, pass after pass; every acknowledged
// row ends in the base once.
func TestCompactionWhileWritersFlush(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(func(o *Options) { o.Compaction = Compaction{MinFiles: 3, TargetBytes: 64 << 20} })
	h := e.host(false)
	s := e.open(h, "s0")
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	errc := make(chan error, 1)
	go func() {
		defer wg.Done()
		errc <- writeAndFlush(e, s, 60, &mu, acked)
	}()
	var compacted int
	for done := false; !done; {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		default:
		}
		r := e.runOnce(c)
		compacted += r.Compacted
	}
	wg.Wait()
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := e.runOnce(c)
	compacted += r.Compacted
	maps.Copy(e.ids, acked)
	if compacted == 0 {
		t.Fatal("nothing was compacted while the writers flushed")
	}
	t.Logf("%d files compacted", compacted)
	e.wantAllIDs()
}

func writeAndFlush(e *env, s *engine.Shard, rounds int, mu *sync.Mutex, acked map[string]bool) error {
	for i := range rounds {
		rows := make([]schema.Row, 5)
		for j := range rows {
			id := fmt.Sprintf("w%d-%d", i, j)
			rows[j] = schema.Row{"id": id, "prompt": "p " + id, "completion": "c", "reward": float64(j)}
		}
		if _, err := s.Append(e.ctx, rows, engine.Source{}); err != nil {
			return err
		}
		mu.Lock()
		for _, r := range rows {
			acked[r["id"].(string)] = true
		}
		mu.Unlock()
		if _, err := s.Flush(e.ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestExpiryKeepsTimeTravelAndSweepsTheRest: with three snapshots kept,
// ten merges leave three; the oldest kept one reads exactly the rows of
// its version; the sweep deletes the manifest lists of expired snapshots
// and a failed attempt's metadata, never a file a kept snapshot names.
func TestExpiryKeepsTimeTravelAndSweepsTheRest(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(func(o *Options) {
		o.SnapshotRetention = catalog.Retention{MaxSnapshots: 3}
		o.Compaction.Disabled = true
	})
	h := e.host(false)
	s := e.open(h, "s0")
	atVersion := map[uint64]map[string]bool{}
	for i := range 10 {
		e.appendRows(s, "t", i*3, 3)
		e.flush(s)
		r := e.runOnce(c)
		atVersion[r.Version] = maps.Clone(e.ids)
	}
	// A failed attempt: its metadata is written, its transaction never runs.
	e.appendRows(s, "t", 30, 3)
	e.flush(s)
	_, staged := e.planStage(c)
	c.testHookAfterPrepare = func() error { return errors.New("crash") }
	if err := c.Commit(e.ctx, staged); err == nil {
		t.Fatal("armed commit succeeded")
	}
	c.testHookAfterPrepare = nil
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	snaps := e.baseTable().Metadata().Snapshots()
	if len(snaps) != 3 {
		t.Fatalf("%d snapshots kept, want 3", len(snaps))
	}
	oldest := snaps[0]
	v, _ := strconv.ParseUint(oldest.Summary.Properties[BaseVersionProperty], 10, 64)
	got := e.rowsByID(oldest.SnapshotID)
	if len(got) != len(atVersion[v]) {
		t.Fatalf("time travel to version %d: %d rows, want %d", v, len(got), len(atVersion[v]))
	}
	for id := range got {
		if !atVersion[v][id] {
			t.Fatalf("time travel to version %d: row %s is from a later version", v, id)
		}
	}
	metaBefore := e.count("metadata")
	o, err := c.RemoveOrphans(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.MetadataFiles == 0 || e.count("metadata") != metaBefore-o.MetadataFiles || o.DataFiles != 1 {
		t.Fatalf("sweep %+v (metadata files %d before): want expired lists, the failed attempt's metadata and its staged file removed", o, metaBefore)
	}
	if again := e.rowsByID(oldest.SnapshotID); !maps.Equal(again, got) {
		t.Fatal("the sweep broke time travel to a kept snapshot")
	}
	e.runOnce(c) // the crashed pass's rows, again
	e.wantAllIDs()
}

// removesFail fails every Remove after the first n.
type removesFail struct {
	vfs.FS
	n int
}

func (f *removesFail) Remove(name string) error {
	if f.n <= 0 {
		return errors.New("injected: remove failed")
	}
	f.n--
	return f.FS.Remove(name)
}

// TestOrphanRemovalCrashMidway: a sweep that stops after one deletion (a
// crash, a failing disk) leaves the table whole; the next sweep deletes
// the rest, and nothing live.
func TestOrphanRemovalCrashMidway(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(func(o *Options) {
		o.SnapshotRetention = catalog.Retention{MaxSnapshots: 2}
		o.Compaction.Disabled = true
	})
	e.sixMerges(c)
	before := e.rowsByID()
	inner := e.fs.FS
	e.fs.FS = &removesFail{FS: inner, n: 1}
	if _, err := c.RemoveOrphans(e.ctx); err == nil {
		t.Fatal("a sweep whose removes fail succeeded")
	}
	e.fs.FS = inner
	if after := e.rowsByID(); !maps.Equal(before, after) {
		t.Fatal("an interrupted sweep changed the rows")
	}
	o, err := c.RemoveOrphans(e.ctx)
	if err != nil || o.MetadataFiles == 0 {
		t.Fatalf("the next sweep: %+v %v, want the rest removed", o, err)
	}
	if o, err := c.RemoveOrphans(e.ctx); err != nil || o != (Orphans{}) {
		t.Fatalf("a third sweep: %+v %v, want nothing left", o, err)
	}
	e.wantAllIDs()
}

// TestExpiryCrashLeavesOneSide: a crash (strict filesystem) after a commit
// that expires snapshots wrote its metadata leaves every snapshot of the
// old side; the successor's retry expires them and publishes once.
func TestExpiryCrashLeavesOneSide(t *testing.T) {
	e := newMemEnv(t)
	retain := func(o *Options) {
		o.SnapshotRetention = catalog.Retention{MaxSnapshots: 2}
		o.Compaction.Disabled = true
	}
	c := e.coordinator(func(o *Options) { retain(o); o.SnapshotRetention.MaxSnapshots = 10 })
	e.sixMerges(c)
	c.Close()
	c = e.coordinator(retain)
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "x", 0, 4)
	e.flush(s)
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	_, staged := e.planStage(c)
	c.testHookAfterPrepare = func() error { return errors.New("crash") }
	if err := c.Commit(e.ctx, staged); err == nil {
		t.Fatal("armed commit succeeded")
	}
	c.Close()
	e.crash()
	if n := len(e.baseTable().Metadata().Snapshots()); n != 6 {
		t.Fatalf("%d snapshots after the crash, want the old side's 6", n)
	}
	r := e.runOnce(e.coordinator(retain))
	if r.RowsStaged != 4 {
		t.Fatalf("retry staged %d rows, want 4", r.RowsStaged)
	}
	if n := len(e.baseTable().Metadata().Snapshots()); n != 2 {
		t.Fatalf("%d snapshots after the retry, want 2", n)
	}
	e.wantAllIDs()
}

// TestCompactionTiersBySize: new small files are compacted among
// themselves, not into the shard's larger compacted file, which would
// rewrite it with every run of new ones; a tier short of MinFiles waits.
func TestCompactionTiersBySize(t *testing.T) {
	c := &Coordinator{opts: Options{MemoryBudget: 1 << 30}}
	c.opts.ensureDefaults()
	var files []shardmeta.BaseFile
	add := func(n int, bytes int64) {
		for range n {
			seq := uint64(len(files)*10 + 1)
			files = append(files, shardmeta.BaseFile{Path: fmt.Sprintf("data/s0/f%d", len(files)), Rows: 10, Bytes: bytes,
				Shard: "s0", SeqFirst: seq, SeqLast: seq + 9})
		}
	}
	add(1, 40<<20)   // the compacted file so far
	add(16, 512<<10) // a run of new ones
	add(5, 4<<20)    // a middle tier, short of MinFiles
	groups := c.compactionGroups(files)
	if len(groups) != 1 || len(groups[0]) != 16 {
		t.Fatalf("groups %v, want the 16 new files alone", groups)
	}
	for _, f := range groups[0] {
		if f.Bytes != 512<<10 {
			t.Fatalf("group holds %s of %d bytes", f.Path, f.Bytes)
		}
	}
}
