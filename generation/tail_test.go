package generation

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestIndexCRCCoversEverythingOutsideTheChunks: every byte outside the
// column chunks — the bloom filters between row groups, the page indexes,
// the footer — is covered: flipping any of them fails VerifyIndex with
// ErrCorrupt naming the file. Bytes inside the chunks (data pages, protected
// by their own CRCs) are not its business.
func TestIndexCRCCoversEverythingOutsideTheChunks(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	f := mustWrite(t, Options{FS: fs, RowGroupRows: 150}, dir, s, testMeta(), allTypesRows(t, s, 400, 3))
	want := f.IndexCRC // computed by Write from the bytes it wrote
	file, err := fs.Open(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(file)
	file.Close()
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(raw))
	if err := VerifyIndex(bytes.NewReader(raw), size, f.Path, want); err != nil {
		t.Fatalf("intact file: %v", err)
	}
	chunks, err := chunkRanges(openRaw(t, fs, f.Path), size)
	if err != nil {
		t.Fatal(err)
	}
	inChunk := func(off int64) bool {
		for _, c := range chunks {
			if off >= c[0] && off < c[1] {
				return true
			}
		}
		return false
	}
	covered, skipped := 0, 0
	for off := range size {
		if inChunk(off) && off%61 != 0 {
			continue // a sample of the chunk bytes is enough
		}
		bad := bytes.Clone(raw)
		bad[off] ^= 0x01
		err := VerifyIndex(bytes.NewReader(bad), size, f.Path, want)
		if inChunk(off) {
			skipped++
			if err != nil {
				t.Fatalf("byte %d (inside a column chunk) flipped: %v", off, err)
			}
			continue
		}
		covered++
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), f.Path) {
			t.Fatalf("byte %d (outside the chunks) flipped: %v, want ErrCorrupt naming the file", off, err)
		}
	}
	pf := openRaw(t, fs, f.Path)
	for _, rg := range pf.Metadata().RowGroups {
		if off := rg.Columns[0].MetaData.BloomFilterOffset; off == 0 || inChunk(off) {
			t.Fatalf("id bloom filter at %d is not in the covered bytes", off)
		}
	}
	t.Logf("%d bytes covered, %d sampled inside column chunks", covered, skipped)
}
