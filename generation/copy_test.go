package generation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// openCopy opens the file at path of fs for copying in schema s, codec.
func openCopy(t *testing.T, fs vfs.FS, path string, s *schema.Schema, codec string) (*Copy, error) {
	t.Helper()
	data, err := vfs.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	return OpenCopy(bytes.NewReader(data), int64(len(data)), path, s, codec)
}

// TestCopyIsTheReencodedFile: a generation copied under a base file's
// meta is byte for byte the file Write makes of its rows under that meta
// (same options, same creation time), for every codec, with several row
// groups and pages; it reads back to the same rows.
func TestCopyIsTheReencodedFile(t *testing.T) {
	s := allTypes(t)
	d := allTypesRows(t, s, 3000, 1)
	for _, codec := range []string{CodecSnappy, CodecZstd, CodecNone} {
		fs, dir := newMemDir(t)
		opts := Options{FS: fs, Codec: codec, RowGroupRows: 1000, PageBufferSize: 8 << 10}
		src := mustWrite(t, opts, dir, s, testMeta(), d)
		c, err := openCopy(t, fs, src.Path, s, codec)
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		base := Meta{Table: "rollouts", Shard: "s-07", Generation: 42, Epoch: 7, CreatedUnixNano: 12345}
		opts.IndexCRCInName = true
		got, err := c.Place(context.Background(), opts, dir, base)
		if err != nil {
			t.Fatal(err)
		}
		want := mustWrite(t, opts, dir, s, base, d)
		gb, _ := vfs.ReadFile(fs, got.Path)
		wb, _ := vfs.ReadFile(fs, want.Path)
		for i := range min(len(gb), len(wb)) {
			if gb[i] != wb[i] {
				t.Logf("first difference at %d of %d: %q vs %q", i, len(gb), gb[max(0, i-40):i+40], wb[max(0, i-40):i+40])
				break
			}
		}
		if !bytes.Equal(gb, wb) || got.IndexCRC != want.IndexCRC || got.Size != want.Size || got.Meta != want.Meta {
			t.Fatalf("%s: copy (%d bytes, %+v) differs from the re-encoded file (%d bytes, %+v)", codec, len(gb), got.Meta, len(wb), want.Meta)
		}
		_, back, err := Read(fs, got.Path, s)
		if err != nil {
			t.Fatal(err)
		}
		requireSameData(t, d, back)
	}
}

// TestCopyRefusesAnotherSchemaOrCodec: a file in another codec or schema
// is not copyable.
func TestCopyRefusesAnotherSchemaOrCodec(t *testing.T) {
	s := allTypes(t)
	d := allTypesRows(t, s, 500, 2)
	fs, dir := newMemDir(t)
	src := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), d)
	if _, err := openCopy(t, fs, src.Path, s, CodecZstd); !errors.Is(err, ErrNotCopyable) {
		t.Fatalf("snappy file copied as zstd: %v", err)
	}
	other, err := schema.New(append([]schema.Column{{Name: "extra", Type: schema.String, Nullable: true}}, s.Columns...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openCopy(t, fs, src.Path, other, CodecSnappy); !errors.Is(err, ErrNotCopyable) {
		t.Fatalf("file copied into another schema: %v", err)
	}
}

// TestCrashBeforeCopyReturnsLeavesNoFile: Place keeps Write's protocol; a
// crash at any of its operations leaves at most a temporary file, never a
// named one.
func TestCrashBeforeCopyReturnsLeavesNoFile(t *testing.T) {
	s := allTypes(t)
	d := allTypesRows(t, s, 1000, 13)
	srcFS, srcDir := newMemDir(t)
	src := mustWrite(t, Options{FS: srcFS, RowGroupRows: 300}, srcDir, s, testMeta(), d)
	c, err := openCopy(t, srcFS, src.Path, s, CodecSnappy)
	if err != nil {
		t.Fatal(err)
	}
	mem, dir := newMemDir(t)
	var probe vfs.Injector
	opts := Options{FS: vfs.Inject(mem, &probe), IndexCRCInName: true}
	if _, err := c.Place(context.Background(), opts, dir, testMeta()); err != nil {
		t.Fatal(err)
	}
	total := probe.Ops()
	if probe.Count(vfs.OpSync) != 2 || probe.Count(vfs.OpRename) != 1 {
		t.Fatalf("clean copy: %d ops, %d syncs, %d renames; want file sync, rename, dir sync", total, probe.Count(vfs.OpSync), probe.Count(vfs.OpRename))
	}
	for k := int64(1); k <= total; k++ {
		mem, dir := newMemDir(t)
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		opts.FS = vfs.Inject(mem, inj)
		if _, err := c.Place(context.Background(), opts, dir, testMeta()); !errors.Is(err, vfs.ErrCrashed) {
			t.Fatalf("crash at op %d/%d: Place returned %v, want the crash", k, total, err)
		}
		names, err := mem.CrashClone().List(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if !IsTemp(n) {
				t.Fatalf("crash at op %d/%d left %s", k, total, n)
			}
		}
	}
}

// TestCopyRefusesDamagedPages: a flipped byte in the data of any page, of
// any column, is corruption: OpenCopy checks every page's CRC-32 as a
// decode would, so damage is never copied into a base file.
func TestCopyRefusesDamagedPages(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	src := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), allTypesRows(t, s, 100, 14))
	orig, err := vfs.ReadFile(fs, src.Path)
	if err != nil {
		t.Fatal(err)
	}
	flips := 0
	for _, at := range pageDataBytes(t, fs, src.Path) {
		b := bytes.Clone(orig)
		b[at] ^= 0xff
		_, err := OpenCopy(bytes.NewReader(b), int64(len(b)), src.Path, s, CodecSnappy)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d of %d flipped: OpenCopy returned %v, want ErrCorrupt", at, len(b), err)
		}
		flips++
	}
	t.Logf("%d page bytes flipped, each refused", flips)
}

