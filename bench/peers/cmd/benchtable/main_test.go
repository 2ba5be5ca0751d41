package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/rollwal/rollwal/bench/peers
cpu: AMD EPYC
loadavg: 4.06 3.26 2.13
BenchmarkWALAppend/sync-each/floor-2   	     200	    164657 ns/op	   6.98 MB/s	      1149 B/row	       2.5 p50-us	       266.7 p99-us	      6073 rows/s
BenchmarkWALAppend/batch-64/rollwal-2  	     200	     10310 ns/op	 111.41 MB/s	      1193 B/row	       488.6 p50-us	       912.5 p99-us	     96997 rows/s	         0.7967 x-etcd	         0.5624 x-floor	         1.343 x-tidwall	    3777 B/op	       0 allocs/op
BenchmarkWALAppend/batch-64/rollwal-2  	     200	     10310 ns/op	 121.41 MB/s	      1193 B/row	       488.6 p50-us	       912.5 p99-us	     106997 rows/s	         0.8967 x-etcd	         0.9624 x-floor	         1.343 x-tidwall	    3777 B/op	       0 allocs/op
BenchmarkFlush/codec=snappy/rows=100k-2
    some log line
       4	 502229923 ns/op	 238.06 MB/s	       596.5 B/row	    199112 rows/s	         0.8389 x-arrow	         2.023 x-parquet-go
PASS
loadavg: 1.50 3.26 2.13
pkg: github.com/rollwal/rollwal/wal
BenchmarkWALAppend/sync-each/rollwal-2 	    2000	    160000 ns/op	 6.2 MB/s	 6200 rows/s	 0.87 x-floor
ok  	github.com/rollwal/rollwal/wal	1.0s
pkg: github.com/rollwal/rollwal/bench/peers
BenchmarkWALCompression/codec=none/rollwal-2 	 2000	 390990 ns/op	 200000 rows/s
pkg: github.com/rollwal/rollwal/generation
BenchmarkFlush/codec=snappy/rows=100k-2 	 3	 400000000 ns/op	 250000 rows/s
pkg: github.com/rollwal/rollwal/bench
BenchmarkIngest/producers=16/wal=none-2 	 1500	 400000 ns/op	 150000 rows/s
pkg: github.com/rollwal/rollwal/publish
BenchmarkMerge/base=100000/id-check-replay-2 	 5	 10000000 ns/op
BenchmarkMerge/base=1000000/id-check-replay-2 	 5	 13000000 ns/op
`

func TestParseAndWrite(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"peers.WALAppend/sync-each/floor", "peers.WALAppend/batch-64/rollwal",
		"peers.Flush/codec=snappy/rows=100k", "wal.WALAppend/sync-each/rollwal",
		"peers.WALCompression/codec=none/rollwal", "generation.Flush/codec=snappy/rows=100k",
		"bench.Ingest/producers=16/wal=none", "publish.Merge/base=100000/id-check-replay",
		"publish.Merge/base=1000000/id-check-replay"}
	if strings.Join(res.order, ",") != strings.Join(want, ",") {
		t.Fatalf("benchmarks %q, want %q", res.order, want)
	}
	if got := res.metrics["peers.WALAppend/batch-64/rollwal"]["x-floor"]; len(got) != 2 {
		t.Fatalf("two runs of x-floor, got %v", got)
	}
	var out bytes.Buffer
	write(&out, res, machine{nproc: 2, cpu: "AMD EPYC", fs: "tmpfs", dir: "/tmp", goVersion: "go1.26.8", date: "today"})
	s := out.String()
	for _, w := range []string{
		"| peers.WALAppend/batch-64/rollwal | 97.0k–107k | 111–121 | 489 / 912 | 1193 | 0 (3777) | x-etcd 0.80–0.90, x-floor 0.56–0.96, x-tidwall 1.34 |",
		"| peers.Flush/codec=snappy/rows=100k | 199k | 238 |",
		"x-arrow 0.84, x-parquet-go 2.02",
		"on **tmpfs**; run today; load average (1 min) 1.50–4.06",
		"WARNING:** the bench directory is on tmpfs",
		"peers.WALAppend/sync-each/floor: fdatasync p50 2.50 µs is implausibly fast",
		"x-tidwall 1.34 |",
		"| WAL batch 64×1 KiB: ≥ 0.9× floor | peers.WALAppend/batch-64/rollwal | x-floor 0.56–0.96 | not met |",
		"| WAL batch 64×1 KiB: ≥ 1.3× tidwall | peers.WALAppend/batch-64/rollwal | x-tidwall 1.34 | **met** |",
		"| flush: ≥ 1.4× arrow | peers.Flush/codec=snappy/rows=100k | x-arrow 0.84 | not met |",
		"| ingest: ≥ 0.8× the slower stage (WAL-only, flush-only) | bench.Ingest/producers=16/wal=none | 150k ÷ min(WAL 200k, flush 250k) = 0.75 | not met |",
		"| merge ID-check: flat in the base size (within 1.2×) | publish.Merge/base=1000000 vs 100000/id-check-replay | 13.0 ms ÷ 10.0 ms = 1.30 | not met |",
		"| publish.Merge/base=100000/id-check-replay |  |  |  |  |  |  | ms/op 10.0 |",
		"| #18 WAL batch 64×1 KiB: ≥ 0.9× the pre-zeroed floor | ^peers\\.WALAppend/batch-64/rollwal-steady$ | no x-floor-prezeroed in this run | not measured |",
		"| #18 ingest: ≥ 0.9× the slower stage | bench.Ingest/producers=16/wal=none | 150k ÷ min(WAL 200k, flush 250k) = 0.75 | not met |",
		"| #18 flush: ≥ 1.2× bare parquet-go | peers.Flush/codec=snappy/rows=100k | x-parquet-go 2.02 | **met** |",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("output lacks %q:\n%s", w, s)
		}
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 0.01234: "0.012", 0.8: "0.80", 1.234: "1.23", 12.34: "12.3", 123.4: "123",
		12345: "12.3k", 123456: "123k", 1234567: "1.23M", 12345678: "12M",
	} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}
