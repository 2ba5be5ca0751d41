package memtable

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
)

// ErrOutOfOrder marks a Release of any generation but the oldest sealed one.
var ErrOutOfOrder = errs.New(errs.InvalidInput, "memtable: generations are released strictly in order")

// ErrClosed marks a Release on a closed Set.
var ErrClosed = errs.New(errs.Closed, "memtable: set is closed")

// Index maps hold their peak capacity after deletes; a Set rebuilds its
// index when it shrinks below a quarter of its peak (and the peak is worth
// the copy), so a burst does not pin memory the budget no longer counts.
const indexShrinkMin = 1024

// Set is one shard's memtables: the active one and the sealed ones awaiting
// flush, oldest first, with one id index over all of them. It is safe for
// concurrent use; see the package doc for the rules.
type Set struct {
	mu     sync.Mutex
	schema *schema.Schema
	budget *Budget
	now    func() time.Time

	active    *Memtable
	sealed    []*Memtable       // oldest first
	index     map[string]uint64 // id → generation, over active and sealed
	indexPeak int               // len(index) at its largest since it was built
	seen      map[string]struct{}
	bytes     int64  // sum of the memtables' bytes
	rows      int    // sum of the memtables' rows
	lastSeq   uint64 // the highest _seq inserted, when hasSeq
	hasSeq    bool
	closed    bool
}

// NewSet returns a set whose active memtable is generation activeGen. Its
// memtables give their bytes back to budget when released. now is the clock
// for CreatedAt; nil means time.Now.
func NewSet(s *schema.Schema, activeGen uint64, budget *Budget, now func() time.Time) *Set {
	if s == nil || budget == nil {
		panic("memtable: NewSet needs a schema and a budget")
	}
	if now == nil {
		now = time.Now
	}
	set := &Set{schema: s, budget: budget, now: now, index: make(map[string]uint64)}
	set.active = newMemtable(s, activeGen, &set.mu)
	return set
}

// Filter returns b without the rows whose id is in any memtable of the set,
// and without later repeats of an id within b, together with the number of
// rows dropped. When nothing is dropped it returns b itself; otherwise a new
// batch that shares b's strings. Call Filter and Insert under one lock of
// your own so that no other insert slips in between.
func (s *Set) Filter(b *schema.Batch) (fresh *schema.Batch, dups int) {
	if b == nil || b.Len() == 0 {
		return b, 0
	}
	keep := s.keep(b.IDs)
	if keep == nil {
		return b, 0
	}
	return gather(b, keep), b.Len() - len(keep) // outside the lock: b is the caller's
}

// keep returns the indexes of the ids to keep, or nil to keep them all.
func (s *Set) keep(ids []string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.resetSeen()
	var keep []int // nil until the first duplicate
	for i, id := range ids {
		if s.isDupLocked(id) {
			if keep == nil {
				keep = make([]int, i, len(ids)-1)
				for j := range keep {
					keep[j] = j
				}
			}
			continue
		}
		if keep != nil {
			keep = append(keep, i)
		}
	}
	return keep
}

// isDupLocked reports whether id is in the index or was seen earlier in the
// batch being filtered, and marks it seen.
func (s *Set) isDupLocked(id string) bool {
	if _, ok := s.index[id]; ok {
		return true
	}
	if s.seen == nil {
		s.seen = make(map[string]struct{})
	}
	if _, ok := s.seen[id]; ok {
		return true
	}
	s.seen[id] = struct{}{}
	return false
}

// resetSeen empties the scratch map of Filter, or drops it after a large
// batch so that one burst does not keep it large.
func (s *Set) resetSeen() {
	if len(s.seen) > indexShrinkMin {
		s.seen = nil
		return
	}
	clear(s.seen)
}

// Insert appends b's rows to the active memtable with _seq firstSeq+i and
// _epoch epoch, indexes their ids and charges EstimateBytes(b), which the
// caller has acquired from the budget. A non-empty source records offset
// for it in the active memtable, even when b is empty (all of a batch's
// rows may have been duplicates). Insert does not deduplicate: call Filter
// first.
//
// Insert panics on a programming error: a closed set, a batch of another
// schema or with ragged columns, or a _seq not above every _seq inserted
// before (_seq is strictly increasing per shard).
func (s *Set) Insert(b *schema.Batch, firstSeq, epoch uint64, source string, offset int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		panic("memtable: Insert on a closed Set")
	}
	if b != nil && b.Len() > 0 {
		s.checkLocked(b, firstSeq)
		s.insertLocked(b, firstSeq, epoch)
	}
	if source != "" {
		s.active.noteSourceLocked(source, offset)
		s.active.touchLocked(s.now())
	}
}

// NotePosition records that a record of the active memtable covers WAL
// positions up to pos, so that the generation it becomes covers the whole
// record even where its last positions hold no row.
func (s *Set) NotePosition(pos uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active.maxPos = max(s.active.maxPos, pos)
}

// NoteProducer records in the active memtable where a producer session
// stands after a record of it: the generation that commits the memtable
// carries the mark to the producer state.
func (s *Set) NoteProducer(id string, mark ProducerMark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		panic("memtable: NoteProducer on a closed Set")
	}
	s.active.noteProducerLocked(id, mark, s.now())
}

func (s *Set) insertLocked(b *schema.Batch, firstSeq, epoch uint64) {
	m, n, charge := s.active, b.Len(), EstimateBytes(b)
	for _, id := range m.appendLocked(b, firstSeq, epoch, charge, s.now()) {
		s.index[id] = m.gen
	}
	s.indexPeak = max(s.indexPeak, len(s.index))
	s.bytes += charge
	s.rows += n
	s.lastSeq, s.hasSeq = firstSeq+uint64(n-1), true
}

