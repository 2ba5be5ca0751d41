package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// Errors, checked with errors.Is. Each returned error names the shard (where
// there is one) and the values involved. Each carries its category of package errs (see docs/errors.md).
var (
	// ErrLockLost: the coordinator's lock (base/lock) is gone or was taken
	// over — its lease expired or was revoked. Nothing was written; close
	// the coordinator, a successor takes over.
	ErrLockLost = errs.New(errs.NotOwner, "publish: merge lock lost")
	// ErrStalePrefix: a staged part starts at or below the shard's
	// watermark but ends above it ("stale prefix; replan").
	ErrStalePrefix = errs.New(errs.Conflict, "publish: stale prefix; replan")
	// ErrBaseMoved: base/state changed since the plan (another commit or a
	// cutoff write landed); the pinned commit refuses to rebase. Replan.
	ErrBaseMoved = errs.New(errs.Conflict, "publish: base state moved since the plan; replan")
	// ErrInvalidState: the shard's merge state or manifest cannot be
	// planned against (malformed, an epoch without a cutoff, an observed
	// epoch above the manifest's). Fail closed: no plan, no commit.
	ErrInvalidState = errs.New(errs.Corruption, "publish: invalid merge state")
	// ErrNotApplied: the commit's response was lost and reading back
	// proved it did not apply; Commit may be called again.
	ErrNotApplied = errs.New(errs.NotApplied, "publish: commit not applied")
	// ErrUnknownOutcome: the commit's response was lost and reading back
	// failed too.
	ErrUnknownOutcome = errs.New(errs.UnknownOutcome, "publish: commit outcome unknown")
)

// Defaults.
const (
	DefaultLeaseTTL       = 10 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultMemoryBudget   = 256 << 20
	// DefaultOrphanGrace is far above any request timeout: a commit whose
	// answer was lost is applied or refused long before.
	DefaultOrphanGrace = 15 * time.Minute
)

// DefaultSnapshotRetention keeps a day of snapshots, at most 200 (with
// merges every few seconds, the newest 200): time travel across recent
// merges with a metadata file of a few hundred KB.
var DefaultSnapshotRetention = catalog.Retention{MaxAge: 24 * time.Hour, MaxSnapshots: 200}

// Options configure a Coordinator.
type Options struct {
	// Etcd is the metadata client (required).
	Etcd *clientv3.Client
	// Prefix and Table name the table's keys (/<prefix>/<table>/...);
	// Prefix defaults to "rollwal", Table to "rollouts".
	Prefix, Table string
	// DataDir holds <table>/shards/<s>/gen and <table>/base (package
	// layout); default ./data.
	DataDir string
	// FS is the filesystem; default vfs.Default.
	FS vfs.FS
	// Store, when set, holds the shards' generations (the engine uploads
	// each one there before committing it, engine.Options.Store): Stage
	// reads every planned generation from it, as the object
	// layout.GenerationKey(Table, shard, file), and never from the shards'
	// local gen directories, which may be on another machine. A generation
	// missing from the store fails the pass naming the object (nothing is
	// committed; the next pass tries again). Nil reads the local files
	// under DataDir. With a store the base lives there too, under the
	// object prefix <table>/base/ (see basestore.go): its Iceberg table
	// at catalog.StoreLocation(Store, "<table>/base"), its data files
	// uploaded there and registered at their store locations, its readers'
	// manifests under _manifest/; nothing of the base is written under
	// DataDir. New refuses a store for a table whose base exists in the
	// local directory (or whose Iceberg table is anywhere else): a base is
	// never migrated silently.
	Store objstore.Store
	// Schema is the configured schema: New checks it against the table's
	// current schema version (shardmeta.EnsureSchema; a table without a
	// schema record gets it as version 1). Nil means the table's recorded
	// schema, or schema.Rollout() for a table without one. Whatever it
	// says, every pass publishes in the table's current version, read when
	// the pass begins (see Plan), so a running coordinator follows schema
	// changes without a restart.
	Schema *schema.Schema
	// LeaseTTL is the TTL of the lock's lease; default 10s.
	LeaseTTL time.Duration
	// RequestTimeout bounds every etcd request; default 5s.
	RequestTimeout time.Duration
	// MemoryBudget bounds the decoded bytes one Stage call holds; staging
	// stops at whole generations (always at least one); default 256 MiB.
	MemoryBudget int64
	// Codec of the base files; default "snappy".
	Codec string
	// SnapshotRetention bounds the base table's snapshots (and so its
	// metadata file); every commit expires those it does not keep. Zero
	// means DefaultSnapshotRetention.
	SnapshotRetention catalog.Retention
	// Compaction configures the rewrite of small base files (Compact),
	// which RunOnce runs after its passes.
	Compaction Compaction
	// OrphanGrace is how old an unreferenced file under the base must be
	// before RemoveOrphans deletes it; 0 means DefaultOrphanGrace, a
	// negative value none (for tests).
	OrphanGrace time.Duration
	// DisableReplayRanges is a test switch: the planner ignores the
	// writers' provenance (recorded replay ranges and inherited WAL tails)
	// and extends the cutoff at every epoch change, so that the cutoff
	// alone must keep replayed rows out of the base (internal/sim draws
	// it). Production never sets it.
	DisableReplayRanges bool
	Logger              *slog.Logger
	Registerer          prometheus.Registerer
}

