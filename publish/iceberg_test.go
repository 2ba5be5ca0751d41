package publish

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// TestIcebergCommitIsTheWatermarkCommit: a base commit is one etcd
// transaction that swaps the Iceberg table's metadata and raises the
// watermarks. A crash (on the strict filesystem: unsynced data is lost) or
// a lost answer at each step leaves either the old snapshot with the old
// watermarks or the new snapshot with the new ones, never a mix, and the
// successor's retry publishes every row exactly once.
func TestIcebergCommitIsTheWatermarkCommit(t *testing.T) {
	lost := func(err error) error {
		if err != nil {
			return err
		}
		return context.DeadlineExceeded
	}
	unreachable := func(error) error { return errors.New("etcd unreachable") }
	crash := errors.New("crash")
	for name, tc := range map[string]struct {
		arm       func(c *Coordinator)
		committed bool // the transaction applied
		ok        bool // Commit says so
	}{
		"metadata written": {arm: func(c *Coordinator) {
			c.testHookAfterPrepare = func() error { return crash }
		}},
		"request lost, read back unchanged": {arm: func(c *Coordinator) {
			c.testHookBeforeCommitTxn = func() error { return context.DeadlineExceeded }
		}},
		"request lost, read-back fails": {arm: func(c *Coordinator) {
			c.testHookBeforeCommitTxn = func() error { return context.DeadlineExceeded }
			c.testHookReadBack = unreachable
		}},
		"applied, answer lost, read back": {arm: func(c *Coordinator) {
			c.testHookCommit = lost
		}, committed: true, ok: true},
		"applied, answer lost, read-back fails": {arm: func(c *Coordinator) {
			c.testHookCommit, c.testHookReadBack = lost, unreachable
		}, committed: true},
		"applied, crash before the readers' manifest": {arm: func(c *Coordinator) {
			c.testHookAfterCommit = func() error { return crash }
		}, committed: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newMemEnv(t)
			oneShard(e)
			c := e.coordinator()
			_, staged := e.planStage(c)
			tc.arm(c)
			var txns int
			if hook := c.testHookCommit; hook != nil {
				c.testHookCommit = func(err error) error { txns++; return hook(err) }
			}
			if err := c.Commit(e.ctx, staged); (err == nil) != tc.ok {
				t.Fatalf("commit: %v, want success %v", err, tc.ok)
			}
			if txns > 1 {
				t.Fatalf("%d commit transactions, want 1 (no blind retry)", txns)
			}
			c.Close()
			e.crash()
			e.wantOneSide(tc.committed, 2)
			// The successor (on what the crash left) retries: nothing twice.
			r := e.runOnce(e.coordinator())
			if want := int64(20); tc.committed && r.RowsStaged != 0 || !tc.committed && r.RowsStaged != want {
				t.Fatalf("successor staged %d rows (committed before the crash: %v)", r.RowsStaged, tc.committed)
			}
			e.wantOneSide(true, 2)
			e.wantAllIDs()
		})
	}
}

// wantOneSide checks that the state and the Iceberg table are on one side
// of the commit: both at version 0 with watermark 0 and no snapshot, or
// both at version 1 with the shard's watermark at last and a snapshot
// holding every acknowledged row.
func (e *env) wantOneSide(committed bool, last uint64) {
	e.t.Helper()
	st, _ := e.state()
	base, err := LoadBase(e.ctx, Options{Etcd: etcdClient, Prefix: "rollwal", Table: e.table, DataDir: e.dir, FS: e.fs})
	if err != nil {
		e.t.Fatalf("the base does not load (a mix of state and table?): %v", err)
	}
	tbl := e.baseTable()
	var rows int64
	for _, f := range base.Files {
		rows += f.Rows
	}
	w := st.Shards["s0"].Watermark
	switch {
	case committed && (st.Version != 1 || w != last || tbl.CurrentSnapshot() == nil || rows != int64(len(e.ids))):
		e.t.Fatalf("after the commit: state v%d watermark %d, table snapshot %v with %d rows; want v1, watermark %d, %d rows",
			st.Version, w, tbl.CurrentSnapshot() != nil, rows, last, len(e.ids))
	case !committed && (st.Version != 0 || w != 0 || tbl.CurrentSnapshot() != nil):
		e.t.Fatalf("before the commit: state v%d watermark %d, table snapshot %v; want v0, watermark 0, no snapshot",
			st.Version, w, tbl.CurrentSnapshot() != nil)
	}
}

// TestCommitKnowsItsSnapshotFiles: the files a commit records for its new
// snapshot (its parent's and the ones it added, without reading the new
// manifest list back) are exactly the files read from the snapshot's
// manifests — path, rows, bytes, shard, positions and index checksum —
// through appends on two shards, a compaction and appends after it.
func TestCommitKnowsItsSnapshotFiles(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(smallCompaction)
	check := func(step string) {
		t.Helper()
		tbl := e.baseTable()
		snap := tbl.CurrentSnapshot()
		known, ok := c.table.snapshotCached(snap.SnapshotID)
		if !ok {
			t.Fatalf("%s: the coordinator does not know the files of snapshot %d", step, snap.SnapshotID)
		}
		read, err := c.table.readSnapshotFiles(e.ctx, tbl, snap, c.baseLocation())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(known, read) {
			t.Fatalf("%s: snapshot %d\nknown %+v\nread  %+v", step, snap.SnapshotID, known, read)
		}
	}
	cursor := e.sixMerges(c)
	check("after six merges")
	if _, err := c.Compact(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drainTo("s0", cursor)
	h := e.host(false)
	s0, s1 := e.open(h, "s0"), e.open(h, "s1")
	for i := range 3 {
		e.appendRows(s0, "b", i*10, 10)
		e.appendRows(s1, "c", i*10, 10)
		e.flush(s0)
		e.flush(s1)
		e.runOnce(c)
		check(fmt.Sprintf("merge %d after the compaction", i))
	}
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantAllIDs()
}
