package memtable

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized model test (0: from the clock)")

// modelGen is what one memtable must hold, kept the simple way.
type modelGen struct {
	gen     uint64
	ids     []string
	seqs    []uint64
	epochs  []uint64
	sources map[string]int64
	bytes   int64
	sealed  bool
}

// model is one shard: generations in order, the last one active.
type model struct {
	gens    []*modelGen
	lastSeq uint64
	epoch   uint64
}

func (m *model) active() *modelGen { return m.gens[len(m.gens)-1] }

func (m *model) holds(id string) bool {
	for _, g := range m.gens {
		if slices.Contains(g.ids, id) {
			return true
		}
	}
	return false
}

// filter is Set.Filter the slow way: a scan over every generation.
func (m *model) filter(ids []string) (fresh []string) {
	for _, id := range ids {
		if !m.holds(id) && !slices.Contains(fresh, id) {
			fresh = append(fresh, id)
		}
	}
	return fresh
}

// shard is a Set under test with its model.
type shard struct {
	set   *Set
	model *model
}

// TestSetMatchesModel drives Sets that share one Budget through random
// inserts, rotations and releases (in and out of order) and compares every
// observable after each step with a model that scans instead of indexing.
// Rerun a failure with: go test ./memtable -run TestSetMatchesModel -seed N
func TestSetMatchesModel(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6d656d7461626c65))

	steps := 2500
	if testing.Short() {
		steps = 500
	}
	budget := NewBudget(48 << 10) // small enough that inserts meet backpressure
	shards := make([]*shard, 3)
	for i := range shards {
		gen := rng.Uint64N(100)
		shards[i] = &shard{set: NewSet(testSchema, gen, budget, nil), model: &model{gens: []*modelGen{{gen: gen}}}}
	}
	counts := map[string]int{}
	for step := range steps {
		sh := shards[rng.IntN(len(shards))]
		var what string
		switch p := rng.IntN(100); {
		case p < 60:
			what = sh.insert(t, rng, budget)
		case p < 78:
			what = sh.rotate()
		default:
			what = sh.release(t, rng)
		}
		if err := checkAll(shards, budget); err != nil {
			t.Fatalf("seed %d, step %d (%s): %v", seed, step, what, err)
		}
		counts[strings.TrimSuffix(strings.Fields(what)[0], ":")]++
	}
	t.Logf("steps by outcome: %v", counts)
	for _, sh := range shards {
		sh.set.Close()
	}
	if budget.Used() != 0 {
		t.Fatalf("seed %d: budget holds %d bytes after every set closed", seed, budget.Used())
	}
}

func (sh *shard) insert(t *testing.T, rng *rand.Rand, budget *Budget) string {
	ids := make([]string, 1+rng.IntN(8))
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", rng.IntN(300))
		if rng.IntN(4) == 0 {
			ids[i] += "~" // null reward and metadata
		}
	}
	m := sh.model
	want := m.filter(ids)
	fresh, dups := sh.set.Filter(batch(t, ids...))
	if !slices.Equal(fresh.IDs, want) || dups != len(ids)-len(want) {
		t.Fatalf("Filter(%q) = %q, %d dups; the model keeps %q", ids, fresh.IDs, dups, want)
	}
	cost := EstimateBytes(fresh)
	fits := budget.Used()+cost <= budget.Limit()
	if err := budget.Acquire(t.Context(), cost, false); (err == nil) != fits || (err != nil && !errors.Is(err, ErrBackpressure)) {
		t.Fatalf("Acquire(%d) with %d of %d used = %v", cost, budget.Used(), budget.Limit(), err)
	} else if err != nil {
		return fmt.Sprintf("backpressure: insert %q", ids)
	}
	first := m.lastSeq + 1 + rng.Uint64N(3)
	m.epoch += rng.Uint64N(2)
	source, offset := []string{"", "s0", "s1"}[rng.IntN(3)], rng.Int64N(100)
	sh.set.Insert(fresh, first, m.epoch, source, offset)

	a := m.active()
	for i, id := range want {
		a.ids = append(a.ids, id)
		a.seqs = append(a.seqs, first+uint64(i))
		a.epochs = append(a.epochs, m.epoch)
	}
	if len(want) > 0 {
		m.lastSeq = first + uint64(len(want)) - 1
	}
	a.bytes += cost
	if source != "" {
		if a.sources == nil {
			a.sources = map[string]int64{}
		}
		a.sources[source] = max(a.sources[source], offset)
	}
	return fmt.Sprintf("insert %q as %q from %d, epoch %d, %s@%d", ids, want, first, m.epoch, source, offset)
}

