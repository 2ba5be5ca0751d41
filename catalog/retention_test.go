package catalog

import (
	"encoding/json"
	"slices"
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

// expire chooses the snapshots to remove by count and age exactly: the
// newest MaxSnapshots are kept (a snapshot being added counts as the
// newest), the current and a tag's always, and nothing depends on the
// clock moving between two readings of it.
func TestExpireKeepsExactlyTheNewest(t *testing.T) {
	e := newEnv(t)
	var tbl *table.Table
	for i := range 6 {
		tbl = e.commit(BaseCommit{Files: []File{e.baseFile("s0", uint64(i+1), 1, "x"+strconv.Itoa(i), 1, uint64(i+1))}})
	}
	meta := tbl.Metadata()
	snaps := meta.Snapshots() // oldest first
	removed := func(u table.Update) []int64 {
		if u == nil {
			return nil
		}
		var out struct {
			Action string  `json:"action"`
			IDs    []int64 `json:"snapshot-ids"`
		}
		b, err := json.Marshal(u)
		fatalIf(t, err, "encode the update")
		fatalIf(t, json.Unmarshal(b, &out), "decode %s", b)
		if out.Action != table.UpdateRemoveSnapshots {
			t.Fatalf("update %s, want %s", b, table.UpdateRemoveSnapshots)
		}
		slices.Sort(out.IDs)
		return out.IDs
	}
	ids := func(ss []table.Snapshot) []int64 {
		var out []int64
		for _, s := range ss {
			out = append(out, s.SnapshotID)
		}
		slices.Sort(out)
		return out
	}
	now := time.UnixMilli(snaps[5].TimestampMs).Add(time.Hour)
	for _, tc := range []struct {
		name   string
		r      Retention
		adding bool
		want   []int64
	}{
		{"count, adding: the new one and the current", Retention{MaxSnapshots: 2}, true, ids(snaps[:5])},
		{"count: the current and one before", Retention{MaxSnapshots: 2}, false, ids(snaps[:4])},
		{"count of one, adding: the current goes too", Retention{MaxSnapshots: 1}, true, ids(snaps)},
		{"age: all older than an hour but the current", Retention{MaxAge: time.Minute}, false, ids(snaps[:5])},
		{"none", Retention{MaxSnapshots: 10}, true, nil},
	} {
		if got := removed(expire(meta, tc.r, now, tc.adding)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: removed %v, want %v", tc.name, got, tc.want)
		}
	}
	tagged, err := table.UpdateTableMetadata(meta, []table.Update{
		table.NewSetSnapshotRefUpdate("audit", snaps[1].SnapshotID, table.TagRef, 0, 0, 0)}, e.location())
	fatalIf(t, err, "tag")
	meta = tagged
	if got, want := removed(expire(meta, Retention{MaxSnapshots: 2}, now, true)), ids(append(slices.Clone(snaps[:1]), snaps[2:5]...)); !slices.Equal(got, want) {
		t.Errorf("with a tag on the second snapshot: removed %v, want %v", got, want)
	}
}
