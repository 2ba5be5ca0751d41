package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

func TestAppendFlushReopen(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	if s.Epoch() != 1 {
		t.Fatalf("first epoch = %d, want 1", s.Epoch())
	}
	res, err := s.Append(ctx, rows("a", 0, 100), Source{Name: "p0", Offset: 41})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stored != 100 || res.FirstSeq != 1 || res.LastSeq != 100 || res.Generation != 1 {
		t.Fatalf("result %+v", res)
	}
	gen, err := s.Flush(ctx)
	if err != nil || gen != 1 {
		t.Fatalf("flush = %d, %v; want generation 1", gen, err)
	}
	if _, err := s.Append(ctx, rows("a", 100, 50), Source{}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ids, m := committed(t, fs, opts, "s0")
	if len(ids) != 150 || m.CurrentGeneration != 3 || m.ReplayCursor != 150 {
		t.Fatalf("after close: %d ids, current generation %d, cursor %d", len(ids), m.CurrentGeneration, m.ReplayCursor)
	}
	if m.SourceOffsets["p0"] != 41 {
		t.Fatalf("source offsets %v", m.SourceOffsets)
	}
	h = openHost(t, opts)
	defer h.Close(ctx)
	s = mustOpen(t, h, "s0")
	if s.Epoch() != 2 {
		t.Fatalf("reopened epoch = %d, want 2", s.Epoch())
	}
	res, err = s.Append(ctx, rows("a", 150, 1), Source{})
	if err != nil || res.FirstSeq != 151 {
		t.Fatalf("append after reopen: %+v %v; want first seq 151", res, err)
	}
}

func TestDuplicatesInMemtableAreNotStoredTwice(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("d", 0, 10), Source{}); err != nil {
		t.Fatal(err)
	}
	batch := append(rows("d", 5, 10), rows("d", 14, 1)...) // 5 old, 5 new, one repeat
	res, err := s.Append(ctx, batch, Source{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stored != 5 || res.Duplicates != 6 {
		t.Fatalf("stored %d duplicates %d; want 5 and 6", res.Stored, res.Duplicates)
	}
	if got := memtableIDs(s); len(got) != 15 {
		t.Fatalf("memtable holds %d ids, want 15", len(got))
	}
}

// TestBadInputChangesNothing: every kind of bad row rejects its whole batch
// with an error naming the row and column, and nothing is written.
func TestBadInputChangesNothing(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("ok", 0, 3), Source{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(schema.Row)
		want string
	}{
		{"schema violation", func(r schema.Row) { r["reward"] = "lots" }, `row 2 (id "bad-2"), column "reward": want float64, got string`},
		{"oversize id", func(r schema.Row) { r["id"] = strings.Repeat("i", 1025) }, `row 2, column "id": id is 1025 bytes, more than the limit of 1024`},
		{"empty id", func(r schema.Row) { r["id"] = "" }, `row 2, column "id": empty id`},
		{"unknown column", func(r schema.Row) { r["score"] = 1.0 }, `row 2 (id "bad-2"), column "score": unknown column`},
		{"missing column", func(r schema.Row) { delete(r, "completion") }, `column "completion": missing value`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Status()
			batch := rows("bad", 0, 4)
			tc.edit(batch[2])
			_, err := s.Append(ctx, batch, Source{})
			if !errors.Is(err, schema.ErrInvalidRow) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q", err, tc.want)
			}
			after := s.Status()
			if after.WALTail != before.WALTail || after.MemtableRows != before.MemtableRows {
				t.Fatalf("a rejected batch changed the shard: tail %d→%d, rows %d→%d",
					before.WALTail, after.WALTail, before.MemtableRows, after.MemtableRows)
			}
		})
	}
	_, err := s.Append(ctx, rows("big", 0, s.opts.MaxBatchRows+1), Source{})
	if !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("oversize batch: %v", err)
	}
	// Callers that build batches themselves answer as Append does.
	if check := s.CheckBatchRows(s.opts.MaxBatchRows + 1); check == nil || check.Error() != err.Error() {
		t.Fatalf("CheckBatchRows of an oversize batch: %v, Append: %v", check, err)
	}
	if err := s.CheckBatchRows(s.opts.MaxBatchRows); err != nil {
		t.Fatalf("CheckBatchRows of MaxBatchRows rows: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	bad := []func(*Options){
		func(o *Options) { o.Etcd = nil },
		func(o *Options) { o.LeaseTTL = 10 },
		func(o *Options) { o.Codec = "lz5" },
		func(o *Options) { o.MemoryBudget, o.FlushBytes = 1<<20, 2<<20 },
		func(o *Options) { o.Schema = &schema.Schema{} },
		func(o *Options) { o.WALPreallocate = 4 << 10 },                        // a fallocate every few records
		func(o *Options) { o.WALSegmentSize, o.WALPreallocate = 1<<20, 2<<20 }, // past the segment
	}
	for i, edit := range bad {
		o := testOptions(vfs.NewStrictMem(), "t")
		edit(&o)
		o.EnsureDefaults()
		if err := o.Validate(); err == nil {
			t.Errorf("case %d: invalid options accepted", i)
		}
	}
	for _, n := range []int64{-1, 0, 64 << 10} { // none, the default, the smallest step
		o := testOptions(vfs.NewStrictMem(), "t")
		o.WALPreallocate = n
		o.EnsureDefaults()
		if err := o.Validate(); err != nil {
			t.Errorf("WAL preallocate %d: %v", n, err)
		}
	}
}
