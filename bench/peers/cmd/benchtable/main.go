// Command benchtable turns `go test -bench` output into one Markdown
// table: benchmark, rows/s, MB/s, p50/p99 acknowledgement latency (µs),
// bytes on disk per row, allocations per op, every x- ratio and the other
// metrics, followed by the matrix targets it can check and the machine the
// run was on. scripts/bench pipes the whole suite's output into it.
//
//	go test -run XXX -bench . ./... | go run ./cmd/benchtable -dir /tmp
//
// Benchmarks are named <package>.<name without "Benchmark" and -GOMAXPROCS>;
// a benchmark seen several times (-count) shows the range of its values.
// The machine block flags tmpfs (and overlay) filesystems and implausibly
// fast fsyncs (a floor p50 under 5 µs), where the ratios against the floor
// mean nothing.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	dir := flag.String("dir", os.TempDir(), "directory the benchmarks wrote to (its filesystem is reported)")
	goVersion := flag.String("go", runtime.Version(), "Go version to report")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(res.order) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results in the input")
		os.Exit(1)
	}
	m := machine{
		date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), nproc: runtime.NumCPU(),
		cpu: cpuModel(res.cpu), fs: fsType(*dir), dir: *dir, goVersion: *goVersion,
	}
	write(os.Stdout, res, m)
}

// results are the parsed benchmark lines, in first-seen order.
type results struct {
	order   []string
	metrics map[string]map[string][]float64 // name → unit → values
	cpu     string                          // the "cpu:" line, if any
	load    []float64                       // 1-minute load averages of "loadavg:" lines
}

