package publish

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/generation"
)

// TestCorruptGenerationIsReportedNotSkipped: a committed generation file
// whose data pages are damaged on disk stops the merge with an error that
// names the shard, the generation and the file; nothing of the pass is
// committed, and once the file is whole again the next pass publishes
// every row once.
func TestCorruptGenerationIsReportedNotSkipped(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	c := e.coordinator()
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := p.Shards[0].Generations[1].Path
	orig := readFile(t, victim)
	for _, off := range pageBytes(t, victim) {
		writeFile(t, victim, flip(orig, off))
		_, err := c.RunOnce(e.ctx)
		if !errors.Is(err, generation.ErrCorrupt) || !strings.Contains(err.Error(), victim) ||
			!strings.Contains(err.Error(), `shard "s0" generation 2`) {
			t.Fatalf("byte %d of %d flipped: merge error %v, want ErrCorrupt naming shard, generation and file", off, len(orig), err)
		}
		if st, _ := e.state(); st.Version != 0 || len(e.baseFiles()) != 0 {
			t.Fatalf("byte %d flipped: a pass with a corrupt generation committed %+v", off, st)
		}
	}
	writeFile(t, victim, orig)
	if r := e.runOnce(c); r.RowsStaged != 20 {
		t.Fatalf("pass after the repair staged %d rows, want 20", r.RowsStaged)
	}
	e.wantAllIDs()
}

// TestDamagedBaseIndexStopsTheIDCheck: the ID check trusts a base file's
// bloom filters and statistics to skip rows, so a flipped byte there would
// let a replayed duplicate through silently. The file's index checksum,
// kept in the base state, catches it: the stage fails naming the base file
// and nothing lands; repaired, the merge drops the replayed rows.
func TestDamagedBaseIndexStopsTheIDCheck(t *testing.T) {
	e := newEnv(t)
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "a", 0, 20)
	e.flush(s)
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	c := e.coordinator()
	e.runOnce(c)
	e.drain("s0", true)
	h = e.host(true) // no source-side exclusion: the replay duplicates all 20 rows
	s = e.open(h, "s0")
	e.appendRows(s, "new", 0, 1)
	e.flush(s)
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(c.BaseDir(), filepath.FromSlash(e.baseFiles()[0].Path))
	orig := readFile(t, base)
	bloom := bloomOffset(t, base)
	writeFile(t, base, flip(orig, bloom+8))
	_, err = c.Stage(e.ctx, p)
	if !errors.Is(err, generation.ErrCorrupt) || !strings.Contains(err.Error(), base) || !strings.Contains(err.Error(), "index checksum") {
		t.Fatalf("stage against a base file with a damaged bloom filter: %v, want ErrCorrupt naming the file", err)
	}
	writeFile(t, base, orig)
	staged, err := c.Stage(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if staged.DroppedInBase != 20 || staged.RowsStaged != 1 {
		t.Fatalf("after the repair: dropped %d, staged %d; want 20 and 1", staged.DroppedInBase, staged.RowsStaged)
	}
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	e.wantAllIDs()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func flip(b []byte, off int64) []byte {
	out := append([]byte(nil), b...)
	out[off] ^= 0x5a
	return out
}

func openParquet(t *testing.T, path string) *parquet.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

// pageBytes returns the last byte of every column chunk of the file: page
// data, which the page CRC covers (page headers are not covered; a flip in
// a header's statistics changes no value read).
func pageBytes(t *testing.T, path string) []int64 {
	var out []int64
	for _, rg := range openParquet(t, path).Metadata().RowGroups {
		for _, cc := range rg.Columns {
			out = append(out, cc.MetaData.DataPageOffset+cc.MetaData.TotalCompressedSize-1)
		}
	}
	return out
}

// bloomOffset returns where the id column's bloom filter of the first row
// group starts.
func bloomOffset(t *testing.T, path string) int64 {
	off := openParquet(t, path).Metadata().RowGroups[0].Columns[0].MetaData.BloomFilterOffset
	if off == 0 {
		t.Fatalf("%s has no bloom filter on id", path)
	}
	return off
}
