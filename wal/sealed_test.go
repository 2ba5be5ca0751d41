package wal

import (
	"bytes"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
)

// Open walks a sealed segment by its headers and checks only its last
// record's CRC, so a flipped byte that no header check sees (the CRC
// word, the kind, the generation or the payload of any record but the
// last) passes Open and is refused by Replay, at the same segment and
// offset a full scan would name. Every other flipped byte, and every byte
// of the last record, is refused by Open exactly as before. Every header
// byte is flipped, and a sample of the payloads'.
func TestSealedSegmentDamage(t *testing.T) {
	sealed, offs := baseSegment(t)
	offs = append(offs, int64(len(sealed)))
	next, _ := frame(rec{epoch: 1, gen: 1, first: 8, count: 1, payload: []byte("later")})
	for v := range len(offs) - 1 {
		start, end := offs[v], offs[v+1]
		for k := start; k < end; k++ {
			if k-start >= headerSize && k != end-1 && (k-start)%17 != 0 {
				continue // every header byte, a sample of the payload's
			}
			b := bytes.Clone(sealed)
			b[k] ^= 0xff
			w, _, err := openDamaged(t, b, next)
			field := k - start
			unseen := v != len(offs)-2 && passesHeaderWalk(field)
			if err != nil {
				if unseen {
					t.Fatalf("record %d, byte %d (field offset %d) flipped: Open read the payloads: %v", v, k, field, err)
				}
				checkCorruption(t, err, segmentName(1, 1), start)
				continue
			}
			if !unseen {
				mustClose(t, w)
				t.Fatalf("record %d, byte %d (field offset %d) flipped: Open succeeded", v, k, field)
			}
			err = w.Replay(0, w.Tail(), func(Header, []byte) error { return nil })
			mustClose(t, w)
			if err == nil {
				t.Fatalf("record %d, byte %d flipped: Open and Replay succeeded", v, k)
			}
			checkCorruption(t, err, segmentName(1, 1), start)
		}
	}
}

// passesHeaderWalk reports whether a flip at this offset of a record is
// one walkSealed cannot see: the fields no header check judges.
func passesHeaderWalk(field int64) bool {
	switch {
	case field >= offCRC && field < offFlags,
		field == offFlags+1, // the kind byte, opaque to the WAL
		field >= offGen && field < offFirst,
		field >= headerSize:
		return true
	}
	return false
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r     *bytes.Reader
	bytes atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bytes.Add(int64(n))
	return n, err
}

// A walk over a sealed segment of big records reads their headers and the
// last record, not every payload, and finds the same records and
// positions as a full scan; the zeros reserved after them end the data.
func TestWalkSealedSkipsBigPayloads(t *testing.T) {
	var recs []rec
	for i := range 16 {
		recs = append(recs, rec{epoch: 3, gen: 1, first: uint64(1 + 4*i), count: 4,
			payload: bytes.Repeat([]byte{byte('a' + i)}, 2*bigRecord)})
	}
	data, _ := frame(recs...)
	data = append(data, make([]byte, 1<<20)...)
	type visited struct {
		h   Header
		off int64
	}
	collect := func(out *[]visited) func(recordHeader, int64) error {
		return func(h recordHeader, off int64) error {
			*out = append(*out, visited{h.Header, off})
			return nil
		}
	}
	var walked, scanned []visited
	r := &countingReader{r: bytes.NewReader(data)}
	end, ok, err := walkSealed(r, int64(len(data)), 3, collect(&walked))
	if err != nil || !ok {
		t.Fatalf("walk: ok %v, err %v", ok, err)
	}
	res, err := scanSegment(bytes.NewReader(data), int64(len(data)), "s", 3, collect(&scanned))
	if err != nil {
		t.Fatal(err)
	}
	if end != res.end || !slices.Equal(walked, scanned) {
		t.Fatalf("walk found %d records ending at %d, scan %d ending at %d", len(walked), end, len(scanned), res.end)
	}
	records := res.end
	// The zeros after the records are read to tell them from damage;
	// of the records, about the last one and 44 bytes per header.
	if read := r.bytes.Load() - (int64(len(data)) - records); read > records/4 {
		t.Fatalf("walk read %d bytes of %d bytes of records", read, records)
	}
}

// Bad bytes after a sealed segment's records make the walk give up
// rather than judge them: the full scan judges them as before.
func TestWalkSealedGivesUpOnDamage(t *testing.T) {
	data, offs := frame(
		rec{epoch: 1, gen: 1, first: 1, count: 1, payload: []byte("one")},
		rec{epoch: 1, gen: 1, first: 2, count: 1, payload: []byte("two")},
	)
	for name, b := range map[string][]byte{
		"garbage after the records": append(bytes.Clone(data), 1, 2, 3),
		"last record's payload":     flipAt(data, offs[1]+headerSize),
		"a record's length":         flipAt(data, offs[0]+offLength),
	} {
		_, ok, err := walkSealed(bytes.NewReader(b), int64(len(b)), 1, func(recordHeader, int64) error { return nil })
		if err != nil || ok {
			t.Errorf("%s: ok %v, err %v; want a walk that gives up", name, ok, err)
		}
	}
	refuse := func(recordHeader, int64) error { return errors.New("no") }
	if _, ok, _ := walkSealed(bytes.NewReader(data), int64(len(data)), 1, refuse); ok {
		t.Error("a walk whose visit refused a record succeeded")
	}
}

func flipAt(b []byte, k int64) []byte {
	b = bytes.Clone(b)
	b[k] ^= 0xff
	return b
}
