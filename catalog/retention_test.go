package catalog

import (
	"strconv"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
)

// commit prepares and applies one base commit.
func (e *env) commit(bc BaseCommit) *table.Table {
	e.t.Helper()
	p, err := e.cat.PrepareBaseCommit(e.ctx, e.ident, bc)
	if err != nil {
		e.t.Fatal(err)
	}
	tbl, err := e.cat.Apply(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

// TestRetentionBoundsSnapshots: with a snapshot count bound, 40 commits
// leave at most that many snapshots (the current one among them), the
// metadata log at its bound, and the current snapshot still holds every
// row.
func TestRetentionBoundsSnapshots(t *testing.T) {
	e := newEnv(t)
	r := Retention{MaxSnapshots: 5, MaxAge: time.Hour}
	var tbl *table.Table
	for i := range 40 {
		f := e.baseFile("s0", uint64(i+1), 1, "r"+strconv.Itoa(i), 2, uint64(2*i+1))
		tbl = e.commit(BaseCommit{Files: []File{f}, Retention: r, Properties: map[string]string{"write.metadata.previous-versions-max": "10"}})
	}
	meta := tbl.Metadata()
	if n := len(meta.Snapshots()); n > r.MaxSnapshots || n < 1 {
		t.Fatalf("%d snapshots after 40 commits, want 1..%d", n, r.MaxSnapshots)
	}
	if cur := meta.CurrentSnapshot(); cur == nil || cur.SnapshotID != meta.Snapshots()[len(meta.Snapshots())-1].SnapshotID {
		t.Fatal("the current snapshot was expired")
	}
	var snapLogs, logs int
	for range meta.SnapshotLogs() {
		snapLogs++
	}
	if snapLogs > r.MaxSnapshots {
		t.Fatalf("snapshot log has %d entries", snapLogs)
	}
	for range meta.PreviousFiles() {
		logs++
	}
	if logs > 10 {
		t.Fatalf("metadata log has %d entries, bound 10", logs)
	}
	e.scan(tbl)
	// An empty commit with an age bound of 1 ns keeps only the current.
	tbl = e.commit(BaseCommit{Properties: map[string]string{"x": "y"}, Retention: Retention{MaxAge: time.Nanosecond}})
	if n := len(tbl.Metadata().Snapshots()); n != 1 {
		t.Fatalf("%d snapshots after expiring everything but the current one", n)
	}
	e.scan(tbl)
}
