package wal

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/rollwal/rollwal/vfs"
)

// BenchmarkWALAppend measures durable appends of rollout-like rows
// (200–2048 bytes of compressible text with random bytes sprinkled in)
// next to the machine's floor, measured in the same run and directory: a
// plain file appended with the same bytes per fdatasync.
//
//	sync-each  one row per SyncTo                 floor: 1 row per fdatasync
//	batch-64   64 Appends, then one SyncTo        floor: 64 rows per fdatasync
//	group-N    N goroutines, each Append+SyncTo   floor: N rows per fdatasync
//
// Every row reports rows/s and MB/s (payload bytes); the rollwal rows also
// report x-floor, rollwal throughput over the floor's. Virtual disks vary
// from run to run; compare ratios, not absolute numbers. BENCH_DIR puts
// the files on another disk than the default temporary directory.
func BenchmarkWALAppend(b *testing.B) {
	dir := benchDir(b)
	payloads := benchPayloads(1024)
	for _, c := range []struct {
		name             string
		writers, perSync int
	}{
		{"sync-each", 1, 1},
		{"batch-64", 1, 64},
		{"group-16", 16, 1},
		{"group-128", 128, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			var floor float64
			b.Run("floor", func(b *testing.B) {
				floor = runFloor(b, dir, payloads, c.perSync*c.writers)
			})
			b.Run("rollwal", func(b *testing.B) {
				rate := runWAL(b, dir, payloads, c.writers, c.perSync)
				if floor > 0 {
					b.ReportMetric(rate/floor, "x-floor")
				}
			})
		})
	}
}

// BenchmarkWALPreallocate compares preallocation on the commit path: none
// (every write grows the file's blocks and its size), then steps of
// DefaultPreallocate and the whole segment at creation, each zero-filled
// (the default: fdatasync has no size to commit) and fallocated (the size
// grows with every write, so fdatasync commits it every time; the
// reservation spares it the block allocation only). Run enough rows to
// cross several steps (-benchtime 8000x for sync-each, 50000x for
// batch-64).
func BenchmarkWALPreallocate(b *testing.B) {
	dir := benchDir(b)
	payloads := benchPayloads(1024)
	for _, c := range []struct {
		name             string
		writers, perSync int
	}{
		{"sync-each", 1, 1},
		{"batch-64", 1, 64},
	} {
		for _, p := range []struct {
			name string
			step int64
			mode Preallocation
		}{
			{"none", -1, ZeroFill},
			{"4MiB-zero", DefaultPreallocate, ZeroFill},
			{"4MiB-fallocate", DefaultPreallocate, Fallocate},
			{"segment-zero", DefaultSegmentSize, ZeroFill},
			{"segment-fallocate", DefaultSegmentSize, Fallocate},
		} {
			b.Run(c.name+"/prealloc="+p.name, func(b *testing.B) {
				runWAL(b, dir, payloads, c.writers, c.perSync, preallocate(p.step),
					func(o *Options) { o.PreallocateMode = p.mode })
			})
		}
	}
}

var benchRun atomic.Int64 // names each run's files uniquely

func benchDir(b *testing.B) string {
	root := os.Getenv("BENCH_DIR")
	if root == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(root, "walbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// benchPayloads returns n seeded rows of 200–2048 bytes.
func benchPayloads(n int) [][]byte {
	rng := rand.New(rand.NewPCG(42, 2048))
	out := make([][]byte, n)
	for i := range out {
		out[i] = textPayload(rng, 200+rng.IntN(2048-200+1))
	}
	return out
}

// report records rows/s and MB/s for b.N rows of payloads and returns
// rows/s.
func report(b *testing.B, bytes int64) float64 {
	secs := b.Elapsed().Seconds()
	rate := float64(b.N) / secs
	b.ReportMetric(rate, "rows/s")
	b.ReportMetric(float64(bytes)/secs/1e6, "MB/s")
	return rate
}

// runFloor appends b.N rows to a plain file, perSync rows per write and
// fdatasync, and returns rows/s.
func runFloor(b *testing.B, dir string, payloads [][]byte, perSync int) float64 {
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("floor-%d", benchRun.Add(1))),
		os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var buf []byte
	var total int64
	b.ResetTimer()
	for row := 0; row < b.N; {
		buf = buf[:0]
		for end := min(row+perSync, b.N); row < end; row++ {
			buf = append(buf, payloads[row%len(payloads)]...)
		}
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		total += int64(len(buf))
	}
	b.StopTimer()
	return report(b, total)
}

// runWAL appends b.N rows to a WAL from writers goroutines, each syncing
// after every perSync rows, and returns rows/s.
func runWAL(b *testing.B, dir string, payloads [][]byte, writers, perSync int, mod ...func(*Options)) float64 {
	w, err := Open(testOptions(vfs.Default, 1, append([]func(*Options){func(o *Options) {
		o.Dir = filepath.Join(dir, fmt.Sprintf("wal-%d", benchRun.Add(1)))
	}}, mod...)...))
	if err != nil {
		b.Fatal(err)
	}
	var next, total atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range writers {
		wg.Go(func() {
			for {
				row := int(next.Add(int64(perSync))) - perSync
				if row >= b.N {
					return
				}
				n, err := appendRows(w, payloads, row, min(row+perSync, b.N))
				if err != nil {
					b.Error(err)
					return
				}
				total.Add(n)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	syncs := counterValue(w.m.syncs)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/syncs, "rows/fsync")
	b.ReportMetric(histMean(w.m.fsyncDuration)*1e6, "µs/fsync")
	return report(b, total.Load())
}

// appendRows appends rows [from, to) and syncs them, returning their bytes.
func appendRows(w *WAL, payloads [][]byte, from, to int) (int64, error) {
	var n int64
	var last uint64
	for row := from; row < to; row++ {
		p := payloads[row%len(payloads)]
		first, err := w.Append(1, 1, p)
		if err != nil {
			return n, err
		}
		last, n = first, n+int64(len(p))
	}
	return n, w.SyncTo(last)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func histMean(h prometheus.Histogram) float64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.GetHistogram().GetSampleCount() == 0 {
		return 0
	}
	return m.GetHistogram().GetSampleSum() / float64(m.GetHistogram().GetSampleCount())
}
