package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/rollwal/rollwal/internal/vfs"
)

// maxUnwritten bounds the bytes appended but not yet written to a file:
// appenders wait beyond it, so a stalled disk cannot grow memory without
// bound.
const maxUnwritten = 8 << 20

// WAL is the write-ahead log of one shard. See the package documentation
// for the lifecycle and the concurrency rules.
type WAL struct {
	opts  Options
	fs    vfs.FS
	dir   string
	log   *slog.Logger
	m     *metrics
	codec *codec
	// readOnly marks a WAL made by ReadTail: it owns no epoch, so recovery
	// treats every segment as another epoch's and never writes.
	readOnly bool

	mu sync.Mutex
	// work wakes the syncer: data to write, a sync wanted, or Close.
	work sync.Cond
	// progress wakes appenders waiting for buffer space and SyncTo
	// callers waiting for durability; it is broadcast after every write
	// or sync, and on failure.
	progress sync.Cond

	segments []*segment // every live segment, by epoch then index
	active   *segment   // the segment being appended to, of Options.Epoch

	assigned   uint64 // the last position handed out; Tail
	pending    *batch // records appended, not yet taken by the syncer
	spare      *batch // an empty batch to swap in for pending
	inflight   int    // bytes the syncer has taken and not yet written
	written    uint64 // last position written to a segment file
	synced     uint64 // last position known durable
	syncWanted uint64 // highest position a SyncTo caller waits for
	closed     bool
	err        error // the failure, wrapping ErrFailed; permanent
	// full is why the syncer waits for disk space (wrapping ErrNoSpace),
	// or nil; it clears once the records it could not write are written.
	full  error
	retry bool // the syncer's wait for space is over: try again

	removeMu sync.Mutex // serializes RemoveThrough

	// Owned by the syncer goroutine once Open returns.
	file       vfs.File // the active segment; nil after a roll that could not create the next
	fileSize   int64    // bytes written to file
	allocated  int64    // bytes of file reserved by Preallocate
	syncerDone chan struct{}
}

// batch is a run of framed records in position order, waiting to be
// written. marks records where each record ends, so that the syncer can
// roll segments between records.
type batch struct {
	data  []byte
	marks []mark
}

type mark struct {
	end  int    // offset in data just past the record
	last uint64 // the record's last position
}

func (b *batch) reset() {
	b.data, b.marks = b.data[:0], b.marks[:0]
}

// Tail returns the highest position in the log: the last one assigned by
// Append, or the highest found on disk by Open (over every epoch). It is 0
// for an empty log.
func (w *WAL) Tail() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.assigned
}

// Err returns the failure that stopped the WAL, or nil.
func (w *WAL) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// NoSpace returns, while the WAL waits for disk space, an error wrapping
// ErrNoSpace and its cause; nil otherwise.
func (w *WAL) NoSpace() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.full
}

// Append frames a record covering count positions and queues it for
// writing. It assigns the record's first position, Tail()+1, so positions
// are dense. It does not wait for durability: call SyncTo. Concurrent
// callers are safe; the order between them is the order in which they take
// the lock, so callers that need an order serialize themselves. Append
// blocks while too many bytes wait to be written. payload is copied; the
// caller may reuse it on return.
func (w *WAL) Append(gen uint64, count uint32, payload []byte) (first uint64, err error) {
	p, err := w.Prepare(payload)
	if err != nil {
		return 0, err
	}
	defer p.Release()
	return w.AppendPrepared(gen, count, p)
}

// Prepared is a payload compressed for a later AppendPrepared. Preparing
// takes no lock, so callers that must append in an order they keep under a
// lock of their own (the engine's shard) compress before taking it, and
// many producers compress in parallel.
type Prepared struct {
	// Kind is stored in the record's header (Header.Kind); set it before
	// AppendPrepared. Default 0.
	Kind      uint8
	c         *codec
	buf       *[]byte
	stored    []byte
	kind      Compression
	rawLength uint32
}

// Prepare checks and compresses payload. The Prepared holds payload's
// bytes until AppendPrepared returns; Release it afterwards.
func (w *WAL) Prepare(payload []byte) (*Prepared, error) { return prepare(w.codec, payload) }

