package wal

import (
	"errors"
	"log/slog"
	"math"
	"sync"
)

// queue is what the local WAL and the object WAL share: positions handed
// out, the records waiting for the one goroutine that makes them durable
// (the syncer), and the waits on durability. Each WAL embeds one; the
// syncer is its own.
type queue struct {
	log  *slog.Logger
	m    *metrics
	name string // the WAL's directory or store prefix, for the logs

	mu sync.Mutex
	// work wakes the syncer: records to write, a sync wanted, or Close.
	work sync.Cond
	// progress wakes appenders waiting for buffer space and SyncTo
	// callers waiting for durability; it is broadcast after every write
	// or sync, and on failure.
	progress sync.Cond

	assigned uint64 // the last position handed out; Tail
	pending  *batch // records appended, not yet taken by the syncer
	spare    *batch // an empty batch to swap in for pending
	inflight int    // bytes the syncer has taken and not yet written
	// writeBehind is how many pending bytes wake the syncer with no one
	// waiting for them (0: any); spaceWaiters counts appenders waiting
	// for buffer space, which wake it whatever is pending.
	writeBehind  int
	spaceWaiters int
	synced       uint64 // last position known durable
	syncWanted   uint64 // highest position a SyncTo caller waits for
	closed       bool
	err          error // the failure, wrapping ErrFailed; permanent
	// held is why records cannot become durable for now while the syncer
	// retries by itself (a full disk: ErrNoSpace; a store that does not
	// take objects: ErrStoreDown), or nil.
	held error
}

func newQueue(log *slog.Logger, m *metrics, name string) queue {
	return queue{log: log, m: m, name: name, pending: new(batch), spare: new(batch)}
}

// init points the conditions at mu; the queue must not move after.
func (q *queue) init() { q.work.L, q.progress.L = &q.mu, &q.mu }

// Tail returns the highest position in the log: the last one assigned by
// an append, or the highest found by Open (over every epoch). It is 0 for
// an empty log.
func (q *queue) Tail() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.assigned
}

// Err returns the failure that stopped the WAL, or nil.
func (q *queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// NoSpace returns, while records cannot become durable for now (the WAL
// waits for disk space, or for a store to take its objects), an error
// wrapping ErrNoSpace or ErrStoreDown and its cause; nil otherwise.
func (q *queue) NoSpace() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}

// enqueue assigns a record covering count positions its first position,
// Tail()+1, and queues it framed; see WAL.AppendPrepared.
func (q *queue) enqueue(c *codec, epoch, gen uint64, count uint32, p *Prepared) (first uint64, err error) {
	if count == 0 {
		return 0, errors.New("wal: append of a record covering no position")
	}
	if p.c != c {
		return 0, errors.New("wal: record prepared by another WAL")
	}
	h := recordHeader{
		Header:    Header{Epoch: epoch, Generation: gen, Count: count, Kind: p.Kind},
		codec:     p.kind,
		rawLength: p.rawLength,
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.waitForSpace(headerSize + len(p.stored)); err != nil {
		return 0, err
	}
	if q.assigned > math.MaxUint64-uint64(count) {
		return 0, errors.New("wal: positions exhausted")
	}
	h.FirstPos = q.assigned + 1
	q.assigned += uint64(count)
	q.pending.data = appendRecord(q.pending.data, h, p.stored)
	q.pending.marks = append(q.pending.marks, mark{end: len(q.pending.data), last: q.assigned})
	q.m.records.Inc()
	if len(q.pending.data) >= q.writeBehind {
		q.work.Signal()
	}
	return h.FirstPos, nil
}

// waitForSpace waits until n more bytes fit under maxUnwritten. A record
// larger than the bound is let through once nothing else is unwritten.
// Callers hold mu.
func (q *queue) waitForSpace(n int) error {
	for {
		if err := q.usable(); err != nil {
			return err
		}
		unwritten := len(q.pending.data) + q.inflight
		if unwritten == 0 || unwritten+n <= maxUnwritten {
			return nil
		}
		q.spaceWaiters++
		q.work.Signal() // what is pending may be below writeBehind
		q.progress.Wait()
		q.spaceWaiters--
	}
}

// usable returns why the WAL cannot take appends, or nil. Callers hold mu.
func (q *queue) usable() error {
	if err := q.callable(); err != nil {
		return err
	}
	return q.held
}

// callable returns why the WAL can take no call at all, or nil. Callers
// hold mu.
func (q *queue) callable() error {
	if q.err != nil {
		return q.err
	}
	if q.closed {
		return ErrClosed
	}
	return nil
}

// SyncTo returns once every record with a position at or below pos is
// durable. Positions beyond Tail() are not waited for. Concurrent callers
// share the syncer's rounds (group commit). After a failure it returns an
// error wrapping ErrFailed and the cause. While the records are held (see
// queue.held), a position not yet durable is answered at once with that
// error: its record is queued and becomes durable once the cause is gone,
// so the caller may not report it lost, only not durable yet.
func (q *queue) SyncTo(pos uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.callable(); err != nil {
		return err
	}
	pos = min(pos, q.assigned)
	for q.synced < pos {
		if q.err != nil {
			return q.err
		}
		if q.held != nil {
			return q.held
		}
		if pos > q.syncWanted {
			q.syncWanted = pos
			q.work.Signal()
		}
		q.progress.Wait()
	}
	return nil
}

// markClosed refuses every later call and wakes the syncer and the
// appenders waiting for space; it reports false if the WAL was closed.
func (q *queue) markClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.closed = true
	q.work.Signal()
	q.progress.Broadcast() // appenders waiting for space give up
	return true
}

// fail puts the WAL in its failed state for good and wakes every waiter.
func (q *queue) fail(cause error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return
	}
	q.err = failed(cause)
	q.log.Error("wal failed; no further appends or syncs", "wal", q.name, "err", cause)
	q.progress.Broadcast()
	q.work.Signal()
}
