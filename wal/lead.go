package wal

import "errors"

// A caller of SyncTo that finds no round running runs one itself, on its
// own goroutine, while the WAL has a lone writer: it takes the pending
// records, writes and syncs them, and returns. Its records then become
// durable without the two wake-ups of a hand-off (the syncer woken to
// write, the caller woken by its fsync), which on a fast disk cost about
// as much as the fsync.
//
// A round that more than one caller waited for makes the WAL grouped, and
// the next round one caller waited for makes it lone again. Grouped, the
// syncer goroutine runs every round, as it always did: each append wakes
// it to write behind, and after each fsync it yields for the callers
// released to append again, then takes all of them in its next round
// without waiting to be woken. Callers running rounds themselves under
// load formed smaller groups, and each round's runner, woken while
// producers kept both cores busy, waited for a core first: ingest with
// 16 producers and an s2 WAL ran 5-10% slower.
//
// Lone, appends wake the syncer only once writeBehind bytes are pending
// (or an appender waits for space), so that a writer appending a batch of
// records before its SyncTo finds the syncer idle rather than writing the
// first of them.

// writeBehind is the local WAL's queue.writeBehind.
const writeBehind = 256 << 10

// SyncTo returns once every record with a position at or below pos is
// durable; see queue.SyncTo for the errors. It runs the round that makes
// them durable itself when no round runs (see above).
func (w *WAL) SyncTo(pos uint64) error {
	if j := w.lead(pos); j != nil {
		w.runLed(j)
	}
	return w.queue.SyncTo(pos)
}

// lead takes a round for the caller if pos is not durable, no round runs
// and the records can be written; nil otherwise.
func (w *WAL) lead(pos uint64) *job {
	w.mu.Lock()
	defer w.mu.Unlock()
	if min(pos, w.assigned) <= w.synced {
		return nil
	}
	w.callers++
	if w.grouped || w.busy || w.handed != nil || w.usable() != nil {
		return nil
	}
	w.busy = true
	return w.takeJob(true, false)
}

// runLed runs a caller's round. A full disk hands it to the syncer, which
// waits for space and finishes it (see complete); any other error fails
// the WAL, as it would on the syncer.
func (w *WAL) runLed(j *job) {
	w.m.callerRounds.Inc()
	err := w.runJob(j)
	if err == nil {
		w.endRound()
		return
	}
	if !errors.Is(err, ErrNoSpace) {
		w.fail(err) // first: the syncer must not take a round after this one
		w.endRound()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy, w.handed = false, j
	w.work.Signal()
}

// endRound ends the running round and wakes the syncer if it has one to
// run now.
func (w *WAL) endRound() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy = false
	if w.syncerWanted() {
		w.work.Signal()
	}
}
