package publish

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// copyEnv is a shard whose generation 1 is merged with the cutoff at 2
// (the generation then active), so that generations 3 and on are
// lookup-free, with a coordinator in schema version 1
// (evolvedSchemas) changed by mod.
func copyEnv(t *testing.T, mod ...func(*Options)) (*env, *Coordinator, *schema.Schema) {
	return copyEnvOn(newEnv(t), mod...)
}

// copyEnvOn is copyEnv on e.
func copyEnvOn(e *env, mod ...func(*Options)) (*env, *Coordinator, *schema.Schema) {
	t := e.t
	v1, _, _ := evolvedSchemas(t)
	c := e.coordinator(append([]func(*Options){func(o *Options) { o.Schema, o.Compaction.Disabled = v1, true }}, mod...)...)
	e.putGenerations(1, 1, genSpec{v1, 0, rowsOf("a", 5, 1)})
	if r := e.runOnce(c); r.RowsStaged != 5 {
		t.Fatalf("first merge staged %d rows, want 5", r.RowsStaged)
	}
	return e, c, v1
}

// stagePlan plans and stages one pass, with every generation marked for
// the ID check when idCheck is set.
func stagePlan(t *testing.T, e *env, c *Coordinator, idCheck bool) *Staged {
	t.Helper()
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range p.Shards {
		for i := range sp.Generations {
			sp.Generations[i].IDCheck = sp.Generations[i].IDCheck || idCheck
		}
	}
	s, err := c.Stage(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stagedFiles are the files of s, in order.
func stagedFiles(s *Staged) []shardmeta.BaseFile {
	var out []shardmeta.BaseFile
	for _, p := range s.Parts {
		out = append(out, p.Files...)
	}
	return out
}

// TestCopiedBaseFileIsTheReencodedOne: lookup-free generations whose rows
// are all kept are copied, and each copy is the base file the decode path
// writes: the same rows read back (rollwal's reader and parquet-go's),
// the same bytes up to the footer, the same record (rows, bytes, _seq
// range), an index checksum that verifies. Committed, the Iceberg data
// files record exactly the copy's row count, size and _seq bounds, and
// every reader of the base sees each row once (checkBase).
func TestCopiedBaseFileIsTheReencodedOne(t *testing.T) {
	e, c, v1 := copyEnv(t)
	e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 300, 1)}, genSpec{v1, 1, rowsOf("c", 200, 1)})
	c.testNoCopy = true
	reencoded := stagePlan(t, e, c, false)
	c.testNoCopy = false
	copied := stagePlan(t, e, c, false)
	if reencoded.Copied != 0 || copied.Copied != 2 || copied.RowsStaged != 500 || reencoded.RowsStaged != 500 {
		t.Fatalf("copied %d and %d generations, staged %d and %d rows; want 0 and 2, 500 each",
			reencoded.Copied, copied.Copied, reencoded.RowsStaged, copied.RowsStaged)
	}
	want, got := stagedFiles(reencoded), stagedFiles(copied)
	if len(want) != 2 || len(got) != 2 {
		t.Fatalf("%d and %d files staged, want 2 each", len(want), len(got))
	}
	for i := range got {
		sameBaseFile(t, e, c, want[i], got[i])
	}
	if err := c.Commit(e.ctx, copied); err != nil {
		t.Fatal(err)
	}
	st, _ := e.state()
	base, err := c.loadBase(e.ctx, st.Version)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		i := slices.IndexFunc(base.files, func(b shardmeta.BaseFile) bool { return b.Path == f.Path })
		if i < 0 {
			t.Fatalf("copied file %s is not in the table", f.Path)
		}
		rec := base.files[i]
		if rec.Rows != f.Rows || rec.Bytes != f.Bytes || rec.SeqFirst != f.SeqFirst || rec.SeqLast != f.SeqLast ||
			rec.IndexCRC == nil || *rec.IndexCRC != *f.IndexCRC {
			t.Fatalf("the table records %+v for the copied file, the stage %+v", rec, f)
		}
		onDisk(t, e, f)
	}
	e.checkBase()
}

// sameBaseFile fails unless the copied base file got holds what the
// re-encoded want holds.
func sameBaseFile(t *testing.T, e *env, c *Coordinator, want, got shardmeta.BaseFile) {
	t.Helper()
	if want.Rows != got.Rows || want.Bytes != got.Bytes || want.SeqFirst != got.SeqFirst || want.SeqLast != got.SeqLast || want.Shard != got.Shard {
		t.Fatalf("copied file %+v, re-encoded %+v", got, want)
	}
	path := func(f shardmeta.BaseFile) string { return filepath.Join(c.BaseDir(), filepath.FromSlash(f.Path)) }
	wm, wd, err := generation.ReadStored(e.fs.FS, path(want))
	if err != nil {
		t.Fatal(err)
	}
	gm, gd, err := generation.ReadStored(e.fs.FS, path(got))
	if err != nil {
		t.Fatal(err)
	}
	wm.CreatedUnixNano, gm.CreatedUnixNano = 0, 0
	if wm != gm || !reflect.DeepEqual(wd.Rows.IDs, gd.Rows.IDs) || !reflect.DeepEqual(wd.Rows.Cols, gd.Rows.Cols) ||
		!slices.Equal(wd.Seq, gd.Seq) || !slices.Equal(wd.Epoch, gd.Epoch) {
		t.Fatalf("copied file %s (%+v) reads back other rows than the re-encoded %s (%+v)", got.Path, gm, want.Path, wm)
	}
	wb, gb := readFile(t, path(want)), readFile(t, path(got))
	if body := footerStart(wb); !bytes.Equal(wb[:body], gb[:footerStart(gb)]) {
		t.Fatalf("copied file %s differs from the re-encoded one before the footer", got.Path)
	}
	if err := generation.VerifyIndex(bytes.NewReader(gb), int64(len(gb)), got.Path, *got.IndexCRC); err != nil {
		t.Fatal(err)
	}
}

