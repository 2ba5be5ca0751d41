package wal

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/vfs"
)

// DefaultSegmentSize is the roll threshold when Options.SegmentSize is 0.
const DefaultSegmentSize = 64 << 20

// DefaultPreallocate is the preallocation step when Options.Preallocate is
// 0: small enough that many idle shards reserve little disk and that
// zero-filling a step holds the syncer up briefly, large enough that a busy
// shard reserves rarely.
const DefaultPreallocate = 4 << 20

// Preallocation is how the active segment's space is reserved ahead of
// the write position (see Options.Preallocate). The values are not wire
// format: segments of either read the same.
type Preallocation uint8

const (
	// ZeroFill writes the space with zeros and syncs them before records
	// go there, so the file's size already covers the records: the
	// fdatasync that makes an append durable flushes data only, with no
	// size to commit and no unwritten extents to convert (no journal
	// commit on ext4 or xfs). Zeros are the end of data to every reader.
	ZeroFill Preallocation = iota
	// Fallocate reserves blocks with fallocate(FALLOC_FL_KEEP_SIZE) and
	// writes nothing ahead, so every fdatasync after an append also
	// commits the file's new size. It suits filesystems where a block
	// written twice costs twice (copy-on-write: btrfs, zfs), and is what
	// builds before ZeroFill did.
	Fallocate
)

var preallocationNames = [...]string{ZeroFill: "zero-fill", Fallocate: "fallocate"}

func (p Preallocation) valid() bool { return int(p) < len(preallocationNames) }

func (p Preallocation) String() string {
	if p.valid() {
		return preallocationNames[p]
	}
	return fmt.Sprintf("Preallocation(%d)", uint8(p))
}

// DefaultSpares is the number of spares kept when Options.Spares is 0:
// enough for the rolls between two flushes that drain the WAL, while
// holding little disk beyond the live segments.
const DefaultSpares = 2

// MaxSpares bounds Options.Spares: each spare holds a segment's disk space.
const MaxSpares = 64

// maxSegmentSize keeps a segment's offsets far from any overflow.
const maxSegmentSize = 1 << 40

// Compression is a record payload codec. The numeric values are wire
// format: they are stored in each record's flags.
type Compression uint8

const (
	None Compression = 0 // payload stored as given
	S2   Compression = 1 // klauspost s2 block format
	Zstd Compression = 2 // one zstd frame, SpeedFastest, no frame checksum
)

var compressionNames = [...]string{None: "none", S2: "s2", Zstd: "zstd"}

func (c Compression) valid() bool { return int(c) < len(compressionNames) }

func (c Compression) String() string {
	if c.valid() {
		return compressionNames[c]
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

// ParseCompression parses "none", "s2" or "zstd"; "" means none, so an
// unset configuration field keeps the default.
func ParseCompression(s string) (Compression, error) {
	if s == "" {
		return None, nil
	}
	for c, name := range compressionNames {
		if s == name {
			return Compression(c), nil
		}
	}
	return None, fmt.Errorf("wal: unknown compression %q (want none, s2 or zstd)", s)
}

// MarshalText lets configuration files spell a Compression by name.
func (c Compression) MarshalText() ([]byte, error) {
	if !c.valid() {
		return nil, fmt.Errorf("wal: unknown compression %d", uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (c *Compression) UnmarshalText(b []byte) error {
	v, err := ParseCompression(string(b))
	if err == nil {
		*c = v
	}
	return err
}

// Options configure a WAL. The zero value of every field but Dir and Epoch
// is usable after EnsureDefaults.
type Options struct {
	// FS is the filesystem; nil means vfs.Default.
	FS vfs.FS
	// Dir is the shard's WAL directory. Open creates it and any missing
	// parents, and syncs each new entry's directory, so that it survives
	// a crash.
	Dir string
	// Epoch is the writer epoch appending now (> 0). New segments are
	// named for it; segments of a newer epoch make Open fail.
	Epoch uint64
	// SegmentSize is the roll threshold in bytes; 0 means
	// DefaultSegmentSize. A segment holds at most SegmentSize bytes unless
	// one record alone is larger.
	SegmentSize int64
	// Preallocate is the step, in bytes, in which the active segment's
	// disk space is reserved ahead of the write position (how: see
	// PreallocateMode): a segment starts with one step and gains another
	// whenever a write would pass the reserved end, never past SegmentSize
	// (unless one record is larger). With ZeroFill the syncer also
	// reserves the next step ahead, between rounds, once less than half a
	// step is left, so that an append rarely waits for it; a round of
	// 256 KiB of records or more reserves its space by fallocate instead
	// and fills nothing ahead (zeros it would overwrite at once cost more
	// than the size change its fsync then commits). A full disk then
	// shows as a failed reservation, before a byte of a record is written,
	// and the WAL waits for space instead of failing (see ErrNoSpace). 0
	// means DefaultPreallocate; a negative value reserves nothing; a step
	// of SegmentSize or more reserves each segment whole when it is
	// created.
	Preallocate int64
	// PreallocateMode is how Preallocate reserves space; default ZeroFill.
	PreallocateMode Preallocation
	// Spares is how many spare files the WAL keeps: drained segments of
	// this epoch that RemoveThrough renames to <epoch>-<index>.spare
	// instead of deleting (at least half full ones), and that a roll then
	// writes the next segment over. A spare's blocks are written and its
	// size is durable, so appends to it write no zeros ahead and their
	// fsyncs commit no size change, as with a pre-zeroed file; its old
	// records stay until overwritten, and readers take them for the end of
	// data (see recycle.go and docs/format/wal.md). Open keeps the spares
	// it finds, of this epoch or older ones, up to Spares, and deletes the
	// rest. 0 means DefaultSpares; a negative value keeps none: Open
	// deletes every spare, every drained segment is deleted and every new
	// one created. A build without spares refuses a directory holding any
	// (see docs/format/wal.md for a downgrade).
	Spares int
	// Compression is the codec tried on every record payload; a payload is
	// stored raw when the codec does not shrink it. Default None.
	Compression Compression
	// After, when above the highest position found, is where this epoch's
	// positions continue instead: a shard whose committed positions are
	// in another WAL (it moved from the object WAL to this one) must never
	// reuse them.
	After uint64
	// Logger receives recovery and failure reports; nil discards them.
	Logger *slog.Logger
	// Registerer receives the writer_wal_* metrics; nil registers nothing.
	// Several WALs may share one Registerer: they then share the metrics
	// (wrap it with prometheus.WrapRegistererWith to tell them apart).
	Registerer prometheus.Registerer
}

// EnsureDefaults fills the fields left at their zero value.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.Preallocate == 0 {
		o.Preallocate = DefaultPreallocate
	}
	if o.Spares == 0 {
		o.Spares = DefaultSpares
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every field that is out of range.
func (o *Options) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("wal: "+format, args...))
		}
	}
	check(o.FS == nil, "no filesystem")
	check(o.Dir == "", "no directory")
	check(o.Epoch == 0, "epoch must be > 0")
	check(o.SegmentSize < 0 || o.SegmentSize > maxSegmentSize,
		"segment size %d out of range [0, %d]", o.SegmentSize, int64(maxSegmentSize))
	check(o.Preallocate > maxSegmentSize, "preallocation step %d above %d", o.Preallocate, int64(maxSegmentSize))
	check(o.Spares > MaxSpares, "spares %d above %d", o.Spares, MaxSpares)
	check(!o.Compression.valid(), "unknown compression %d", uint8(o.Compression))
	check(!o.PreallocateMode.valid(), "unknown preallocation mode %d", uint8(o.PreallocateMode))
	return errors.Join(errs...)
}