func (o *Options) ensureDefaults() {
	if o.Prefix == "" {
		o.Prefix = "rollwal"
	}
	if o.Table == "" {
		o.Table = "rollouts"
	}
	if o.DataDir == "" {
		o.DataDir = "./data"
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Schema == nil {
		o.Schema = schema.Rollout()
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = DefaultMemoryBudget
	}
	if o.Codec == "" {
		o.Codec = "snappy"
	}
	if o.SnapshotRetention == (catalog.Retention{}) {
		o.SnapshotRetention = DefaultSnapshotRetention
	}
	if o.OrphanGrace == 0 {
		o.OrphanGrace = DefaultOrphanGrace
	}
	if o.Compaction.TargetBytes == 0 {
		o.Compaction.TargetBytes = DefaultCompactionTarget
	}
	if o.Compaction.MinFiles == 0 {
		o.Compaction.MinFiles = DefaultCompactionMinFiles
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Coordinator is the merge coordinator of one table. It holds base/lock
// from New until Close or until its lease is lost. Its methods are not safe
// for concurrent use.
type Coordinator struct {
	opts    Options
	keys    shardmeta.Keys
	store   *shardmeta.Store
	cli     *clientv3.Client
	log     *slog.Logger
	metrics *metrics
	baseDir string
	table   *baseTable

	lease   clientv3.LeaseID
	lockRev int64
	stopKA  context.CancelFunc
	kaDone  chan struct{}
	closeMu sync.Once

	// testHookAfterPrepare runs once a commit's Iceberg metadata files are
	// written, before its transaction; an error aborts there (a crash).
	testHookAfterPrepare func() error
	// testHookCompactTxn runs once a compaction's files and metadata are
	// written, before its transaction; an error aborts there (a crash).
	testHookCompactTxn func() error
	// testHookCommit, when set, sees the commit transaction's error and
	// may replace it (simulating a response lost after the apply).
	testHookCommit func(err error) error
	// testHookBeforeCommitTxn, when set, runs before the commit
	// transaction; an error replaces the transaction (a request lost
	// before it reached etcd).
	testHookBeforeCommitTxn func() error
	// testHookAfterCommit runs after the commit, before the readers'
	// manifest is written; an error aborts there (a crash).
	testHookAfterCommit func() error
	// testHookReadBack, when set, sees the error of the read that resolves
	// a lost commit response and returns the one to act on.
	testHookReadBack func(err error) error
	// testNoCopy makes Stage decode and re-encode every generation, as it
	// did before generations were copied (copy.go).
	testNoCopy bool
}

// New validates opts, takes the table's merge lock (waiting, by watching
// the key, while another coordinator holds it) and returns the
// coordinator. Files under base/data that the committed state does not
// name are deleted: only the lock holder writes there, and anything
// unnamed is the garbage of a failed stage.
func New(ctx context.Context, opts Options) (*Coordinator, error) {
	configured := opts.Schema != nil
	opts.ensureDefaults()
	if opts.Etcd == nil {
		return nil, errors.New("publish: no etcd client")
	}
	if opts.LeaseTTL < time.Second {
		return nil, fmt.Errorf("publish: lease TTL %v is below 1s", opts.LeaseTTL)
	}
	if r := opts.SnapshotRetention; r.MaxAge < 0 || r.MaxSnapshots < 0 {
		return nil, fmt.Errorf("publish: snapshot retention %+v is negative", r)
	}
	if cc := opts.Compaction; cc.TargetBytes < 1<<10 || cc.MinFiles < 2 {
		return nil, fmt.Errorf("publish: compaction target %d bytes (want ≥ 1 KiB) or min files %d (want ≥ 2)", cc.TargetBytes, cc.MinFiles)
	}
	if err := opts.Schema.Validate(); err != nil {
		return nil, err
	}
	keys := shardmeta.Keys{Prefix: opts.Prefix, Table: opts.Table}
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	if err := ensureSchema(ctx, &opts, keys, configured); err != nil {
		return nil, err
	}
	// Absolute: Iceberg metadata names files by absolute location.
	baseDir, err := filepath.Abs(layout.BaseDir(opts.DataDir, opts.Table))
	if err != nil {
		return nil, fmt.Errorf("publish: data directory %q: %w", opts.DataDir, err)
	}
	c := &Coordinator{
		opts: opts, keys: keys, cli: opts.Etcd, log: opts.Logger.With("table", opts.Table),
		store:   shardmeta.NewStore(opts.Etcd, keys, shardmeta.StoreOptions{RequestTimeout: opts.RequestTimeout, Logger: opts.Logger}),
		baseDir: baseDir,
	}
	if err := c.openBaseTable(); err != nil {
		return nil, err
	}
	if err := c.checkBaseHome(ctx); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer, opts.Table)
	if err != nil {
		return nil, err
	}
	c.metrics = m
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	if err := c.prepareBase(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ensureSchema holds a configured schema to the table's current version
// (recording it as version 1 for a table without one); without one, the
// table's recorded schema is taken (the rollout schema recorded for a
// table without).
func ensureSchema(ctx context.Context, opts *Options, keys shardmeta.Keys, configured bool) error {
	if !configured {
		rctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
		rec, err := shardmeta.LoadSchema(rctx, opts.Etcd, keys)
		cancel()
		if err != nil {
			return fmt.Errorf("publish: read the schema of table %s: %w", keys.Table, err)
		}
		if rec != nil {
			opts.Schema = rec.Schema()
			return nil
		}
	}
	if _, err := shardmeta.EnsureSchema(ctx, opts.Etcd, keys, opts.Schema, opts.RequestTimeout); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// prepareBase runs once the lock is held: the base's Iceberg table exists,
// a legacy state's files are moved into it, the readers' manifest of the
// committed version exists, and orphans are deleted.
func (c *Coordinator) prepareBase(ctx context.Context) error {
	if err := c.ensureTable(ctx); err != nil {
		return err
	}
	if err := c.migrate(ctx); err != nil {
		return err
	}
	if err := c.repairReaderManifest(ctx); err != nil {
		return err
	}
	_, err := c.RemoveOrphans(ctx)
	if errors.Is(err, ErrInvalidState) {
		c.log.Warn("base refused; not removing orphans (Plan fails closed)", "err", err)
		return nil
	}
	return err
}

func (c *Coordinator) rpc(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

// acquire grants a lease, keeps it alive and puts base/lock under it if
// absent; while another holder has it, it watches the key for its DELETE.
func (c *Coordinator) acquire(ctx context.Context) error {
	rctx, cancel := c.rpc(ctx)
	g, err := c.cli.Grant(rctx, int64(c.opts.LeaseTTL/time.Second))
	cancel()
	if err != nil {
		return fmt.Errorf("publish: grant lease: %w", err)
	}
	c.lease = g.ID
	kactx, stop := context.WithCancel(context.Background())
	ka, err := c.cli.KeepAlive(kactx, g.ID)
	if err != nil {
		stop()
		return fmt.Errorf("publish: keep lease alive: %w", err)
	}
	c.stopKA, c.kaDone = stop, make(chan struct{})
	go func() {
		defer close(c.kaDone)
		for range ka {
		}
	}()
	host, _ := os.Hostname()
	value := fmt.Sprintf(`{"coordinator":%q,"pid":%d}`, host, os.Getpid())
	key := c.keys.BaseLock()
	for {
		rctx, cancel := c.rpc(ctx)
		resp, err := c.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			c.release()
			return fmt.Errorf("publish: take lock %s: %w", key, err)
		}
		if resp.Succeeded {
			c.lockRev = resp.Header.Revision
			c.log.Info("took the merge lock", "key", key, "revision", c.lockRev, "lease", fmt.Sprintf("%x", g.ID))
			return nil
		}
		held := resp.Responses[0].GetResponseRange().GetKvs()
		if len(held) == 0 {
			continue
		}
		c.log.Info("merge lock held; waiting for its release", "holder", string(held[0].Value))
		if err := c.waitDeleted(ctx, key, resp.Header.Revision); err != nil {
			c.release()
			return err
		}
	}
}

func (c *Coordinator) waitDeleted(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if wr.CompactRevision != 0 {
			return nil // compacted past the read: the caller reads again
		}
		if err := wr.Err(); err != nil {
			return fmt.Errorf("publish: watch lock %s: %w", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publish: waiting for lock %s: %w", key, err)
	}
	return fmt.Errorf("publish: watch of lock %s ended", key)
}

// release stops the keepalive and revokes the lease (deleting the lock).
func (c *Coordinator) release() {
	if c.stopKA != nil {
		c.stopKA()
		<-c.kaDone
	}
	if c.lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
		_, _ = c.cli.Revoke(ctx, c.lease)
		cancel()
	}
}

// Close releases the lock. It does not wait for anything else.
func (c *Coordinator) Close() error {
	c.closeMu.Do(c.release)
	return nil
}

// LockRevision is the revision at which the lock was taken: every write of
// this coordinator is guarded by ModRevision(base/lock) == LockRevision.
func (c *Coordinator) LockRevision() int64 { return c.lockRev }

// Lease is the lease the lock is bound to.
func (c *Coordinator) Lease() clientv3.LeaseID { return c.lease }

// BaseDir is <data>/<table>/base.
func (c *Coordinator) BaseDir() string { return c.baseDir }

// repairReaderManifest writes the committed version's readers' manifest
// when a crash after the commit left it missing. A base that Plan will
// refuse is left alone.
func (c *Coordinator) repairReaderManifest(ctx context.Context) error {
	st, _, err := c.store.LoadBaseState(ctx)
	if errors.Is(err, shardmeta.ErrInvalidBaseState) {
		return nil
	} else if err != nil {
		return err
	}
	if err := c.writeReaderManifest(ctx, st, nil); err != nil && !errors.Is(err, ErrInvalidState) {
		return err
	}
	return nil
}
