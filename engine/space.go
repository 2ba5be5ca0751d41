package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rollwal/rollwal/wal"
)

// A full disk is not fatal, unlike a failed fsync. The WAL meets it when it
// creates a segment or reserves space (see wal.ErrNoSpace), before a byte
// of a record is written, and waits for space by itself; a flush meets it
// writing a generation, which nothing acknowledged depends on, and the
// flusher retries with backoff. Meanwhile the shard refuses appends with
// ErrNoSpace, so that the memtables and the WAL's queue stop growing, and
// Status.Degraded says why. Both clear by themselves once space is back.

// diskFull returns why the shard waits for disk space, or nil.
func (s *Shard) diskFull() error {
	if err := s.w.NoSpace(); err != nil {
		return err
	}
	if p := s.flushNoSpace.Load(); p != nil {
		return *p
	}
	return nil
}

// checkSpace refuses an append while flushes fail for a full disk. (While
// the WAL waits for space it refuses the append itself, under its lock;
// see walError.)
func (s *Shard) checkSpace() error {
	if p := s.flushNoSpace.Load(); p != nil {
		return fmt.Errorf("%w: shard %s takes appends again once a flush succeeds (it retries by itself): %w", ErrNoSpace, s.name, *p)
	}
	return nil
}

// walError turns an error of the WAL into the shard's. Out of space, the
// WAL waits and retries by itself and the shard keeps running; any other
// failure stops the shard for good (fail-stop).
func (s *Shard) walError(err error) error {
	switch {
	case errors.Is(err, wal.ErrNoSpace):
		return fmt.Errorf("%w: shard %s: %w", ErrNoSpace, s.name, err)
	case errors.Is(err, wal.ErrStoreDown):
		return fmt.Errorf("%w: shard %s: %w", ErrStoreDown, s.name, err)
	}
	s.stop(err)
	return fmt.Errorf("engine: shard %s: %w", s.name, err)
}

// noteFlushFailure records a flush that failed for a full disk.
func (s *Shard) noteFlushFailure(err error) {
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, wal.ErrFailed) {
		return
	}
	if s.flushNoSpace.Swap(&err) == nil {
		s.log.Warn("flush failed for a full disk; appends are refused until a flush succeeds (retrying)", "err", err)
	}
}

// noteFlushed clears a full disk met by an earlier flush.
func (s *Shard) noteFlushed() {
	if s.flushNoSpace.Swap(nil) != nil {
		s.log.Info("flush succeeded: disk space is back; appends resume")
	}
}
