package wal

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// The syncer is the one goroutine that writes and syncs segment files.
// Each round it takes every pending record, writes them (rolling segments
// between records as needed) and, if anyone waits in SyncTo, issues one
// fsync that covers them all. Records appended while it writes or syncs
// wait for the next round, so under load every fsync covers a growing
// group: that is the group commit.

// maxSpare is the largest batch buffer kept for reuse; a larger one (left
// by a huge record) goes back to the garbage collector.
const maxSpare = 2 * maxUnwritten

// job is one round of the syncer.
type job struct {
	b       *batch
	next    int  // the first of b's records not yet written
	sync    bool // someone waits for durability (or Close does)
	closing bool // the last round
	synced  bool // the round ended with an fsync
}

// The wait between attempts to write while the disk is full.
const (
	minSpaceRetry = 10 * time.Millisecond
	maxSpaceRetry = time.Second
)

func (w *WAL) runSyncer() {
	defer close(w.syncerDone)
	defer w.closeFile()
	for {
		j, ok := w.nextJob()
		if !ok {
			return
		}
		w.m.syncerRounds.Inc()
		if !w.complete(j) || j.closing {
			return
		}
		w.endRound()
		if j.synced {
			// The fsync just released its waiters; let them run and
			// append their next records before the next round starts,
			// so that it covers all of them rather than the first few.
			runtime.Gosched()
		}
	}
}

// nextJob waits for work and takes the pending batch. It reports false
// once the WAL has failed: from then on nothing is written or synced.
func (w *WAL) nextJob() (*job, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.syncerWanted() {
		w.work.Wait()
	}
	if w.err != nil {
		return nil, false
	}
	w.busy = true
	if j := w.handed; j != nil {
		w.handed = nil
		return j, true
	}
	return w.takeJob(w.syncWanted > w.synced || w.closed, w.closed), true
}

// syncerWanted reports whether the syncer has a round to run: none runs,
// and a caller's round left it one to finish, records wait for a sync or
// for space, enough are pending to write behind, or Close came. Callers
// hold mu.
func (w *WAL) syncerWanted() bool {
	if w.busy {
		return false
	}
	n := len(w.pending.data)
	return w.handed != nil || w.closed || w.syncWanted > w.synced ||
		n >= w.writeBehind || (n > 0 && w.spaceWaiters > 0)
}

// takeJob takes the pending batch as a round's, and makes the WAL
// grouped or lone by the callers that asked for a round since the last
// (lead.go). Callers hold mu.
//
// Every round decides, those no caller asked for (written behind, or
// syncing for callers counted then) too: they make the WAL lone. Keeping
// the mode through them, or grouping by callers that found a round
// running, made wal.BenchmarkWALAppend's groups of 16 writers smaller (8.8
// and 10.5-11.4 rows per fsync against 13.0-14.5 and 14.8-14.9 before the
// lone path).
func (w *WAL) takeJob(sync, closing bool) *job {
	w.grouped, w.callers = w.callers > 1, 0
	w.writeBehind = writeBehind
	if w.grouped {
		w.writeBehind = 0
	}
	j := &job{b: w.pending, sync: sync, closing: closing}
	w.pending = w.spare
	if w.pending == nil {
		w.pending = new(batch)
	}
	w.spare = nil
	w.inflight = len(j.b.data)
	return j
}

// complete runs j. While the disk is full it waits and tries again from the
// first record not written, for as long as it takes, or until Close: a
// full disk then, like any other failure, fails the WAL, and complete
// reports false.
func (w *WAL) complete(j *job) bool {
	backoff := minSpaceRetry
	for {
		closing := w.isClosed()
		err := w.runJob(j)
		if err == nil {
			w.spaceBack()
			return true
		}
		if errors.Is(err, ErrNoSpace) && !closing {
			err = w.syncWritten(err)
		}
		if !errors.Is(err, ErrNoSpace) || closing {
			w.fail(err)
			return false
		}
		w.outOfSpace(err)
		w.awaitRetry(backoff)
		backoff = min(2*backoff, maxSpaceRetry)
	}
}