func prepare(c *codec, payload []byte) (*Prepared, error) {
	if len(payload) > MaxPayloadSize {
		return nil, fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrPayloadTooLarge, len(payload), MaxPayloadSize)
	}
	p := &Prepared{c: c, buf: c.getBuf(), rawLength: uint32(len(payload))}
	p.stored, p.kind = c.compress(payload, p.buf)
	return p, nil
}

// Release returns p's buffer for reuse; p must not be used again.
func (p *Prepared) Release() {
	if p.buf != nil {
		p.c.putBuf(p.buf)
		p.buf, p.stored = nil, nil
	}
}

// AppendPrepared appends a prepared record covering count positions of
// generation gen; see Append.
func (w *WAL) AppendPrepared(gen uint64, count uint32, p *Prepared) (first uint64, err error) {
	if count == 0 {
		return 0, errors.New("wal: append of a record covering no position")
	}
	if p.c != w.codec {
		return 0, errors.New("wal: record prepared by another WAL")
	}
	h := recordHeader{
		Header:    Header{Epoch: w.opts.Epoch, Generation: gen, Count: count, Kind: p.Kind},
		codec:     p.kind,
		rawLength: p.rawLength,
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.waitForSpace(headerSize + len(p.stored)); err != nil {
		return 0, err
	}
	if w.assigned > math.MaxUint64-uint64(count) {
		return 0, errors.New("wal: positions exhausted")
	}
	h.FirstPos = w.assigned + 1
	w.assigned += uint64(count)
	w.pending.data = appendRecord(w.pending.data, h, p.stored)
	w.pending.marks = append(w.pending.marks, mark{end: len(w.pending.data), last: w.assigned})
	w.m.records.Inc()
	w.work.Signal()
	return h.FirstPos, nil
}

// waitForSpace waits until n more bytes fit under maxUnwritten. A record
// larger than the bound is let through once nothing else is unwritten.
// Callers hold mu.
func (w *WAL) waitForSpace(n int) error {
	for {
		if err := w.usable(); err != nil {
			return err
		}
		unwritten := len(w.pending.data) + w.inflight
		if unwritten == 0 || unwritten+n <= maxUnwritten {
			return nil
		}
		w.progress.Wait()
	}
}

// usable returns why the WAL cannot take appends, or nil. Callers hold mu.
func (w *WAL) usable() error {
	if err := w.callable(); err != nil {
		return err
	}
	return w.full
}

// callable returns why the WAL can take no call at all, or nil. Callers
// hold mu.
func (w *WAL) callable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}

// SyncTo returns once every record with a position at or below pos is
// durable: written and covered by a successful fsync of its segment, whose
// directory entry was synced when it was created. Positions beyond Tail()
// are not waited for. Concurrent callers share fsyncs: one fsync covers
// every record written before it started (group commit). After a failure
// it returns an error wrapping ErrFailed and the cause. While the WAL waits
// for disk space, a position not yet durable is answered at once with an
// error wrapping ErrNoSpace: its record is queued and becomes durable once
// space is back, so the caller may not report it lost, only not durable
// yet.
func (w *WAL) SyncTo(pos uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.callable(); err != nil {
		return err
	}
	pos = min(pos, w.assigned)
	for w.synced < pos {
		if w.err != nil {
			return w.err
		}
		if w.full != nil {
			return w.full
		}
		if pos > w.syncWanted {
			w.syncWanted = pos
			w.work.Signal()
		}
		w.progress.Wait()
	}
	return nil
}

// Close writes and syncs every record appended, stops the syncer and
// closes the active segment. Calls after Close return ErrClosed. If the
// WAL had failed, Close returns the failure.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.work.Signal()
	w.progress.Broadcast() // appenders waiting for space give up
	w.mu.Unlock()

	<-w.syncerDone
	w.codec.close()
	return w.Err()
}

// fail puts the WAL in its failed state for good and wakes every waiter.
func (w *WAL) fail(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.err = failed(cause)
	w.log.Error("wal failed; no further appends or syncs", "dir", w.dir, "err", cause)
	w.progress.Broadcast()
	w.work.Signal()
}
