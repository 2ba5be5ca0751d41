package memtable

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rollwal/rollwal/schema"
)

// Memtable holds the rows of one generation of a shard, in columns, with
// their _seq and _epoch system columns alongside. Memtables are created by
// a Set and change only through it; every method is safe for concurrent use.
type Memtable struct {
	gen uint64
	mu  *sync.Mutex // the owning Set's lock: guards every field below

	rows    schema.Batch
	seqs    []uint64
	epochs  []uint64
	bytes   int64 // what this memtable holds of the budget
	sealed  bool
	created time.Time
	sources map[string]int64
	// producers is, per producer session, the next expected sequence and
	// the last append's time (Unix milliseconds) that this generation's
	// records carry.
	producers map[string]ProducerMark
	metaSince time.Time
	// maxPos is the highest WAL position a record of this generation
	// covers, rows or not (a record whose last rows were duplicates, a
	// record of meta alone).
	maxPos uint64
	arena  arena
	// like, until the first insert, is the shape of the memtable sealed
	// before this one, whose capacity the first insert reserves (see
	// shape).
	like *shape
}

// ProducerMark is where a producer session stands after a generation's
// records: its next expected sequence and when it last appended.
type ProducerMark struct {
	Next       uint64
	SeenMillis int64
}

func newMemtable(s *schema.Schema, gen uint64, mu *sync.Mutex) *Memtable {
	return &Memtable{gen: gen, mu: mu, rows: *s.NewBatch(0)}
}

// Generation is the number of the generation this memtable becomes.
func (m *Memtable) Generation() uint64 { return m.gen }

// Len is the number of rows.
func (m *Memtable) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seqs)
}

// Bytes is what the memtable holds of the budget: the sum of EstimateBytes
// over the batches inserted, and 0 once it has been released.
func (m *Memtable) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// SeqRange returns the _seq of the first and the last row, or 0, 0 when the
// memtable is empty.
func (m *Memtable) SeqRange() (first, last uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seqs) == 0 {
		return 0, 0
	}
	return m.seqs[0], m.seqs[len(m.seqs)-1]
}

// Rows returns the rows in columns: a read-only snapshot of the rows present
// at the call (see the package doc on snapshots). Its strings point into the
// memtable's arena.
func (m *Memtable) Rows() *schema.Batch {
	m.mu.Lock()
	defer m.mu.Unlock()
	return snapshot(&m.rows)
}

// Schema is the schema of the memtable's rows.
func (m *Memtable) Schema() *schema.Schema {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows.Schema
}

// Seqs returns the _seq column, parallel to Rows: a read-only snapshot.
func (m *Memtable) Seqs() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clip(m.seqs)
}

// Epochs returns the _epoch column, parallel to Rows: a read-only snapshot.
func (m *Memtable) Epochs() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clip(m.epochs)
}

// Sealed reports whether the memtable has been sealed by Set.Rotate.
func (m *Memtable) Sealed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sealed
}

// CreatedAt is when the first row arrived (by the Set's clock), for
// age-based flushes; zero while the memtable is empty.
func (m *Memtable) CreatedAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.created
}

// SourceOffsets returns, per producer source, the highest offset attached to
// an Insert into this memtable. The map is a copy; it is empty, not nil,
// when no insert named a source.
func (m *Memtable) SourceOffsets() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.sources))
	maps.Copy(out, m.sources)
	return out
}

// appendLocked appends b's rows with _seq firstSeq+i and _epoch epoch,
// charging the given bytes. It returns the appended ids (arena copies).
func (m *Memtable) appendLocked(b *schema.Batch, firstSeq, epoch uint64, charge int64, now time.Time) []string {
	n, start := b.Len(), len(m.seqs)
	if start == 0 && n > 0 {
		m.created = now
		if m.like != nil {
			m.like.reserve(m)
			m.like = nil
		}
	}
	m.rows.IDs = slices.Grow(m.rows.IDs, n)
	for _, id := range b.IDs {
		m.rows.IDs = append(m.rows.IDs, m.arena.copy(id))
	}
	all := []run{{0, n}}
	for c := range m.rows.Cols {
		appendRuns(&m.rows.Cols[c], &b.Cols[c], all, &m.arena)
	}
	m.seqs = slices.Grow(m.seqs, n)
	m.epochs = slices.Grow(m.epochs, n)
	for i := range uint64(n) {
		m.seqs = append(m.seqs, firstSeq+i)
		m.epochs = append(m.epochs, epoch)
	}
	m.bytes += charge
	return m.rows.IDs[start:]
}

// Producers returns a copy of the producer marks of this generation.
func (m *Memtable) Producers() map[string]ProducerMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.producers)
}

// MaxPos is the highest WAL position the records of this generation cover,
// as noted with Set.NotePosition; at least the last row's _seq once one is
// inserted.
func (m *Memtable) MaxPos() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.seqs); n > 0 {
		return max(m.maxPos, m.seqs[n-1])
	}
	return m.maxPos
}

// HasMeta reports whether the memtable carries source offsets or producer
// marks: even without rows it must then be committed, so that they reach
// the manifest.
func (m *Memtable) HasMeta() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sources) > 0 || len(m.producers) > 0
}

func (m *Memtable) noteProducerLocked(id string, mark ProducerMark, now time.Time) {
	if m.producers == nil {
		m.producers = make(map[string]ProducerMark)
	}
	cur := m.producers[id]
	m.producers[id] = ProducerMark{Next: max(cur.Next, mark.Next), SeenMillis: max(cur.SeenMillis, mark.SeenMillis)}
	m.touchLocked(now)
}

// touchLocked starts the metadata age clock (MetaSince).
func (m *Memtable) touchLocked(now time.Time) {
	if m.metaSince.IsZero() {
		m.metaSince = now
	}
}

// MetaSince is when the first source offset or producer mark arrived, for
// age-based flushes of a memtable whose rows were all duplicates; zero
// while it has none.
func (m *Memtable) MetaSince() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.metaSince
}

func (m *Memtable) noteSourceLocked(source string, offset int64) {
	if m.sources == nil {
		m.sources = make(map[string]int64)
	}
	if cur, ok := m.sources[source]; !ok || offset > cur {
		m.sources[source] = offset
	}
}
