package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// fuzzEpoch is the epoch of the segment the fuzzer's bytes pretend to be.
const fuzzEpoch = 1

// FuzzWALDecode feeds arbitrary bytes to the segment decoder and to Open
// as a segment file. Neither may panic, and no record may come out whose
// CRC does not verify over the exact input bytes. The seed corpus is
// checked in under testdata/fuzz/FuzzWALDecode (see TestWriteFuzzSeeds),
// so a plain go test runs it.
func FuzzWALDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		scanned := checkScan(t, data)
		checkOpen(t, data, scanned)
	})
}

// checkScan runs the decoder over data and re-verifies every record it
// returns with an independent CRC computation. It returns the records.
func checkScan(t *testing.T, data []byte) []Header {
	var hs []Header
	c, _ := newCodec(None)
	defer c.close()
	_, err := scanSegment(bytes.NewReader(data), int64(len(data)), "fuzz", fuzzEpoch, func(h recordHeader, off int64) error {
		end := off + h.size()
		if end > int64(len(data)) {
			t.Fatalf("record at %d runs past the input (%d > %d)", off, end, len(data))
		}
		raw := data[off:end]
		want := binary.LittleEndian.Uint32(raw[4:8])
		covered := append(bytes.Clone(raw[:4]), raw[8:]...)
		if crc32.Checksum(covered, crc32.MakeTable(crc32.Castagnoli)) != want {
			t.Fatalf("record at %d returned with a bad CRC", off)
		}
		if h.Epoch != fuzzEpoch {
			t.Fatalf("record at %d has epoch %d", off, h.Epoch)
		}
		// Decompression of a CRC-valid record may fail, never panic.
		_, _ = c.decompress(h, raw[headerSize:], nil)
		hs = append(hs, h.Header)
		return nil
	})
	var ce *CorruptionError
	if err != nil && !errors.As(err, &ce) {
		t.Fatalf("decoder error is not a *CorruptionError: %v", err)
	}
	return hs
}

// checkOpen opens data as epoch 1's segment, both as epoch 1 itself
// (which may truncate it) and as epoch 2 (which must leave it as it is).
// If Open accepts it, Replay returns a prefix of what the decoder found,
// and the tail matches.
func checkOpen(t *testing.T, data []byte, scanned []Header) {
	for _, epoch := range []uint64{fuzzEpoch, fuzzEpoch + 1} {
		fs := vfs.NewStrictMem()
		writeFile(t, fs, segPath(fuzzEpoch, 1), data)
		checkOpenAs(t, fs, epoch, scanned)
		if epoch != fuzzEpoch && !bytes.Equal(readFile(t, fs, segPath(fuzzEpoch, 1)), data) {
			t.Fatalf("Open as epoch %d changed epoch %d's segment", epoch, fuzzEpoch)
		}
	}
}

func checkOpenAs(t *testing.T, fs vfs.FS, epoch uint64, scanned []Header) {
	w, err := Open(testOptions(fs, epoch))
	if err != nil {
		if !errors.Is(err, ErrCorruption) {
			t.Fatalf("Open as epoch %d failed without ErrCorruption: %v", epoch, err)
		}
		return
	}
	defer w.Close()
	var replayed []Header
	err = w.Replay(0, w.Tail(), func(h Header, _ []byte) error {
		replayed = append(replayed, h)
		return nil
	})
	if err != nil && !errors.Is(err, ErrCorruption) {
		t.Fatalf("Replay: %v", err)
	}
	if len(replayed) > len(scanned) {
		t.Fatalf("replayed %d records, the decoder found %d", len(replayed), len(scanned))
	}
	for i, h := range replayed {
		if h != scanned[i] {
			t.Fatalf("record %d: replayed %+v, decoded %+v", i, h, scanned[i])
		}
	}
	if err == nil && len(replayed) > 0 && w.Tail() != replayed[len(replayed)-1].lastPos() {
		t.Fatalf("tail %d, last record %+v", w.Tail(), replayed[len(replayed)-1])
	}
}

// fuzzSeeds returns the checked-in corpus's inputs in the order they are
// generated: valid segments (raw, s2, zstd) and damaged copies of them.
func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, c := range []Compression{None, S2, Zstd} {
		fs := vfs.NewStrictMem()
		w := open(tb, fs, fuzzEpoch, compression(c))
		for i := range 4 {
			appendSynced(tb, w, uint64(i), uint32(1+i%2), payloadFor(w.Tail()+1, i))
		}
		if err := w.Close(); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, readFile(tb, fs, segPath(fuzzEpoch, 1)))
	}
	valid := seeds[0]
	torn := bytes.Clone(valid[:len(valid)-5])
	flipped := bytes.Clone(valid)
	flipped[headerSize+3] ^= 0x40
	zeros := append(bytes.Clone(valid), make([]byte, 100)...)
	return append(seeds, torn, flipped, zeros, nil, make([]byte, headerSize))
}

// TestWriteFuzzSeeds rewrites testdata/fuzz/FuzzWALDecode from fuzzSeeds
// when WAL_WRITE_FUZZ_SEEDS=1. The files are checked in, so a format
// change shows up as a diff.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("WAL_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set WAL_WRITE_FUZZ_SEEDS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzWALDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"valid-none", "valid-s2", "valid-zstd", "torn-tail", "flipped-payload", "trailing-zeros", "empty", "zero-header"}
	for i, seed := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
		if err := os.WriteFile(filepath.Join(dir, names[i]), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
