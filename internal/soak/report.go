package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Report is what a soak did and saw.
type Report struct {
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`

	RowsAcked  int `json:"rows_acked"`
	RowsDoubt  int `json:"rows_in_doubt"`
	Batches    int `json:"batches"`
	Retries    int `json:"retries"` // sends of a batch after its first: the Client's and ours
	BaseRows   int `json:"base_rows"`
	BaseFiles  int `json:"base_files"`
	Merges     int `json:"merge_passes"`
	Starts     int `json:"serve_starts"`
	Kills      int `json:"sigkills"`
	Terms      int `json:"sigterms"`
	BadRefused int `json:"bad_requests_refused"`

	SlowOpened         int `json:"slow_connections_opened"`
	SlowClosedByServer int `json:"slow_connections_closed_by_server"`

	// StartMax is the longest a serve took from exec to serving every
	// shard (a killed owner's lease expiry and the replay included).
	StartMax time.Duration `json:"serve_start_max_ns"`

	Samples []Sample `json:"samples"`
}

// Sample is the serve's resources at one moment.
type Sample struct {
	At        time.Duration `json:"at_ns"` // since the start
	RSS       int64         `json:"rss_bytes"`
	PeakRSS   int64         `json:"peak_rss_bytes"` // of this serve process (VmHWM)
	FDs       int           `json:"open_fds"`
	Disk      int64         `json:"disk_bytes"` // allocated under the data directory
	EtcdDB    int64         `json:"etcd_db_bytes"`
	RowsAcked int           `json:"rows_acked"`
}

func (rep *Report) noteStart(d time.Duration) { rep.StartMax = max(rep.StartMax, d) }

// sampleLoop samples every SampleEvery while the run lasts.
func (r *run) sampleLoop(ctx context.Context) {
	for waitCtx(ctx, r.cfg.SampleEvery) {
		r.sample()
	}
}

// sample records one Sample of the serve running now (none while it is
// down).
func (r *run) sample() {
	pid, ok := r.servePID()
	if !ok {
		return
	}
	s := Sample{At: time.Since(r.rep.Started), RowsAcked: r.led.ackedBatches() * r.cfg.BatchRows}
	s.RSS, s.PeakRSS = procMemory(pid)
	s.FDs = procFDs(pid)
	s.Disk = diskUse(r.cfg.Dir)
	s.EtcdDB = r.etcdDBBytes()
	if s.RSS == 0 { // it exited between the pid and the read
		return
	}
	r.mu.Lock()
	r.rep.Samples = append(r.rep.Samples, s)
	r.mu.Unlock()
}

// procMemory reads VmRSS and VmHWM of pid.
func procMemory(pid int) (rss, peak int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch {
		case err != nil:
		case k == "VmRSS":
			rss = kb << 10
		case k == "VmHWM":
			peak = kb << 10
		}
	}
	return rss, peak
}

func procFDs(pid int) int {
	names, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(names)
}

// diskUse sums the blocks allocated to files under dir (preallocation
// included), as du does.
func diskUse(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// etcdDBBytes reads writer_etcd_db_bytes from the serve's /metrics; 0 if
// it does not answer.
func (r *run) etcdDBBytes() int64 {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + r.addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "writer_etcd_db_bytes "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int64(f)
		}
	}
	return 0
}

// Print writes the report as a summary and a table of samples (at most
// about rows lines).
func (rep *Report) Print(w io.Writer, rows int) {
	var peakRSS, disk, etcd int64
	var fds int
	for _, s := range rep.Samples {
		peakRSS, disk, etcd, fds = max(peakRSS, s.PeakRSS, s.RSS), max(disk, s.Disk), max(etcd, s.EtcdDB), max(fds, s.FDs)
	}
	fmt.Fprintf(w, "soak: %v; rows acknowledged %d (in doubt %d) in %d batches, %d retries; base %d rows in %d files after %d merge passes\n",
		rep.Took.Round(time.Second), rep.RowsAcked, rep.RowsDoubt, rep.Batches, rep.Retries, rep.BaseRows, rep.BaseFiles, rep.Merges)
	fmt.Fprintf(w, "soak: serve started %d times (%d SIGKILL, %d SIGTERM; slowest start %v); %d bad requests refused; slow connections %d opened, %d closed by the server\n",
		rep.Starts, rep.Kills, rep.Terms, rep.StartMax.Round(time.Millisecond), rep.BadRefused, rep.SlowOpened, rep.SlowClosedByServer)
	fmt.Fprintf(w, "soak: peak RSS %s, most open descriptors %d, most disk %s, largest etcd database %s\n",
		mibs(peakRSS), fds, mibs(disk), mibs(etcd))
	fmt.Fprintf(w, "%10s %10s %10s %6s %10s %10s %12s\n", "at", "rss", "peak-rss", "fds", "disk", "etcd-db", "rows-acked")
	step := max(1, len(rep.Samples)/max(rows, 1))
	for i, s := range rep.Samples {
		if i%step != 0 && i != len(rep.Samples)-1 {
			continue
		}
		fmt.Fprintf(w, "%10v %10s %10s %6d %10s %10s %12d\n", s.At.Round(time.Second), mibs(s.RSS), mibs(s.PeakRSS), s.FDs,
			mibs(s.Disk), mibs(s.EtcdDB), s.RowsAcked)
	}
}

func mibs(n int64) string { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }
