package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

// Source names an upstream position that an append covers, for snapshot
// offsets. The zero Source means none.
type Source struct {
	Name   string
	Offset int64
}

// Result describes an acknowledged append.
type Result struct {
	// Stored is the number of rows newly stored.
	Stored int
	// Duplicates is the number of rows acknowledged without being stored
	// again, because their id was already in the shard's memtables or
	// repeated within the batch.
	Duplicates int
	// FirstSeq and LastSeq are the WAL positions (_seq) of the stored rows;
	// both 0 when nothing was stored.
	FirstSeq, LastSeq uint64
	// Generation is the generation the rows went into.
	Generation uint64
}

// Append validates rows against the table schema and appends them. It
// returns once they are durable in the WAL. A bad row rejects the whole
// batch with a *schema.RowError and nothing of it is written.
func (s *Shard) Append(ctx context.Context, rows []schema.Row, src Source) (Result, error) {
	return s.AppendWith(ctx, rows, AppendOptions{Source: src})
}

// AppendWith is Append with a producer session (see Producer).
func (s *Shard) AppendWith(ctx context.Context, rows []schema.Row, o AppendOptions) (Result, error) {
	if err := s.CheckBatchRows(len(rows)); err != nil {
		return Result{}, err
	}
	b, err := s.Schema().Build(rows)
	if err != nil {
		return Result{}, err
	}
	return s.AppendBatchWith(ctx, b, o)
}

// AppendBatch appends a batch that was built against the table's schema.
func (s *Shard) AppendBatch(ctx context.Context, b *schema.Batch, src Source) (Result, error) {
	return s.AppendBatchWith(ctx, b, AppendOptions{Source: src})
}

// AppendBatchWith is AppendBatch with a producer session (see Producer).
func (s *Shard) AppendBatchWith(ctx context.Context, b *schema.Batch, o AppendOptions) (Result, error) {
	res, err := s.appendBatch(ctx, b, o)
	if err != nil {
		s.metrics.appendErrors.WithLabelValues(s.name).Inc()
		return Result{}, err
	}
	s.metrics.rows.WithLabelValues(s.name).Add(float64(res.Stored))
	s.metrics.duplicates.WithLabelValues(s.name).Add(float64(res.Duplicates))
	return res, nil
}

// CheckBatchRows refuses a batch of n rows, more than MaxBatchRows, with
// ErrBatchTooLarge. AppendWith checks it before it validates the rows; a
// caller that validates rows itself checks it first to answer alike.
func (s *Shard) CheckBatchRows(n int) error {
	if n > s.opts.MaxBatchRows {
		return fmt.Errorf("%w: %d rows, the limit is %d", ErrBatchTooLarge, n, s.opts.MaxBatchRows)
	}
	return nil
}

func (s *Shard) checkAppend(b *schema.Batch, o AppendOptions) error {
	if err := s.CheckBatchRows(b.Len()); err != nil {
		return err
	}
	if o.Producer.ID != "" {
		if err := ValidateProducerID(o.Producer.ID); err != nil {
			return err
		}
		if b.Len() == 0 {
			return fmt.Errorf("%w: producer %q: a batch of no rows takes no sequence", ErrInvalidAppend, o.Producer.ID)
		}
	}
	if err := ValidateSource(o.Source); err != nil {
		return err
	}
	if err := s.checkMergesBehind(); err != nil {
		return err
	}
	if err := s.checkSpace(); err != nil {
		return err
	}
	return s.checkLease()
}

// checkMergesBehind refuses an append while the committed and the sealed
// generations waiting for a merge reach MaxUnmergedGenerations: one more
// could not be committed without growing the manifest past its bound.
func (s *Shard) checkMergesBehind() error {
	waiting := len(s.committed.Load().Flushed) + len(s.set.Sealed())
	if waiting < s.opts.MaxUnmergedGenerations {
		return nil
	}
	return fmt.Errorf("%w: shard %s holds %d generations not yet merged into the base (the limit is %d); run writer merge",
		ErrMergesBehind, s.name, waiting, s.opts.MaxUnmergedGenerations)
}

