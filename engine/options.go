package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/vfs"
	"github.com/rollwal/rollwal/wal"
)

// Options configure a Host and the shards it opens.
type Options struct {
	// DataDir holds <table>/shards/<shard>/{wal,gen,producers} (package
	// layout).
	DataDir string
	// FS is the filesystem; default vfs.Default.
	FS vfs.FS
	// Table names the table; default "rollouts".
	Table string
	// Schema is the table's schema; default schema.Rollout().
	Schema *schema.Schema
	// Etcd is the metadata client (required).
	Etcd *clientv3.Client
	// Prefix is the root of the table's keys in etcd; default "rollwal".
	Prefix string
	// WriterID names this writer in the owner key; default host-pid.
	WriterID string
	// Address is where this writer serves, recorded in the owner key.
	Address string
	// LeaseTTL is the TTL of the writer's lease; default 5s.
	LeaseTTL time.Duration
	// LeaseMargin is subtracted from the lease's deadline: a writer stops
	// acknowledging this long before its lease could expire on the server;
	// default LeaseTTL/5.
	LeaseMargin time.Duration
	// RequestTimeout bounds every etcd request; default 5s.
	RequestTimeout time.Duration

	// WALSegmentSize is the WAL's roll threshold; default 64 MiB.
	WALSegmentSize int64
	// WALPreallocate is the step in which WAL segments reserve disk space
	// ahead of the write position, by writing it with zeros (see
	// wal.Options.Preallocate and wal.ZeroFill): a new segment reserves one
	// step, not the whole WALSegmentSize, so that many idle shards reserve
	// little disk. Default 4 MiB (or WALSegmentSize if smaller); negative
	// reserves nothing; otherwise 64 KiB up to WALSegmentSize.
	WALPreallocate int64
	// WALSpares is how many drained WAL segments a shard keeps, renamed to
	// spares, for its next segments to be written over (no zeros ahead, no
	// size change for an fsync to commit); each holds a segment's disk
	// space. 0 means wal.DefaultSpares (2); negative keeps none.
	WALSpares int
	// WALBackend is where the WAL lives: WALLocal (default), segment files
	// under DataDir, or WALObject, one object per group commit in Store
	// (required then), so that a writer on another machine replays the
	// tail. docs/objstore.md says which to choose.
	WALBackend WALBackend
	// WALObjectSize bounds one WAL object with WALObject: a group commit
	// above it is split between records. Default wal.DefaultObjectSize.
	WALObjectSize int
	// WALCompression compresses WAL record payloads; default none.
	WALCompression wal.Compression
	// Codec is the generation files' Parquet codec; default "snappy".
	Codec string

	// FlushBytes seals the active memtable once it holds this many bytes
	// (the flusher seals it; while the flusher is busy an append seals it
	// at twice this, so a generation stays under 2×FlushBytes plus one
	// batch); default 64 MiB.
	FlushBytes int64
	// FlushAge seals the active memtable once its oldest row is this old;
	// default 30s. Negative disables age-based flushes.
	FlushAge time.Duration
	// FlushOnClose flushes the active memtable on Close; default true
	// (set NoFlushOnClose to disable).
	NoFlushOnClose bool
	// MemoryBudget bounds the bytes held by all memtables of the host;
	// default 512 MiB.
	MemoryBudget int64
	// BudgetWait is how long an append waits for memory before it fails
	// with memtable.ErrBackpressure; 0 fails at once. Default 0.
	BudgetWait time.Duration
	// MaxBatchRows bounds the rows of one append; default 100000.
	MaxBatchRows int

	// Snapshots, when set, receives after every manifest commit the highest
	// offset per source that committed generations cover (the upstream
	// resume points). A rejected persist (a newer writer moved the offset
	// further) is logged, never fatal. The store stays the caller's.
	Snapshots snapshot.Store

	// Store, when set, is where generations live for everyone else: a
	// flush uploads each generation file (layout.GenerationKey) before it
	// commits it, a drain deletes the object with the file, and an open
	// deletes the objects of attempts no commit names. Merges on any
	// machine read them there (publish.Options.Store). The local file
	// stays until drained. The store stays the caller's.
	Store objstore.Store

	// ProducerExpiry is how long a producer session's state outlives its
	// last append; default DefaultProducerExpiry (7 days). A producer that
	// comes back later is unknown and must start a new session.
	ProducerExpiry time.Duration
	// MaxProducers bounds the producer sessions a shard tracks; default
	// DefaultMaxProducers. A new producer beyond it is refused
	// (ErrTooManyProducers) until idle ones expire.
	MaxProducers int
	// MaxUnmergedGenerations bounds the committed generations a shard's
	// manifest holds before merges drain them; default
	// DefaultMaxUnmergedGenerations. At the bound appends get
	// ErrMergesBehind (backpressure) until a merge catches up, so that the
	// manifest, one etcd value, never outgrows etcd's request limit.
	MaxUnmergedGenerations int
	// MaxSources bounds the sources a shard tracks offsets for; default
	// DefaultMaxSources. An append naming a new source beyond it is refused
	// (ErrInvalidAppend).
	MaxSources int

	// ReclaimOnFence makes the host claim a fenced shard again, with a new
	// lease and epoch, in the background (waiting, as any claim does, for
	// the current owner key to go). Default off: a fenced shard stays
	// fenced until Host.Reclaim.
	ReclaimOnFence bool

	// DisableSourceExclusion replays WAL records of already-flushed
	// generations. A test switch: it proves that the merge-side cutoff
	// holds on its own. Never set it in production.
	DisableSourceExclusion bool

	// testHookBeforeWrite runs in Append after every check, just before the
	// WAL write: tests stall a writer there to make a zombie.
	testHookBeforeWrite func()
	// testHookClaimPrepared runs in every claim attempt after the WAL's
	// tail was read and before the claim transaction: tests hold a
	// claimant there to race another.
	testHookClaimPrepared func()

	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.DataDir == "" {
		o.DataDir = "./data"
	}
	if o.Table == "" {
		o.Table = "rollouts"
	}
	if o.Schema == nil {
		o.Schema = schema.Rollout()
	}
	if o.Prefix == "" {
		o.Prefix = "rollwal"
	}
	if o.WriterID == "" {
		host, _ := os.Hostname()
		o.WriterID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	setDefault(&o.LeaseTTL, 5*time.Second)
	setDefault(&o.LeaseMargin, o.LeaseTTL/5)
	setDefault(&o.RequestTimeout, 5*time.Second)
	setDefault(&o.WALSegmentSize, 64<<20)
	setDefault(&o.WALPreallocate, min(wal.DefaultPreallocate, o.WALSegmentSize))
	setDefault(&o.FlushBytes, 64<<20)
	setDefault(&o.FlushAge, 30*time.Second)
	setDefault(&o.MemoryBudget, 512<<20)
	setDefault(&o.MaxBatchRows, 100000)
	setDefault(&o.ProducerExpiry, DefaultProducerExpiry)
	setDefault(&o.MaxProducers, DefaultMaxProducers)
	setDefault(&o.MaxSources, DefaultMaxSources)
	setDefault(&o.MaxUnmergedGenerations, DefaultMaxUnmergedGenerations)
	if o.Codec == "" {
		o.Codec = "snappy"
	}
	if o.WALBackend == "" {
		o.WALBackend = WALLocal
	}
	setDefault(&o.WALObjectSize, wal.DefaultObjectSize)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

// Validate reports the first option that cannot work.
func (o *Options) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("engine: "+format, args...))
		}
	}
	check(o.Etcd == nil, "no etcd client")
	check(o.LeaseTTL < time.Second, "lease TTL %v is below 1s", o.LeaseTTL)
	check(o.LeaseMargin <= 0 || o.LeaseMargin >= o.LeaseTTL/2, "lease margin %v must be positive and below half the lease TTL %v", o.LeaseMargin, o.LeaseTTL)
	check(o.RequestTimeout <= 0, "request timeout %v must be positive", o.RequestTimeout)
	check(o.WALSegmentSize < 64<<10, "WAL segment size %d is below 64 KiB", o.WALSegmentSize)
	check(o.WALSpares > wal.MaxSpares, "WAL spares %d above %d", o.WALSpares, wal.MaxSpares)
	check(o.WALPreallocate > 0 && (o.WALPreallocate < 64<<10 || o.WALPreallocate > o.WALSegmentSize),
		"WAL preallocate %d must be from 64 KiB to the WAL segment size %d (or negative to reserve nothing)", o.WALPreallocate, o.WALSegmentSize)
	check(o.WALBackend != WALLocal && o.WALBackend != WALObject, "unknown WAL backend %q (want %q or %q)", o.WALBackend, WALLocal, WALObject)
	check(o.WALBackend == WALObject && o.Store == nil, "the WAL backend %q needs an object store (Options.Store)", WALObject)
	check(o.WALObjectSize < 64<<10 || o.WALObjectSize > wal.MaxPayloadSize, "WAL object size %d must be from 64 KiB to %d", o.WALObjectSize, wal.MaxPayloadSize)
	check(o.FlushBytes <= 0, "flush bytes %d must be positive", o.FlushBytes)
	check(o.MemoryBudget < o.FlushBytes, "memory budget %d is below flush bytes %d: a memtable could never fill", o.MemoryBudget, o.FlushBytes)
	check(o.BudgetWait < 0, "budget wait %v is negative", o.BudgetWait)
	check(o.MaxBatchRows <= 0, "max batch rows %d must be positive", o.MaxBatchRows)
	check(o.ProducerExpiry <= 0, "producer expiry %v must be positive", o.ProducerExpiry)
	check(o.MaxProducers <= 0, "max producers %d must be positive", o.MaxProducers)
	check(o.MaxSources <= 0, "max sources %d must be positive", o.MaxSources)
	check(o.MaxUnmergedGenerations <= 0, "max unmerged generations %d must be positive", o.MaxUnmergedGenerations)
	if o.MaxSources > 0 && o.MaxUnmergedGenerations > 0 {
		b := shardmeta.ManifestBound(o.MaxUnmergedGenerations, o.MaxSources, MaxSourceBytes)
		check(b > MaxManifestBytes,
			"max unmerged generations %d and max sources %d allow a shard manifest of %d bytes (with %d epoch records and %d-byte source names), above the %d it may take (one etcd value): lower one of them",
			o.MaxUnmergedGenerations, o.MaxSources, b, shardmeta.MaxEpochRecords(o.MaxUnmergedGenerations), MaxSourceBytes, MaxManifestBytes)
	}
	if err := checkOwnerField("writer id", o.WriterID, MaxWriterIDBytes); err != nil {
		errs = append(errs, err)
	} else if o.WriterID == "" {
		errs = append(errs, errors.New("engine: writer id is empty"))
	}
	if err := checkOwnerField("address", o.Address, MaxAddressBytes); err != nil {
		errs = append(errs, err)
	}
	check(o.Codec != "snappy" && o.Codec != "zstd" && o.Codec != "none", "unknown codec %q (want snappy, zstd or none)", o.Codec)
	if err := o.Schema.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// MaxManifestBytes is the most a shard manifest may encode to at the limits
