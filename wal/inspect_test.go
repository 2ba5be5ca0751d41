package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// readOnlyFS fails the test on any call that could change the filesystem,
// so that a scan proven through it cannot have written.
type readOnlyFS struct {
	vfs.FS
	t *testing.T
}

func (f readOnlyFS) deny(op, name string) error {
	f.t.Errorf("Scan called %s(%s)", op, name)
	return fmt.Errorf("read-only: %s %s", op, name)
}

func (f readOnlyFS) Create(name string) (vfs.File, error) { return nil, f.deny("Create", name) }
func (f readOnlyFS) OpenReadWrite(name string) (vfs.File, error) {
	return nil, f.deny("OpenReadWrite", name)
}
func (f readOnlyFS) OpenDir(name string) (vfs.File, error) { return nil, f.deny("OpenDir", name) }
func (f readOnlyFS) Rename(a, _ string) error              { return f.deny("Rename", a) }
func (f readOnlyFS) Link(_, b string) error                { return f.deny("Link", b) }
func (f readOnlyFS) Remove(name string) error              { return f.deny("Remove", name) }
func (f readOnlyFS) RemoveAll(name string) error           { return f.deny("RemoveAll", name) }
func (f readOnlyFS) MkdirAll(name string, _ os.FileMode) error {
	return f.deny("MkdirAll", name)
}

