package wal

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testDir = "/shard/wal"

// open opens a WAL on fs and fails the test on error. mod adjusts the
// options.
func open(t testing.TB, fs vfs.FS, epoch uint64, mod ...func(*Options)) *WAL {
	t.Helper()
	w, err := Open(testOptions(fs, epoch, mod...))
	if err != nil {
		t.Fatalf("open epoch %d: %v", epoch, err)
	}
	return w
}

func testOptions(fs vfs.FS, epoch uint64, mod ...func(*Options)) Options {
	opts := Options{FS: fs, Dir: testDir, Epoch: epoch}
	for _, f := range mod {
		f(&opts)
	}
	return opts
}

func segmentSize(n int64) func(*Options) { return func(o *Options) { o.SegmentSize = n } }

func preallocate(n int64) func(*Options) { return func(o *Options) { o.Preallocate = n } }

func compression(c Compression) func(*Options) { return func(o *Options) { o.Compression = c } }

// textPayload returns n bytes of compressible text with a few random
// bytes sprinkled in, seeded so that tests are repeatable.
func textPayload(rng *rand.Rand, n int) []byte {
	words := []string{"the ", "policy ", "reward ", "token ", "rollout ", "model ", "step ", "value ", "\n"}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		if rng.IntN(16) == 0 {
			b = append(b, byte(rng.IntN(256)))
			continue
		}
		b = append(b, words[rng.IntN(len(words))]...)
	}
	return b[:n]
}

// payloadFor derives a record's payload from its first position and a
// salt, so that a test can check what it reads without keeping copies.
func payloadFor(first uint64, salt int) []byte {
	rng := rand.New(rand.NewPCG(first, uint64(salt)))
	return textPayload(rng, 1+int((first*37+uint64(salt))%600))
}

// got is one record as Replay returned it.
type got struct {
	Header
	payload []byte
}

func replayAll(t testing.TB, w *WAL, from, to uint64) []got {
	t.Helper()
	var out []got
	err := w.Replay(from, to, func(h Header, p []byte) error {
		out = append(out, got{h, bytes.Clone(p)})
		return nil
	})
	if err != nil {
		t.Fatalf("replay (%d, %d]: %v", from, to, err)
	}
	return out
}

// appendSynced appends and syncs a record, failing the test on error.
func appendSynced(t testing.TB, w *WAL, gen uint64, count uint32, payload []byte) uint64 {
	t.Helper()
	first, err := w.Append(gen, count, payload)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := w.SyncTo(first + uint64(count) - 1); err != nil {
		t.Fatalf("sync to %d: %v", first+uint64(count)-1, err)
	}
	return first
}

func mustClose(t testing.TB, w *WAL) {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func readFile(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, fs vfs.FS, name string, data []byte) {
	t.Helper()
	if err := fs.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	// Make the file and its directories durable, as a log that was
	// written long ago would be.
	for d := filepath.Dir(name); ; d = filepath.Dir(d) {
		if err := vfs.SyncDir(fs, d); err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(d) == d {
			return
		}
	}
}

func segPath(epoch, index uint64) string { return filepath.Join(testDir, segmentName(epoch, index)) }

// rec is a record to frame by hand.
type rec struct {
	epoch, gen, first uint64
	count             uint32
	payload           []byte
}

// frame encodes records as a segment's bytes and returns each record's
// offset.
func frame(recs ...rec) ([]byte, []int64) {
	var b []byte
	var offs []int64
	for _, r := range recs {
		offs = append(offs, int64(len(b)))
		b = appendRecord(b, recordHeader{
			Header:    Header{Epoch: r.epoch, Generation: r.gen, FirstPos: r.first, Count: r.count},
			rawLength: uint32(len(r.payload)),
		}, r.payload)
	}
	return b, offs
}

// checkGot compares replayed records with expected headers, deriving
// payloads with payloadFor(first, salt) where salt is the epoch.
func checkGot(t testing.TB, gots []got, want []Header) {
	t.Helper()
	if len(gots) != len(want) {
		t.Fatalf("replayed %d records, want %d\ngot  %v\nwant %v", len(gots), len(want), headers(gots), want)
	}
	for i, g := range gots {
		if g.Header != want[i] {
			t.Fatalf("record %d: header %+v, want %+v", i, g.Header, want[i])
		}
		if p := payloadFor(g.FirstPos, int(g.Epoch)); !bytes.Equal(g.payload, p) {
			t.Fatalf("record %d (%+v): payload differs (%d bytes, want %d)", i, g.Header, len(g.payload), len(p))
		}
	}
}

func headers(gots []got) []Header {
	hs := make([]Header, len(gots))
	for i, g := range gots {
		hs[i] = g.Header
	}
	return hs
}

// logBuf collects a WAL's log lines (text format) for a test to check.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count returns how many lines contain every one of subs.
func (l *logBuf) count(subs ...string) int {
	n := 0
	for line := range strings.Lines(l.String()) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// logTo sends the WAL's log, from level Debug on, to l.
func logTo(l *logBuf) func(*Options) {
	return func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}