func (sh *shard) rotate() string {
	got := sh.set.Rotate()
	a := sh.model.active()
	a.sealed = true
	sh.model.gens = append(sh.model.gens, &modelGen{gen: a.gen + 1})
	if got.Generation() != a.gen {
		return fmt.Sprintf("rotate returned generation %d, want %d", got.Generation(), a.gen)
	}
	return fmt.Sprintf("rotate %d", a.gen)
}

func (sh *shard) release(t *testing.T, rng *rand.Rand) string {
	m := sh.model
	oldest := m.gens[0]
	gen := oldest.gen
	if rng.IntN(4) == 0 { // anything from just below the oldest to past the active one
		gen = gen - 1 + rng.Uint64N(uint64(len(m.gens))+2)
	}
	ok := oldest.sealed && gen == oldest.gen
	err := sh.set.Release(gen)
	if (err == nil) != ok || (err != nil && !errors.Is(err, ErrOutOfOrder)) {
		t.Fatalf("Release(%d) with generations %v = %v, want success %t", gen, m.genNumbers(), err, ok)
	}
	if ok {
		m.gens = m.gens[1:]
	}
	if !ok {
		return fmt.Sprintf("refused: release %d", gen)
	}
	return fmt.Sprintf("release %d", gen)
}

func (m *model) genNumbers() []uint64 {
	out := make([]uint64, len(m.gens))
	for i, g := range m.gens {
		out[i] = g.gen
	}
	return out
}

func checkAll(shards []*shard, budget *Budget) error {
	var used int64
	for i, sh := range shards {
		if err := sh.check(); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		used += sh.set.Bytes()
	}
	if budget.Used() != used {
		return fmt.Errorf("budget holds %d bytes, the sets %d", budget.Used(), used)
	}
	return nil
}

func (sh *shard) check() error {
	s, m := sh.set, sh.model
	mts := append(s.Sealed(), s.Active())
	if got, want := gens(mts), m.genNumbers(); !slices.Equal(got, want) {
		return fmt.Errorf("generations %v, want %v", got, want)
	}
	if o := s.Oldest(); (o == nil) != (len(mts) == 1) || (o != nil && o != mts[0]) {
		return fmt.Errorf("Oldest = %v with sealed %v", o, gens(mts[:len(mts)-1]))
	}
	var rows int
	var bytes int64
	for i, mt := range mts {
		if err := checkMemtable(mt, m.gens[i]); err != nil {
			return fmt.Errorf("generation %d: %w", mt.Generation(), err)
		}
		rows += len(m.gens[i].ids)
		bytes += m.gens[i].bytes
	}
	if s.Len() != rows || s.Bytes() != bytes {
		return fmt.Errorf("set has %d rows, %d bytes; the model %d, %d", s.Len(), s.Bytes(), rows, bytes)
	}
	return sh.checkIndex(rows)
}

func (sh *shard) checkIndex(rows int) error {
	s := sh.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.index) != rows {
		return fmt.Errorf("index has %d ids, the memtables %d rows", len(s.index), rows)
	}
	for _, g := range sh.model.gens {
		for _, id := range g.ids {
			if got, ok := s.index[id]; !ok || got != g.gen {
				return fmt.Errorf("index[%q] = %d, %t; want %d", id, got, ok, g.gen)
			}
		}
	}
	return nil
}

func checkMemtable(mt *Memtable, g *modelGen) error {
	first, last := mt.SeqRange()
	wantFirst, wantLast := uint64(0), uint64(0)
	if len(g.seqs) > 0 {
		wantFirst, wantLast = g.seqs[0], g.seqs[len(g.seqs)-1]
	}
	sources := mt.SourceOffsets()
	switch {
	case rowsMismatch(mt.Rows(), g.ids...) != nil:
		return rowsMismatch(mt.Rows(), g.ids...)
	case mt.Len() != len(g.ids) || mt.Bytes() != g.bytes || mt.Sealed() != g.sealed:
		return fmt.Errorf("%d rows, %d bytes, sealed %t; want %d, %d, %t", mt.Len(), mt.Bytes(), mt.Sealed(), len(g.ids), g.bytes, g.sealed)
	case !slices.Equal(mt.Seqs(), g.seqs) || !slices.Equal(mt.Epochs(), g.epochs):
		return fmt.Errorf("seqs %v epochs %v; want %v, %v", mt.Seqs(), mt.Epochs(), g.seqs, g.epochs)
	case first != wantFirst || last != wantLast:
		return fmt.Errorf("SeqRange = %d, %d; want %d, %d", first, last, wantFirst, wantLast)
	case !maps.Equal(sources, g.sources) && (len(sources) > 0 || len(g.sources) > 0):
		return fmt.Errorf("SourceOffsets = %v, want %v", sources, g.sources)
	case mt.CreatedAt().IsZero() != (len(g.ids) == 0):
		return fmt.Errorf("CreatedAt = %v with %d rows", mt.CreatedAt(), len(g.ids))
	}
	return nil
}