func (w *WAL) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// syncWritten syncs what was written to the active segment before the disk
// filled, so that only the records not written wait for space. It returns
// cause when the sync succeeds (or nothing needs one), the sync's error,
// which is final, otherwise.
func (w *WAL) syncWritten(cause error) error {
	w.mu.Lock()
	needSync := w.file != nil && w.written > w.synced
	covered := w.written
	w.mu.Unlock()
	if needSync {
		if err := w.syncFile(); err != nil {
			return err
		}
	}
	w.mu.Lock()
	w.synced = max(w.synced, covered)
	w.progress.Broadcast()
	w.mu.Unlock()
	return cause
}

// outOfSpace makes the WAL refuse appends while the syncer waits for
// space, and answers the SyncTo callers waiting.
func (w *WAL) outOfSpace(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held == nil {
		w.m.noSpace.Inc()
		w.log.Warn("wal out of disk space; appends are refused until the queued records are written", "dir", w.dir, "err", err)
	}
	w.held = err
	w.progress.Broadcast()
}

// spaceBack ends a wait for space.
func (w *WAL) spaceBack() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held != nil {
		w.held = nil
		w.log.Info("wal has disk space again; appends resume", "dir", w.dir)
		w.progress.Broadcast()
	}
}

// awaitRetry waits d, or less if Close comes first.
func (w *WAL) awaitRetry(d time.Duration) {
	t := time.AfterFunc(d, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.retry = true
		w.work.Signal()
	})
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.retry && !w.closed {
		w.work.Wait()
	}
	w.retry = false
}

// runJob writes the job's records and syncs them if asked.
func (w *WAL) runJob(j *job) error {
	if len(j.b.data) > 0 {
		// A round that only syncs keeps the last writing round's size.
		w.bigRound = len(j.b.data) >= bigRound
	}
	if err := w.writeBatch(j); err != nil {
		return err
	}
	w.mu.Lock()
	covered := w.written
	needSync := j.sync && covered > w.synced
	w.mu.Unlock()
	if needSync {
		if err := w.syncFile(); err != nil {
			return err
		}
	}
	w.finishJob(j.b, needSync, covered)
	j.synced = needSync
	if j.closing {
		return w.cutRecycled()
	}
	return w.fillAhead()
}

// finishJob publishes a round's progress and recycles its batch.
func (w *WAL) finishJob(b *batch, synced bool, covered uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if synced {
		w.synced = max(w.synced, covered)
	}
	w.inflight = 0
	if cap(b.data) <= maxSpare {
		b.reset()
		w.spare = b
	}
	w.progress.Broadcast()
}

// writeBatch writes j's records from j.next on to the active segment,
// rolling to a new segment before a record that would take the active one
// past SegmentSize, or first thing when a roll could not create the next
// one. Records are never split, and consecutive records bound for one
// segment go out in one write.
func (w *WAL) writeBatch(j *job) error {
	b, from := j.b, j.next
	for i := j.next; i < len(b.marks); i++ {
		if w.file == nil || w.needsRoll(b.start(i)-b.start(from), b.start(i+1)-b.start(i)) {
			if err := w.writeRecords(j, i); err != nil {
				return err
			}
			if err := w.roll(); err != nil {
				return err
			}
			from = i
		}
	}
	return w.writeRecords(j, len(b.marks))
}

// start is the data offset of record i.
func (b *batch) start(i int) int64 {
	if i == 0 {
		return 0
	}
	return int64(b.marks[i-1].end)
}

// needsRoll reports whether a record of recSize bytes must go to a new
// segment, given unwritten bytes already bound for the active one.
func (w *WAL) needsRoll(unwritten, recSize int64) bool {
	used := w.fileSize + unwritten
	return used > 0 && used+recSize > w.opts.SegmentSize
}

