package peers

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/record"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

// BenchmarkWALReplay measures recovery, warm (the files were just written,
// so they are in the page cache): about 256 MiB of payload (1 GiB with
// ROLLWAL_BENCH_BIG=1) is written once, off the clock, to a rollwal WAL and
// to a Pebble log (LogWriter.WriteRecord, same payloads in the same order),
// then each op reads it all back:
//
//	raw-read        the rollwal segment files read sequentially, 1 MiB at
//	                a time: the floor
//	pebble-reader   record.Reader over the Pebble log, every record read
//	rollwal         wal.Open (sealed segments walked by their headers, the
//	                last segment read whole, a new segment) and
//	                Replay(0, Tail) (read, CRC, hand each payload to the
//	                callback)
//	rollwal-decode  the same, and each payload decoded into a schema.Batch,
//	                as the engine does before refilling the memtable
//	                (rec=batch64 only)
//
// Two record shapes: rec=row, one ~1.1 KiB row per record, and
// rec=batch64, an encoded 64-row batch (~70 KiB) per record, the engine's
// shape. open-share is the part of rollwal's time spent in Open. s/GiB is seconds per GiB of payload (target ≤ 1 warm); x-pebble
// and x-raw-read are rollwal's speed over theirs. Every op checks the
// record count.
func BenchmarkWALReplay(b *testing.B) {
	size := int64(256 << 20)
	if os.Getenv("ROLLWAL_BENCH_BIG") != "" {
		size = 1 << 30
	}
	dir := benchDir(b)
	for _, shape := range []struct {
		name     string
		payloads [][]byte
		rowsPer  int
	}{{"row", walPayloads, 1}, {"batch64", batchPayloads, rowsPerBatch}} {
		b.Run("rec="+shape.name, func(b *testing.B) {
			walDir, pebblePath := subdir(dir, "rollwal"), subdir(dir, "pebble")
			records, logical := writeReplayData(b, walDir, pebblePath, shape.payloads, shape.rowsPer, size)
			gib := float64(logical) / (1 << 30)
			perOp := func(b *testing.B) float64 {
				s := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(s/gib, "s/GiB")
				b.ReportMetric(float64(logical)/s/1e6, "MB/s")
				b.ReportMetric(float64(records*shape.rowsPer)/s, "rows/s")
				return s
			}
			var raw, pebble float64
			b.Run("raw-read", func(b *testing.B) {
				buf := make([]byte, 1<<20)
				for b.Loop() {
					if n := readDir(b, walDir, buf); n < logical {
						b.Fatalf("read %d bytes, want at least %d", n, logical)
					}
				}
				raw = perOp(b)
			})
			b.Run("pebble-reader", func(b *testing.B) {
				buf := make([]byte, 0, 256<<10)
				for b.Loop() {
					if n, bytes := readPebble(b, pebblePath, buf); n != records || bytes != logical {
						b.Fatalf("pebble read %d records, %d bytes; want %d, %d", n, bytes, records, logical)
					}
				}
				pebble = perOp(b)
				ratio(b, "x-raw-read", raw, pebble)
			})
			decodes := []bool{false}
			if shape.rowsPer > 1 {
				decodes = append(decodes, true)
			}
			for _, decode := range decodes {
				name := "rollwal"
				if decode {
					name = "rollwal-decode"
				}
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					var open time.Duration
					for b.Loop() {
						replayRollwal(b, walDir, records, logical, decode, &open)
					}
					s := perOp(b)
					b.ReportMetric(open.Seconds()/b.Elapsed().Seconds(), "open-share")
					ratio(b, "x-pebble", pebble, s)
					ratio(b, "x-raw-read", raw, s)
				})
			}
		})
	}
}

// writeReplayData writes payloads round-robin until size bytes, once to a
// rollwal WAL in walDir (records covering rowsPer positions) and once to a Pebble log at pebblePath, and returns
// the record count and payload bytes.
func writeReplayData(b *testing.B, walDir, pebblePath string, payloads [][]byte, rowsPer int, size int64) (records int, logical int64) {
	w, err := wal.Open(wal.Options{Dir: walDir, Epoch: 1})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(pebblePath)
	if err != nil {
		b.Fatal(err)
	}
	lw := record.NewLogWriter(fdatasyncFile{f}, 1, record.LogWriterConfig{})
	for ; logical < size; records++ {
		p := payloads[records%len(payloads)]
		if _, err := w.Append(1, uint32(rowsPer), p); err != nil {
			b.Fatal(err)
		}
		if _, err := lw.WriteRecord(p); err != nil {
			b.Fatal(err)
		}
		logical += int64(len(p))
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := lw.Close(); err != nil {
		b.Fatal(err)
	}
	return records, logical
}

// readDir reads every file in dir sequentially into buf and returns the
// bytes read.
func readDir(b *testing.B, dir string, buf []byte) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		for {
			m, err := f.Read(buf)
			n += int64(m)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		f.Close()
	}
	return n
}

// replayRollwal opens the WAL in dir and replays all of it, checking the
// record count and bytes; with decode it decodes every payload as a batch.
// The segment Open creates is closed and removed off the clock. The time
// Open took is added to *openTime.
func replayRollwal(b *testing.B, dir string, records int, logical int64, decode bool, openTime *time.Duration) {
	b.StopTimer()
	before, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	w, err := wal.Open(wal.Options{Dir: dir, Epoch: 1})
	if err != nil {
		b.Fatal(err)
	}
	*openTime += time.Since(start)
	var n int
	var bytes int64
	s := schema.Rollout()
	err = w.Replay(0, w.Tail(), func(h wal.Header, p []byte) error {
		n++
		bytes += int64(len(p))
		if decode {
			batch, err := s.DecodeBorrowed(p) // as the engine's replay does: its memtable copies what it keeps
			if err != nil {
				return err
			}
			if len(batch.IDs) != int(h.Count) {
				b.Fatalf("record at %d decoded %d rows, covers %d", h.FirstPos, len(batch.IDs), h.Count)
			}
		}
		return nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if n != records || bytes != logical {
		b.Fatalf("replayed %d records, %d bytes; want %d, %d", n, bytes, records, logical)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	after, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range after {
		if !slices.ContainsFunc(before, func(o os.DirEntry) bool { return o.Name() == e.Name() }) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StartTimer()
}
