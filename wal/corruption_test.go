package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// baseSegment returns a one-segment log of epoch 1 with five records and
// the offset of each, as the WAL itself writes them, without the zeros
// the WAL reserved after them.
func baseSegment(t *testing.T) ([]byte, []int64) {
	t.Helper()
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	var offs []int64
	off := int64(0)
	for i := range 5 {
		p := payloadFor(w.Tail()+1, 1)
		appendSynced(t, w, 1, uint32(1+i%2), p)
		offs = append(offs, off)
		off += headerSize + int64(len(p))
	}
	mustClose(t, w)
	data := readFile(t, fs, segPath(1, 1))
	if int64(len(data)) < off || !allZero(data[off:]) {
		t.Fatalf("segment has %d bytes, want %d of records and zeros after them", len(data), off)
	}
	return data[:off], offs
}

// openDamaged writes data as epoch 1's segments on a fresh MemFS and
// opens the log with epoch 2.
func openDamaged(t *testing.T, segments ...[]byte) (*WAL, vfs.FS, error) {
	t.Helper()
	return openDamagedAs(t, 2, segments...)
}

// openDamagedAs writes data as epoch 1's segments on a fresh MemFS and
// opens the log with the given epoch: 1 reopens the damaged epoch itself,
// as after a crash of its own; 2 is the next writer, which finds epoch 1's
// segments as a zombie may have left them.
func openDamagedAs(t *testing.T, epoch uint64, segments ...[]byte) (*WAL, vfs.FS, error) {
	t.Helper()
	fs := vfs.NewStrictMem()
	for i, data := range segments {
		writeFile(t, fs, segPath(1, uint64(i+1)), data)
	}
	w, err := Open(testOptions(fs, epoch))
	return w, fs, err
}

// A record cut short, or overwritten with garbage or zeros from any byte
// on, is a torn tail: the earlier records survive. Reopening its own epoch
// a writer truncates the last segment before it; a writer of another
// epoch leaves the file exactly as it is and reads up to the same point.
func TestTornTailIsTruncated(t *testing.T) {
	data, offs := baseSegment(t)
	last := offs[len(offs)-1]
	rng := rand.New(rand.NewPCG(7, 7))
	damage := map[string]func(k int64) []byte{
		"cut": func(k int64) []byte { return bytes.Clone(data[:k]) },
		"zeros": func(k int64) []byte {
			b := bytes.Clone(data)
			clear(b[k:])
			return b
		},
		"garbage": func(k int64) []byte {
			b := bytes.Clone(data)
			for i := k; i < int64(len(b)); i++ {
				b[i] = byte(rng.Uint32())
			}
			return b
		},
		"zeros appended": func(k int64) []byte {
			return append(bytes.Clone(data[:k]), make([]byte, 4096)...)
		},
	}
	for name, damaged := range damage {
		t.Run(name, func(t *testing.T) {
			for k := last; k < int64(len(data)); k++ {
				for _, epoch := range []uint64{1, 2} {
					in := damaged(k)
					w, fs, err := openDamagedAs(t, epoch, in)
					if err != nil {
						t.Fatalf("epoch %d, damage from byte %d: %v", epoch, k, err)
					}
					gots := replayAll(t, w, 0, w.Tail())
					mustClose(t, w)
					if len(gots) != len(offs)-1 || w.Tail() != gots[len(gots)-1].lastPos() {
						t.Fatalf("epoch %d, damage from byte %d: %d records, tail %d", epoch, k, len(gots), w.Tail())
					}
					out := readFile(t, fs, segPath(1, 1))
					if epoch == 1 && int64(len(out)) != last {
						t.Fatalf("damage from byte %d: segment left at %d bytes, want %d", k, len(out), last)
					}
					if epoch == 2 && !bytes.Equal(out, in) {
						t.Fatalf("damage from byte %d: epoch 2 changed epoch 1's segment (%d bytes, was %d)", k, len(out), len(in))
					}
				}
			}
		})
	}
	t.Run("garbage after the last record", func(t *testing.T) {
		in := append(bytes.Clone(data), "not a record"...)
		for _, epoch := range []uint64{1, 2} {
			w, fs, err := openDamagedAs(t, epoch, in)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(replayAll(t, w, 0, w.Tail())); n != len(offs) {
				t.Fatalf("epoch %d: %d records survived, want %d", epoch, n, len(offs))
			}
			mustClose(t, w)
			want := data
			if epoch == 2 {
				want = in
			}
			if out := readFile(t, fs, segPath(1, 1)); !bytes.Equal(out, want) {
				t.Fatalf("epoch %d: segment left at %d bytes, want %d", epoch, len(out), len(want))
			}
		}
	})
}

