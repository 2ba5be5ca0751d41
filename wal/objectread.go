package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rollwal/rollwal/objstore"
)

// objectName is a WAL object's name below the prefix; see ObjectWAL.
func objectName(epoch, first, last uint64) string {
	return fmt.Sprintf("%020d-%020d-%020d%s", epoch, first, last, objectSuffix)
}

// objectRef is a listed WAL object.
type objectRef struct {
	name               string // full object name
	epoch, first, last uint64
	size               int64
}

// parseObjectName parses a name below the prefix; ok is false for a name
// that is not a WAL object's.
func parseObjectName(name string) (epoch, first, last uint64, ok bool) {
	base, found := strings.CutSuffix(name, objectSuffix)
	parts := strings.Split(base, "-")
	if !found || len(parts) != 3 {
		return 0, 0, 0, false
	}
	var nums [3]uint64
	for i, p := range parts {
		if len(p) != 20 {
			return 0, 0, 0, false
		}
		if nums[i], ok = parseDigits(p); !ok {
			return 0, 0, 0, false
		}
	}
	return nums[0], nums[1], nums[2], true
}

// listObjects lists the WAL objects under prefix, by epoch then first
// position. Other names are left alone; a WAL name whose numbers cannot
// be a writer's is damage, refused.
func listObjects(ctx context.Context, store objstore.Store, prefix string) ([]objectRef, error) {
	infos, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var objs []objectRef
	for _, in := range infos {
		epoch, first, last, ok := parseObjectName(strings.TrimPrefix(in.Name, prefix))
		if !ok || strings.Contains(strings.TrimPrefix(in.Name, prefix), "/") {
			continue
		}
		if epoch == 0 || first == 0 || last < first || in.Size < headerSize {
			return nil, &CorruptionError{Segment: in.Name, Err: fmt.Errorf("%w: object name or size (%d bytes) impossible for a writer", errInvalid, in.Size)}
		}
		objs = append(objs, objectRef{name: in.Name, epoch: epoch, first: first, last: last, size: in.Size})
	}
	slices.SortFunc(objs, func(a, b objectRef) int {
		if a.epoch != b.epoch {
			return cmpUint(a.epoch, b.epoch)
		}
		return cmpUint(a.first, b.first)
	})
	return objs, nil
}

// Replay calls fn with every record, of any epoch, whose positions
// intersect (from, to], in the order and on the terms of WAL.Replay; the
// objects are those listed when it starts. An object's records must be
// whole, of its epoch, dense and exactly its name's positions, and one
// epoch's objects in the range must follow each other: an object is
// created whole or not at all, so anything else is damage (ErrCorruption).
func (w *ObjectWAL) Replay(from, to uint64, fn func(h Header, payload []byte) error) (err error) {
	if from >= to {
		return nil
	}
	w.mu.Lock()
	need, closed := min(to, w.assigned), w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := w.SyncTo(need); err != nil {
		return err
	}
	objs, err := listObjects(w.ctx, w.opts.Store, w.opts.Prefix)
	if err != nil {
		return fmt.Errorf("wal: replay: list %s%s: %w", w.opts.Store, w.opts.Prefix, err)
	}
	objs = slices.DeleteFunc(objs, func(o objectRef) bool { return o.last <= from || o.first > to })
	var readers []*objectReader
	for i, o := range objs {
		if i == 0 || objs[i-1].epoch != o.epoch {
			readers = append(readers, &objectReader{w: w, from: from, to: to})
		}
		r := readers[len(readers)-1]
		r.objs = append(r.objs, o)
	}
	return mergeRecords(w.codec, readers, fn)
}

func (r *objectReader) current() (recordHeader, []byte, bool) { return r.h, r.stored, r.ok }

func (r *objectReader) at() (string, int64) { return r.objs[r.obj].name, r.recOff }

// objectReader walks one epoch's objects in position order, one object
// in memory at a time.
type objectReader struct {
	w        *ObjectWAL
	objs     []objectRef
	from, to uint64

	obj    int    // index of the loaded object; len(objs) when done
	data   []byte // the loaded object; nil before the first load
	off    int64
	next   uint64 // the position the next record must start at
	ok     bool
	h      recordHeader
	stored []byte
	recOff int64
}