// footerStart is where the Thrift footer of Parquet file b begins.
func footerStart(b []byte) int {
	return len(b) - 8 - int(binary.LittleEndian.Uint32(b[len(b)-8:]))
}

// onDisk fails unless the file f records is that size, and parquet-go
// reads its rows, of ids and _seq within the recorded range.
func onDisk(t *testing.T, e *env, f shardmeta.BaseFile) {
	t.Helper()
	b := readFile(t, filepath.Join(e.baseDir(), filepath.FromSlash(f.Path)))
	pf, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]parquet.Row, pf.NumRows()+1)
	r := parquet.NewReader(pf)
	defer r.Close()
	n, _ := r.ReadRows(rows)
	id, _ := pf.Schema().Lookup(schema.IDColumn)
	seq, _ := pf.Schema().Lookup(schema.SeqColumn)
	lo, hi := ^uint64(0), uint64(0)
	for _, row := range rows[:n] {
		if row[id.ColumnIndex].IsNull() || len(row[id.ColumnIndex].ByteArray()) == 0 {
			t.Fatalf("file %s: a row without id", f.Path)
		}
		q := row[seq.ColumnIndex].Uint64()
		lo, hi = min(lo, q), max(hi, q)
	}
	if int64(len(b)) != f.Bytes || int64(n) != f.Rows || lo != f.SeqFirst || hi != f.SeqLast {
		t.Fatalf("file %s: %d bytes, %d rows, _seq %d..%d; recorded %+v", f.Path, len(b), n, lo, hi, f)
	}
}

// TestStageCopiesOnlyWhenEveryRowIsKept: a generation is copied when it
// is lookup-free, all its rows are new to the pass, and it is in the
// pass's schema and codec; when any of these fails it is decoded and
// re-encoded, and the rows staged are the same.
func TestStageCopiesOnlyWhenEveryRowIsKept(t *testing.T) {
	t.Run("all kept", func(t *testing.T) {
		e, c, v1 := copyEnv(t)
		e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 30, 1)}, genSpec{v1, 1, rowsOf("c", 20, 1)})
		wantStaged(t, stagePlan(t, e, c, false), 2, 50, 0)
	})
	t.Run("id check, none in the base", func(t *testing.T) {
		e, c, v1 := copyEnv(t)
		e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 30, 1)}, genSpec{v1, 1, rowsOf("c", 20, 1)})
		wantStaged(t, stagePlan(t, e, c, true), 2, 50, 0)
	})
	t.Run("id check, a row in the base", func(t *testing.T) {
		e, c, v1 := copyEnv(t)
		// a-4 replayed at its position (5) in generation 1's base file.
		replayed := append(rowsOf("a", 5, 1)[4:], rowsOf("b", 30, 1)...)
		e.putGenerations(3, 5, genSpec{v1, 1, replayed}, genSpec{v1, 1, rowsOf("c", 20, 1)})
		s := stagePlan(t, e, c, true)
		if s.Copied != 1 || s.RowsStaged != 50 || s.DroppedInBase != 1 || s.DroppedInPass != 0 {
			t.Fatalf("copied %d generations, staged %d rows, dropped %d in the base and %d in the pass; want 1, 50, 1, 0",
				s.Copied, s.RowsStaged, s.DroppedInBase, s.DroppedInPass)
		}
		if f := stagedFiles(s); len(f) != 2 || f[0].Rows != 30 || f[1].Rows != 20 {
			t.Fatalf("staged %+v, want generation 3 without a-4 and generation 4 whole", f)
		}
		if s.BaseRowGroupsRead != 1 {
			t.Fatalf("read %d base row groups' ids, want 1: the copy's ID check answers the decode path", s.BaseRowGroupsRead)
		}
	})
	t.Run("a row dropped", func(t *testing.T) {
		e, c, v1 := copyEnv(t)
		again := append(rowsOf("c", 20, 1), rowsOf("b", 1, 1)...) // b-0 a second time
		e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 30, 1)}, genSpec{v1, 1, again})
		s := wantStaged(t, stagePlan(t, e, c, false), 1, 50, 1)
		if f := stagedFiles(s); len(f) != 2 || f[0].Rows != 30 || f[1].Rows != 20 {
			t.Fatalf("staged %+v, want generation 3 whole and generation 4 without b-0", f)
		}
	})
	t.Run("a row repeated within", func(t *testing.T) {
		e, c, v1 := copyEnv(t)
		twice := append(rowsOf("b", 30, 1), rowsOf("b", 1, 1)...)
		e.putGenerations(3, 6, genSpec{v1, 1, twice})
		wantStaged(t, stagePlan(t, e, c, false), 0, 30, 1)
	})
	t.Run("another codec", func(t *testing.T) {
		e, c, v1 := copyEnv(t, func(o *Options) { o.Codec = generation.CodecZstd })
		e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 30, 1)})
		wantStaged(t, stagePlan(t, e, c, false), 0, 30, 0)
	})
	t.Run("another schema", func(t *testing.T) {
		e, c, v1 := copyEnv(t)
		_, v2, configured := evolvedSchemas(t)
		if _, _, err := shardmeta.ApplySchema(e.ctx, etcdClient, e.keys(), configured, false, 5e9); err != nil {
			t.Fatal(err)
		}
		e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 30, 1)}, genSpec{v2, 2, rowsOf("c", 20, 2)})
		s := wantStaged(t, stagePlan(t, e, c, false), 1, 50, 0)
		for _, f := range stagedFiles(s) {
			_, d, err := generation.ReadStored(e.fs.FS, filepath.Join(c.BaseDir(), filepath.FromSlash(f.Path)))
			if err != nil {
				t.Fatal(err)
			}
			if !schema.Same(d.Rows.Schema, v2) {
				t.Fatalf("base file %s is not in the pass's schema version 2", f.Path)
			}
		}
	})
}