// The truncation is durable: a crash right after Open does not bring the
// torn bytes back.
func TestTornTailTruncationIsSynced(t *testing.T) {
	data, offs := baseSegment(t)
	w, fs, err := openDamagedAs(t, 1, data[:len(data)-3])
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	crashed := fs.(*vfs.MemFS).CrashClone()
	if size := int64(len(readFile(t, crashed, segPath(1, 1)))); size != offs[len(offs)-1] {
		t.Fatalf("after a crash the segment has %d bytes, want %d", size, offs[len(offs)-1])
	}
}

// Flipping any byte of a record that has a valid record after it is
// corruption, reported at the damaged record's offset.
func TestMidSegmentCorruptionRefused(t *testing.T) {
	data, offs := baseSegment(t)
	for _, victim := range []int{0, 2, 3} {
		start, end := offs[victim], offs[victim+1]
		for k := start; k < end; k++ {
			b := bytes.Clone(data)
			b[k] ^= 0xff
			w, _, err := openDamaged(t, b)
			if err == nil {
				mustClose(t, w)
				t.Fatalf("record %d, byte %d flipped: Open succeeded", victim, k)
			}
			checkCorruption(t, err, segmentName(1, 1), start)
		}
	}
}

func checkCorruption(t *testing.T, err error, segment string, offset int64) {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorruption) {
		t.Fatalf("err = %v, want a *CorruptionError", err)
	}
	if ce.Segment != segment || ce.Offset != offset {
		t.Fatalf("corruption reported in %s at %d, want %s at %d (%v)", ce.Segment, ce.Offset, segment, offset, err)
	}
	if msg := err.Error(); !bytes.Contains([]byte(msg), []byte(segment)) ||
		!bytes.Contains([]byte(msg), fmt.Appendf(nil, "offset %d", offset)) {
		t.Fatalf("message %q does not name the segment and offset", msg)
	}
}

// A torn record in a segment that is not the last of its epoch cannot be
// a crash's leftover, because a roll syncs the sealed segment first.
func TestTornTailInEarlierSegmentRefused(t *testing.T) {
	first, offs := baseSegment(t)
	next, _ := frame(rec{epoch: 1, gen: 1, first: 8, count: 1, payload: []byte("later")})
	_, _, err := openDamaged(t, first[:len(first)-1], next)
	checkCorruption(t, err, segmentName(1, 1), offs[len(offs)-1])
}

func TestPositionGapsRefused(t *testing.T) {
	r := func(first uint64, count uint32) rec {
		return rec{epoch: 1, gen: 1, first: first, count: count, payload: []byte("p")}
	}
	cases := []struct {
		name     string
		segments [][]rec
		segment  string
		record   int // index of the bad record in its segment
	}{
		{"gap inside a segment", [][]rec{{r(1, 1), r(2, 2), r(5, 1)}}, segmentName(1, 1), 2},
		{"regression inside a segment", [][]rec{{r(1, 3), r(3, 1)}}, segmentName(1, 1), 1},
		{"repeat inside a segment", [][]rec{{r(1, 1), r(1, 1)}}, segmentName(1, 1), 1},
		{"gap between segments", [][]rec{{r(1, 2)}, {r(4, 1)}}, segmentName(1, 2), 0},
		{"regression between segments", [][]rec{{r(1, 2)}, {r(2, 1)}}, segmentName(1, 2), 0},
		{"gap across an empty segment", [][]rec{{r(1, 2)}, {}, {r(9, 1)}}, segmentName(1, 3), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var segs [][]byte
			var badOff int64
			for i, recs := range tc.segments {
				b, offs := frame(recs...)
				segs = append(segs, b)
				if segmentName(1, uint64(i+1)) == tc.segment {
					badOff = offs[tc.record]
				}
			}
			_, _, err := openDamaged(t, segs...)
			checkCorruption(t, err, tc.segment, badOff)
			if !errors.Is(err, errGap) {
				t.Fatalf("err = %v, want a position gap", err)
			}
		})
	}
	t.Run("dense across an empty segment", func(t *testing.T) {
		a, _ := frame(r(1, 2))
		c, _ := frame(r(3, 1))
		w, _, err := openDamaged(t, a, nil, c)
		if err != nil {
			t.Fatal(err)
		}
		defer mustClose(t, w)
		if w.Tail() != 3 {
			t.Fatalf("tail %d, want 3", w.Tail())
		}
	})
}