var nameRE = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?$`)

// parse reads `go test -bench` output. A result line is a benchmark name,
// an iteration count and value/unit pairs; a name alone on a line (output
// came between) joins the next line that starts with a count.
func parse(r io.Reader) (*results, error) {
	res := &results{metrics: map[string]map[string][]float64{}}
	pkg, pending := "", ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			p := strings.TrimSpace(strings.TrimPrefix(line, "pkg: "))
			pkg = p[strings.LastIndex(p, "/")+1:]
			continue
		case strings.HasPrefix(line, "cpu: "):
			res.cpu = strings.TrimSpace(strings.TrimPrefix(line, "cpu: "))
			continue
		case strings.HasPrefix(line, "loadavg: "):
			if f := strings.Fields(strings.TrimPrefix(line, "loadavg: ")); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					res.load = append(res.load, v)
				}
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if nameRE.MatchString(f[0]) {
			pending = ""
			if len(f) == 1 {
				pending = f[0]
				continue
			}
		} else if _, err := strconv.Atoi(f[0]); err == nil && pending != "" {
			f = append([]string{pending}, f...)
			pending = ""
		}
		m := nameRE.FindStringSubmatch(f[0])
		if m == nil || len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := m[1]
		if pkg != "" {
			name = pkg + "." + name
		}
		units := res.metrics[name]
		if units == nil {
			units = map[string][]float64{}
			res.metrics[name] = units
			res.order = append(res.order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: value %q: %v", line, f[i], err)
			}
			units[f[i+1]] = append(units[f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// standard are the units with a column of their own (or left out).
var standard = map[string]bool{
	"ns/op": true, "rows/s": true, "MB/s": true, "p50-us": true, "p99-us": true,
	"B/row": true, "allocs/op": true, "B/op": true,
}

func write(w io.Writer, res *results, m machine) {
	load := ""
	if len(res.load) > 0 {
		load = "; load average (1 min) " + cell(res.load)
	}
	fmt.Fprintf(w, "Machine: %d cores, %s, %s; bench dir %s on **%s**; run %s%s\n\n", m.nproc, m.cpu, m.goVersion, m.dir, m.fs, m.date, load)
	for _, warn := range warnings(res, m) {
		fmt.Fprintf(w, "> **WARNING:** %s\n\n", warn)
	}
	fmt.Fprintln(w, "| benchmark | rows/s | MB/s | p50 / p99 µs | B/row | allocs/op (B/op) | ratios | other |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|---|")
	for _, name := range res.order {
		u := res.metrics[name]
		lat := ""
		if _, ok := u["p50-us"]; ok {
			lat = cell(u["p50-us"]) + " / " + cell(u["p99-us"])
		}
		allocs := cell(u["allocs/op"])
		if b := u["B/op"]; b != nil {
			allocs += " (" + cell(b) + ")"
		}
		var ratios, other []string
		if u["rows/s"] == nil && u["ns/op"] != nil {
			ms := make([]float64, len(u["ns/op"]))
			for i, ns := range u["ns/op"] {
				ms[i] = ns / 1e6
			}
			other = append(other, "ms/op "+cell(ms))
		}
		for _, unit := range sortedUnits(u) {
			if standard[unit] {
				continue
			}
			s := unit + " " + cell(u[unit])
			if strings.HasPrefix(unit, "x-") {
				ratios = append(ratios, s)
			} else {
				other = append(other, s)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, cell(u["rows/s"]), cell(u["MB/s"]),
			lat, cell(u["B/row"]), allocs, strings.Join(ratios, ", "), strings.Join(other, ", "))
	}
	if rows := checkTargets(res); len(rows) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| target | benchmark | measured | met |")
		fmt.Fprintln(w, "|---|---|---:|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.target, r.name, r.value, r.met)
		}
	}
}

func sortedUnits(u map[string][]float64) []string {
	units := make([]string, 0, len(u))
	for k := range u {
		units = append(units, k)
	}
	slices.Sort(units)
	return units
}

// cell formats values: one value, or the min–max range of several (one
// value when both ends print the same).
func cell(vs []float64) string {
	if len(vs) == 0 {
		return ""
	}
	lo, hi := num(slices.Min(vs)), num(slices.Max(vs))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// num prints three significant digits, with k and M for large values.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 10e6:
		return strconv.FormatFloat(v/1e6, 'f', 0, 64) + "M"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case a >= 100e3:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	case a >= 10e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a == 0:
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// target is a matrix target the table can check from one metric.
type target struct {
	desc   string
	name   *regexp.Regexp // benchmarks it applies to
	unit   string
	atMost bool // the value must be ≤ limit (else ≥)
	limit  float64
}

// targets follow the matrix of the shared BENCHMARKS.md.
var targets = []target{
	{"WAL sync-each: ≤ 1.1× floor latency (p50)", regexp.MustCompile(`^peers\.WALAppend/sync-each/rollwal$`), "lat-vs-floor", true, 1.1},
	{"WAL batch 64×1 KiB: ≥ 0.9× floor", regexp.MustCompile(`^peers\.WALAppend/batch-64/rollwal$`), "x-floor", false, 0.9},
	{"WAL batch 64×1 KiB: ≥ 1.0× etcd", regexp.MustCompile(`^peers\.WALAppend/batch-64/rollwal$`), "x-etcd", false, 1.0},
	{"WAL batch 64×1 KiB: ≥ 1.3× tidwall", regexp.MustCompile(`^peers\.WALAppend/batch-64/rollwal$`), "x-tidwall", false, 1.3},
	// The group-commit targets hold a WAL as it runs for long: with 128
	// writers, the rows written over spare segments (rollwal-steady). The
	// fresh WAL's rows are reported beside them: its first segment is
	// created, and zero-filled as it grows.
	{"group commit: ≥ 1.0× Pebble rows/s", regexp.MustCompile(`^peers\.WALGroupCommit/writers=(16/rollwal|128/rollwal-steady)$`), "x-pebble", false, 1.0},
	{"group commit: p99 ack ≤ 2× floor p99 + 1 ms", regexp.MustCompile(`^peers\.WALGroupCommit/writers=(16/rollwal|128/rollwal-steady)$`), "p99-budget", true, 1.0},
	{"s2: ≥ 0.9× uncompressed rows/s", regexp.MustCompile(`^peers\.WALCompression/codec=s2/rollwal$`), "x-uncompressed", false, 0.9},
	{"s2: ≥ 1.6× fewer bytes", regexp.MustCompile(`^peers\.WALCompression/codec=s2/rollwal$`), "x-smaller", false, 1.6},
	{"replay: ≤ 1 s/GiB warm", regexp.MustCompile(`^peers\.WALReplay/rec=\w+/rollwal(-decode)?$`), "s/GiB", true, 1.0},
	{"flush: ≥ 0.9× bare parquet-go", regexp.MustCompile(`^peers\.Flush/codec=snappy/rows=100k$`), "x-parquet-go", false, 0.9},
	{"flush: ≥ 1.4× arrow", regexp.MustCompile(`^peers\.Flush/codec=snappy/rows=100k$`), "x-arrow", false, 1.4},
	{"ingest: ≥ 150k rows/s (1 KiB rows)", regexp.MustCompile(`^bench\.Ingest/producers=\d+/wal=none$`), "rows/s", false, 150e3},
	{"merge ID-check: ≥ 0.5× lookup-free", regexp.MustCompile(`^publish\.Merge/base=\d+/id-check-\w+$`), "x-lookup-free", false, 0.5},
	{"snapshot: ≥ 5k persists/s, 64 in flight", regexp.MustCompile(`^snapshot\.SnapshotPersist/lwt$`), "persists/s", false, 5000},

	// Issue #18's stricter targets (performance to the floor).
	{"#18 WAL sync-each: ≤ 1.1× the pre-zeroed floor's p50", regexp.MustCompile(`^peers\.WALAppend/sync-each/rollwal$`), "lat-vs-floor-prezeroed", true, 1.1},
	{"#18 WAL sync-each: ahead of etcd", regexp.MustCompile(`^peers\.WALAppend/sync-each/rollwal$`), "x-etcd", false, 1.0},
	{"#18 WAL sync-each: ahead of raft-wal", regexp.MustCompile(`^peers\.WALAppend/sync-each/rollwal$`), "x-raft-wal", false, 1.0},
	// A pre-zeroed file is a segment whose blocks exist: like for like,
	// rollwal's steady state, writing over spare segments.
	{"#18 WAL batch 64×1 KiB: ≥ 0.9× the pre-zeroed floor", regexp.MustCompile(`^peers\.WALAppend/batch-64/rollwal-steady$`), "x-floor-prezeroed", false, 0.9},
	{"#18 group commit, 128 writers: ≥ 1.2× Pebble", regexp.MustCompile(`^peers\.WALGroupCommit/writers=128/rollwal-steady$`), "x-pebble", false, 1.2},
	{"#18 replay with decode: ≤ 0.5 s/GiB warm", regexp.MustCompile(`^peers\.WALReplay/rec=batch64/rollwal-decode$`), "s/GiB", true, 0.5},
	{"#18 flush: ≥ 1.2× bare parquet-go", regexp.MustCompile(`^peers\.Flush/codec=snappy/rows=100k$`), "x-parquet-go", false, 1.2},
	{"#18 HTTP NDJSON: ≥ 0.6× in-process", regexp.MustCompile(`^bench\.HTTPIngest/batch=\d+/format=ndjson/clients=\d+$`), "x-inprocess", false, 0.6},
	{"#18 HTTP Arrow IPC: ≥ 0.9× in-process", regexp.MustCompile(`^bench\.HTTPIngest/batch=\d+/format=arrow/clients=\d+$`), "x-inprocess", false, 0.9},
	{"#18 sustained ingest, p99 ack ≤ 50 ms: ≥ 120k rows/s", regexp.MustCompile(`^bench\.SustainedIngest`), "rows/s", false, 120e3},
	{"#15 RL rows, flush: ≥ 0.9× bare parquet-go", regexp.MustCompile(`^generation\.FlushRL/codec=\w+/rows=\d+$`), "x-parquet-go", false, 0.9},
	{"#15 RL rows, ingest: ≥ 0.9× bare parquet-go", regexp.MustCompile(`^bench\.IngestRL/producers=\d+/wal=\w+$`), "x-parquet-go", false, 0.9},
	{"#18 merge lookup-free: ≥ 0.5× a verbatim row-group copy", regexp.MustCompile(`^publish\.Merge/base=\d+/lookup-free$`), "x-rowgroup-copy", false, 0.5},
}

type targetRow struct{ target, name, value, met string }

func metOr(ok bool) string {
	if ok {
		return "**met**"
	}
	return "not met"
}

func mean(vs []float64) float64 {
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

// derivedTargets checks the targets that combine benchmarks: ingest
// against its slower stage (the WAL with 16 writers appending 64-row
// batches, and the snappy flush, both measured in the same suite run), and
// the merge ID-check cost against the base size.
func derivedTargets(res *results) []targetRow {
	var out []targetRow
	get := func(name, unit string) float64 {
		if vs := res.metrics[name][unit]; len(vs) > 0 {
			return mean(vs)
		}
		return 0
	}
	flush := get("generation.Flush/codec=snappy/rows=100k", "rows/s")
	for _, codec := range []string{"none", "s2"} {
		name := "bench.Ingest/producers=16/wal=" + codec
		ingest, walOnly := get(name, "rows/s"), get("peers.WALCompression/codec="+codec+"/rollwal", "rows/s")
		if ingest == 0 || walOnly == 0 || flush == 0 {
			continue
		}
		slower := min(walOnly, flush)
		value := fmt.Sprintf("%s ÷ min(WAL %s, flush %s) = %s", num(ingest), num(walOnly), num(flush), num(ingest/slower))
		out = append(out, targetRow{"ingest: ≥ 0.8× the slower stage (WAL-only, flush-only)", name, value, metOr(ingest/slower >= 0.8)},
			targetRow{"#18 ingest: ≥ 0.9× the slower stage", name, value, metOr(ingest/slower >= 0.9)})
	}
	var sizes []int
	for _, name := range res.order {
		var size int
		if _, err := fmt.Sscanf(name, "publish.Merge/base=%d/id-check-replay", &size); err == nil {
			sizes = append(sizes, size)
		}
	}
	slices.Sort(sizes)
	if n := len(sizes); n >= 2 {
		big, small := sizes[n-1], sizes[n-2]
		at := func(size int) float64 {
			return get(fmt.Sprintf("publish.Merge/base=%d/id-check-replay", size), "ns/op")
		}
		growth := at(big) / at(small)
		out = append(out, targetRow{"merge ID-check: flat in the base size (within 1.2×)",
			fmt.Sprintf("publish.Merge/base=%d vs %d/id-check-replay", big, small),
			fmt.Sprintf("%s ms ÷ %s ms = %s", num(at(big)/1e6), num(at(small)/1e6), num(growth)), metOr(growth <= 1.2)})
	}
	return out
}

func checkTargets(res *results) []targetRow {
	var out []targetRow
	for _, t := range targets {
		measured := false
		for _, name := range res.order {
			vs := res.metrics[name][t.unit]
			if !t.name.MatchString(name) || len(vs) == 0 {
				continue
			}
			measured = true
			worst := slices.Min(vs)
			if t.atMost {
				worst = slices.Max(vs)
			}
			met := metOr(!(t.atMost && worst > t.limit) && !(!t.atMost && worst < t.limit))
			out = append(out, targetRow{t.desc, name, t.unit + " " + cell(vs), met})
		}
		if !measured {
			// Said, rather than left out: a target no benchmark of the run
			// reports is not met either.
			out = append(out, targetRow{t.desc, t.name.String(), "no " + t.unit + " in this run", "not measured"})
		}
	}
	return append(out, derivedTargets(res)...)
}

type machine struct {
	date, cpu, fs, dir, goVersion string
	nproc                         int
}

func warnings(res *results, m machine) []string {
	var out []string
	if m.fs == "tmpfs" || m.fs == "overlay" {
		out = append(out, fmt.Sprintf("the bench directory is on %s: fsync is nearly free there, every ratio against the floor is meaningless", m.fs))
	}
	for _, name := range res.order {
		if d := res.metrics[name]["floor-drift"]; len(d) > 0 && (slices.Min(d) < 0.9 || slices.Max(d) > 1.1) {
			out = append(out, fmt.Sprintf("%s: the floor measured again at the end ran at %s× the first floor's rows/s; the disk's speed drifted during the run (other I/O on the machine), so the ratios against the floor of that group are unreliable", name, cell(d)))
		}
		if !strings.Contains(name, "/floor") {
			continue
		}
		if p50 := res.metrics[name]["p50-us"]; len(p50) > 0 && slices.Min(p50) < 5 {
			out = append(out, fmt.Sprintf("%s: fdatasync p50 %s µs is implausibly fast for a durable disk", name, cell(p50)))
		}
	}
	return out
}

// cpuModel returns the first "model name" of /proc/cpuinfo, else fallback.
func cpuModel(fallback string) string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	if fallback == "" {
		return "unknown CPU"
	}
	return fallback
}

// fsType names the filesystem holding dir, from statfs's magic number.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case 0x01021994:
		return "tmpfs"
	case 0xef53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683e:
		return "btrfs"
	case 0x794c7630:
		return "overlay"
	case 0x6969:
		return "nfs"
	case 0x2fc12fc1:
		return "zfs"
	}
	return fmt.Sprintf("0x%x", st.Type)
}
