package wal

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/rollwal/rollwal/objstore"
)

// The object WAL's syncer is its one goroutine that creates objects. Each
// round it takes every pending record once someone waits for durability
// (or ObjectSize bytes wait) and creates them as one object, or a few at
// record boundaries; appends meanwhile wait for the next round, so under
// load every object covers a growing group.

// closeGrace is how long Close lets a store call in progress finish before
// cancelling it: a hung store must not hang a shard's close for good.
const closeGrace = 10 * time.Second

func (w *ObjectWAL) runSyncer() {
	defer close(w.syncerDone)
	for {
		b, closing, ok := w.take()
		if !ok {
			return
		}
		if b != nil {
			began, records := time.Now(), len(b.marks)
			if !w.putBatch(b) {
				return
			}
			w.release(b, records, time.Since(began))
		}
		if closing {
			return
		}
	}
}

// take waits for a round's work and takes the pending batch (nil when
// closing with nothing pending). It reports false once the WAL failed.
func (w *ObjectWAL) take() (b *batch, closing, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.closed && !w.due() {
		w.work.Wait()
	}
	w.linger()
	if w.err != nil {
		return nil, false, false
	}
	if len(w.pending.data) == 0 {
		return nil, w.closed, true
	}
	b = w.pending
	w.pending = w.spare
	if w.pending == nil {
		w.pending = new(batch)
	}
	w.spare = nil
	w.inflight = len(b.data)
	return b, w.closed, true
}

// linger holds a round that has fewer records than the last one for up
// to a quarter of the last round's create, until as many are pending.
// Without it, producers settle into alternating groups: those the last
// create acknowledged append again just after the syncer took the few
// that came in meanwhile, and each waits through two creates. Callers
// hold mu.
func (w *ObjectWAL) linger() {
	if w.closed || w.err != nil || len(w.pending.marks) >= w.lastRecords || w.pending.size() >= w.opts.ObjectSize {
		return
	}
	deadline := time.Now().Add(w.lastCreate / 4)
	t := time.AfterFunc(w.lastCreate/4, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.work.Broadcast()
	})
	defer t.Stop()
	for !w.closed && w.err == nil && len(w.pending.marks) < w.lastRecords &&
		w.pending.size() < w.opts.ObjectSize && time.Now().Before(deadline) {
		w.work.Wait()
	}
}

// due reports whether pending records should become an object now.
func (w *ObjectWAL) due() bool {
	return len(w.pending.data) > 0 && (w.syncWanted > w.synced || len(w.pending.data) >= w.opts.ObjectSize)
}

// release hands a written batch back for reuse.
func (w *ObjectWAL) release(b *batch, records int, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastRecords, w.lastCreate = records, took
	w.inflight = 0
	b.reset()
	if w.spare == nil && cap(b.data) <= maxSpare {
		w.spare = b
	}
	w.progress.Broadcast()
}

// putBatch creates b's records as objects of at most ObjectSize bytes
// each, in position order. It reports false if the WAL failed.
func (w *ObjectWAL) putBatch(b *batch) bool {
	start := 0
	for k := 0; k < len(b.marks); {
		end := k
		for end+1 < len(b.marks) && b.marks[end+1].end-start <= w.opts.ObjectSize {
			end++
		}
		data := b.data[start:b.marks[end].end]
		if !w.put(data, b.marks[end].last) {
			return false
		}
		start, k = b.marks[end].end, end+1
	}
	return true
}

// put creates one object of records ending at position last, retrying
// while the store does not take it. It reports false if the WAL failed.
func (w *ObjectWAL) put(data []byte, last uint64) bool {
	first := decodeHeader(data).FirstPos
	name := w.opts.Prefix + objectName(w.opts.Epoch, first, last)
	for attempt := 0; ; attempt++ {
		began := time.Now()
		err := w.opts.Store.Create(w.ctx, name, bytes.NewReader(data), int64(len(data)))
		if err == nil {
			w.m.fsyncDuration.Observe(time.Since(began).Seconds())
			w.m.bytesWritten.Add(float64(len(data)))
			w.m.syncs.Inc()
			w.durable(last)
			return true
		}
		if errors.Is(err, objstore.ErrExists) && attempt > 0 && w.ownObject(name, data) {
			// An earlier attempt landed after all (its answer was lost).
			err = nil
			w.durable(last)
			return true
		}
		if errors.Is(err, objstore.ErrExists) || errors.Is(err, objstore.ErrInvalidName) {
			// Another object under this epoch's name: two writers of one
			// epoch, which the claim rules out. Nothing can be trusted.
			w.fail(fmt.Errorf("create WAL object %s (positions %d-%d): %w", name, first, last, err))
			return false
		}
		w.storeDown(fmt.Errorf("%w: create WAL object %s (positions %d-%d): %w", ErrStoreDown, name, first, last, err))
		if !w.awaitRetry(w.backoff(attempt)) {
			w.fail(fmt.Errorf("closed while the store did not take WAL object %s: positions %d-%d were never durable: %w",
				name, first, last, err))
			return false
		}
	}
}

// durable records that every position up to last is in the store.
func (w *ObjectWAL) durable(last uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.synced = last
	if w.held != nil {
		w.log.Info("the store takes WAL objects again", "was", w.held)
		w.held = nil
	}
	w.progress.Broadcast()
}

func (w *ObjectWAL) storeDown(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held == nil {
		w.m.noSpace.Inc()
		w.log.Warn("the store does not take a WAL object; appends are refused while the WAL retries", "err", err)
	}
	w.held = err
	w.progress.Broadcast()
}

func (w *ObjectWAL) backoff(attempt int) time.Duration {
	return w.opts.RetryBackoff << min(attempt, 5)
}

// awaitRetry waits d, or less once Close was called; it reports false if
// the WAL was closed.
func (w *ObjectWAL) awaitRetry(d time.Duration) bool {
	t := time.AfterFunc(d, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.work.Broadcast()
	})
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	deadline := time.Now().Add(d)
	for !w.closed && time.Now().Before(deadline) {
		w.work.Wait()
	}
	return !w.closed
}

// ownObject reports whether object name holds exactly data: an earlier
// create of this WAL whose answer was lost.
func (w *ObjectWAL) ownObject(name string, data []byte) bool {
	got, err := readObject(w.ctx, w.opts.Store, name)
	return err == nil && bytes.Equal(got, data)
}

func (b *batch) size() int { return len(b.data) }
