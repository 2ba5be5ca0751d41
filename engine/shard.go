package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/vfs"
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
	return layout.WALDir(s.opts.DataDir, s.opts.Table, s.name)
}

func openShard(ctx context.Context, o *Options, name string, l *lease, budget *memtable.Budget, m *metrics, sc *schemas) (*Shard, error) {
	s := &Shard{
		name: name, opts: o, budget: budget, metrics: m, lease: l, schemas: sc,
		genDir:      layout.GenDir(o.DataDir, o.Table, name),
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
		s.metrics.claims.WithLabelValues(s.name, claimFailed).Inc()
		return fmt.Errorf("engine: shard %s: claim: %w", s.name, err)
	}
	s.claim = c
	s.metrics.claimed(s.name, c.Epoch, c.Adopted) // owned until releaseOwner or a fence
	w, err := s.openWAL(ctx, c.Epoch)
	if err != nil {
		s.releaseOwner()
		return fmt.Errorf("engine: shard %s: epoch %d: %w", s.name, c.Epoch, err)
	}
	s.w = w
	s.setManifest(c.Manifest)
	s.lastPos = s.w.Tail()
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
		// Fenced, the shard is another writer's (or soon will be). Stopped
		// for another reason (a failed WAL) it still holds the owner key,
		// and so the shard, until it closes.
		if errors.Is(err, ErrFenced) {
			s.metrics.owned.WithLabelValues(s.name).Set(0)
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
	defer s.metrics.owned.WithLabelValues(s.name).Set(0)
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
