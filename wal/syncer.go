package wal

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rollwal/rollwal/internal/vfs"
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
	sync    bool // someone waits for durability (or Close does)
	closing bool // the last round
}

func (w *WAL) runSyncer() {
	defer close(w.syncerDone)
	defer w.closeFile()
	for {
		j, ok := w.nextJob()
		if !ok {
			return
		}
		if err := w.runJob(j); err != nil {
			w.fail(err)
			return
		}
		if j.closing {
			return
		}
	}
}

// nextJob waits for work and takes the pending batch. It reports false
// once the WAL has failed: from then on nothing is written or synced.
func (w *WAL) nextJob() (job, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.closed && len(w.pending.data) == 0 && w.syncWanted <= w.synced {
		w.work.Wait()
	}
	if w.err != nil {
		return job{}, false
	}
	j := job{b: w.pending, sync: w.syncWanted > w.synced || w.closed, closing: w.closed}
	w.pending = w.spare
	if w.pending == nil {
		w.pending = new(batch)
	}
	w.spare = nil
	w.inflight = len(j.b.data)
	return j, true
}

// runJob writes the job's records and syncs them if asked.
func (w *WAL) runJob(j job) error {
	if err := w.writeBatch(j.b); err != nil {
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
	if needSync {
		// The fsync just released its waiters; let them run and append
		// their next records before the next round starts, so that it
		// covers all of them rather than the first few.
		runtime.Gosched()
	}
	return nil
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

// writeBatch writes b's records to the active segment, rolling to a new
// segment before a record that would take the active one past
// SegmentSize. Records are never split, and consecutive records bound for
// one segment go out in one write.
func (w *WAL) writeBatch(b *batch) error {
	groupStart, recStart := 0, 0
	for i, m := range b.marks {
		if w.needsRoll(int64(recStart-groupStart), int64(m.end-recStart)) {
			if err := w.writeGroup(b, groupStart, i); err != nil {
				return err
			}
			if err := w.roll(); err != nil {
				return err
			}
			groupStart = recStart
		}
		recStart = m.end
	}
	return w.writeGroup(b, groupStart, len(b.marks))
}

// needsRoll reports whether a record of recSize bytes must go to a new
// segment, given unwritten bytes already bound for the active one.
func (w *WAL) needsRoll(unwritten, recSize int64) bool {
	used := w.fileSize + unwritten
	return used > 0 && used+recSize > w.opts.SegmentSize
}

// writeGroup writes the bytes of b's records [i, j) from data offset
// start, and publishes the new end of the active segment.
func (w *WAL) writeGroup(b *batch, start, j int) error {
	if j == 0 || b.marks[j-1].end <= start {
		return nil
	}
	end := b.marks[j-1].end
	n, err := w.file.Write(b.data[start:end])
	w.fileSize += int64(n)
	w.m.bytesWritten.Add(float64(n))
	if err != nil {
		return fmt.Errorf("write %s: %w", w.active.name, err)
	}
	first := decodeHeader(b.data[start:]).FirstPos
	last := b.marks[j-1].last

	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.active.holds() {
		w.active.first = first
	}
	w.active.last, w.active.size = last, w.fileSize
	w.written = last
	return nil
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

// roll seals the active segment and starts the next one. The sealed
// segment is synced first, so that every segment but the last of an epoch
// is complete on disk: Open relies on it to tell damage from a torn tail.
func (w *WAL) roll() error {
	if err := w.syncFile(); err != nil {
		return err
	}
	w.mu.Lock()
	w.synced = max(w.synced, w.written)
	w.progress.Broadcast()
	w.mu.Unlock()
	if err := w.file.Close(); err != nil {
		return fmt.Errorf("close %s: %w", w.active.name, err)
	}
	w.file = nil
	seg, f, err := w.createSegment(w.active.index + 1)
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

// createSegment creates the segment of Options.Epoch with the given index,
// preallocates it and syncs the directory, so that the new file's entry is
// durable before any record in it is reported durable.
func (w *WAL) createSegment(index uint64) (*segment, vfs.File, error) {
	if index > maxSegmentIndex {
		return nil, nil, fmt.Errorf("wal: epoch %d has used all %d segment indexes", w.opts.Epoch, maxSegmentIndex)
	}
	name := segmentName(w.opts.Epoch, index)
	// Create truncates: a segment that exists belongs to another writer of
	// this epoch (a claim race lost without knowing it), whose acknowledged
	// records must never be cut.
	if _, err := w.fs.Stat(filepath.Join(w.dir, name)); err == nil {
		return nil, nil, fmt.Errorf("create segment: %s already exists: another writer holds epoch %d", name, w.opts.Epoch)
	}
	f, err := w.fs.Create(filepath.Join(w.dir, name))
	if err != nil {
		return nil, nil, fmt.Errorf("create segment: %w", err)
	}
	if err := w.prepareSegment(f); err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	return &segment{epoch: w.opts.Epoch, index: index, name: name}, f, nil
}

func (w *WAL) prepareSegment(f vfs.File) error {
	if w.opts.Preallocate {
		if err := f.Preallocate(0, w.opts.SegmentSize); err != nil {
			return fmt.Errorf("preallocate segment: %w", err)
		}
	}
	return vfs.SyncDir(w.fs, w.dir)
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