// Records whose CRC verifies but whose fields are impossible are refused,
// not truncated: they are not a torn write.
func TestInvalidFieldsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    recordHeader
		p    []byte
	}{
		{"zero count", recordHeader{Header: Header{Epoch: 1, FirstPos: 1}, rawLength: 1}, []byte("x")},
		{"zero position", recordHeader{Header: Header{Epoch: 1, Count: 1}, rawLength: 1}, []byte("x")},
		{"position overflow", recordHeader{Header: Header{Epoch: 1, FirstPos: 1<<64 - 1, Count: 2}, rawLength: 1}, []byte("x")},
		{"unknown codec", recordHeader{Header: Header{Epoch: 1, FirstPos: 1, Count: 1}, codec: 3, rawLength: 1}, []byte("x")},
		{"raw length mismatch", recordHeader{Header: Header{Epoch: 1, FirstPos: 1, Count: 1}, rawLength: 2}, []byte("x")},
		{"absurd decoded length", recordHeader{Header: Header{Epoch: 1, FirstPos: 1, Count: 1}, codec: S2, rawLength: MaxPayloadSize + 1}, []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := openDamaged(t, appendRecord(nil, tc.h, tc.p))
			checkCorruption(t, err, segmentName(1, 1), 0)
			if !errors.Is(err, errInvalid) {
				t.Fatalf("err = %v, want an invalid record", err)
			}
		})
	}
}

// Damage that appears after Open (bit rot) is reported by Replay.
func TestReplayVerifiesChecksums(t *testing.T) {
	fs := vfs.NewStrictMem()
	w := open(t, fs, 1)
	appendN(t, w, 1, 5)
	mustClose(t, w)
	w = open(t, fs, 2)
	defer mustClose(t, w)
	data := readFile(t, fs, segPath(1, 1))
	data[headerSize+2] ^= 1
	writeFile(t, fs, segPath(1, 1), data)
	err := w.Replay(0, w.Tail(), func(Header, []byte) error { return nil })
	checkCorruption(t, err, segmentName(1, 1), 0)
}

// Open repairs the torn tail of its own epoch only. Another epoch's last
// segment may belong to a zombie still writing to it: Open leaves it byte
// for byte as it is, reads up to the torn record, and says so once.
func TestTornTailOfOtherEpochIsLeftAlone(t *testing.T) {
	data, offs := baseSegment(t) // epoch 1, positions 1..7
	fs := vfs.NewStrictMem()
	older := data[:len(data)-2]
	writeFile(t, fs, segPath(1, 1), older)
	own, ownOffs := frame(
		rec{epoch: 2, gen: 1, first: 7, count: 2, payload: []byte("epoch 2")},
		rec{epoch: 2, gen: 1, first: 9, count: 1, payload: []byte("cut short")})
	writeFile(t, fs, segPath(2, 1), own[:len(own)-1])

	var logs logBuf
	w := open(t, fs, 2, logTo(&logs)) // epoch 2 reopens after a crash of its own
	if w.Tail() != 8 {
		t.Fatalf("tail %d, want 8", w.Tail())
	}
	if got := readFile(t, fs, segPath(1, 1)); !bytes.Equal(got, older) {
		t.Fatalf("epoch 1's segment changed: %d bytes, was %d", len(got), len(older))
	}
	if size := int64(len(readFile(t, fs, segPath(2, 1)))); size != ownOffs[1] {
		t.Fatalf("epoch 2's own torn segment left at %d bytes, want %d", size, ownOffs[1])
	}
	if n := len(replayAll(t, w, 0, 8)); n != len(offs) {
		t.Fatalf("replayed %d records, want %d", n, len(offs))
	}
	replayAll(t, w, 0, 8)
	if n := logs.count("level=WARN", segmentName(1, 1), fmt.Sprintf("offset=%d", offs[len(offs)-1])); n != 1 {
		t.Fatalf("%d warnings name epoch 1's torn segment and offset, want 1 per Open:\n%s", n, logs.String())
	}
	mustClose(t, w)

	// The next epoch leaves both as they are now.
	before := readFile(t, fs, segPath(2, 1))
	w = open(t, fs, 3)
	defer mustClose(t, w)
	if !bytes.Equal(readFile(t, fs, segPath(1, 1)), older) || !bytes.Equal(readFile(t, fs, segPath(2, 1)), before) {
		t.Fatal("epoch 3 changed an older epoch's segment")
	}
	if n := len(replayAll(t, w, 0, w.Tail())); n != len(offs) || w.Tail() != 8 {
		t.Fatalf("epoch 3: replayed %d records with tail %d, want %d with tail 8", n, w.Tail(), len(offs))
	}
}