func (r *objectReader) advance() error {
	r.ok = false
	for r.obj < len(r.objs) {
		o := r.objs[r.obj]
		if r.data == nil {
			if err := r.load(o); err != nil {
				return err
			}
		}
		if r.off == int64(len(r.data)) {
			if r.next != o.last+1 {
				return &CorruptionError{Segment: o.name, Offset: r.off,
					Err: fmt.Errorf("%w: records end at position %d, the name says %d", errInvalid, r.next-1, o.last)}
			}
			r.obj, r.data = r.obj+1, nil
			continue
		}
		if err := r.record(o); err != nil {
			return err
		}
		if r.h.lastPos() <= r.from {
			continue
		}
		if r.h.FirstPos > r.to {
			r.obj = len(r.objs) // positions only grow within an epoch
			return nil
		}
		r.ok = true
		return nil
	}
	return nil
}

// load reads object o whole; it must follow the epoch's previous one.
func (r *objectReader) load(o objectRef) error {
	if r.obj > 0 && o.first != r.objs[r.obj-1].last+1 {
		return &CorruptionError{Segment: o.name, Err: fmt.Errorf("%w: object starts at position %d, the epoch's previous one ends at %d",
			errGap, o.first, r.objs[r.obj-1].last)}
	}
	data, err := readObject(r.w.ctx, r.w.opts.Store, o.name)
	if err != nil {
		return fmt.Errorf("wal: replay: read %s: %w", o.name, err)
	}
	r.data, r.off, r.next = data, 0, o.first
	return nil
}

// record parses the record at r.off of the loaded object o.
func (r *objectReader) record(o objectRef) error {
	h, err := parseRecord(r.data[r.off:], o.epoch)
	if err == nil {
		err = h.validate()
	}
	if err == nil && h.FirstPos != r.next {
		err = fmt.Errorf("%w: record starts at position %d, expected %d", errGap, h.FirstPos, r.next)
	}
	if err != nil {
		return &CorruptionError{Segment: o.name, Offset: r.off, Err: err}
	}
	r.h, r.stored, r.recOff = h, r.data[r.off+headerSize:r.off+h.size()], r.off
	r.off += h.size()
	r.next = h.lastPos() + 1
	return nil
}

// readObject reads a whole object.
func readObject(ctx context.Context, store objstore.Store, name string) ([]byte, error) {
	obj, err := store.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	if obj.Size() > 2*MaxPayloadSize {
		return nil, &CorruptionError{Segment: name, Err: fmt.Errorf("%w: object of %d bytes, above any group commit", errLength, obj.Size())}
	}
	data := make([]byte, obj.Size())
	if _, err := obj.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data, nil
}

// RemoveThrough deletes the objects, of any epoch, wholly at or below
// cursor: a committed replay cursor, so no replay needs them again. Names
// are never reused, so a fenced writer's late object is never one a
// deletion here makes room for; one above the cursor stays until a later
// cursor passes it. The object holding the highest position stays
// whatever the cursor: it is the tail that the next claim lists (as the
// local WAL keeps its last segment), and positions must continue past it.
// A failed delete leaves the object for the next call.
func (w *ObjectWAL) RemoveThrough(cursor uint64) error {
	w.removeMu.Lock()
	defer w.removeMu.Unlock()
	objs, err := listObjects(w.ctx, w.opts.Store, w.opts.Prefix)
	if err != nil {
		return fmt.Errorf("wal: remove through %d: %w", cursor, err)
	}
	var tail uint64
	for _, o := range objs {
		tail = max(tail, o.last)
	}
	var errs []error
	for _, o := range objs {
		if o.last > cursor || o.last == tail {
			continue
		}
		if err := w.opts.Store.Delete(w.ctx, o.name); err != nil {
			errs = append(errs, fmt.Errorf("wal: remove %s: %w", o.name, err))
		}
	}
	return errors.Join(errs...)
}