// TestScanReadsWhatReplayReads writes a compressed log over several
// segments and epochs through the WAL itself; Scan must return every
// record with its payload, in file order, report each segment once, and
// touch nothing.
func TestScanReadsWhatReplayReads(t *testing.T) {
	fs := vfs.NewStrictMem()
	var want []Header
	for epoch := uint64(1); epoch <= 2; epoch++ {
		w := open(t, fs, epoch, segmentSize(2048), compression(S2))
		for range 12 {
			first := w.Tail() + 1
			appendSynced(t, w, epoch, 2, payloadFor(first, int(epoch)))
			want = append(want, Header{Epoch: epoch, Generation: epoch, FirstPos: first, Count: 2})
		}
		mustClose(t, w)
	}
	before := fs.String()
	var gots []got
	var progress []int
	rep, err := Scan(ScanOptions{FS: readOnlyFS{fs, t}, Dir: testDir, Payloads: true,
		Record: func(r Record) error {
			gots = append(gots, got{r.Header, bytes.Clone(r.Payload)})
			return nil
		},
		Segment: func(n, total int, _ SegmentInfo) { progress = append(progress, n*1000+total) },
	})
	if err != nil {
		t.Fatal(err)
	}
	checkGot(t, gots, want)
	if rep.Records != len(want) || len(rep.Tails) != 0 {
		t.Fatalf("report: %d records, tails %v; want %d, none", rep.Records, rep.Tails, len(want))
	}
	if len(rep.Segments) < 3 || len(progress) != len(rep.Segments) || progress[len(progress)-1] != len(rep.Segments)*1001 {
		t.Fatalf("%d segments, progress %v: want one call per segment, the last n == total", len(rep.Segments), progress)
	}
	var bytesSum int64
	for _, s := range rep.Segments {
		if data := readFile(t, fs, filepath.Join(testDir, s.Name)); s.Size != int64(len(data)) || !allZero(data[s.End:]) {
			t.Fatalf("segment %s ends its records at %d of %d bytes (%d read): want only zeros after them", s.Name, s.End, s.Size, len(data))
		}
		bytesSum += s.End
	}
	if bytesSum != rep.Bytes {
		t.Fatalf("report counts %d bytes, segments hold %d", rep.Bytes, bytesSum)
	}
	if after := fs.String(); after != before {
		t.Fatalf("the filesystem changed:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// TestScanDamage: damage Open passes over is a Tail and the scan goes on;
// damage Open refuses is a *CorruptionError naming the segment and offset.
func TestScanDamage(t *testing.T) {
	data, offs := baseSegment(t) // epoch 1, five records
	last := offs[len(offs)-1]
	later, _ := frame(rec{epoch: 1, gen: 1, first: 8, count: 1, payload: []byte("later")})
	flipped := func(at int64) []byte {
		b := bytes.Clone(data)
		b[at] ^= 0xff
		return b
	}
	holed := append(append(bytes.Clone(data[:last]), make([]byte, 100)...), data[last:]...)
	for _, tc := range []struct {
		name     string
		segments [][]byte
		tail     int64 // offset of the expected Tail in the last segment, or -1
		hole     bool
		corrupt  string // segment of the expected corruption, or ""
		at       int64
	}{
		{"clean", [][]byte{data}, -1, false, "", 0},
		{"cut last record", [][]byte{data[:len(data)-3]}, last, false, "", 0},
		{"flipped byte in last record", [][]byte{flipped(last + headerSize + 1)}, last, false, "", 0},
		{"hole before the last record", [][]byte{holed}, last, true, "", 0},
		{"flipped byte in the middle", [][]byte{flipped(offs[1] + 3)}, -1, false, segmentName(1, 1), offs[1]},
		{"torn segment not the last", [][]byte{data[:len(data)-3], later}, -1, false, segmentName(1, 1), last},
		{"gap between segments", [][]byte{data, append([]byte{}, frameOne(t, 20)...)}, -1, false, segmentName(1, 2), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewStrictMem()
			for i, seg := range tc.segments {
				writeFile(t, fs, segPath(1, uint64(i+1)), seg)
			}
			rep, err := Scan(ScanOptions{FS: readOnlyFS{fs, t}, Dir: testDir, Payloads: true})
			if tc.corrupt != "" {
				checkCorruption(t, err, tc.corrupt, tc.at)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkTails(t, rep, tc.tail, tc.hole, int64(len(tc.segments[len(tc.segments)-1])))
		})
	}
}

func frameOne(t *testing.T, first uint64) []byte {
	t.Helper()
	b, _ := frame(rec{epoch: 1, gen: 1, first: first, count: 1, payload: []byte("x")})
	return b
}

func checkTails(t *testing.T, rep ScanReport, at int64, hole bool, size int64) {
	t.Helper()
	if at < 0 {
		if len(rep.Tails) != 0 {
			t.Fatalf("tails %+v in a clean log", rep.Tails)
		}
		return
	}
	if len(rep.Tails) != 1 {
		t.Fatalf("tails %+v, want one at offset %d", rep.Tails, at)
	}
	tl := rep.Tails[0]
	if tl.Segment != segmentName(1, 1) || tl.Offset != at || tl.Bytes != size-at || tl.Hole != hole || tl.Reason == nil {
		t.Fatalf("tail %+v, want %s at %d, %d bytes, hole %v", tl, segmentName(1, 1), at, size-at, hole)
	}
}

func TestScanRefusesStrangers(t *testing.T) {
	fs := vfs.NewStrictMem()
	writeFile(t, fs, filepath.Join(testDir, "notes.txt"), []byte("hi"))
	if _, err := Scan(ScanOptions{FS: fs, Dir: testDir}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("notes.txt")) {
		t.Fatalf("a stray file: %v, want an error naming it", err)
	}
	if _, err := Scan(ScanOptions{FS: fs, Dir: "/nowhere"}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing directory: %v, want ErrNotExist", err)
	}
}

// A payload that passed its CRC but does not decompress is corruption
// when payloads are decoded, and invisible when they are not.
func TestScanUndecodablePayload(t *testing.T) {
	var b []byte
	b = appendRecord(b, recordHeader{Header: Header{Epoch: 1, Generation: 1, FirstPos: 1, Count: 1},
		codec: S2, rawLength: 10}, []byte("not s2 at all"))
	fs := vfs.NewStrictMem()
	writeFile(t, fs, segPath(1, 1), b)
	if _, err := Scan(ScanOptions{FS: fs, Dir: testDir}); err != nil {
		t.Fatalf("headers only: %v", err)
	}
	_, err := Scan(ScanOptions{FS: fs, Dir: testDir, Payloads: true})
	checkCorruption(t, err, segmentName(1, 1), 0)
}
