package generation

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// mutation edits the leveled values of one leaf, in file order.
type mutation func(t *testing.T, vals []parquet.Value) []parquet.Value

// writeCrafted writes d as a generation of one row group, as Write would,
// except that the values of each leaf in edits go through its mutation
// first: a file whose footer is valid and whose levels are damaged.
func writeCrafted(t *testing.T, fs vfs.FS, path string, s *schema.Schema, d Data, edits map[string]mutation) {
	t.Helper()
	lay, err := newLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	m := testMeta()
	if err := fillMeta(&m, s, d); err != nil {
		t.Fatal(err)
	}
	kv, err := keyValues(&m, s)
	if err != nil {
		t.Fatal(err)
	}
	opts := []parquet.WriterOption{lay.schema}
	for _, p := range kv {
		opts = append(opts, parquet.KeyValueMetadata(p[0], p[1]))
	}
	var buf bytes.Buffer
	pw := parquet.NewGenericWriter[any](&buf, opts...)
	cw := pw.ColumnWriters()
	enc := newColumnEncoder(DefaultPageBufferSize)
	n := d.Rows.Len()
	paths := lay.schema.Columns()
	if err := enc.writeStrings(cw[0], 0, d.Rows.IDs, nil, false, 0, n); err != nil {
		t.Fatal(err)
	}
	applied := 0
	for i, c := range s.Columns {
		v := &d.Rows.Cols[i]
		if lay.nested[i] == nil {
			if err := enc.writeVector(cw[lay.first[i]], lay.first[i], c.Nullable, v, 0, n); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, l := range lay.nested[i] {
			sh := newShredder(&l, v)
			var vals []parquet.Value
			for r := range n {
				vals, _ = sh.row(vals, r)
			}
			if edit, ok := edits[strings.Join(paths[l.index], ".")]; ok {
				vals = edit(t, vals)
				applied++
			}
			if _, err := cw[l.index].WriteRowValues(vals); err != nil {
				t.Fatal(err)
			}
		}
	}
	if applied != len(edits) {
		t.Fatalf("%d of %d edits name a nested leaf", applied, len(edits))
	}
	if err := enc.writeUints(cw[lay.seqIndex], lay.seqIndex, d.Seq, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := enc.writeUints(cw[lay.epochIndex], lay.epochIndex, d.Epoch, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	putFile(t, fs, path, buf.Bytes())
}

// find returns the index of the first value that ok accepts.
func find(t *testing.T, vals []parquet.Value, what string, ok func(i int, v parquet.Value) bool) int {
	t.Helper()
	for i, v := range vals {
		if ok(i, v) {
			return i
		}
	}
	t.Fatalf("no value is %s", what)
	return -1
}

// withLevels returns v at other levels (a null value below the max
// definition level, the value itself at it).
func withLevels(v parquet.Value, rep, def, maxDef int) parquet.Value {
	col := v.Column()
	if def < maxDef {
		v = parquet.NullValue()
	}
	return v.Level(rep, def, col)
}

func dropElement(t *testing.T, vals []parquet.Value) []parquet.Value {
	i := find(t, vals, "a second list element", func(_ int, v parquet.Value) bool { return v.RepetitionLevel() == 1 })
	return slices.Delete(slices.Clone(vals), i, i+1)
}

func addElement(t *testing.T, vals []parquet.Value) []parquet.Value {
	i := find(t, vals, "a second list element", func(_ int, v parquet.Value) bool { return v.RepetitionLevel() == 1 })
	return slices.Insert(slices.Clone(vals), i, vals[i])
}

// setDef changes the definition level of the first value at def from to
// def to.
func setDef(from, to, maxDef int) mutation {
	return func(t *testing.T, vals []parquet.Value) []parquet.Value {
		i := find(t, vals, fmt.Sprintf("at def %d", from), func(_ int, v parquet.Value) bool { return v.DefinitionLevel() == from })
		vals = slices.Clone(vals)
		vals[i] = withLevels(vals[i], vals[i].RepetitionLevel(), to, maxDef)
		return vals
	}
}

// Damaged levels in a nested leaf, in files whose footer and checksum are
// valid, are refused as corrupt with a reason, never a panic nor rows that
// differ from what was written.
func TestNestedCorruptLevelsAreRefused(t *testing.T) {
	s := nestedTypes(t)
	d := nestedRows(t, s, 200, 11, 0)
	fs := vfs.NewStrictMem()
	const path = "/crafted.parquet"

	// The crafted file without edits is the file Write makes.
	writeCrafted(t, fs, path, s, d, nil)
	if _, got, err := Read(fs, path, s); err != nil {
		t.Fatalf("unedited crafted file: %v", err)
	} else {
		requireSameValues(t, d, got)
	}

	cases := []struct {
		name  string
		edits map[string]mutation
		want  string
	}{
		{"a field leaf with an element fewer", map[string]mutation{"messages.list.element.content": dropElement},
			"list elements in one leaf of the column"},
		{"a field leaf with an element more", map[string]mutation{"messages.list.element.content": addElement},
			"more list elements than the column's first leaf"},
		{"the first leaf with an element fewer", map[string]mutation{"events.list.element.at": dropElement},
			"more list elements than the column's first leaf"},
		{"struct leaves disagree on a null row", map[string]mutation{"msg.content": setDef(0, 1, 2)},
			"null in one leaf of the column and not in another"},
		{"list leaves disagree on a null element", map[string]mutation{"events.list.element.score": setDef(1, 2, 3)},
			"null in one leaf of the column and not in another"},
		{"an element after a null list", map[string]mutation{"logprobs.list.element": func(t *testing.T, vals []parquet.Value) []parquet.Value {
			i := find(t, vals, "a null list", func(_ int, v parquet.Value) bool { return v.DefinitionLevel() == 0 })
			return slices.Insert(slices.Clone(vals), i+1, parquet.FloatValue(1).Level(1, 3, vals[i].Column()))
		}}, "outside a list"},
		{"an element at the level of an empty list", map[string]mutation{"tags.list.element": func(t *testing.T, vals []parquet.Value) []parquet.Value {
			i := find(t, vals, "a second list element", func(_ int, v parquet.Value) bool { return v.RepetitionLevel() == 1 })
			vals = slices.Clone(vals)
			vals[i] = withLevels(vals[i], 1, 0, 1)
			return vals
		}}, "outside a list"},
		{"a chunk that begins inside a row", map[string]mutation{"times.list.element": func(t *testing.T, vals []parquet.Value) []parquet.Value {
			i := find(t, vals, "a second list element", func(_ int, v parquet.Value) bool { return v.RepetitionLevel() == 1 })
			return append([]parquet.Value{vals[i]}, vals...)
		}}, "does not start at the beginning of a row"}, // parquet-go's own check of v2 pages
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			writeCrafted(t, fs, path, s, d, tc.edits)
			_, _, err := Read(fs, path, s)
			requireCorrupt(t, err, path, tc.name)
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "panicked") {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// Seeded random damage in a file of every nested shape: Read never panics,
// and either refuses the file as corrupt or returns exactly the rows that
// were written.
func TestNestedRandomDamageNeverReadsWrongRows(t *testing.T) {
	s := nestedTypes(t)
	fs, dir := newMemDir(t)
	d := nestedRows(t, s, 60, 12, 0)
	f := mustWrite(t, Options{FS: fs, RowGroupRows: 25}, dir, s, testMeta(), d)
	b := fileBytes(t, fs, f.Path)
	const seed = 20260302
	rng := rand.New(rand.NewPCG(seed, 0))
	iterations := 1500
	if testing.Short() {
		iterations = 200
	}
	detected := 0
	for it := range iterations {
		c, how := damage(rng, b)
		mem := vfs.NewStrictMem()
		putFile(t, mem, "/"+f.Name, c)
		m, got, err := Read(mem, "/"+f.Name, s)
		if err != nil {
			requireCorrupt(t, err, "/"+f.Name, fmt.Sprintf("seed %d iteration %d (%s)", seed, it, how))
			detected++
			continue
		}
		if m != f.Meta {
			t.Fatalf("seed %d iteration %d (%s): accepted with meta %+v, want %+v", seed, it, how, m, f.Meta)
		}
		requireSameValues(t, d, got)
	}
	t.Logf("seed %d: %d of %d damaged files refused, the rest read back intact", seed, detected, iterations)
}

// Levels above a leaf's maximum cannot be written through parquet-go (its
// writer indexes histograms by level), but a damaged page can decode to
// them: the assembler refuses them before it uses them.
func TestNestedLevelsAboveTheLeafAreRefused(t *testing.T) {
	s := nestedTypes(t)
	lay, err := newLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"counts", "messages", "msg"} {
		c := s.Index(name)
		leaves := lay.nested[c]
		l := leaves[0]
		for _, lv := range [][2]int{{0, int(l.lv.max) + 1}, {l.lv.maxRep() + 1, int(l.lv.max)}} {
			b := s.NewBatch(1)
			sink := nestedSinks(leaves, &b.Cols[c])[0]
			v := parquet.NullValue().Level(lv[0], lv[1], l.index)
			if err := safely(func() error { return sink(v) }); err == nil || !strings.Contains(err.Error(), "above the leaf's") {
				t.Errorf("%s: value at rep %d def %d: %v", name, lv[0], lv[1], err)
			}
		}
	}
}