func (s *Shard) appendBatch(ctx context.Context, b *schema.Batch, o AppendOptions) (Result, error) {
	if err := s.checkAppend(b, o); err != nil {
		return Result{}, err
	}
	res, syncTo, err := s.logAndInsert(ctx, b, o)
	for errors.Is(err, errSchemaMoved) {
		res, syncTo, err = s.logAndInsert(ctx, b, o)
	}
	if err != nil {
		return Result{}, err
	}
	if s.set.Oldest() != nil || s.set.Active().Bytes() >= s.opts.FlushBytes {
		s.requestFlush()
	}
	if err := s.w.SyncTo(syncTo); err != nil {
		err = s.walError(err)
		if errors.Is(err, ErrNoSpace) || errors.Is(err, ErrStoreDown) {
			// Queued for the WAL, and in the memtable: durable once
			// space (or the store) is back, lost in a crash before.
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		return Result{}, err
	}
	if err := s.checkLease(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	return res, nil
}

// errSchemaMoved sends an append back to be converted again: a racing
// append moved the memtables to a newer schema version than the one its
// rows were converted to.
var errSchemaMoved = errors.New("engine: the schema moved on")

// logAndInsert converts b to the current schema version, writes its WAL
// record and inserts it into the active memtable. It returns the result
// and the position to sync to.
func (s *Shard) logAndInsert(ctx context.Context, b *schema.Batch, o AppendOptions) (Result, uint64, error) {
	b, version, err := s.schemas.convert(b)
	if err != nil {
		return Result{}, 0, fmt.Errorf("engine: shard %s: %w", s.name, err)
	}
	// Reserve memory before taking the lock: waiting for budget under the
	// lock would block the flusher that frees it.
	reserved := memtable.EstimateBytes(b)
	if err := s.acquire(ctx, reserved); err != nil {
		return Result{}, 0, err
	}
	meta := RecordMeta{Producer: o.Producer, Count: uint64(b.Len()), Source: o.Source, Millis: s.opts.Now().UnixMilli(),
		SchemaVersion: version.version}
	// Encode and compress outside the ordered section, so that producers
	// do it in parallel; a batch with duplicates re-encodes under the lock.
	buf := encodeBufs.Get().(*[]byte)
	payload, kind := s.encodeRecord((*buf)[:0], meta, b)
	pre, err := s.w.Prepare(payload)
	if err != nil {
		s.budget.Release(reserved)
		return Result{}, 0, fmt.Errorf("engine: shard %s: %w", s.name, err)
	}
	pre.Kind = kind
	res, syncTo, used, err := s.write(b, pre, meta, version)
	pre.Release()
	putEncodeBuf(buf, payload)
	s.budget.Release(reserved - used)
	return res, syncTo, err
}

// encodeRecord appends b's WAL payload, with meta when it carries any (or
// the rows are of a later schema version than the first), and returns it
// with its kind.
func (s *Shard) encodeRecord(dst []byte, meta RecordMeta, b *schema.Batch) ([]byte, uint8) {
	if meta.empty() && meta.SchemaVersion <= 1 {
		return b.Encode(dst), kindBatch
	}
	dst, kind := appendVersioned(dst, meta.SchemaVersion)
	return b.Encode(appendMeta(dst, meta)), kind
}

// encodeBufs recycles the buffers batches are encoded into for the WAL:
// one allocation of the whole batch per append was the largest source of
// garbage on the ingest path.
var encodeBufs = sync.Pool{New: func() any { return new([]byte) }}

// putEncodeBuf returns buf, now holding payload, to the pool unless it grew
// too large to keep around.
func putEncodeBuf(buf *[]byte, payload []byte) {
	if cap(payload) > 8<<20 {
		return
	}
	*buf = payload[:0]
	encodeBufs.Put(buf)
}

func (s *Shard) acquire(ctx context.Context, n int64) error {
	if s.opts.BudgetWait <= 0 {
		return s.budget.Acquire(ctx, n, false)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.BudgetWait)
	defer cancel()
	return s.budget.Acquire(ctx, n, true)
}

// write runs the ordered section: check the producer's sequence,
// deduplicate, assign positions, write the WAL record, insert. It returns
// the position the caller must sync to and the budget bytes the memtable
// now holds.
func (s *Shard) write(b *schema.Batch, pre *wal.Prepared, meta RecordMeta, version *schemaVersion) (Result, uint64, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.err(); err != nil {
		return Result{}, 0, 0, err
	}
	if version.version < s.setVersion {
		return Result{}, 0, 0, errSchemaMoved
	}
	s.followSchema(version)
	res := Result{Generation: s.set.Active().Generation()}
	if err := s.checkSource(meta.Source); err != nil {
		return Result{}, 0, 0, err
	}
	if meta.Producer.ID != "" {
		dup, err := s.checkSequence(meta.Producer, b.Len())
		if err != nil {
			return Result{}, 0, 0, err
		}
		if dup {
			// Acknowledged before; s.lastPos covers it should it still
			// be on its way to the disk.
			res.Duplicates = b.Len()
			return res, s.lastPos, 0, nil
		}
	}
	fresh, dups := s.set.Filter(b)
	res.Duplicates = dups
	if fresh.Len() == 0 && meta.empty() {
		return res, s.lastPos, 0, nil
	}
	if s.opts.testHookBeforeWrite != nil {
		s.opts.testHookBeforeWrite()
	}
	first, err := s.appendRecord(res.Generation, b, fresh, pre, meta)
	if err != nil {
		return Result{}, 0, 0, s.walError(err)
	}
	s.set.Insert(fresh, first, s.claim.Epoch, meta.Source.Name, meta.Source.Offset)
	s.set.NotePosition(first + uint64(max(fresh.Len(), 1)) - 1)
	s.noteProducer(meta)
	if meta.Source.Name != "" {
		s.sources[meta.Source.Name] = true
	}
	if fresh.Len() == 0 {
		// A record of meta alone (every row a duplicate) takes one
		// position and no row.
		s.lastPos = first
		return res, first, 0, nil
	}
	if s.set.Active().Bytes() >= 2*s.opts.FlushBytes {
		// The flusher seals at FlushBytes; while it is busy flushing the
		// memtable keeps growing, and a generation (and the memory to
		// write it) must not grow without bound: seal here at twice that.
		// Not at FlushBytes itself: every seal costs a manifest commit.
		s.set.Rotate()
	}
	s.lastPos = first + uint64(fresh.Len()) - 1
	res.Stored, res.FirstSeq, res.LastSeq = fresh.Len(), first, s.lastPos
	s.metrics.memtableBytes.WithLabelValues(s.name).Set(float64(s.set.Bytes()))
	return res, s.lastPos, memtable.EstimateBytes(fresh), nil
}

// checkSource refuses a new source beyond MaxSources. Callers hold mu.
func (s *Shard) checkSource(src Source) error {
	if src.Name == "" || s.sources[src.Name] || len(s.sources) < s.opts.MaxSources {
		return nil
	}
	return fmt.Errorf("%w: shard %s already tracks offsets of %d sources, the limit; source %q is new",
		ErrInvalidAppend, s.name, len(s.sources), src.Name)
}

// appendRecord appends fresh, the rows of b not already held, using b's
// prepared record when nothing was filtered out. Callers hold mu.
func (s *Shard) appendRecord(gen uint64, b, fresh *schema.Batch, pre *wal.Prepared, meta RecordMeta) (uint64, error) {
	if fresh.Len() == b.Len() && b.Len() > 0 {
		return s.w.AppendPrepared(gen, uint32(fresh.Len()), pre)
	}
	payload, kind := s.encodeRecord(nil, meta, fresh)
	p, err := s.w.Prepare(payload)
	if err != nil {
		return 0, err
	}
	defer p.Release()
	p.Kind = kind
	return s.w.AppendPrepared(gen, uint32(max(fresh.Len(), 1)), p)
}

// checkLease enforces the acknowledgement rule: only while the lease is
// known valid with margin. Past that the shard is fenced for good.
func (s *Shard) checkLease() error {
	if err := s.err(); err != nil {
		return err
	}
	if !s.lease.valid() {
		s.stop(fmt.Errorf("%w: shard %s epoch %d: the writer's lease is not known valid: not the owner", ErrFenced, s.name, s.claim.Epoch))
		return s.err()
	}
	return nil
}
