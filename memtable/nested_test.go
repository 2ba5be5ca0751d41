package memtable

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rollwal/rollwal/schema"
)

// mustColumn is a column of the type typ in the short form (list<int32>).
func mustColumn(name, typ string, nullable bool) schema.Column {
	c, err := schema.ParseColumnType(typ)
	if err != nil {
		panic(err)
	}
	c.Name, c.Nullable = name, nullable
	return c
}

// nestedSchema has every type at every level a schema allows, nullable and
// not, so that the tests below take every branch of appendRange, gather,
// clipVector and vectorBytes.
var nestedSchema = func() *schema.Schema {
	s, err := schema.New([]schema.Column{
		mustColumn("tokens", "list<int32>", false),
		mustColumn("logprobs", "list<float32?>", true),
		mustColumn("messages", "list<struct<role: string, content: string?, weight: float64?>?>", false),
		mustColumn("meta", "struct<step: int64, score: float32?, tag: binary?, at: timestamp?, ok: bool?, note: json?, n: int32>", true),
		mustColumn("labels", "list<string?>", true),
		mustColumn("times", "list<timestamp?>", false),
		mustColumn("flags", "list<bool>", true),
		mustColumn("blobs", "list<binary>", false),
		mustColumn("counts", "list<int64?>", false),
		mustColumn("blob", "binary", true),
		mustColumn("at", "timestamp", false),
		mustColumn("n32", "int32", true),
		mustColumn("f32", "float32", false),
		mustColumn("prompt", "string", false),
		mustColumn("reward", "float64", true),
	})
	if err != nil {
		panic(err)
	}
	return s
}()

// nestedRow returns a random row of nestedSchema: lists of zero to a few
// dozen elements, nulls at every nullable level, now and then a string long
// enough for an allocation of its own.
func nestedRow(rng *rand.Rand, id string) schema.Row {
	maybe := func(v any) any {
		if rng.IntN(5) == 0 {
			return nil
		}
		return v
	}
	list := func(most int, elem func() any) []any {
		out := make([]any, rng.IntN(most+1))
		for i := range out {
			out[i] = elem()
		}
		return out
	}
	text := func() any { return randText(rng) }
	message := func() any {
		return maybe(map[string]any{"role": text(), "content": maybe(text()), "weight": maybe(rng.NormFloat64())})
	}
	return schema.Row{
		"id":       id,
		"tokens":   list(40, func() any { return int32(rng.Uint32()) }),
		"logprobs": maybe(list(20, func() any { return maybe(-rng.Float32()) })),
		"messages": list(4, message),
		"meta": maybe(map[string]any{
			"step": rng.Int64(), "score": maybe(rng.Float32()), "tag": maybe(randBytes(rng)), "at": maybe(randTime(rng)),
			"ok": maybe(rng.IntN(2) == 0), "note": maybe(fmt.Sprintf(`{"k":%d}`, rng.IntN(9))), "n": int32(rng.Uint32()),
		}),
		"labels": maybe(list(5, func() any { return maybe(text()) })),
		"times":  list(3, func() any { return maybe(randTime(rng)) }),
		"flags":  maybe(list(6, func() any { return rng.IntN(2) == 0 })),
		"blobs":  list(3, func() any { return randBytes(rng) }),
		"counts": list(3, func() any { return maybe(rng.Int64()) }),
		"blob":   maybe(randBytes(rng)),
		"at":     randTime(rng),
		"n32":    maybe(int32(rng.Uint32())),
		"f32":    rng.Float32(),
		"prompt": text(),
		"reward": maybe(rng.Float64()),
	}
}

func randText(rng *rand.Rand) string {
	if rng.IntN(500) == 0 {
		return strings.Repeat("é", ownAllocBytes/2+rng.IntN(64))
	}
	words := []string{"", "user", "assistant", "é", "a b"}
	return words[rng.IntN(len(words))] + strings.Repeat("x", rng.IntN(24))
}

func randBytes(rng *rand.Rand) []byte {
	b := make([]byte, rng.IntN(12))
	for i := range b {
		b[i] = byte(rng.Uint32()) // any bytes, not only UTF-8
	}
	return b
}

