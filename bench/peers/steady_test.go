package peers

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/wal"
)

// steady puts a rollwal WAL in the state of a writer that has run for a
// while. Before the clock starts, an untimed pass fills segments and
// drains them with RemoveThrough, so that the directory holds spares
// (wal.Options.Spares); while the clock runs, the WAL is drained again
// each time a segment's worth of payload has been appended, as the
// engine's flushes drain it, so that every roll writes over a spare rather
// than creating a segment and zero-filling it. A nil *steady is a fresh
// WAL: its methods do nothing.
type steady struct {
	w        *wal.WAL
	reg      *prometheus.Registry
	start    uint64       // the tail when the clock started
	since    atomic.Int64 // payload bytes appended since the last drain
	draining sync.Mutex
	// At the clock's start: segments written over spares so far, and
	// bytes of records written.
	recycled, written float64
}

// prefillBatch is the rows per sync of the untimed pass: big, so that the
// pass costs few fsyncs.
const prefillBatch = 4096

// newSteady fills w, in path, with walPayloads until it has more sealed
// segments than it keeps spares, drains it, then appends until a roll has
// written over a spare, and drains again: the clock starts in a segment
// written over a spare, as a writer that has run for a while is, not in
// the first segment of the WAL (created and zero-filled as it grows). It
// fails unless spares are then on disk.
func newSteady(b *testing.B, w *wal.WAL, reg *prometheus.Registry, path string) *steady {
	row := 0
	fill := func() {
		var last uint64
		var err error
		for end := row + prefillBatch; row < end; row++ {
			if last, err = w.Append(1, 1, payload(row)); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.SyncTo(last); err != nil {
			b.Fatal(err)
		}
	}
	for countFiles(b, path, ".wal") <= wal.DefaultSpares {
		fill()
	}
	if err := w.RemoveThrough(w.Tail()); err != nil {
		b.Fatal(err)
	}
	if n := countFiles(b, path, ".spare"); n == 0 {
		b.Fatalf("no spare in %s after the untimed pass", path)
	}
	for counter(b, reg, "writer_wal_segments_recycled_total") == 0 {
		fill()
	}
	if err := w.RemoveThrough(w.Tail()); err != nil {
		b.Fatal(err)
	}
	return &steady{w: w, reg: reg, start: w.Tail(),
		recycled: counter(b, reg, "writer_wal_segments_recycled_total"),
		written:  counter(b, reg, "writer_wal_written_bytes_total")}
}

// countFiles counts the files in dir whose names end in suffix.
func countFiles(b *testing.B, dir, suffix string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			n++
		}
	}
	return n
}

// appended notes n more payload bytes, durable up to position durable, and
// drains the WAL through durable once a segment's worth has come since the
// last drain: one caller drains while the others go on.
func (s *steady) appended(n int64, durable uint64) error {
	if s == nil || s.since.Add(n) < wal.DefaultSegmentSize || !s.draining.TryLock() {
		return nil
	}
	defer s.draining.Unlock()
	s.since.Store(0)
	return s.w.RemoveThrough(durable)
}

// report checks, once the clock stopped and the WAL is closed with tail
// as its last position, that the timed run appended rows positions and
// that wal.Scan reads the WAL to that tail; it reports the segments
// written over spares in the timed run ("recycled") and returns the bytes
// of records written per row.
func (s *steady) report(b *testing.B, path string, tail uint64, rows int64) float64 {
	if tail-s.start != uint64(rows) {
		b.Fatalf("rollwal appended positions %d to %d, want %d rows", s.start, tail, rows)
	}
	rep, err := wal.Scan(wal.ScanOptions{Dir: path})
	if err != nil {
		b.Fatal(err)
	}
	if last := rep.Segments[len(rep.Segments)-1]; last.LastPos != tail {
		b.Fatalf("rollwal's last segment %s ends at position %d, want %d", filepath.Base(last.Name), last.LastPos, tail)
	}
	b.ReportMetric(counter(b, s.reg, "writer_wal_segments_recycled_total")-s.recycled, "recycled")
	return (counter(b, s.reg, "writer_wal_written_bytes_total") - s.written) / float64(rows)
}
