package peers

import (
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/prometheus/client_golang/prometheus"
	tidwal "github.com/tidwall/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	etcdwal "go.etcd.io/etcd/server/v3/storage/wal"

	"github.com/rollwal/rollwal/wal"
)

// BenchmarkWALAppend measures durable appends of 1 KiB-class rollout
// payloads from one goroutine, perSync rows per durable acknowledgement,
// against the floor and the WAL peers, all in the same run and directory:
//
//	sync-each  one row per ack    floor: write+fdatasync of 1 row
//	batch-64   64 rows per ack    floor: write+fdatasync of 64 rows
//
// Subjects run in order floor, floor-prezeroed, the peers, rollwal, and
// floor-end (the floor again: floor-drift is its rows/s over the first
// floor's; beyond ±10% the run was disturbed). batch-64 also runs
// rollwal-steady after rollwal: the same appends to a WAL in steady state,
// whose directory holds spares before the clock starts and which is
// drained as it runs (see steady), so that its rolls write over spares
// instead of zero-filling new segments; it carries rollwal's ratios and
// "recycled", the segments written over spares. The rollwal rows carry
// x-floor, x-floor-prezeroed and x-<peer>, its rows/s over theirs, and
// lat-vs-floor and lat-vs-floor-prezeroed, its p50 acknowledgement
// latency over the floors' (the sync-each targets are ≤ 1.1). b.N counts
// rows.
//
// The peers, each with its defaults and its own durability per call:
//
//	etcd      wal.Save(hardState, entries): one fdatasync per call
//	raft-wal  StoreLogs(logs): one fsync per call
//	tidwall   Write / WriteBatch, NoSync false: one fsync per call
func BenchmarkWALAppend(b *testing.B) {
	dir := benchDir(b)
	for _, c := range []struct {
		name    string
		perSync int
	}{{"sync-each", 1}, {"batch-64", 64}} {
		b.Run(c.name, func(b *testing.B) {
			var floor, prezeroed rate
			peers := map[string]rate{}
			b.Run("floor", func(b *testing.B) { floor = runFloor(b, dir, c.perSync, floorAppend) })
			b.Run("floor-prezeroed", func(b *testing.B) { prezeroed = runFloor(b, dir, c.perSync, floorPrezeroed) })
			for _, p := range []struct {
				name string
				run  func(b *testing.B, dir string, perSync int) rate
			}{{"etcd", runEtcd}, {"raft-wal", runRaftWAL}, {"tidwall", runTidwall}} {
				b.Run(p.name, func(b *testing.B) {
					r := p.run(b, dir, c.perSync)
					ratio(b, "x-floor", r.rows, floor.rows)
					peers[p.name] = r
				})
			}
			rollwal := func(b *testing.B, steady bool) {
				r := runRollwalSteady(b, dir, c.perSync, steady)
				ratio(b, "x-floor", r.rows, floor.rows)
				ratio(b, "x-floor-prezeroed", r.rows, prezeroed.rows)
				for _, name := range []string{"etcd", "raft-wal", "tidwall"} {
					ratio(b, "x-"+name, r.rows, peers[name].rows)
				}
				ratio(b, "lat-vs-floor", r.p50, floor.p50)
				ratio(b, "lat-vs-floor-prezeroed", r.p50, prezeroed.p50)
			}
			b.Run("rollwal", func(b *testing.B) { rollwal(b, false) })
			if c.perSync == rowsPerBatch {
				b.Run("rollwal-steady", func(b *testing.B) { rollwal(b, true) })
			}
			b.Run("floor-end", func(b *testing.B) {
				r := runFloor(b, dir, c.perSync, floorAppend)
				ratio(b, "floor-drift", r.rows, floor.rows)
			})
		})
	}
}

// runRollwal appends b.N rows to a fresh rollwal WAL, perSync Appends per
// SyncTo, and checks with wal.Scan that every row is on disk.
func runRollwal(b *testing.B, dir string, perSync int) rate {
	return runRollwalSteady(b, dir, perSync, false)
}

