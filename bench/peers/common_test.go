// Package peers measures rollwal against the peers of the benchmark matrix
// (shared BENCHMARKS.md), each in the same run as rollwal and as the raw
// disk floor: etcd's server/storage/wal, tidwall/wal, hashicorp/raft-wal,
// Pebble's record.LogWriter and record.Reader, a bare parquet-go
// GenericWriter and arrow-go's pqarrow. It is a module of its own so that
// the engine's go.mod does not inherit the peers' dependency graph.
//
// Every subject writes the same seeded rollout payloads
// (internal/rolloutgen: 200–2048 bytes of compressible text with random
// bytes sprinkled in, never zero-filled), and every benchmark checks that
// the work was done (it reads back the count of records or rows) so that it
// can fail. Ratios are reported with b.ReportMetric:
//
//	x-floor     rollwal's rows/s (or MB/s) over the raw floor's
//	x-<peer>    rollwal's rows/s over the peer's (above 1: rollwal is faster)
//	p50-us      median acknowledgement latency, p99-us its 99th percentile
//	B/row       bytes on disk per row
//
// BENCH_DIR puts the files on another disk than the default temporary
// directory. scripts/bench runs the suite and prints one table.
package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
)

var runSeq atomic.Int64 // names each run's files uniquely

// benchDir returns a fresh directory under BENCH_DIR, or b.TempDir.
// TestMain warns when that is tmpfs, where fsync costs nothing and every
// ratio against the floor is meaningless.
func benchDir(b *testing.B) string {
	root := os.Getenv("BENCH_DIR")
	if root == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(root, "peersbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// subdir names a fresh path below dir (not created).
func subdir(dir, what string) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d", what, runSeq.Add(1)))
}

// walPayloads are 1024 seeded rollout payloads of 200–2048 bytes (mean
// about 1.1 KiB): the "1 KiB records" of the WAL rows of the matrix.
var walPayloads = func() [][]byte {
	g := rolloutgen.New(42, "wal")
	out := make([][]byte, 1024)
	for i := range out {
		out[i] = []byte(g.Payload())
	}
	return out
}()

// payload returns the payload of row i.
func payload(i int) []byte { return walPayloads[i%len(walPayloads)] }

// batchPayloads are encoded 64-row rollout batches, the record the engine
// appends for one AppendBatch of 64 rows.
var batchPayloads = func() [][]byte {
	g := rolloutgen.New(7, "batch")
	out := make([][]byte, 16)
	for i := range out {
		batch, err := schema.Rollout().Build(g.Rows(rowsPerBatch))
		if err != nil {
			panic(err)
		}
		out[i] = batch.Encode(nil)
	}
	return out
}()

const rowsPerBatch = 64

// latencies collects acknowledgement latencies; each goroutine owns one.
type latencies []time.Duration

// reportLatency reports the p50 and p99 of all the latencies in us.
func reportLatency(b *testing.B, lat []latencies) (p50, p99 float64) {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return 0, 0
	}
	slices.Sort(all)
	p50 = float64(all[len(all)/2].Nanoseconds()) / 1e3
	p99 = float64(all[min(len(all)-1, len(all)*99/100)].Nanoseconds()) / 1e3
	b.ReportMetric(p50, "p50-us")
	b.ReportMetric(p99, "p99-us")
	return p50, p99
}

// rate is a subject's result, kept for the ratios of later subjects.
type rate struct {
	rows, mb, p50, p99 float64
	diskPerRow         float64 // bytes on disk per row, when measured
}

// reportRate reports rows/s and MB/s for b.N rows of bytes logical bytes
// over the timed region.
func reportRate(b *testing.B, rows, bytes int64) rate {
	secs := b.Elapsed().Seconds()
	r := rate{rows: float64(rows) / secs, mb: float64(bytes) / secs / 1e6}
	b.ReportMetric(r.rows, "rows/s")
	b.ReportMetric(r.mb, "MB/s")
	return r
}

// ratio reports num/den as name when both are known.
func ratio(b *testing.B, name string, num, den float64) {
	if num > 0 && den > 0 {
		b.ReportMetric(num/den, name)
	}
}

// fdatasyncFile is an *os.File whose Sync is fdatasync, as the WAL files
// of rollwal and Pebble (vfs.syncingFile on Linux) are synced.
type fdatasyncFile struct{ *os.File }

func (f fdatasyncFile) Sync() error { return unix.Fdatasync(int(f.Fd())) }

// openPreallocated creates path and reserves n bytes without changing its
// size (FALLOC_FL_KEEP_SIZE), as rollwal does for each segment.
func openPreallocated(b *testing.B, path string, n int64) fdatasyncFile {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return fdatasyncFile{f}
}

// floorKind selects the file the floor writes to.
type floorKind int

const (
	floorAppend    floorKind = iota // a fresh file that grows with each write
	floorPrezeroed                  // a file zero-filled and synced beforehand
)

// runFloor writes b.N rows of walPayloads to a plain file, perSync rows
// per write and fdatasync, from one goroutine: the disk's floor at that
// batch size. It reports rows/s, MB/s and the p50/p99 of the syncs.
func runFloor(b *testing.B, dir string, perSync int, kind floorKind) rate {
	path := subdir(dir, "floor")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if kind == floorPrezeroed {
		zeros := make([]byte, 1<<20)
		for size := int64(b.N) * 2048; size > 0; size -= int64(len(zeros)) {
			if _, err := f.Write(zeros[:min(int64(len(zeros)), size)]); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			b.Fatal(err)
		}
	}
	var buf []byte
	var total int64
	lat := make(latencies, 0, b.N/perSync+1)
	b.ResetTimer()
	for row := 0; row < b.N; {
		start := time.Now()
		buf = buf[:0]
		for end := min(row+perSync, b.N); row < end; row++ {
			buf = append(buf, payload(row)...)
		}
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		total += int64(len(buf))
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if off, err := f.Seek(0, 1); err != nil || off != total {
		b.Fatalf("floor wrote %d bytes, file offset %d (%v)", total, off, err)
	}
	r := reportRate(b, int64(b.N), total)
	r.p50, r.p99 = reportLatency(b, []latencies{lat})
	b.ReportMetric(float64(total)/float64(b.N), "B/row")
	return r
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCores reports the process's CPU time since start over the
// benchmark's elapsed time: how many cores the subject kept busy. Below
// the cores available while the subject is CPU-bound, other processes had
// the rest.
func reportCores(b *testing.B, start time.Duration) {
	if secs := b.Elapsed().Seconds(); secs > 0 {
		b.ReportMetric((cpuTime()-start).Seconds()/secs, "cores")
	}
}

// counter returns the value of the counter named name in reg.
func counter(b *testing.B, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	b.Fatalf("no counter %s", name)
	return 0
}

// fsType names the filesystem holding dir (as stat -f does).
func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	}
	return fmt.Sprintf("0x%x", st.Type)
}

func TestMain(m *testing.M) {
	dir := os.Getenv("BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	if t := fsType(dir); t == "tmpfs" || t == "overlay" {
		fmt.Fprintf(os.Stderr, "WARNING: %s is on %s: fsync is nearly free there, ratios against the floor are not meaningful\n", dir, t)
	}
	os.Exit(m.Run())
}