// wantStaged fails unless s copied copied generations and staged rows
// rows, dropping dropped in the pass.
func wantStaged(t *testing.T, s *Staged, copied int, rows, dropped int64) *Staged {
	t.Helper()
	if s.Copied != copied || s.RowsStaged != rows || s.DroppedInPass != dropped || s.DroppedInBase != 0 {
		t.Fatalf("copied %d generations, staged %d rows, dropped %d in the pass and %d in the base; want %d, %d, %d, 0",
			s.Copied, s.RowsStaged, s.DroppedInPass, s.DroppedInBase, copied, rows, dropped)
	}
	return s
}

// TestCrashWhileCopyingPublishesEveryRowOnce: a machine crash at any
// filesystem operation of a stage that copies leaves the table as it was,
// and under a base file name only whole files (a copy in the making is a
// temporary file; a copy placed but not committed, an orphan, as a
// re-encoded one is); the successor's pass publishes every row once.
func TestCrashWhileCopyingPublishesEveryRowOnce(t *testing.T) {
	setup := func(t *testing.T) (*env, *Coordinator) {
		e, c, v1 := copyEnvOn(newMemEnv(t))
		e.putGenerations(3, 6, genSpec{v1, 1, rowsOf("b", 30, 1)}, genSpec{v1, 1, rowsOf("c", 20, 1)})
		return e, c
	}
	e, c := setup(t)
	probe := &vfs.Injector{}
	e.fs.FS = vfs.Inject(e.mem, probe)
	if s := stagePlan(t, e, c, false); s.Copied != 2 {
		t.Fatalf("copied %d generations, want 2", s.Copied)
	}
	total := probe.Ops()
	for k := int64(1); k <= total; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			e, c := setup(t)
			inj := &vfs.Injector{}
			inj.CrashAt(k)
			e.fs.FS = vfs.Inject(e.mem, inj)
			p, err := c.Plan(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Stage(e.ctx, p); !errors.Is(err, vfs.ErrCrashed) {
				t.Fatalf("crash at op %d of %d: stage returned %v", k, total, err)
			}
			c.Close()
			e.crash()
			for _, n := range baseDataNames(t, e) {
				if _, _, err := generation.ReadStored(e.fs, filepath.Join(e.baseDir(), "data", "s0", n)); err != nil {
					t.Fatalf("crash at op %d of %d left base file %s: %v", k, total, n, err)
				}
			}
			if len(e.baseFiles()) != 1 {
				t.Fatalf("crash at op %d of %d: the table has %d files, want generation 1's alone", k, total, len(e.baseFiles()))
			}
			if r := e.runOnce(e.coordinator(func(o *Options) { o.Compaction.Disabled = true })); r.RowsStaged != 50 {
				t.Fatalf("the successor staged %d rows, want 50", r.RowsStaged)
			}
			if ids, rows := e.baseIDs(); len(ids) != 55 || rows != 55 {
				t.Fatalf("the base holds %d rows of %d ids, want 55 once each", rows, len(ids))
			}
		})
	}
}

// baseDataNames are the base files under the base's data directory, not
// counting temporary files.
func baseDataNames(t *testing.T, e *env) []string {
	t.Helper()
	dir := filepath.Join(e.baseDir(), "data", "s0")
	names, err := e.mem.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if !generation.IsTemp(n) {
			out = append(out, n)
		}
	}
	return out
}
