package wal

import (
	"errors"
	"fmt"
	"path/filepath"
)

// recover scans every segment (sealed ones by their headers), epoch by
// epoch, checks that each epoch's positions are dense, repairs the torn tail of this epoch's last segment
// and sets the tail. The last segment of every other epoch is left as it
// is (see recoverSegment). On return every record found is durable: each
// epoch's last segment (the only one that can hold unsynced bytes, since a
// roll syncs the segment it seals) has been synced.
func (w *WAL) recover(segs []*segment) error {
	var next uint64 // the position the epoch's next record must start at; 0: any
	for i, s := range segs {
		if i > 0 && segs[i-1].epoch != s.epoch {
			next = 0
		}
		lastOfEpoch := i == len(segs)-1 || segs[i+1].epoch != s.epoch
		w.log.Debug("wal: scanning segment", "segment", s.name, "n", i+1, "total", len(segs))
		if err := w.recoverSegment(s, next, lastOfEpoch); err != nil {
			return err
		}
		if s.holds() {
			next = s.last + 1
		}
		w.assigned = max(w.assigned, s.last)
	}
	w.written, w.synced = w.assigned, w.assigned
	return nil
}

// recoverSegment scans one segment, whose first record must start at
// position next unless next is 0.
//
// Only this epoch's own last segment is repaired: this epoch reopens only
// after a crash of its own, so nothing else writes to it. The last segment
// of another epoch may belong to a zombie that is still appending to it:
// cutting a record it is in the middle of writing would leave a hole once
// it writes on at its own offset. So that file is never modified; a torn
// tail, or a hole an older build's truncation left, is the end of its data
// for now, and is logged.
func (w *WAL) recoverSegment(s *segment, next uint64, lastOfEpoch bool) error {
	res, size, err := w.scanFile(s, next, !lastOfEpoch)
	if err != nil {
		return err
	}
	s.size = res.end
	own := s.epoch == w.opts.Epoch && !w.readOnly
	switch {
	case res.hole && (own || !lastOfEpoch):
		return &CorruptionError{Segment: s.name, Offset: res.end, Err: res.why}
	case res.torn && !lastOfEpoch:
		return &CorruptionError{Segment: s.name, Offset: res.end,
			Err: fmt.Errorf("torn record in a segment that is not the last of epoch %d: %w", s.epoch, res.why)}
	case res.stale && !lastOfEpoch:
		// Sealing a segment written over a spare cuts the spare's rest.
		return &CorruptionError{Segment: s.name, Offset: res.end,
			Err: fmt.Errorf("older records after the records of a segment that is not the last of epoch %d: %w", s.epoch, res.why)}
	case !lastOfEpoch:
		return nil
	case own:
		w.logCut(s, res, size)
		return w.truncateAndSync(s, size)
	}
	s.growing = true
	switch {
	case res.hole:
		w.log.Warn("wal: another epoch's segment has a hole of zeros; its records end there, the file is left as is",
			"segment", s.name, "offset", res.end, "ignored_bytes", size-res.end, "reason", res.why)
	case res.torn:
		w.log.Warn("wal: another epoch's segment ends in a torn record, perhaps a zombie's write in progress; its records end there, the file is left as is",
			"segment", s.name, "offset", res.end, "ignored_bytes", size-res.end, "reason", res.why)
	case res.stale:
		w.log.Info("wal: another epoch's segment was written over a spare; its records end where the spare's older ones start, the file is left as is",
			"segment", s.name, "offset", res.end, "ignored_bytes", size-res.end)
	}
	return w.syncSegment(s)
}

// scanFile scans segment s, recording its position range and checking
// that records continue from next (when non-zero) without gaps. A sealed
// segment is walked by its headers (walkSealed) and scanned in full only
// when the walk finds something amiss, so that damage is judged as in any
// other segment. It returns the scan result and the file's size.
func (w *WAL) scanFile(s *segment, next uint64, sealed bool) (scanResult, int64, error) {
	f, err := w.fs.Open(filepath.Join(w.dir, s.name))
	if err != nil {
		return scanResult{}, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return scanResult{}, 0, err
	}
	if sealed {
		walked := *s
		end, ok, err := walkSealed(f, info.Size(), s.epoch, positionCheck(&walked, next))
		if err != nil || ok {
			*s = walked
			return scanResult{end: end}, info.Size(), err
		}
	}
	res, err := scanSegment(f, info.Size(), s.name, s.epoch, positionCheck(s, next))
	return res, info.Size(), err
}

// positionCheck returns a visit for a scan of s that records its position
// range and refuses a record that does not continue from next (when
// non-zero).
func positionCheck(s *segment, next uint64) func(h recordHeader, off int64) error {
	return func(h recordHeader, off int64) error {
		if next != 0 && h.FirstPos != next {
			return &CorruptionError{Segment: s.name, Offset: off,
				Err: fmt.Errorf("%w: record of epoch %d starts at position %d, expected %d", errGap, s.epoch, h.FirstPos, next)}
		}
		if !s.holds() {
			s.first = h.FirstPos
		}
		s.last = h.lastPos()
		next = s.last + 1
		return nil
	}
}

// truncateAndSync cuts the segment to its valid records, when something
// follows them, and syncs it so that everything Open reports is durable.
func (w *WAL) truncateAndSync(s *segment, size int64) (err error) {
	f, err := w.fs.OpenReadWrite(filepath.Join(w.dir, s.name))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	if s.size < size {
		if err := f.Truncate(s.size); err != nil {
			return fmt.Errorf("truncate %s: %w", s.name, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", s.name, err)
	}
	return nil
}

// logCut reports what truncateAndSync is about to cut from this epoch's
// last segment: a torn record is a crash's leftover, worth a warning; a
// spare's rest is what every recycled segment holds until it is sealed.
func (w *WAL) logCut(s *segment, res scanResult, size int64) {
	switch {
	case res.torn:
		w.log.Warn("wal: truncating torn tail", "segment", s.name, "offset", res.end,
			"dropped_bytes", size-res.end, "reason", res.why)
	case res.stale:
		w.log.Info("wal: cutting the rest of the spare a segment was written over", "segment", s.name,
			"offset", res.end, "dropped_bytes", size-res.end, "reason", res.why)
	}
}

// syncSegment syncs another epoch's segment through a read-only handle,
// so that the records Open reports are durable without writing to a file
// that is not this epoch's.
func (w *WAL) syncSegment(s *segment) (err error) {
	f, err := w.fs.Open(filepath.Join(w.dir, s.name))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", s.name, err)
	}
	return nil
}
