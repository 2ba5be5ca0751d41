package generation

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// Leaves written on several goroutines give the column chunks one
// goroutine writes, byte for byte, and read back as the rows written: the
// leaves share no state, and each is written whole by one goroutine.
func TestParallelEncodeIsSerialEncode(t *testing.T) {
	seed := nestedSeed(t)
	nested := nestedTypes(t)
	rl := rolloutgen.RLSchema()
	rlBatch, err := rl.Build(rolloutgen.New(seed, "rl").RLRows(120))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		s    *schema.Schema
		d    Data
		opts Options
	}{
		{"nested-many-pages", nested, nestedRows(t, nested, 3000, seed, 5), Options{RowGroupRows: 1000, PageBufferSize: 4 << 10}},
		{"nested-zstd", nested, nestedRows(t, nested, 1500, seed+1, 0), Options{Codec: CodecZstd}},
		{"flat", allTypes(t), allTypesRows(t, allTypes(t), 4000, seed), Options{RowGroupRows: 1500}},
		{"rl", rl, seqData(rlBatch), Options{RowGroupRows: 50}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := newMemDir(t)
			chunks := map[int][][]byte{}
			for _, workers := range []int{1, 3} {
				opts := tc.opts
				opts.FS, opts.EncodeWorkers = fs, workers
				before := parallelRowGroups.Load()
				f := mustWrite(t, opts, dir, tc.s, testMeta(), tc.d)
				if ran := parallelRowGroups.Load() - before; workers > 1 && ran == 0 {
					t.Fatalf("%d workers: no row group was written in parallel", workers)
				}
				_, got, err := Read(fs, f.Path, tc.s)
				if err != nil {
					t.Fatal(err)
				}
				requireSameValues(t, tc.d, got)
				requireSameData(t, tc.d, got)
				chunks[workers] = columnChunkBytes(t, fs, f.Path)
			}
			if len(chunks[1]) != len(chunks[3]) {
				t.Fatalf("%d column chunks serially, %d in parallel", len(chunks[1]), len(chunks[3]))
			}
			for i := range chunks[1] {
				if !bytes.Equal(chunks[1][i], chunks[3][i]) {
					t.Errorf("column chunk %d differs between serial and parallel encoding", i)
				}
			}
		})
	}
}

// columnChunkBytes returns the stored bytes of every column chunk of the
// file, row group by row group.
func columnChunkBytes(t *testing.T, fs vfs.FS, path string) [][]byte {
	t.Helper()
	data, err := vfs.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, rg := range pf.Metadata().RowGroups {
		for _, c := range rg.Columns {
			start := c.MetaData.DataPageOffset
			if off := c.MetaData.DictionaryPageOffset; off > 0 && off < start {
				start = off
			}
			end := start + c.MetaData.TotalCompressedSize
			if start < 0 || end > int64(len(data)) {
				t.Fatalf("column chunk [%d, %d) outside the file of %d bytes", start, end, len(data))
			}
			out = append(out, data[start:end])
		}
	}
	return out
}

// A row group's leaves stop at the first error of any worker: the write
// fails with it, no further leaf starts, and nothing is left under a
// generation name.
func TestParallelEncodeStopsOnError(t *testing.T) {
	s := nestedTypes(t)
	d := nestedRows(t, s, 2000, nestedSeed(t), 0)
	fs, dir := newMemDir(t)
	boom := errors.New("boom")
	var started atomic.Int64
	leafTaskHook = func() error {
		if started.Add(1) == 3 {
			return boom
		}
		return nil
	}
	t.Cleanup(func() { leafTaskHook = nil })
	_, err := Write(context.Background(), Options{FS: fs, EncodeWorkers: 2}, dir, s, testMeta(), d)
	if !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want the failing leaf's error", err)
	}
	if n := started.Load(); n > 3+1 {
		t.Errorf("%d leaves started after the third failed (a worker may finish the one it holds)", n)
	}
	names, lerr := fs.List(dir)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(names) != 0 {
		t.Errorf("left %v in the directory after a failed write", names)
	}
}