// pageDataBytes are the offsets of every page's data (not its header) in
// the file at path.
func pageDataBytes(t *testing.T, fs vfs.FS, path string) []int64 {
	t.Helper()
	pf := openRaw(t, fs, path)
	data, err := vfs.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, rg := range pf.Metadata().RowGroups {
		for _, cc := range rg.Columns {
			at, end := cc.MetaData.DataPageOffset, cc.MetaData.DataPageOffset+cc.MetaData.TotalCompressedSize
			for at < end {
				h, n, err := pageHeader(data[at:end])
				if err != nil {
					t.Fatal(err)
				}
				for i := at + int64(n); i < at+int64(n)+int64(h.CompressedPageSize); i++ {
					out = append(out, i)
				}
				at += int64(n) + int64(h.CompressedPageSize)
			}
		}
	}
	return out
}

// TestCopyRefusesDamagedIDCheckIndex: what the merge's ID check trusts in
// a base file (the id bloom filter and offset index; the _seq statistics,
// column index and offset index) is copied, so damage to it is refused: a
// bloom filter that lost its bits, and any flipped byte of those page
// indexes that changes what they say.
func TestCopyRefusesDamagedIDCheckIndex(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	src := mustWrite(t, Options{FS: fs, PageBufferSize: 4 << 10}, dir, s, testMeta(), allTypesRows(t, s, 2000, 15))
	orig, err := vfs.ReadFile(fs, src.Path)
	if err != nil {
		t.Fatal(err)
	}
	pf := openRaw(t, fs, src.Path)
	id := pf.Metadata().RowGroups[0].Columns[0].MetaData
	b := bytes.Clone(orig)
	// The bitset follows a Thrift header of a dozen bytes.
	for i := id.BloomFilterOffset + 16; i < id.BloomFilterOffset+int64(id.BloomFilterLength); i++ {
		b[i] = 0
	}
	if _, err := OpenCopy(bytes.NewReader(b), int64(len(b)), src.Path, s, CodecSnappy); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("id bloom filter zeroed: OpenCopy returned %v, want ErrCorrupt", err)
	}
	seq := pf.Metadata().RowGroups[0].Columns[len(pf.Metadata().RowGroups[0].Columns)-2]
	want := seqIndex(t, orig, src.Path)
	idc := pf.Metadata().RowGroups[0].Columns[0]
	regions := [][2]int64{{seq.ColumnIndexOffset, int64(seq.ColumnIndexLength)}, {seq.OffsetIndexOffset, int64(seq.OffsetIndexLength)},
		{idc.OffsetIndexOffset, int64(idc.OffsetIndexLength)}}
	refused := 0
	for _, r := range regions {
		for at := r[0]; at < r[0]+r[1]; at++ {
			b := bytes.Clone(orig)
			b[at] ^= 0xff
			_, err := OpenCopy(bytes.NewReader(b), int64(len(b)), src.Path, s, CodecSnappy)
			if err != nil {
				refused++
				continue
			}
			if got := seqIndex(t, b, src.Path); got != want {
				t.Fatalf("byte %d flipped: copied with the _seq index %s, it was %s", at, got, want)
			}
		}
	}
	t.Logf("%d of the page index bytes refused when flipped; the rest changed nothing they say", refused)
}

// seqIndex is what the _seq column's page indexes and the id column's
// offset index say, as text.
func seqIndex(t *testing.T, data []byte, name string) string {
	t.Helper()
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "unreadable"
	}
	var out strings.Builder
	for _, rg := range pf.RowGroups() {
		chunks := rg.ColumnChunks()
		fc := chunks[len(chunks)-2].(*parquet.FileColumnChunk)
		ci, err1 := fc.ColumnIndex()
		oi, err2 := fc.OffsetIndex()
		if err1 != nil || err2 != nil {
			return "unreadable"
		}
		for p := range min(ci.NumPages(), oi.NumPages()) {
			fmt.Fprintf(&out, "[%v %v %v %d %d %d]", ci.NullPage(p), ci.MinValue(p), ci.MaxValue(p), oi.Offset(p), oi.CompressedPageSize(p), oi.FirstRowIndex(p))
		}
		fmt.Fprintf(&out, "(%d %d)", ci.NumPages(), oi.NumPages())
		idOffsets, err := chunks[0].(*parquet.FileColumnChunk).OffsetIndex()
		if err != nil {
			return "unreadable"
		}
		for p := range idOffsets.NumPages() {
			fmt.Fprintf(&out, "{%d %d %d}", idOffsets.Offset(p), idOffsets.CompressedPageSize(p), idOffsets.FirstRowIndex(p))
		}
	}
	return out.String()
}