// writeRecords writes j's records from j.next up to k in one write, within
// space reserved first, and publishes the new end of the active segment. A
// full disk that left the file as it was is ErrNoSpace, to retry. The
// first records written to a recycled spare are synced and give the file
// its segment's name (nameRecycled) before they count as written.
func (w *WAL) writeRecords(j *job, k int) error {
	b := j.b
	if k <= j.next {
		return nil
	}
	data := b.data[b.start(j.next):b.start(k)]
	if err := w.reserve(int64(len(data))); err != nil {
		return err
	}
	// At the end of data, not of the file: a zero-filled step lies past it.
	n, err := w.file.WriteAt(data, w.fileSize)
	w.fileSize += int64(n)
	w.allocated = max(w.allocated, w.fileSize)
	w.m.bytesWritten.Add(float64(n))
	if err != nil {
		err = fmt.Errorf("write %s: %w", w.active.name, err)
		if n == 0 && errors.Is(err, syscall.ENOSPC) {
			return noSpace(err)
		}
		return err
	}
	named := w.recycling != ""
	if named {
		if err := w.nameRecycled(); err != nil {
			return err
		}
	}
	first, last := decodeHeader(data).FirstPos, b.marks[k-1].last
	j.next = k

	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.active.holds() {
		w.active.first = first
	}
	w.active.last, w.active.size = last, w.fileSize
	w.written = last
	if named { // nameRecycled synced everything written
		w.synced = max(w.synced, last)
		w.progress.Broadcast()
	}
	return nil
}

// reserve makes the n bytes about to be written fall within the active
// segment's reserved space, reserving up to the next step boundary (never
// past SegmentSize, unless one record is larger) if they do not. A full
// disk shows here, before a byte of the records is written.
func (w *WAL) reserve(n int64) error {
	end := w.fileSize + n
	if w.opts.Preallocate < 0 || end <= w.allocated {
		return nil
	}
	step := w.opts.Preallocate
	target := min((end+step-1)/step*step, max(w.opts.SegmentSize, end))
	if err := w.extend(w.file, target, w.reserveMode()); err != nil {
		return preallocError(w.active.name, err)
	}
	w.aheadFull = false
	return nil
}

// bigRound is the size of a round of records from which the syncer
// reserves space by fallocate even with ZeroFill, and fills nothing ahead:
// zeros written to be overwritten at once cost a second write of every
// byte, while the size change an fsync then commits is small beside the
// round's own data. Smaller rounds are where zeros pay: their fsyncs are
// short, and a size change a large part of them.
const bigRound = 256 << 10

// reserveMode is how reserve takes space for the round being written.
func (w *WAL) reserveMode() Preallocation {
	if w.bigRound {
		return Fallocate
	}
	return w.opts.PreallocateMode
}

// extend reserves f's space from w.allocated up to end, as mode says.
// Zeros are not synced here: the sync that makes the records durable
// covers them, and commits the file's size once for the step.
func (w *WAL) extend(f vfs.File, end int64, mode Preallocation) error {
	if mode == Fallocate {
		if err := f.Preallocate(w.allocated, end-w.allocated); err != nil {
			return err
		}
		w.allocated = end
		return nil
	}
	n, err := writeZeros(f, w.allocated, end)
	// Zeros written are the end of data whatever failed after them, and
	// the records may use them.
	w.allocated += n
	return err
}

// zeroBlock is the source of the zeros a step is filled with.
var zeroBlock [256 << 10]byte

// writeZeros writes zeros to f over [off, end) and returns how many it
// wrote.
func writeZeros(f vfs.File, off, end int64) (int64, error) {
	start := off
	for off < end {
		n, err := f.WriteAt(zeroBlock[:min(end-off, int64(len(zeroBlock)))], off)
		off += int64(n)
		if err != nil {
			return off - start, err
		}
	}
	return off - start, nil
}

