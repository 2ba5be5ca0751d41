package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/wal"
)

// Shard is the writer of one shard for one epoch.
type Shard struct {
	name   string
	opts   *Options
	genDir string
	store  *shardmeta.Store
	lease  *lease
	claim  *shardmeta.Claim
	w      shardLog
	// walAfter is where the WAL's positions continue when the backend
	// changed (claimTail); 0 otherwise.
	walAfter uint64
	set      *memtable.Set
	schemas  *schemas
	// setVersion is the schema version of the rows the active memtable
	// takes; guarded by mu.
	setVersion int
	budget     *memtable.Budget
	metrics    *metrics
	log        *slog.Logger

	// mu orders WAL position assignment with memtable insertion, and
	// guards lastPos and the choice of the active generation.
	mu      sync.Mutex
	lastPos uint64
	// producers is every producer session's live mark, acknowledged or in
	// flight; guarded by mu.
	producers producerState
	// sources are the source names the shard tracks (the committed ones
	// and those in memtables), to bound them; guarded by mu.
	sources map[string]bool

	// stopErr is set once: fenced, stopped after a WAL failure, or closed.
	stopErr atomic.Pointer[error]
	// flushNoSpace is why the last flush failed for a full disk, or nil;
	// a committed generation clears it.
	flushNoSpace atomic.Pointer[error]

	// flushMu makes flushes (and their commits) one at a time, in order.
	flushMu sync.Mutex
	// manifest is the last committed manifest; guarded by flushMu.
	manifest *shardmeta.Manifest
	// committed is manifest for readers that must not wait out a flush
	// (Status, Manifest); a committed manifest is never changed in place.
	committed atomic.Pointer[shardmeta.Manifest]
	// pending is a commit to repeat byte for byte; guarded by flushMu.
	pending *pendingCommit
	// pendingDrain are the generations the pending commit drops.
	pendingDrain []shardmeta.Generation
	// drainPending is a Drain commit to repeat byte for byte; guarded by
	// flushMu.
	drainPending *pendingDrain
	// replayEnd is the generation replay filled last (0: replay found
	// nothing); recorded in the epoch's provenance when it commits.
	replayEnd uint64

	// committedProducers is the producer state as of the committed
	// generations, the one the manifest's producer-state file holds;
	// guarded by flushMu.
	committedProducers producerState
	// stagedProducers is the state a commit in progress names; guarded by
	// flushMu.
	stagedProducers producerState

	// persistMu guards the snapshot persists that have not landed yet.
	persistMu      sync.Mutex
	unpersisted    map[string]int64
	persistBackoff time.Duration
	persistRetryAt time.Time

	// snapshots are the resume points loaded at open.
	snapshots map[string]snapshot.Snapshot

	// onFenced is told once when the shard is fenced.
	onFenced func(*Shard)

	kick      chan struct{}
	quit      chan struct{}
	flusherWG sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

func (s *Shard) walDir() string {
	return filepath.Join(s.opts.DataDir, s.opts.Table, "shards", s.name, "wal")
}

func openShard(ctx context.Context, o *Options, name string, l *lease, budget *memtable.Budget, m *metrics, sc *schemas) (*Shard, error) {
	s := &Shard{
		name: name, opts: o, budget: budget, metrics: m, lease: l, schemas: sc,
		genDir:      filepath.Join(o.DataDir, o.Table, "shards", name, "gen"),
		store:       shardmeta.NewStore(o.Etcd, shardmeta.Keys{Prefix: o.Prefix, Table: o.Table}, shardmeta.StoreOptions{RequestTimeout: o.RequestTimeout, Logger: o.Logger}),
		log:         o.Logger.With("shard", name),
		kick:        make(chan struct{}, 1),
		unpersisted: map[string]int64{},
		quit:        make(chan struct{}),
	}
	for _, dir := range []string{s.genDir, s.walDir()} {
		if err := vfs.MkdirAllDurable(o.FS, dir, 0o755); err != nil {
			return nil, fmt.Errorf("engine: shard %s: %w", name, err)
		}
	}
	if err := s.claimAndOpenWAL(ctx); err != nil {
		return nil, err
	}
	s.loadSnapshots(ctx)
	if err := s.recover(ctx); err != nil {
		s.w.Close()
		if s.set != nil { // recover fails before making the set when garbage removal fails
			s.set.Close()
		}
		s.releaseOwner()
		return nil, err
	}
	s.flusherWG.Add(1)
	go s.flusher()
	return s, nil
}

// claimAndOpenWAL claims the next epoch, then opens the WAL for it. Until
// the claim transaction commits the WAL is only read (wal.ReadTail): a
// claimant that loses a race it cannot see yet must never create or cut a
// file of the winner's epoch. The tail read is recorded in the claim
// transaction as the epoch's start position.
func (s *Shard) claimAndOpenWAL(ctx context.Context) error {
	owner := shardmeta.Owner{Writer: s.opts.WriterID, Address: s.opts.Address}
	prepare := func(m *shardmeta.Manifest) error {
		tail, err := s.claimTail(ctx, m)
		if err != nil {
			return err
		}
		m.Epochs[len(m.Epochs)-1].StartPosition = tail
		if s.opts.testHookClaimPrepared != nil {
			s.opts.testHookClaimPrepared()
		}
		return nil
	}
	c, err := s.claimWhenFree(ctx, owner, prepare)
	if err != nil {
		return fmt.Errorf("engine: shard %s: claim: %w", s.name, err)
	}
	s.claim = c
	w, err := s.openWAL(ctx, c.Epoch)
	if err != nil {
		s.releaseOwner()
		return fmt.Errorf("engine: shard %s: epoch %d: %w", s.name, c.Epoch, err)
	}
	s.w = w
	s.setManifest(c.Manifest)
	s.lastPos = s.w.Tail()
	s.metrics.epoch.WithLabelValues(s.name).Set(float64(c.Epoch))
	s.log.Info("claimed shard", "epoch", c.Epoch, "token", c.Token,
		"current_generation", c.Manifest.CurrentGeneration, "replay_cursor", c.Manifest.ReplayCursor, "wal_tail", s.w.Tail())
	return nil
}

// claimWhenFree claims the shard, waiting through a watch for the owner
// key's DELETE while another writer holds it: never for a local clock.
func (s *Shard) claimWhenFree(ctx context.Context, owner shardmeta.Owner, prepare func(*shardmeta.Manifest) error) (*shardmeta.Claim, error) {
	for {
		if s.lease.isLost() {
			return nil, fmt.Errorf("%w while the claim waited", errLeaseLost)
		}
		var c *shardmeta.Claim
		err := retryTransient(ctx, s.log, "claim", func() (err error) {
			c, err = s.store.Claim(ctx, s.name, owner, s.lease.id, prepare)
			return err
		})
		if !errors.Is(err, shardmeta.ErrOwned) {
			return c, err
		}
		s.log.Info("shard is owned by another writer; waiting for its owner key to go", "err", err)
		if err := s.store.WaitOwnerGone(ctx, s.name); err != nil {
			return nil, err
		}
	}
}

// recover removes garbage generation files and replays the WAL tail.
func (s *Shard) recover(ctx context.Context) error {
	if err := s.removeGarbage(); err != nil {
		return err
	}
	if err := s.removeGarbageObjects(ctx); err != nil {
		return err
	}
	m := s.manifest
	if err := s.loadSessions(ctx); err != nil {
		return err
	}
	cur := s.schemas.current()
	s.set = memtable.NewSet(cur.schema, m.CurrentGeneration, s.budget, s.opts.Now)
	s.setVersion = cur.version
	start := time.Now()
	rows, err := s.replay(ctx, m.ReplayCursor, s.w.Tail())
	if err != nil {
		return fmt.Errorf("engine: shard %s: replay: %w", s.name, err)
	}
	if rows > 0 {
		s.replayEnd = s.set.Active().Generation()
	}
	if err := s.commitReplayIfBehind(ctx); err != nil {
		return err
	}
	s.metrics.replayRows.WithLabelValues(s.name).Add(float64(rows))
	s.metrics.replaySeconds.WithLabelValues(s.name).Set(time.Since(start).Seconds())
	s.log.Info("replayed WAL tail", "rows", rows, "from", m.ReplayCursor, "to", s.w.Tail(), "duration", time.Since(start))
	return nil
}

// replayFlushClaims is how many of the manifest's claims may start above
// the replay cursor before an open commits what it replayed ahead of
// serving appends. Each such claim inherited a WAL tail no commit has
// covered, and its epoch record stays until one does
// (shardmeta.PruneEpochs): a writer that kept dying before its first flush
// would otherwise add a record to the manifest at every restart.
const replayFlushClaims = shardmeta.RecentEpochs / 2

// commitReplayIfBehind commits the replayed WAL tail at once when
// replayFlushClaims claims started above the replay cursor. A tail of
// source offsets alone replays no rows but still has to be committed:
// only a commit moves the cursor past it.
func (s *Shard) commitReplayIfBehind(ctx context.Context) error {
	n := s.manifest.UncoveredEpochs()
	a := s.set.Active()
	if n < replayFlushClaims || (a.Len() == 0 && !a.HasMeta()) {
		return nil
	}
	s.log.Info("committing the replayed WAL tail before serving appends", "claims_above_replay_cursor", n, "rows", a.Len())
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.flushOnce(ctx, true); err != nil {
		return fmt.Errorf("engine: shard %s: commit the replayed WAL tail (%d claims started above the replay cursor): %w", s.name, n, err)
	}
	return nil
}

// loadSessions restores the committed producer state and the tracked
// sources from the manifest; replay then moves them past the WAL tail.
func (s *Shard) loadSessions(ctx context.Context) error {
	st, err := s.loadProducerState(ctx, s.manifest.ProducerState)
	if err != nil {
		return err
	}
	s.committedProducers, s.producers = st, maps.Clone(st)
	s.sources = make(map[string]bool, len(s.manifest.SourceOffsets))
	for src := range s.manifest.SourceOffsets {
		s.sources[src] = true
	}
	s.removeStaleProducerFiles()
	s.removeStaleProducerObjects(ctx)
	return nil
}

// removeGarbage deletes generation files no committed generation names:
// failed flush attempts and temp files. Committed files are never touched.
func (s *Shard) removeGarbage() error {
	names, err := s.opts.FS.List(s.genDir)
	if err != nil {
		return fmt.Errorf("engine: shard %s: %w", s.name, err)
	}
	keep := make(map[string]bool, len(s.manifest.Flushed))
	for _, g := range s.manifest.Flushed {
		keep[g.File] = true
	}
	for _, n := range names {
		if keep[n] {
			continue
		}
		if _, _, _, err := generation.ParseName(n); err != nil && !generation.IsTemp(n) {
			continue // not ours: leave it alone
		}
		if err := s.opts.FS.Remove(filepath.Join(s.genDir, n)); err != nil {
			return fmt.Errorf("engine: shard %s: remove garbage %s: %w", s.name, n, err)
		}
		s.log.Info("removed uncommitted generation file", "file", n)
	}
	return nil
}

// replay inserts the records of (from, to] into the active memtable,
// skipping what source-side exclusion proves is already committed: records
// an epoch tagged with a generation that the same epoch committed, and
// records of an older epoch written after a newer epoch's claim (a zombie's
// unacknowledged tail): see skipOnReplay.
func (s *Shard) replay(ctx context.Context, from, to uint64) (int, error) {
	m := s.manifest
	var rows int
	var last uint64 // highest position replayed, to refuse overlaps
	progress := newReplayProgress(s, from, to)
	err := s.w.Replay(from, to, func(h wal.Header, payload []byte) error {
		progress.at(h.FirstPos, rows)
		if h.Epoch > s.claim.Epoch {
			return fmt.Errorf("%w: record at position %d has epoch %d above the claimed epoch %d", ErrReplay, h.FirstPos, h.Epoch, s.claim.Epoch)
		}
		if s.skipOnReplay(m, h) {
			return nil
		}
		if h.FirstPos <= last {
			return fmt.Errorf("%w: record at position %d (epoch %d) overlaps position %d already replayed", ErrReplay, h.FirstPos, h.Epoch, last)
		}
		last = h.FirstPos + uint64(h.Count) - 1
		meta, b, err := decodeRecord(s.schemaLookup(ctx), h.Kind, payload)
		if err == nil {
			b, err = s.inSetSchema(b)
		}
		if err != nil {
			return fmt.Errorf("record at position %d: %w", h.FirstPos, err)
		}
		n, err := s.replayBatch(ctx, b, h, meta)
		rows += n
		return err
	})
	return rows, err
}

// replayProgress logs a long replay's progress: a line each time another
// tenth of the tail's positions is behind it, and at most one every few
// seconds otherwise, so an operator watching a slow start sees it move.
type replayProgress struct {
	s        *Shard
	from, to uint64
	next     uint64 // position of the next tenth
	last     time.Time
}

func newReplayProgress(s *Shard, from, to uint64) *replayProgress {
	p := &replayProgress{s: s, from: from, to: to, last: time.Now()}
	p.next = from + max((to-from)/10, 1)
	return p
}

func (p *replayProgress) at(pos uint64, rows int) {
	if pos < p.next && time.Since(p.last) < 5*time.Second {
		return
	}
	for p.next <= pos {
		p.next += max((p.to-p.from)/10, 1)
	}
	p.last = time.Now()
	done := float64(pos-p.from) / float64(max(p.to-p.from, 1))
	p.s.log.Info("replaying WAL tail", "position", pos, "of", p.to, "done", fmt.Sprintf("%.0f%%", 100*done), "rows", rows)
}

func (s *Shard) skipOnReplay(m *shardmeta.Manifest, h wal.Header) bool {
	return skipOnReplay(m, h, !s.opts.DisableSourceExclusion)
}

// skipOnReplay reports whether the replay over (m.ReplayCursor, tail]
// skips record h, which reaches past the cursor. h is judged by the record
// of the first later epoch, next (the records' start positions and
// generations never decrease, so it has the lowest of the later epochs):
//
//   - next starts at or below the cursor: everything h's epoch wrote before
//     next's claim ends at or below next's start position (the WAL tail that
//     claim read), hence at or below the cursor, so h was written after that
//     claim, by a zombie, and never acknowledged;
//   - h begins above next's start position: a zombie's, as above;
//   - with source exclusion, h's generation is below next's start
//     generation: h's epoch committed that generation itself.
//
// A record of the latest epoch (none later) is replayed. The first rule is
// what lets a claim drop the records before one that starts at or below the
// cursor (shardmeta.PruneEpochs): every record they judged is skipped by it.
func skipOnReplay(m *shardmeta.Manifest, h wal.Header, sourceExclusion bool) bool {
	i := slices.IndexFunc(m.Epochs, func(r shardmeta.EpochRecord) bool { return r.Epoch > h.Epoch })
	if i < 0 {
		return false
	}
	next := m.Epochs[i]
	return next.StartPosition <= m.ReplayCursor || next.StartPosition < h.FirstPos ||
		sourceExclusion && h.Generation < next.StartGeneration
}

// replayBatch inserts one replayed record. Replay is bounded in memory:
// when the active memtable is full it is flushed before the record goes in,
// so the last replayed row always lands in the active memtable, whose
// generation is the one recorded as the end of the replay.
func (s *Shard) replayBatch(ctx context.Context, b *schema.Batch, h wal.Header, meta RecordMeta) (int, error) {
	fresh, _ := s.set.Filter(b)
	if fresh.Len() > 0 && s.set.Active().Bytes() >= s.opts.FlushBytes {
		if err := s.flushOnce(ctx, true); err != nil {
			return 0, err
		}
	}
	if err := s.budget.Acquire(ctx, memtable.EstimateBytes(fresh), true); err != nil {
		return 0, err
	}
	defer s.replayMeta(meta)
	s.set.NotePosition(h.FirstPos + uint64(h.Count) - 1)
	switch {
	case fresh.Len() == 0:
		s.set.Insert(fresh, 0, h.Epoch, meta.Source.Name, meta.Source.Offset)
		return 0, nil
	case fresh.Len() != b.Len():
		// Positions stay those of the WAL; only whole records keep them
		// dense, so a partially duplicate record keeps each row's own.
		return fresh.Len(), s.insertSparse(b, fresh, h, meta.Source)
	}
	s.set.Insert(fresh, h.FirstPos, h.Epoch, meta.Source.Name, meta.Source.Offset)
	return fresh.Len(), nil
}

// replayMeta restores what a replayed record carries besides rows.
func (s *Shard) replayMeta(meta RecordMeta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteProducer(meta)
	if meta.Source.Name != "" {
		s.sources[meta.Source.Name] = true
	}
}

// insertSparse inserts the rows of b that survived deduplication, one at a
// time, each with the position it had in the WAL.
func (s *Shard) insertSparse(b, fresh *schema.Batch, h wal.Header, src Source) error {
	keep := make(map[string]bool, fresh.Len())
	for _, id := range fresh.IDs {
		keep[id] = true
	}
	for i, id := range b.IDs {
		if !keep[id] {
			continue
		}
		delete(keep, id) // a repeat within the record is a duplicate
		one := b.Schema.NewBatch(1)
		one.AppendRow(b, i)
		s.set.Insert(one, h.FirstPos+uint64(i), h.Epoch, src.Name, src.Offset)
	}
	return nil
}

// Schema is the table's schema the shard serves: the current version.
// Rows built against an earlier version are appended too (converted).
func (s *Shard) Schema() *schema.Schema { return s.schemas.current().schema }

// schemaLookup finds the schema versions a replay meets.
func (s *Shard) schemaLookup(ctx context.Context) SchemaLookup {
	return func(v int) (*schema.Schema, error) { return s.schemas.version(ctx, v) }
}

// followSchema moves the memtables to version v when it is newer than
// theirs. Callers hold mu.
func (s *Shard) followSchema(v *schemaVersion) {
	if v.version <= s.setVersion {
		return
	}
	s.set.UseSchema(v.schema)
	s.setVersion = v.version
	s.log.Info("memtables take a new schema version", "version", v.version)
}

// inSetSchema converts b to the schema of the memtables when it is of an
// earlier version: a replayed record, or an append that a racing one
// moved past.
func (s *Shard) inSetSchema(b *schema.Batch) (*schema.Batch, error) {
	sc := s.set.Schema()
	if b.Schema == sc {
		return b, nil
	}
	return schema.Convert(b, sc)
}

// Name is the shard's name.
func (s *Shard) Name() string { return s.name }

// Epoch is the writer epoch this shard claimed.
func (s *Shard) Epoch() uint64 { return s.claim.Epoch }

// err returns why the shard stopped, or nil.
func (s *Shard) err() error {
	if p := s.stopErr.Load(); p != nil {
		return *p
	}
	return nil
}

// stop records the first reason the shard stops taking writes.
func (s *Shard) stop(err error) {
	if s.stopErr.CompareAndSwap(nil, &err) {
		if !errors.Is(err, ErrClosed) {
			s.metrics.fenced.WithLabelValues(s.name).Set(1)
			s.log.Error("shard stopped", "err", err)
		}
		if errors.Is(err, ErrFenced) && s.onFenced != nil {
			go s.onFenced(s)
		}
	}
}

// releaseOwner deletes the owner key so that a successor claims at once.
// It retries for up to a lease TTL: a key left behind holds the shard
// against every writer for as long as this process's lease lives (a later
// claim of this writer finds and removes it).
func (s *Shard) releaseOwner() {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.opts.LeaseTTL, s.opts.RequestTimeout))
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := s.store.Release(ctx, s.claim)
		if err == nil || errors.Is(err, ErrFenced) {
			return
		}
		if ctx.Err() != nil {
			s.log.Warn("release owner key failed; the key stays until this writer claims the shard again or its lease ends", "err", err)
			return
		}
		s.log.Warn("release owner key failed; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