// Options allow (shardmeta.ManifestBound). etcd refuses a request above
// --max-request-bytes, 1.5 MiB by default, and the claim transaction
// carries the manifest with the epoch and owner keys; the rest is room for
// the few generations a shard commits beyond MaxUnmergedGenerations (the
// limit is checked when an append is admitted, and replay flushes whatever
// the count). See docs/format/etcd.md.
const MaxManifestBytes = 1 << 20

// MaxWriterIDBytes and MaxAddressBytes bound Options.WriterID and
// Options.Address, which every shard's owner key records.
const (
	MaxWriterIDBytes = 256
	MaxAddressBytes  = 256
)

// checkOwnerField checks a value of the owner key: at most limit bytes of
// printable UTF-8 (unicode.IsPrint: ASCII space, no other space, no control
// or format character).
func checkOwnerField(what, v string, limit int) error {
	if len(v) > limit {
		return fmt.Errorf("engine: %s of %d bytes, the limit is %d", what, len(v), limit)
	}
	for i := 0; i < len(v); {
		r, n := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return fmt.Errorf("engine: %s %q: byte %d is not valid UTF-8", what, v, i)
		case !unicode.IsPrint(r):
			return fmt.Errorf("engine: %s %q: unprintable %U at byte %d", what, v, r, i)
		}
		i += n
	}
	return nil
}

// newBudget is split out so a Host shares one budget across its shards.
func (o *Options) newBudget() *memtable.Budget { return memtable.NewBudget(o.MemoryBudget) }