func randTime(rng *rand.Rand) time.Time { return time.UnixMicro(rng.Int64N(4e15)).UTC() }

// nestedBatch builds a batch of random rows with the given ids.
func nestedBatch(t testing.TB, rng *rand.Rand, ids ...string) *schema.Batch {
	t.Helper()
	rows := make([]schema.Row, len(ids))
	for i, id := range ids {
		rows[i] = nestedRow(rng, id)
	}
	b, err := nestedSchema.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// source is where a row of a memtable came from: row i of a built batch.
type source struct {
	b *schema.Batch
	i int
}

// cost is what the row alone costs, measured on a batch that schema's own
// AppendRow makes of it.
func (s source) cost() int64 {
	one := s.b.Schema.NewBatch(1)
	one.AppendRow(s.b, s.i)
	return EstimateBytes(one)
}

func sources(b *schema.Batch) []source {
	out := make([]source, b.Len())
	for i := range out {
		out[i] = source{b, i}
	}
	return out
}

// matches fails unless got holds the rows of want, in order, value for
// value at every level, and every column of got passes schema's Check.
func matches(got *schema.Batch, want []source) error {
	if got.Len() != len(want) {
		return fmt.Errorf("%d rows, want %d", got.Len(), len(want))
	}
	for c, col := range got.Schema.Columns {
		if err := got.Cols[c].Check(col, got.Len()); err != nil {
			return err
		}
	}
	for i, w := range want {
		if err := sameRow(got, i, w.b, w.i); err != nil {
			return err
		}
	}
	return nil
}

func sameRow(got *schema.Batch, gi int, want *schema.Batch, wi int) error {
	if got.IDs[gi] != want.IDs[wi] {
		return fmt.Errorf("row %d: id %q, want %q", gi, got.IDs[gi], want.IDs[wi])
	}
	for c, col := range want.Schema.Columns {
		if g, w := got.Value(c, gi), want.Value(c, wi); !reflect.DeepEqual(g, w) {
			return fmt.Errorf("row %d (id %q) column %s = %s, want %s", gi, got.IDs[gi], col.Name, brief(g), brief(w))
		}
	}
	return nil
}

// brief formats v for a failure message, cut short.
func brief(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// insertBatch acquires b's estimate and inserts it as it is (no Filter).
func insertBatch(t testing.TB, s *Set, firstSeq uint64, b *schema.Batch) {
	t.Helper()
	if err := s.budget.Acquire(t.Context(), EstimateBytes(b), false); err != nil {
		t.Fatal(err)
	}
	s.Insert(b, firstSeq, 1, "", 0)
}

// TestNestedMatchesModel inserts random nested batches whose ids repeat
// within and across batches, with rotations and releases, and compares
// after every step what Filter keeps, what every memtable's Rows hold, what
// each memtable charges and an earlier snapshot of the active memtable
// with a model of plain lists of source rows.
// Rerun a failure with: go test ./memtable -run TestNestedMatchesModel -seed N
func TestNestedMatchesModel(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -run TestNestedMatchesModel -seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6e6573746564))
	steps := 800
	if testing.Short() {
		steps = 200
	}
	set := NewSet(nestedSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	gens := [][]source{nil} // per memtable, sealed ones first, the active one last
	held := map[string]bool{}
	seq := uint64(1)
	var snap *schema.Batch // the active memtable's Rows after the previous step
	var snapWant []source
	var dups, kept int
	for step := range steps {
		fail := func(format string, args ...any) {
			t.Fatalf("seed %d, step %d: %s", seed, step, fmt.Sprintf(format, args...))
		}
		switch p := rng.IntN(20); {
		case p < 15:
			ids := make([]string, 1+rng.IntN(10))
			for i := range ids {
				ids[i] = fmt.Sprintf("id-%d", rng.IntN(80))
			}
			b := nestedBatch(t, rng, ids...)
			fresh, n := set.Filter(b)
			want, dropped := filterModel(b, held)
			if err := matches(fresh, want); err != nil || n != len(dropped) {
				fail("Filter(%q) kept %q (%d dropped): %v", ids, fresh.IDs, n, err)
			}
			var droppedCost int64
			for _, d := range dropped {
				droppedCost += d.cost()
			}
			if got := EstimateBytes(b) - EstimateBytes(fresh); got != droppedCost {
				fail("Filter dropped rows that cost %d by EstimateBytes of the batches, %d row by row", got, droppedCost)
			}
			insertBatch(t, set, seq, fresh)
			seq += uint64(fresh.Len()) + rng.Uint64N(3)
			gens[len(gens)-1] = append(gens[len(gens)-1], want...)
			for _, w := range want {
				held[w.b.IDs[w.i]] = true
			}
			dups, kept = dups+n, kept+fresh.Len()
		case p < 17:
			set.Rotate()
			gens = append(gens, nil)
		default:
			if len(gens) == 1 {
				continue
			}
			if err := set.Release(set.Oldest().Generation()); err != nil {
				fail("%v", err)
			}
			for _, w := range gens[0] {
				delete(held, w.b.IDs[w.i])
			}
			gens = gens[1:]
		}
		mts := append(set.Sealed(), set.Active())
		if len(mts) != len(gens) {
			fail("%d memtables, the model has %d", len(mts), len(gens))
		}
		for k, m := range mts {
			var cost int64
			for _, w := range gens[k] {
				cost += w.cost()
			}
			if err := matches(m.Rows(), gens[k]); err != nil || m.Bytes() != cost {
				fail("generation %d (%d bytes, the rows cost %d): %v", m.Generation(), m.Bytes(), cost, err)
			}
		}
		if snap != nil {
			if err := matches(snap, snapWant); err != nil {
				fail("a snapshot changed after it was taken: %v", err)
			}
		}
		snap, snapWant = set.Active().Rows(), slices.Clone(gens[len(gens)-1])
	}
	if dups == 0 || kept == 0 {
		t.Fatalf("%d rows kept, %d dropped: the test did not test", kept, dups)
	}
	t.Logf("%d rows kept, %d dropped as duplicates", kept, dups)
}

// filterModel is Filter the slow way: the rows of b whose id is neither
// held nor earlier in b, and the others.
func filterModel(b *schema.Batch, held map[string]bool) (fresh, dropped []source) {
	seen := map[string]bool{}
	for i, id := range b.IDs {
		if held[id] || seen[id] {
			dropped = append(dropped, source{b, i})
			continue
		}
		seen[id] = true
		fresh = append(fresh, source{b, i})
	}
	return fresh, dropped
}

// TestEstimateBytesIsAdditiveOverNestedRows checks the property Filter's
// accounting relies on at every level: a batch costs the sum of its rows,
// however it is split.
func TestEstimateBytesIsAdditiveOverNestedRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	b := nestedBatch(t, rng, ids...)
	var rows int64
	for _, s := range sources(b) {
		rows += s.cost()
	}
	if whole := EstimateBytes(b); whole != rows {
		t.Fatalf("the batch costs %d, its rows one by one %d", whole, rows)
	}
	for range 20 {
		var in, out []int
		for i := range b.Len() {
			if rng.IntN(2) == 0 {
				in = append(in, i)
			} else {
				out = append(out, i)
			}
		}
		if got, want := EstimateBytes(gather(b, in))+EstimateBytes(gather(b, out)), rows; got != want {
			t.Fatalf("split into %v and %v: %d, want %d", in, out, got, want)
		}
	}
}

