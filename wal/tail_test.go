package wal

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// TestReadTailWritesNothing: ReadTail reports the tail Open would, over
// every epoch, and creates, truncates or repairs nothing: a torn tail of
// any epoch, the one being claimed included, stays as it is.
func TestReadTailWritesNothing(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	want := appendN(t, w, 5, 40)
	mustClose(t, w)
	w = open(t, fs, 2)
	want = append(want, appendN(t, w, 3, 40)...)
	mustClose(t, w)
	seg := segPath(2, 1)
	torn := make([]byte, 20)
	binary.LittleEndian.PutUint32(torn, 999)
	writeFile(t, fs, seg, append(readFile(t, fs, seg), torn...))
	before := segmentFilesIn(t, fs, testDir)
	sizeBefore, _ := fs.Stat(seg)

	for _, epoch := range []uint64{2, 3} { // a claimant of the torn epoch itself, and of the next
		tail, err := ReadTail(Options{FS: fs, Dir: testDir, Epoch: epoch})
		if err != nil {
			t.Fatalf("ReadTail for epoch %d: %v", epoch, err)
		}
		if last := want[len(want)-1].lastPos(); tail != last {
			t.Fatalf("ReadTail = %d, want %d", tail, last)
		}
	}
	after := segmentFilesIn(t, fs, testDir)
	sizeAfter, _ := fs.Stat(seg)
	if len(after) != len(before) || sizeAfter.Size() != sizeBefore.Size() {
		t.Fatalf("ReadTail changed the directory: %v (%d bytes) became %v (%d bytes)", before, sizeBefore.Size(), after, sizeAfter.Size())
	}
	if tail, err := ReadTail(Options{FS: fs, Dir: "/nowhere"}); err != nil || tail != 0 {
		t.Fatalf("ReadTail of a missing directory = %d, %v; want 0, nil", tail, err)
	}
}

// TestRecordKindRoundTrips: a record's kind is stored in flags bits 8–15
// and returned by Replay; bits above them are still refused as invalid.
func TestRecordKindRoundTrips(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	p, err := w.Prepare([]byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	p.Kind = 7
	if _, err := w.AppendPrepared(1, 1, p); err != nil {
		t.Fatal(err)
	}
	p.Release()
	if err := w.SyncTo(w.Tail()); err != nil {
		t.Fatal(err)
	}
	got := replayAll(t, w, 0, w.Tail())
	mustClose(t, w)
	if len(got) != 1 || got[0].Kind != 7 {
		t.Fatalf("replayed %+v, want one record of kind 7", got)
	}
	rec := appendRecord(nil, recordHeader{Header: Header{Epoch: 1, Generation: 1, FirstPos: 1, Count: 1, Kind: 7}, rawLength: 1}, []byte("x"))
	h, err := parseRecord(rec, 1)
	if err != nil || h.validate() != nil || h.Kind != 7 {
		t.Fatalf("record of kind 7: %+v, %v, %v", h, err, h.validate())
	}
	binary.LittleEndian.PutUint32(rec[offFlags:], 1<<16)
	binary.LittleEndian.PutUint32(rec[offCRC:], recordCRC(rec))
	h, err = parseRecord(rec, 1)
	if err != nil || !errors.Is(h.validate(), errInvalid) {
		t.Fatalf("a reserved flag bit: %v, %v; want errInvalid", err, h.validate())
	}
}

// vanishingFS removes a segment at the moment ReadTail first opens it, as
// the shard's owner does when its replay cursor passes the segment.
type vanishingFS struct {
	vfs.FS
	victim  string
	removed bool
}

func (f *vanishingFS) Open(name string) (vfs.File, error) {
	if name == f.victim && !f.removed {
		f.removed = true
		if err := f.FS.Remove(name); err != nil {
			return nil, err
		}
	}
	return f.FS.Open(name)
}

// TestReadTailRereadsWhenASegmentVanishes: a segment listed by ReadTail
// and removed before it is read makes ReadTail read the directory again,
// not fail the claim that called it.
func TestReadTailRereadsWhenASegmentVanishes(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1, segmentSize(4<<10))
	want := appendN(t, w, 5, 40)
	mustClose(t, w)
	vf := &vanishingFS{FS: fs, victim: segPath(1, 1)}
	tail, err := ReadTail(Options{FS: vf, Dir: testDir})
	if err != nil || !vf.removed {
		t.Fatalf("ReadTail with a segment removed under it: %d, %v (removed: %v)", tail, err, vf.removed)
	}
	if last := want[len(want)-1].lastPos(); tail != last {
		t.Fatalf("ReadTail = %d, want %d", tail, last)
	}
}