// A run of at least a header's worth of zeros with valid records after it
// is a hole, what an older build left when it truncated a zombie's torn
// tail and the zombie wrote on at its own offset. In another epoch's last
// segment it ends that segment's records; anywhere else, and for any other
// damage followed by a valid record, it is corruption.
func TestHoleInOtherEpochsLastSegment(t *testing.T) {
	r := func(first uint64) rec {
		return rec{epoch: 1, gen: 1, first: first, count: 1, payload: []byte("p")}
	}
	head, _ := frame(r(1), r(2), r(3))
	after, _ := frame(r(4), r(5)) // written by the zombie past the hole
	holed := func(gap []byte) []byte {
		return append(append(bytes.Clone(head), gap...), after...)
	}
	hole := holed(make([]byte, 300))
	at := int64(len(head))

	t.Run("another epoch's last segment", func(t *testing.T) {
		var logs logBuf
		fs := vfs.NewStrictMem()
		writeFile(t, fs, segPath(1, 1), hole)
		w := open(t, fs, 2, logTo(&logs))
		defer mustClose(t, w)
		if w.Tail() != 3 {
			t.Fatalf("tail %d, want 3: records end at the hole", w.Tail())
		}
		if got := readFile(t, fs, segPath(1, 1)); !bytes.Equal(got, hole) {
			t.Fatal("Open changed another epoch's segment")
		}
		if n := logs.count("level=WARN", "hole", segmentName(1, 1), fmt.Sprintf("offset=%d", at)); n != 1 {
			t.Fatalf("%d warnings name the hole's segment and offset, want 1:\n%s", n, logs.String())
		}
		if gots := replayAll(t, w, 0, 100); len(gots) != 3 {
			t.Fatalf("replayed %v, want the 3 records before the hole", headers(gots))
		}
	})
	t.Run("exactly a header of zeros", func(t *testing.T) {
		w, _, err := openDamaged(t, holed(make([]byte, headerSize)))
		if err != nil {
			t.Fatal(err)
		}
		mustClose(t, w)
	})
	t.Run("own epoch", func(t *testing.T) {
		_, _, err := openDamagedAs(t, 1, hole)
		checkCorruption(t, err, segmentName(1, 1), at)
	})
	t.Run("not the last segment", func(t *testing.T) {
		later, _ := frame(r(6))
		_, _, err := openDamaged(t, hole, later)
		checkCorruption(t, err, segmentName(1, 1), at)
	})
	t.Run("fewer zeros than a header", func(t *testing.T) {
		_, _, err := openDamaged(t, holed(make([]byte, headerSize-1)))
		checkCorruption(t, err, segmentName(1, 1), at)
	})
	t.Run("garbage", func(t *testing.T) {
		_, _, err := openDamaged(t, holed(bytes.Repeat([]byte{0xa5}, 300)))
		checkCorruption(t, err, segmentName(1, 1), at)
	})
}