// fillAhead zero-fills the active segment's next step and syncs it once
// less than half a step is left, so that appends find the space ready and
// their fsyncs commit no size change. The syncer calls it between rounds:
// only the records appended meanwhile wait for it, and the next round
// takes them all. A full disk is not reported here: the write that needs
// the space meets it in reserve, where it is retried (see ErrNoSpace); an
// attempt waits until then.
func (w *WAL) fillAhead() error {
	step := w.opts.Preallocate
	if w.opts.PreallocateMode != ZeroFill || step <= 0 || w.file == nil || w.aheadFull || w.bigRound ||
		w.allocated >= w.opts.SegmentSize || w.allocated-w.fileSize >= step/2 {
		return nil
	}
	target := min((w.allocated/step+1)*step, w.opts.SegmentSize)
	if err := w.extend(w.file, target, ZeroFill); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			w.aheadFull = true
			return nil
		}
		return fmt.Errorf("zero-fill %s: %w", w.active.name, err)
	}
	return w.syncActive()
}

// firstStep is the space a new segment reserves at once.
func (w *WAL) firstStep() int64 {
	if w.opts.Preallocate < 0 {
		return 0
	}
	return min(w.opts.Preallocate, w.opts.SegmentSize)
}

// preallocError names a failed reservation; ENOSPC is ErrNoSpace: nothing
// was written.
func preallocError(name string, err error) error {
	err = fmt.Errorf("preallocate %s: %w", name, err)
	if errors.Is(err, syscall.ENOSPC) {
		return noSpace(err)
	}
	return err
}

// syncFile fsyncs the active segment. Its error is final: it is never
// retried, because a failed fsync may have dropped the dirty pages it was
// meant to persist while a second attempt would report success.
func (w *WAL) syncFile() error {
	start := time.Now()
	err := w.file.Sync()
	w.m.fsyncDuration.Observe(time.Since(start).Seconds())
	w.m.syncs.Inc()
	if err != nil {
		return fmt.Errorf("sync %s: %w", w.active.name, err)
	}
	return nil
}