// runRollwalSteady is runRollwal, on a WAL in steady state (see steady)
// if asked: its appends are checked by their positions, since draining
// removes some of them.
func runRollwalSteady(b *testing.B, dir string, perSync int, steadyState bool) rate {
	reg := prometheus.NewRegistry()
	path := subdir(dir, "rollwal")
	w, err := wal.Open(wal.Options{Dir: path, Epoch: 1, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	var st *steady
	if steadyState {
		st = newSteady(b, w, reg, path)
	}
	syncs0 := counter(b, reg, "writer_wal_syncs_total")
	var total int64
	lat := make(latencies, 0, b.N/perSync+1)
	b.ReportAllocs()
	b.ResetTimer()
	for row := 0; row < b.N; {
		start := time.Now()
		var last uint64
		var n int64
		for end := min(row+perSync, b.N); row < end; row++ {
			p := payload(row)
			if last, err = w.Append(1, 1, p); err != nil {
				b.Fatal(err)
			}
			n += int64(len(p))
		}
		if err := w.SyncTo(last); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		total += n
		if err := st.appended(n, last); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syncs := counter(b, reg, "writer_wal_syncs_total") - syncs0
	tail := w.Tail()
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	r := reportRate(b, int64(b.N), total)
	r.p50, r.p99 = reportLatency(b, []latencies{lat})
	b.ReportMetric(float64(b.N)/syncs, "rows/fsync")
	if st != nil {
		b.ReportMetric(st.report(b, path, tail, int64(b.N)), "B/row")
	} else {
		b.ReportMetric(float64(scanRollwal(b, path, b.N))/float64(b.N), "B/row")
	}
	return r
}

// scanRollwal checks that the WAL in path holds exactly rows records and
// returns their bytes on disk.
func scanRollwal(b *testing.B, path string, rows int) int64 {
	rep, err := wal.Scan(wal.ScanOptions{Dir: path})
	if err != nil {
		b.Fatal(err)
	}
	if rep.Records != rows {
		b.Fatalf("rollwal holds %d records, want %d", rep.Records, rows)
	}
	return rep.Bytes
}

// runEtcd saves b.N rows as raft entries with etcd's WAL, perSync entries
// per Save, and reads them all back.
func runEtcd(b *testing.B, dir string, perSync int) rate {
	path := subdir(dir, "etcd")
	lg := zap.NewNop()
	w, err := etcdwal.Create(lg, path, nil)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	lat := make(latencies, 0, b.N/perSync+1)
	ents := make([]*raftpb.Entry, 0, perSync)
	b.ReportAllocs()
	b.ResetTimer()
	for row := 0; row < b.N; {
		start := time.Now()
		ents = ents[:0]
		for end := min(row+perSync, b.N); row < end; row++ {
			p := payload(row)
			ents = append(ents, &raftpb.Entry{Term: proto.Uint64(1), Index: proto.Uint64(uint64(row + 1)), Data: p})
			total += int64(len(p))
		}
		st := &raftpb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(uint64(row))}
		if err := w.Save(st, ents); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	r := reportRate(b, int64(b.N), total)
	r.p50, r.p99 = reportLatency(b, []latencies{lat})
	rd, err := etcdwal.OpenForRead(lg, path, &walpb.Snapshot{})
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	_, _, got, err := rd.ReadAll()
	if err != nil {
		b.Fatal(err)
	}
	if len(got) != b.N {
		b.Fatalf("etcd wal holds %d entries, want %d", len(got), b.N)
	}
	return r
}

// runRaftWAL stores b.N rows as raft logs with hashicorp/raft-wal, perSync
// logs per StoreLogs, and checks the last index.
func runRaftWAL(b *testing.B, dir string, perSync int) rate {
	path := subdir(dir, "raftwal")
	if err := os.MkdirAll(path, 0o755); err != nil {
		b.Fatal(err)
	}
	w, err := raftwal.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	lat := make(latencies, 0, b.N/perSync+1)
	logs := make([]*raft.Log, 0, perSync)
	b.ReportAllocs()
	b.ResetTimer()
	for row := 0; row < b.N; {
		start := time.Now()
		logs = logs[:0]
		for end := min(row+perSync, b.N); row < end; row++ {
			p := payload(row)
			logs = append(logs, &raft.Log{Index: uint64(row + 1), Term: 1, Type: raft.LogCommand, Data: p})
			total += int64(len(p))
		}
		if err := w.StoreLogs(logs); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	last, err := w.LastIndex()
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if last != uint64(b.N) {
		b.Fatalf("raft-wal last index %d, want %d", last, b.N)
	}
	r := reportRate(b, int64(b.N), total)
	r.p50, r.p99 = reportLatency(b, []latencies{lat})
	return r
}

// runTidwall writes b.N rows to tidwall/wal (Write for one row, WriteBatch
// for more), reopens it and checks the last index.
func runTidwall(b *testing.B, dir string, perSync int) rate {
	path := subdir(dir, "tidwall")
	l, err := tidwal.Open(path, &tidwal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	lat := make(latencies, 0, b.N/perSync+1)
	batch := new(tidwal.Batch)
	b.ReportAllocs()
	b.ResetTimer()
	for row := 0; row < b.N; {
		start := time.Now()
		if perSync == 1 {
			p := payload(row)
			row++
			if err := l.Write(uint64(row), p); err != nil {
				b.Fatal(err)
			}
			total += int64(len(p))
		} else {
			batch.Clear()
			for end := min(row+perSync, b.N); row < end; row++ {
				p := payload(row)
				batch.Write(uint64(row+1), p)
				total += int64(len(p))
			}
			if err := l.WriteBatch(batch); err != nil {
				b.Fatal(err)
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	r := reportRate(b, int64(b.N), total)
	r.p50, r.p99 = reportLatency(b, []latencies{lat})
	l, err = tidwal.Open(path, &tidwal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if last, err := l.LastIndex(); err != nil || last != uint64(b.N) {
		b.Fatalf("tidwall last index %d (%v), want %d", last, err, b.N)
	}
	return r
}
