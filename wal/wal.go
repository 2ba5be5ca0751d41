package wal

import (
	"fmt"
	"sync"

	"github.com/rollwal/rollwal/vfs"
)

// maxUnwritten bounds the bytes appended but not yet written to a file:
// appenders wait beyond it, so a stalled disk cannot grow memory without
// bound.
const maxUnwritten = 8 << 20

// WAL is the write-ahead log of one shard in a directory of segment files.
// See the package documentation for the lifecycle and the concurrency
// rules. A record is durable, for SyncTo, once it is written and covered
// by a successful fsync of its segment, whose directory entry was synced
// when it was created.
type WAL struct {
	queue
	opts  Options
	fs    vfs.FS
	dir   string
	codec *codec
	// readOnly marks a WAL made by ReadTail: it owns no epoch, so recovery
	// treats every segment as another epoch's and never writes.
	readOnly bool

	segments []*segment // every live segment, by epoch then index
	active   *segment   // the segment being appended to, of Options.Epoch

	written uint64 // last position written to a segment file
	retry   bool   // the syncer's wait for space is over: try again
	// busy: a round runs, on the syncer or on a caller of SyncTo (see
	// lead.go); the fields owned by the round are its alone. handed is a
	// caller's round that met a full disk, for the syncer to finish.
	busy   bool
	handed *job
	// callers counts the SyncTo calls that needed a round since the last
	// was taken; grouped: more than one needed the last round, so the
	// syncer runs them all (see lead.go). Guarded by mu.
	callers int
	grouped bool

	removeMu sync.Mutex // serializes RemoveThrough

	spares []spare // spares a roll may write over, oldest first; guarded by mu

	// Owned by the running round (busy) once Open returns.
	file       vfs.File // the active segment; nil after a roll that could not create the next
	fileSize   int64    // bytes of records written to file: the end of data, where the next goes
	allocated  int64    // bytes of file reserved: zero-filled (its size) or fallocated
	aheadFull  bool     // fillAhead met a full disk; it waits until reserve gets space
	bigRound   bool     // the last round that wrote records was big: space is fallocated, not zeroed
	recycled   bool     // file is a spare written over: sealing cuts it to its records
	recycling  string   // file's name while it is recycled and holds no durable record yet (see recycle.go)
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
	return w.enqueue(w.codec, w.opts.Epoch, gen, count, p)
}

// Close writes and syncs every record appended, stops the syncer and
// closes the active segment. Calls after Close return ErrClosed. If the
// WAL had failed, Close returns the failure.
func (w *WAL) Close() error {
	if !w.markClosed() {
		return ErrClosed
	}
	<-w.syncerDone
	w.codec.close()
	return w.Err()
}
