package publish

import (
	"fmt"
	"testing"
)

// TestLaggingCursorReplayAppendsOnlyNewRow is the incident, deterministic:
// published rows are replayed into a new generation (source-side exclusion
// off) and only the one new row reaches the base; the later generations of
// the epoch are merged without reading the base.
func TestLaggingCursorReplayAppendsOnlyNewRow(t *testing.T) {
	e := newEnv(t)
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "a", 0, 10)
	e.flush(s)
	e.appendRows(s, "a", 10, 10)
	e.flush(s)
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	c := e.coordinator()
	if r := e.runOnce(c); r.RowsStaged != 20 {
		t.Fatalf("first merge staged %d rows, want 20", r.RowsStaged)
	}
	e.drain("s0", true)

	h = e.host(true)
	s = e.open(h, "s0")
	e.appendRows(s, "new", 0, 1)

	// Before the replayed memtable flushes: the epoch change is observed
	// and persisted; the active (replay) generation is not planned.
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		t.Fatalf("plan before the replay flush: %+v", p.Shards)
	}
	st, _ := e.state()
	if ms := st.Shards["s0"]; ms.ObservedEpoch == nil || *ms.ObservedEpoch != 2 {
		t.Fatalf("observed epoch not persisted before the plan was released: %+v", ms)
	}

	g := e.flush(s)
	p, err = c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := genFlags(p, "s0"); len(f) != 1 || !f[g] {
		t.Fatalf("replay generation %d: plan %v, want ID-check", g, f)
	}
	staged, err := c.Stage(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if staged.RowsRead != 21 || staged.RowsStaged != 1 || staged.DroppedInBase != 20 {
		t.Fatalf("replay generation: read %d, staged %d, dropped in base %d; want 21, 1, 20",
			staged.RowsRead, staged.RowsStaged, staged.DroppedInBase)
	}
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	if _, rows := e.baseIDs(); rows != 21 {
		t.Fatalf("base has %d rows, want 21", rows)
	}

	// The next generations of the epoch take the lookup-free path.
	for i := range 3 {
		e.appendRows(s, "later", i*5, 5)
		g := e.flush(s)
		p, err := c.Plan(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f := genFlags(p, "s0"); len(f) != 1 || f[g] {
			t.Fatalf("generation %d: plan %v, want lookup-free", g, f)
		}
		before := e.fs.baseOpens.Load()
		staged, err := c.Stage(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if n := e.fs.baseOpens.Load() - before; n != 0 || staged.BaseFilesOpened != 0 {
			t.Fatalf("lookup-free generation %d opened %d base files", g, n)
		}
		if err := c.Commit(e.ctx, staged); err != nil {
			t.Fatal(err)
		}
	}
	e.wantAllIDs()
}

// TestReplayIncidentScale: 4 shards × 8 restarts with lagging cursors × 16
// rows, source-side exclusion off: exactly 512 rows for 512 ids.
func TestReplayIncidentScale(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	shards := []string{"s0", "s1", "s2", "s3"}
	var dropped int64
	for restart := range 8 {
		h := e.host(true)
		for _, name := range shards {
			s := e.open(h, name)
			e.appendRows(s, fmt.Sprintf("%s-r%d", name, restart), 0, 16)
			e.flush(s)
		}
		if err := h.Close(e.ctx); err != nil {
			t.Fatal(err)
		}
		dropped += e.runOnce(c).Dropped
		for _, name := range shards {
			e.drain(name, true)
		}
	}
	if dropped == 0 {
		t.Fatal("no replayed duplicate reached the merge: the test does not exercise the cutoff")
	}
	t.Logf("merge dropped %d replayed duplicates", dropped)
	ids, rows := e.baseIDs()
	if rows != 512 || len(ids) != 512 {
		t.Fatalf("base has %d rows for %d distinct ids, want 512 and 512", rows, len(ids))
	}
	e.wantAllIDs()
}

// TestCleanBacklogIsNotScanned: after a restart, the clean generations of
// the earlier epoch are merged without reading the base; only the
// generation replay filled is ID-checked, and it opens only base files
// whose positions it overlaps (here none).
func TestCleanBacklogIsNotScanned(t *testing.T) {
	e := newEnv(t)
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "a", 0, 10)
	e.flush(s)
	c := e.coordinator(func(o *Options) { o.MemoryBudget = 1 }) // one generation per pass
	e.runOnce(c)                                                // first observation: cutoff = active generation 2
	e.appendRows(s, "a", 10, 10)
	e.flush(s) // generation 2, at the cutoff
	e.runOnce(c)
	e.appendRows(s, "b", 0, 10)
	e.flush(s) // generation 3, clean backlog
	e.appendRows(s, "b", 10, 10)
	e.flush(s)                  // generation 4, clean backlog
	e.appendRows(s, "c", 0, 10) // unflushed: replayed after the restart
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	h = e.host(false)
	s = e.open(h, "s0")
	e.appendRows(s, "d", 0, 5)
	replayGen := e.flush(s) // generation 5: replayed c-* plus d-*
	e.appendRows(s, "e", 0, 5)
	after := e.flush(s)

	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]bool{3: false, 4: false, replayGen: true, after: false}
	got := genFlags(p, "s0")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("plan ID-check flags %v, want %v", got, want)
	}
	for _, sp := range p.Shards {
		if !sp.Precise {
			t.Fatalf("shard %s: plan is not precise", sp.Shard)
		}
	}
	opens := map[uint64]int64{}
	for {
		p, err := c.Plan(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Empty() {
			break
		}
		before := e.fs.baseOpens.Load()
		staged, err := c.Stage(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(staged.Parts) != 1 || len(staged.Parts[0].Generations) != 1 || staged.Complete != (len(p.Shards[0].Generations) == 1) {
			t.Fatalf("budget of 1 byte staged %+v", staged.Parts)
		}
		opens[staged.Parts[0].First] = e.fs.baseOpens.Load() - before
		if err := c.Commit(e.ctx, staged); err != nil {
			t.Fatal(err)
		}
	}
	// The replay generation is ID-checked (the plan says so above), but its
	// positions lie beyond every published file's range: nothing to open.
	if opens[3] != 0 || opens[4] != 0 || opens[after] != 0 || opens[replayGen] != 0 {
		t.Fatalf("base files opened per generation: %v; want none", opens)
	}
	e.wantAllIDs()
}

// TestIDCheckOpensOnlyOverlappingFiles: the ID check of a replayed
// generation opens only the base files of its shard whose position range
// overlaps the replayed rows, however many files the base holds.
func TestIDCheckOpensOnlyOverlappingFiles(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	h := e.host(false)
	other := e.open(h, "s1")
	s := e.open(h, "s0")
	for i := range 6 {
		e.appendRows(s, "a", i*10, 10)
		e.appendRows(other, fmt.Sprintf("o%d-", i), 0, 10)
		e.flush(s)
		e.flush(other)
		e.runOnce(c)
	}
	last := s.Manifest().Flushed
	cursor := last[len(last)-1].SeqFirst - 1
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	if files := e.baseFiles(); len(files) != 12 {
		t.Fatalf("base has %d files, want 12", len(files))
	}
	e.drainTo("s0", cursor) // only the last generation's rows are replayed

	h = e.host(true)
	s = e.open(h, "s0")
	e.appendRows(s, "new", 0, 1)
	g := e.flush(s)
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := genFlags(p, "s0"); !f[g] {
		t.Fatalf("replay generation %d: plan %v, want ID-check", g, f)
	}
	staged, err := c.Stage(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if staged.BaseFilesOpened != 1 || staged.DroppedInBase != 10 || staged.RowsStaged != 1 {
		t.Fatalf("opened %d base files, dropped %d, staged %d; want 1, 10, 1",
			staged.BaseFilesOpened, staged.DroppedInBase, staged.RowsStaged)
	}
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	e.wantAllIDs()
}