// roll seals the active segment, unless a roll that could not create the
// next one sealed it already, and starts the next one over a spare, or
// creates it when no spare is left.
func (w *WAL) roll() error {
	if w.file != nil {
		if err := w.seal(); err != nil {
			return err
		}
	}
	index := w.active.index + 1
	if err := w.checkNewSegment(index); err != nil {
		return err
	}
	seg, f, err := w.recycle(index)
	if err == nil && f == nil {
		seg, f, err = w.createSegment(index)
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.segments = append(w.segments, seg)
	w.active = seg
	w.mu.Unlock()
	w.file, w.fileSize = f, 0
	return nil
}

// syncActive syncs the active segment and publishes that everything
// written to it is durable.
func (w *WAL) syncActive() error {
	w.mu.Lock()
	covered := w.written
	w.mu.Unlock()
	if err := w.syncFile(); err != nil {
		return err
	}
	w.mu.Lock()
	w.synced = max(w.synced, covered)
	w.progress.Broadcast()
	w.mu.Unlock()
	return nil
}

// seal syncs and closes the active segment, so that every segment but the
// last of an epoch is complete on disk: Open relies on it to tell damage
// from a torn tail. A recycled segment is cut to its records first, so
// that no sealed segment holds a spare's older records: Open walks sealed
// segments by their headers, which takes bytes after the records for
// damage.
func (w *WAL) seal() error {
	if w.recycled {
		if err := w.file.Truncate(w.fileSize); err != nil {
			return fmt.Errorf("truncate %s: %w", w.active.name, err)
		}
		w.recycled = false
	}
	if err := w.syncActive(); err != nil {
		return err
	}
	if err := w.file.Close(); err != nil {
		return fmt.Errorf("close %s: %w", w.active.name, err)
	}
	w.file = nil
	return nil
}

// cutRecycled cuts the active segment, if written over a spare, to its
// records and syncs it, as seal does: a clean Close leaves no spare's rest,
// which the next Open could not tell from a torn tail. A recycled file
// that holds no record yet has no name to keep: the next Open deletes it.
func (w *WAL) cutRecycled() error {
	if !w.recycled || w.recycling != "" {
		return nil
	}
	if err := w.file.Truncate(w.fileSize); err != nil {
		return fmt.Errorf("truncate %s: %w", w.active.name, err)
	}
	w.recycled = false
	return w.syncFile()
}

// checkNewSegment checks that segment index of this epoch may be started.
// Creating or renaming onto an existing segment would destroy it: one
// that exists belongs to another writer of this epoch (a claim race lost
// without knowing it), whose acknowledged records must never be cut.
func (w *WAL) checkNewSegment(index uint64) error {
	if index > maxSegmentIndex {
		return fmt.Errorf("wal: epoch %d has used all %d segment indexes", w.opts.Epoch, maxSegmentIndex)
	}
	name := segmentName(w.opts.Epoch, index)
	if _, err := w.fs.Stat(w.path(name)); err == nil {
		return fmt.Errorf("create segment: %s already exists: another writer holds epoch %d", name, w.opts.Epoch)
	}
	return nil
}

// createSegment creates the segment of Options.Epoch with the given index,
// reserves its first step (and syncs it, when zero-filled) and syncs the
// directory, so that the new file's
// entry is durable before any record in it is reported durable. A full
// disk (at the create or the reservation) is ErrNoSpace and leaves no
// file behind, so that a retry creates it again.
func (w *WAL) createSegment(index uint64) (*segment, vfs.File, error) {
	// Create truncates: see checkNewSegment.
	if err := w.checkNewSegment(index); err != nil {
		return nil, nil, err
	}
	name := segmentName(w.opts.Epoch, index)
	path := w.path(name)
	f, err := w.fs.Create(path)
	if err != nil {
		err = fmt.Errorf("create segment: %w", err)
		if errors.Is(err, syscall.ENOSPC) {
			err = noSpace(err)
		}
		return nil, nil, err
	}
	if err := w.reserveFirst(f); err != nil {
		return nil, nil, w.abandon(f, path, preallocError(name, err))
	}
	// Zeros are synced with the segment, so that the first appends'
	// fsyncs commit no size change either. A failed fsync is final, as
	// everywhere.
	if w.opts.PreallocateMode == ZeroFill && w.allocated > 0 {
		if err := f.Sync(); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("sync %s: %w", name, err), f.Close())
		}
	}
	if err := vfs.SyncDir(w.fs, w.dir); err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	return &segment{epoch: w.opts.Epoch, index: index, name: name}, f, nil
}

// reserveFirst reserves a new segment's first step; the active
// segment's reservation starts over with it.
func (w *WAL) reserveFirst(f vfs.File) error {
	w.allocated, w.aheadFull = 0, false
	if n := w.firstStep(); n > 0 {
		return w.extend(f, n, w.opts.PreallocateMode)
	}
	return nil
}

// abandon closes and removes a new segment that could not reserve space:
// it is empty and ours, and the retry would take it for another writer's.
// If it cannot be removed, the failure is no longer one to retry.
func (w *WAL) abandon(f vfs.File, path string, err error) error {
	cerr, rerr := f.Close(), w.fs.Remove(path)
	if rerr != nil {
		return fmt.Errorf("%v; and removing the new segment failed: %w", err, errors.Join(rerr, cerr))
	}
	return err
}

// closeFile closes the active segment when the syncer stops.
func (w *WAL) closeFile() {
	if w.file == nil {
		return
	}
	if err := w.file.Close(); err != nil {
		w.fail(fmt.Errorf("close %s: %w", w.active.name, err))
	}
	w.file = nil
}
