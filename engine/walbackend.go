package engine

import (
	"context"
	"fmt"

	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// WALBackend says where a shard's WAL lives.
type WALBackend string

const (
	// WALLocal: segment files in the data directory, fsynced (the default).
	WALLocal WALBackend = "local"
	// WALObject: one object per group commit in Options.Store
	// (wal.ObjectWAL), so that a writer on another machine replays it.
	WALObject WALBackend = "object"
)

// shardLog is what a shard needs of its WAL; *wal.WAL and *wal.ObjectWAL
// are it.
type shardLog interface {
	Tail() uint64
	Prepare(payload []byte) (*wal.Prepared, error)
	AppendPrepared(gen uint64, count uint32, p *wal.Prepared) (uint64, error)
	SyncTo(pos uint64) error
	Replay(from, to uint64, fn func(h wal.Header, payload []byte) error) error
	RemoveThrough(cursor uint64) error
	// NoSpace is why the WAL refuses appends for now and retries by
	// itself (a full disk, a store that does not take objects), or nil.
	NoSpace() error
	Close() error
}

// walObjectPrefix is the prefix of the shard's WAL objects in the store.
func (s *Shard) walObjectPrefix() string {
	return layout.WALPrefix(s.opts.Table, s.name)
}

func (s *Shard) objectWALOptions(epoch uint64) wal.ObjectOptions {
	return wal.ObjectOptions{
		Store: s.opts.Store, Prefix: s.walObjectPrefix(), Epoch: epoch,
		Compression: s.opts.WALCompression, ObjectSize: s.opts.WALObjectSize, After: s.walAfter,
		Logger: s.log, Registerer: s.opts.Registerer,
	}
}

// claimTail is the WAL tail a claim records, read without writing
// anything (see claimAndOpenWAL). The other backend's WAL is read too, so
// that a change of Options.WALBackend never loses rows: while the other
// holds positions above the replay cursor the claim is refused, and once
// it holds nothing uncommitted the configured WAL continues after the
// cursor (walAfter) rather than reuse committed positions.
func (s *Shard) claimTail(ctx context.Context, m *shardmeta.Manifest) (uint64, error) {
	s.walAfter = 0
	tail, err := s.readWALTail(ctx, s.opts.WALBackend)
	if err != nil {
		return 0, err
	}
	other := WALLocal
	if s.opts.WALBackend == WALLocal {
		other = WALObject
	}
	otherTail, err := s.readWALTail(ctx, other)
	if err != nil {
		return 0, fmt.Errorf("read the %s WAL, which the shard may have used before: %w", other, err)
	}
	switch cursor := m.ReplayCursor; {
	case otherTail > cursor && otherTail > tail:
		return 0, fmt.Errorf("%w: the %s WAL (%s) holds positions up to %d, above the replay cursor %d, and the configured %s WAL only up to %d: "+
			"those rows would never be replayed; open the shard with the %s WAL again and flush it before changing the WAL backend",
			ErrReplay, other, s.walWhere(other), otherTail, cursor, s.opts.WALBackend, tail, other)
	case tail < cursor && otherTail >= cursor:
		s.log.Info("the WAL backend changed with every row committed; positions continue after the replay cursor",
			"backend", s.opts.WALBackend, "was", other, "replay_cursor", cursor)
		s.walAfter = cursor
		return cursor, nil
	}
	return tail, nil
}

// readWALTail reads the tail of the shard's WAL of backend b; 0 for an
// object WAL without a store.
func (s *Shard) readWALTail(ctx context.Context, b WALBackend) (uint64, error) {
	switch {
	case b == WALLocal:
		return wal.ReadTail(wal.Options{FS: s.opts.FS, Dir: s.walDir(), Logger: s.log})
	case s.opts.Store == nil:
		return 0, nil
	}
	return wal.ReadObjectTail(ctx, s.objectWALOptions(0))
}

// walWhere names where the WAL of backend b lives.
func (s *Shard) walWhere(b WALBackend) string {
	if b == WALLocal {
		return s.walDir()
	}
	return s.opts.Store.String() + "/" + s.walObjectPrefix()
}

// openWAL opens the WAL for appending in epoch.
func (s *Shard) openWAL(ctx context.Context, epoch uint64) (shardLog, error) {
	if s.opts.WALBackend == WALObject {
		w, err := wal.OpenObjects(ctx, s.objectWALOptions(epoch))
		if err != nil {
			return nil, fmt.Errorf("object WAL %s%s: %w", s.opts.Store, s.walObjectPrefix(), err)
		}
		return w, nil
	}
	return wal.Open(wal.Options{
		FS: s.opts.FS, Dir: s.walDir(), Epoch: epoch,
		SegmentSize: s.opts.WALSegmentSize, Preallocate: s.opts.WALPreallocate, Spares: s.opts.WALSpares, Compression: s.opts.WALCompression,
		After: s.walAfter, Logger: s.log, Registerer: s.opts.Registerer,
	})
}