// TestEstimateBytesOfNestedValues pins the accounting rule for nested
// values to numbers worked out by hand.
func TestEstimateBytesOfNestedValues(t *testing.T) {
	s, err := schema.New([]schema.Column{
		mustColumn("tokens", "list<int32>", false),
		mustColumn("messages", "list<struct<role: string, content: string?>>", true),
		mustColumn("meta", "struct<step: int64, score: float32?>", true),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		row  schema.Row
		want int64
	}{{
		schema.Row{"id": "a", "tokens": []int32{1, 2, 3},
			"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "bot"}},
			"meta":     map[string]any{"step": 1}},
		rowBytes + 1 + // the row and its id
			offsetBytes + 3*4 + // tokens: an offset, three int32
			1 + offsetBytes + // messages: a null flag, an offset
			(16 + 4) + (16 + 3) + // roles: headers and bytes
			(1 + 16 + 2) + (1 + 16) + // contents: null flags, headers and bytes
			1 + 8 + (1 + 4), // meta: a null flag, step, score with its null flag
	}, {
		schema.Row{"id": "bb", "tokens": []int32{}},
		// An empty or null list is its offset; a null struct still holds
		// its fields' zero values.
		rowBytes + 2 + offsetBytes + (1 + offsetBytes) + (1 + 8 + 1 + 4),
	}} {
		b, err := s.Build([]schema.Row{tc.row})
		if err != nil {
			t.Fatal(err)
		}
		if got := EstimateBytes(b); got != tc.want {
			t.Errorf("EstimateBytes of %v = %d, want %d", tc.row, got, tc.want)
		}
	}
}

// TestNestedSnapshotIsClipped checks that Rows clips every slice at every
// level and copies the vectors that hold them: a later insert then cannot
// write into what a snapshot covers, nor a reader's append (which Rows
// forbids, but clipping makes harmless) into the memtable. Without the
// clipping of any one nested slice, the rows appended on each side would
// share memory and one side would read the other's values.
func TestNestedSnapshotIsClipped(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	set := NewSet(nestedSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	m := set.Active()
	var want []source
	// Insert rows until every nested slice below has room to grow in place,
	// so that an unclipped snapshot would share what the next insert writes.
	for i := 0; !roomInPlace(m); i++ {
		if i == 100 {
			t.Fatal("the memtable's nested slices never had room to grow in place: the test does not test")
		}
		b := nestedBatch(t, rng, fmt.Sprintf("id-%d", i))
		insertBatch(t, set, uint64(i+1), b)
		want = append(want, source{b, 0})
	}
	snap := m.Rows()
	for c := range snap.Cols {
		eachSlice(&snap.Cols[c], nestedSchema.Columns[c].Name, func(path string, l, c int) {
			if l != c {
				t.Errorf("%s of the snapshot has length %d and capacity %d", path, l, c)
			}
		})
	}
	m.mu.Lock()
	for c := range snap.Cols {
		if mine, theirs := &m.rows.Cols[c], &snap.Cols[c]; sharesVectors(mine, theirs) {
			t.Errorf("the snapshot's column %s shares a nested vector with the memtable", nestedSchema.Columns[c].Name)
		}
	}
	m.mu.Unlock()

	extra := nestedBatch(t, rng, "reader's")
	snap.AppendRow(extra, 0)
	next := nestedBatch(t, rng, "next-1", "next-2")
	insertBatch(t, set, 1000, next)
	if err := matches(snap, append(slices.Clone(want), source{extra, 0})); err != nil {
		t.Errorf("the snapshot: %v", err)
	}
	if err := matches(m.Rows(), append(want, sources(next)...)); err != nil {
		t.Errorf("the memtable: %v", err)
	}
}

// roomInPlace reports whether the slices of m that hold nested values
// (offsets, elements, fields of structs in and out of lists) all have room
// beyond their length.
func roomInPlace(m *Memtable) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	room := true
	for _, c := range []int{0, 1, 2, 3, 7} { // tokens, logprobs, messages, meta, blobs
		eachSlice(&m.rows.Cols[c], "", func(path string, l, c int) {
			// Nulls are made exactly as long as needed on the first null,
			// and a struct's Fields never grow.
			if !strings.HasSuffix(path, ".Nulls") && !strings.HasSuffix(path, ".Fields") && l == c {
				room = false
			}
		})
	}
	return room
}

// eachSlice calls f with the path, length and capacity of every non-nil
// slice of v, at every level.
func eachSlice(v *schema.Vector, path string, f func(path string, l, c int)) {
	for _, s := range []struct {
		name   string
		l, c   int
		exists bool
	}{
		{"Nulls", len(v.Nulls), cap(v.Nulls), v.Nulls != nil},
		{"Str", len(v.Str), cap(v.Str), v.Str != nil},
		{"I64", len(v.I64), cap(v.I64), v.I64 != nil},
		{"F64", len(v.F64), cap(v.F64), v.F64 != nil},
		{"Bool", len(v.Bool), cap(v.Bool), v.Bool != nil},
		{"I32", len(v.I32), cap(v.I32), v.I32 != nil},
		{"F32", len(v.F32), cap(v.F32), v.F32 != nil},
		{"Offsets", len(v.Offsets), cap(v.Offsets), v.Offsets != nil},
		{"Fields", len(v.Fields), cap(v.Fields), v.Fields != nil},
	} {
		if s.exists {
			f(path+"."+s.name, s.l, s.c)
		}
	}
	if v.Elem != nil {
		eachSlice(v.Elem, path+"[]", f)
	}
	for i := range v.Fields {
		eachSlice(&v.Fields[i], fmt.Sprintf("%s.Fields[%d]", path, i), f)
	}
}

// sharesVectors reports whether a and b share an Elem or a Fields array at
// any level.
func sharesVectors(a, b *schema.Vector) bool {
	switch {
	case a.Elem != nil && (a.Elem == b.Elem || sharesVectors(a.Elem, b.Elem)):
		return true
	case len(a.Fields) > 0 && &a.Fields[0] == &b.Fields[0]:
		return true
	}
	for i := range a.Fields {
		if sharesVectors(&a.Fields[i], &b.Fields[i]) {
			return true
		}
	}
	return false
}

// TestInsertRefusesMalformedNestedVectors checks that Insert holds nested
// vectors to the schema before it rebases offsets or appends fields.
func TestInsertRefusesMalformedNestedVectors(t *testing.T) {
	set := NewSet(nestedSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	rng := rand.New(rand.NewPCG(5, 5))
	for _, tc := range []struct {
		want  string
		spoil func(b *schema.Batch)
	}{
		{`memtable: column "tokens": tokens[]: `, func(b *schema.Batch) { b.Cols[0].Offsets[2]++ }},
		{`memtable: column "meta": meta: 5 struct fields, the schema says 7`, func(b *schema.Batch) { b.Cols[3].Fields = b.Cols[3].Fields[:5] }},
		{`memtable: column "messages": messages[].content: 0 values for `, func(b *schema.Batch) { b.Cols[2].Elem.Fields[1].Str = nil }},
	} {
		b := nestedBatch(t, rng, "a", "b")
		tc.spoil(b)
		mustPanic(t, tc.want, func() { set.Insert(b, 1, 1, "", 0) })
	}
	if set.Len() != 0 {
		t.Errorf("a refused insert changed the set: %d rows", set.Len())
	}
}

// TestInsertCopiesNestedStrings checks that strings and binary values in
// lists and structs are copied into the memtable's arena like top-level
// ones, so that a memtable never pins the buffers its input came from.
func TestInsertCopiesNestedStrings(t *testing.T) {
	set := NewSet(nestedSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	b := nestedBatch(t, rand.New(rand.NewPCG(9, 9)), ids...)
	insertBatch(t, set, 1, b)
	rows := set.Active().Rows()
	var nested int
	for c := range b.Cols {
		theirs, mine := stringsByPath(&b.Cols[c], ""), stringsByPath(&rows.Cols[c], "")
		for path, ss := range theirs {
			for i, s := range ss {
				if s != "" && unsafe.StringData(s) == unsafe.StringData(mine[path][i]) {
					t.Fatalf("%s%s value %d shares its bytes with the inserted batch", nestedSchema.Columns[c].Name, path, i)
				}
				if path != "" && s != "" {
					nested++
				}
			}
		}
	}
	if nested == 0 {
		t.Fatal("no nested string: the test does not test")
	}
}

// stringsByPath returns the Str slices of v at every level, by path.
func stringsByPath(v *schema.Vector, path string) map[string][]string {
	out := map[string][]string{}
	if v.Str != nil {
		out[path] = v.Str
	}
	if v.Elem != nil {
		maps.Copy(out, stringsByPath(v.Elem, path+"[]"))
	}
	for f := range v.Fields {
		maps.Copy(out, stringsByPath(&v.Fields[f], fmt.Sprintf("%s.Fields[%d]", path, f)))
	}
	return out
}