// checkLocked panics unless b fits the set's schema and firstSeq continues
// the set's _seq order.
func (s *Set) checkLocked(b *schema.Batch, firstSeq uint64) {
	n := b.Len()
	if len(b.Cols) != len(s.schema.Columns) {
		panic(fmt.Sprintf("memtable: Insert of a batch of %d columns, the schema has %d", len(b.Cols), len(s.schema.Columns)))
	}
	if b.Schema != s.schema && (b.Schema == nil || b.Schema.Fingerprint() != s.schema.Fingerprint()) {
		panic("memtable: Insert of a batch of another schema")
	}
	for c, col := range s.schema.Columns {
		if err := checkVector(&b.Cols[c], col, n); err != nil {
			panic(err.Error())
		}
	}
	if firstSeq+uint64(n-1) < firstSeq {
		panic(fmt.Sprintf("memtable: _seq overflows: %d rows from %d", n, firstSeq))
	}
	if s.hasSeq && firstSeq <= s.lastSeq {
		panic(fmt.Sprintf("memtable: _seq %d is not above the last inserted _seq %d", firstSeq, s.lastSeq))
	}
}

// checkVector holds v to its column with schema's own check, which walks
// lists' elements and structs' fields too: an insert trusts the offsets it
// rebases and the field counts it appends.
func checkVector(v *schema.Vector, col schema.Column, n int) error {
	if err := v.Check(col, n); err != nil {
		return fmt.Errorf("memtable: column %q: %w", col.Name, err)
	}
	return nil
}

// Active returns the active memtable.
func (s *Set) Active() *Memtable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// Rotate seals the active memtable (generation g), opens generation g+1 as
// the active one and returns the sealed memtable, even when it is empty:
// the caller decides whether an empty generation is flushed.
func (s *Set) Rotate() *Memtable {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.active
	old.sealed = true
	s.sealed = append(s.sealed, old)
	s.active = newMemtable(s.schema, old.gen+1, &s.mu)
	if old.rows.Schema == s.schema {
		s.active.like = shapeOf(&old.rows)
	}
	return old
}

// Schema is the schema of the active memtable: what Insert takes.
func (s *Set) Schema() *schema.Schema {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.schema
}

// UseSchema makes sc the schema of the rows inserted from now on. A
// generation holds rows of one schema: an active memtable that holds rows
// is sealed (as Rotate does) and the next one takes sc; one without rows
// takes sc itself, keeping what else it carries.
func (s *Set) UseSchema(sc *schema.Schema) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc == s.schema {
		return
	}
	s.schema = sc
	if len(s.active.seqs) == 0 {
		s.active.rows = *sc.NewBatch(0)
		s.active.like = nil // another schema's shape
		return
	}
	old := s.active
	old.sealed = true
	s.sealed = append(s.sealed, old)
	s.active = newMemtable(sc, old.gen+1, &s.mu)
}

// Oldest returns the oldest sealed memtable, or nil when none is sealed.
func (s *Set) Oldest() *Memtable {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sealed) == 0 {
		return nil
	}
	return s.sealed[0]
}

// Sealed returns the sealed memtables, oldest first.
func (s *Set) Sealed() []*Memtable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sealed)
}

// Release drops the sealed memtable of generation gen, which must be the
// oldest sealed one (else ErrOutOfOrder), returns its bytes to the budget
// and removes its ids from the index. The memtable's rows stay readable by
// whoever still holds it.
func (s *Set) Release(gen uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("%w: cannot release generation %d", ErrClosed, gen)
	case len(s.sealed) == 0:
		return fmt.Errorf("%w: release of generation %d, but no memtable is sealed (generation %d is active)",
			ErrOutOfOrder, gen, s.active.gen)
	case s.sealed[0].gen != gen:
		return fmt.Errorf("%w: release of generation %d, but the oldest sealed generation is %d",
			ErrOutOfOrder, gen, s.sealed[0].gen)
	}
	m := s.sealed[0]
	s.sealed = slices.Delete(s.sealed, 0, 1)
	for _, id := range m.rows.IDs {
		if g, ok := s.index[id]; ok && g == gen {
			delete(s.index, id)
		}
	}
	s.shrinkIndexLocked()
	s.budget.Release(m.bytes)
	s.bytes -= m.bytes
	s.rows -= len(m.seqs)
	m.bytes = 0
	return nil
}

// shrinkIndexLocked rebuilds the index when it holds far fewer ids than its
// peak: Go maps keep their capacity after deletes.
func (s *Set) shrinkIndexLocked() {
	if s.indexPeak < indexShrinkMin || len(s.index) >= s.indexPeak/4 {
		return
	}
	index := make(map[string]uint64, len(s.index))
	for id, g := range s.index {
		index[id] = g
	}
	s.index, s.indexPeak = index, len(index)
}

// Len is the number of rows over all memtables of the set.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows
}

// Bytes is what all memtables of the set hold of the budget.
func (s *Set) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Close returns every memtable's bytes to the budget and empties the index.
// The memtables stay readable. Close is idempotent.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, m := range s.sealed {
		s.budget.Release(m.bytes)
		m.bytes = 0
	}
	s.budget.Release(s.active.bytes)
	s.active.bytes = 0
	s.bytes = 0
	s.index, s.indexPeak, s.seen = nil, 0, nil
}
