package main

// The writer as real processes: `writer serve` children that the tests post
// to, SIGKILL and SIGTERM, against the embedded etcd or a real 3-member etcd
// cluster, and the base that `writer merge` makes of what they wrote, read
// back through its readers' manifest (in Go, and with pyarrow when
// ROLLWAL_PYTHON is set).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/etcdcluster"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/server"
	"github.com/rollwal/rollwal/vfs"
)

// serveHelperEnv makes the test binary act as `writer …` (the arguments
// after "--", e.g. serve or generate): a real process that tests signal.
const serveHelperEnv = "ROLLWAL_SERVE_HELPER"

// TestServeHelperProcess is not a test: it is the child process, any
// writer command.
func TestServeHelperProcess(t *testing.T) {
	if os.Getenv(serveHelperEnv) != "1" {
		t.Skip("the child process of the serve tests")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	root := newRoot()
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveProc is a running `writer serve` (or another writer command: see
// spawnWriter).
type serveProc struct {
	cmd    *exec.Cmd
	addr   string       // host:port of its HTTP listener
	stdout bytes.Buffer // read it once done is closed

	mu      sync.Mutex
	log     bytes.Buffer  // stderr
	changed chan struct{} // closed, and replaced, when a log line arrives

	done    chan struct{} // closed once the process exited and its log is read
	waitErr error         // its exit status, once done is closed
}

// Log messages of `writer serve` the tests wait for.
const (
	msgHTTPUp    = "http server started; ready once the shards are claimed and replayed"
	msgListening = "listening"
	msgWaiting   = "shard is owned by another writer; waiting for its owner key to go"
	msgUnready   = "unready; the listener closes after the unready delay"
)

// spawnServe starts `writer serve` and returns once its HTTP listener is up;
// it may still be claiming (a standby waits there for the owner to go).
func spawnServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	p := spawnWriter(t, append([]string{"serve"}, args...)...)
	rec := p.waitLog(t, 60*time.Second, msgHTTPUp)
	p.addr, _ = rec["addr"].(string)
	if p.addr == "" {
		t.Fatalf("no addr in %v", rec)
	}
	return p
}

// spawnWriter starts `writer ARGS…` as a child process and returns at once.
func spawnWriter(t *testing.T, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestServeHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), serveHelperEnv+"=1")
	p := &serveProc{cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	cmd.Stdout = &p.stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.Write(sc.Bytes())
			p.log.WriteByte('\n')
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
		p.waitErr = cmd.Wait() // Wait closes the pipe: read it all first
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("log of writer %s (pid %d, %s), last lines:\n%s", p.command(), cmd.Process.Pid, p.addr, lastLines(p.output(), 60))
		}
	})
	return p
}

// startServe starts `writer serve` and waits (bounded) until it serves
// every shard.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	p := spawnServe(t, args...)
	p.waitLog(t, 60*time.Second, msgListening)
	return p
}

// command names the writer command the process runs, e.g. "serve".
func (p *serveProc) command() string {
	if i := slices.Index(p.cmd.Args, "--"); i >= 0 && i+1 < len(p.cmd.Args) {
		return p.cmd.Args[i+1]
	}
	return "?"
}

func (p *serveProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *serveProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *serveProc) url(path string) string { return "http://" + p.addr + path }

// find returns the first JSON log record with message msg whose attributes
// include attrs (key, value, key, value, …), or nil.
func (p *serveProc) find(msg string, attrs ...string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(p.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["msg"] != msg {
			continue
		}
		for i := 0; i+1 < len(attrs); i += 2 {
			if fmt.Sprint(rec[attrs[i]]) != attrs[i+1] {
				continue next
			}
		}
		return rec
	}
	return nil
}

// waitLog waits, at most d, for a log record (see find) and returns it.
func (p *serveProc) waitLog(t *testing.T, d time.Duration, msg string, attrs ...string) map[string]any {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if rec := p.find(msg, attrs...); rec != nil {
			return rec
		}
		select {
		case <-changed:
		case <-p.done:
			if rec := p.find(msg, attrs...); rec != nil {
				return rec
			}
			t.Fatalf("writer %s exited (%v) before logging %q %v", p.command(), p.waitErr, msg, attrs)
		case <-deadline.C:
			t.Fatalf("writer %s did not log %q %v within %v", p.command(), msg, attrs, d)
		}
	}
}

// wait waits, at most d, for the process to exit and returns its status.
func (p *serveProc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(d):
		t.Fatalf("writer %s did not exit within %v", p.command(), d)
		return nil
	}
}

func (p *serveProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("writer serve exited with %v after SIGTERM", err)
	}
}

// kill sends SIGKILL and waits (bounded) for the process to be gone.
func (p *serveProc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.wait(t, 30*time.Second)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// httpDo makes one request and fails the test if it gets no answer.
func httpDo(t *testing.T, method, url, contentType, body string) (int, []byte) {
	t.Helper()
	code, b, err := tryDo(&http.Client{Timeout: 30 * time.Second}, method, url, contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

// tryDo makes one request; any goroutine may call it.
func tryDo(c *http.Client, method, url, contentType, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return doRequest(c, req)
}

// doRequest sends req and reads the whole answer.
func doRequest(c *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func shardStatus(t *testing.T, p *serveProc, shard string) engine.Status {
	t.Helper()
	code, b := httpDo(t, http.MethodGet, p.url("/v1/shards/"+shard), "", "")
	if code != http.StatusOK {
		t.Fatalf("GET status of %s: %d %s", shard, code, b)
	}
	var st engine.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// ---- producers ----

// ledger is what producers learned of the ids they posted.
type ledger struct {
	mu      sync.Mutex
	acked   map[string]bool // answered 200
	unknown map[string]bool // no answer, or one that does not rule out a write
	refused map[string]bool // answered 503 "not ready": nothing was written
	changed chan struct{}
}

func newLedger() *ledger {
	return &ledger{acked: map[string]bool{}, unknown: map[string]bool{}, refused: map[string]bool{}, changed: make(chan struct{})}
}

type outcome int

const (
	acked outcome = iota
	unknown
	refused
)

func (l *ledger) record(ids []string, o outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[outcome]map[string]bool{acked: l.acked, unknown: l.unknown, refused: l.refused}[o]
	for _, id := range ids {
		m[id] = true
	}
	if o == acked {
		for _, id := range ids { // a retry that got through settles the doubt
			delete(l.unknown, id)
			delete(l.refused, id)
		}
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *ledger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcked waits, at most d, until n ids are acknowledged.
func (l *ledger) waitAcked(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		have, changed := len(l.acked), l.changed
		l.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%d ids acknowledged within %v; want %d", have, d, n)
		}
	}
}

// batchIDs are the unique ids of one batch.
func batchIDs(prefix string, batch, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-b%d-r%d", prefix, batch, i)
	}
	return ids
}

func ndjson(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&b, `{"id":%q,"prompt":"prompt of %s","completion":"a completion long enough to look like one","reward":%d}`+"\n", id, id, i%7)
	}
	return b.String()
}

// postRows posts ids as one NDJSON batch. code is 0 when no answer came.
func postRows(c *http.Client, base, shard string, ids []string) (int, string, error) {
	code, b, err := tryDo(c, http.MethodPost, base+"/v1/shards/"+shard+"/rows", server.ContentTypeNDJSON, ndjson(ids))
	if err != nil {
		return 0, "", err
	}
	if code == http.StatusOK {
		if res, err := appendResponse(b); err != nil || res.Acked != len(ids) {
			return code, string(b), fmt.Errorf("200 answered %s for %d rows", b, len(ids))
		}
	}
	return code, string(b), nil
}

func appendResponse(b []byte) (server.AppendResponse, error) {
	var res server.AppendResponse
	err := json.Unmarshal(b, &res)
	return res, err
}

// produceUntilFailure posts batches of n rows to shard until a request
// fails, and records every outcome.
func produceUntilFailure(c *http.Client, base, shard, prefix string, n int, l *ledger) {
	for batch := 0; ; batch++ {
		ids := batchIDs(prefix, batch, n)
		code, body, err := postRows(c, base, shard, ids)
		switch {
		case err == nil && code == http.StatusOK:
			l.record(ids, acked)
			continue
		case err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "not ready"):
			l.record(ids, refused)
		default:
			l.record(ids, unknown)
		}
		return
	}
}

// produceBatches posts batches of n rows to shard; every one must be
// acknowledged.
func produceBatches(t *testing.T, c *http.Client, base, shard, prefix string, batches, n int, l *ledger) {
	for batch := range batches {
		ids := batchIDs(prefix, batch, n)
		code, body, err := postRows(c, base, shard, ids)
		if err != nil || code != http.StatusOK {
			l.record(ids, unknown)
			t.Errorf("%s batch %d: %d %s %v", prefix, batch, code, body, err)
			return
		}
		l.record(ids, acked)
	}
}

// ---- the base ----

// readBase reads the table's base through its latest readers' manifest, in
// Go and, when ROLLWAL_PYTHON is set, with pyarrow (the two must agree). It
// returns how often each id occurs and the manifest.
func readBase(t *testing.T, dataDir string) (map[string]int, publish.ReaderManifest) {
	t.Helper()
	baseDir := filepath.Join(dataDir, "rollouts", "base")
	m, ok, err := publish.LatestReaderManifest(vfs.Default, baseDir)
	if err != nil || !ok {
		t.Fatalf("readers' manifest under %s: ok=%v err=%v", baseDir, ok, err)
	}
	ids := map[string]int{}
	var goIDs []string
	var rows int64
	for _, f := range m.Files {
		_, d, err := generation.Read(vfs.Default, filepath.Join(baseDir, filepath.FromSlash(f.Path)), schema.Rollout())
		if err != nil {
			t.Fatalf("base file %s: %v", f.Path, err)
		}
		if int64(d.Rows.Len()) != f.Rows {
			t.Fatalf("base file %s holds %d rows; the manifest says %d", f.Path, d.Rows.Len(), f.Rows)
		}
		for _, id := range d.Rows.IDs {
			ids[id]++
			goIDs = append(goIDs, id)
		}
		rows += f.Rows
	}
	if rows != m.Rows {
		t.Fatalf("the manifest's files hold %d rows; it says %d", rows, m.Rows)
	}
	pyIDs, ok := readBaseWithPyarrow(t, baseDir)
	if ok {
		slices.Sort(goIDs)
		slices.Sort(pyIDs)
		if !slices.Equal(goIDs, pyIDs) {
			t.Fatalf("pyarrow read %d ids through the readers' manifest, Go %d, and they differ", len(pyIDs), len(goIDs))
		}
		t.Logf("pyarrow read the same %d rows through the readers' manifest v%d", len(pyIDs), m.Version)
	}
	return ids, m
}

// readBaseWithPyarrow lists the ids of the latest readers' manifest's files
// as pyarrow reads them; ok is false when ROLLWAL_PYTHON is not set.
func readBaseWithPyarrow(t *testing.T, baseDir string) ([]string, bool) {
	t.Helper()
	py := os.Getenv("ROLLWAL_PYTHON")
	if py == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("ROLLWAL_PYTHON must be set by the test command (scripts/test)")
		}
		t.Log("SKIPPING the pyarrow read of the base: ROLLWAL_PYTHON is not set (see scripts/pyenv)")
		return nil, false
	}
	const script = `
import json, os, sys
import pyarrow.parquet as pq
base = sys.argv[1]
names = sorted(n for n in os.listdir(os.path.join(base, "_manifest")) if n.endswith(".json") and not n.startswith("."))
m = json.load(open(os.path.join(base, "_manifest", names[-1])))
ids = []
for f in m["files"]:
    t = pq.read_table(os.path.join(base, f["path"]), columns=["id"])
    assert t.num_rows == f["rows"], (f, t.num_rows)
    ids += t.column("id").to_pylist()
assert len(ids) == m["rows"], (len(ids), m["rows"])
json.dump(ids, sys.stdout)
`
	cmd := exec.Command(py, "-c", script, baseDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow (%s): %v\n%s", py, err, stderr.String())
	}
	var ids []string
	if err := json.Unmarshal(out, &ids); err != nil {
		t.Fatalf("pyarrow output: %v\n%.500s", err, out)
	}
	return ids, true
}

// checkBase holds the promise: the base has each id once, every
// acknowledged id, and no id that was neither acknowledged nor in doubt.
func checkBase(t *testing.T, ids map[string]int, l *ledger) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []string
	report := func(format string, args ...any) {
		if len(errs) < 10 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for id, n := range ids {
		switch {
		case n != 1:
			report("id %s is in the base %d times", id, n)
		case l.refused[id]:
			report("id %s is in the base, but its post was refused (503 not ready)", id)
		case !l.acked[id] && !l.unknown[id]:
			report("id %s is in the base, but was never posted", id)
		}
	}
	missing := 0
	for id := range l.acked {
		if ids[id] == 0 {
			missing++
			report("acknowledged id %s is not in the base", id)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("the base (%d distinct ids) breaks the promise (%d acknowledged ids missing):\n%s",
			len(ids), missing, strings.Join(errs, "\n"))
	}
}

// merge runs one `writer merge` pass and returns its report.
func merge(t *testing.T, args ...string) mergeReport {
	t.Helper()
	out, err := run(t, append([]string{"merge", "-o", "json"}, args...)...)
	if err != nil {
		t.Fatalf("writer merge: %v\n%s", err, out)
	}
	var rep mergeReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("writer merge output: %v\n%s", err, out)
	}
	return rep
}

// ---- the tests ----

// TestServeKillRestartMerge: `writer serve` on a fresh data dir with its
// embedded etcd is SIGKILLed while concurrent producers post; a restart on
// the same data dir waits out the dead writer's lease, replays, and takes
// more rows; after SIGTERM, `writer merge` publishes the base, and the base
// read through its readers' manifest holds every acknowledged id exactly
// once and nothing that was never posted.
func TestServeKillRestartMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	shards := []string{"s0", "s1"}
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--shards", strings.Join(shards, ","),
		"--lease-ttl", "2s", "--flush-bytes", "131072", "--flush-age", "-1s"}
	l := newLedger()
	c := &http.Client{Timeout: 30 * time.Second}

	p := startServe(t, args...)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { produceUntilFailure(c, p.url(""), shards[w%2], fmt.Sprintf("k1-w%d", w), 40, l) })
	}
	l.waitAcked(t, 3000, 60*time.Second)
	p.kill(t) // mid-stream: the producers are posting
	wg.Wait()
	killed := l.ackedCount()
	l.mu.Lock()
	inDoubt := len(l.unknown)
	l.mu.Unlock()
	t.Logf("SIGKILL after %d acknowledged ids; %d ids in doubt (their posts got no answer)", killed, inDoubt)

	start := time.Now()
	p2 := startServe(t, args...)
	t.Logf("the restarted writer served after %v (waited for the dead writer's lease: %v)",
		time.Since(start).Round(time.Millisecond), p2.find(msgWaiting) != nil)
	if p2.find(msgStaleRemoved, "file", endpointFile(dir)) == nil {
		t.Errorf("the restarted writer did not name the endpoint file %s the killed one left", endpointFile(dir))
	}
	for _, s := range shards {
		st := shardStatus(t, p2, s)
		if st.Epoch != 2 || st.Stopped != "" {
			t.Fatalf("shard %s after the restart: epoch %d, stopped %q; want epoch 2, running", s, st.Epoch, st.Stopped)
		}
		t.Logf("shard %s after the restart: %d generations committed before the SIGKILL, %d rows replayed from the WAL",
			s, len(st.Flushed), st.MemtableRows)
	}
	for w := range 4 {
		wg.Go(func() { produceBatches(t, c, p2.url(""), shards[w%2], fmt.Sprintf("k2-w%d", w), 10, 40, l) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	p2.stop(t)

	rep := merge(t, "--data-dir", dir)
	ids, m := readBase(t, dir)
	if rep.Base.Version != m.Version || rep.Base.Rows != int64(len(ids)) {
		t.Fatalf("merge reported base v%d with %d rows; the readers' manifest is v%d with %d distinct ids",
			rep.Base.Version, rep.Base.Rows, m.Version, len(ids))
	}
	checkBase(t, ids, l)
	t.Logf("base v%d: %d rows = distinct ids; %d acknowledged (%d before the SIGKILL)", m.Version, m.Rows, l.ackedCount(), killed)
}

// TestTwoProcessFailover: `writer serve` on a data dir against a 3-member
// etcd cluster. A second serve on the same data dir is refused at once (the
// data dir's lock, whatever the etcd); a standby on another data dir waits
// for the owner keys and answers (unready, 503) meanwhile. Producers post
// and retry on 409/503 and dead connections. SIGKILL of the owner frees the
// data dir: a successor started on it at once waits out the dead owner's
// lease, replays its WAL and serves within the lease TTL plus a margin, and
// nothing acknowledged is lost: after a flush through the survivor and a
// merge, the base holds every id exactly once.
func TestTwoProcessFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const ttl, margin = 2 * time.Second, 5 * time.Second
	cluster := etcdcluster.Start(t, etcdcluster.Options{Members: 3})
	endpoints := strings.Join(cluster.Endpoints(), ",")
	dir := t.TempDir()
	shards := []string{"s0", "s1"}
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--shards", strings.Join(shards, ","),
		"--etcd-endpoints", endpoints, "--lease-ttl", ttl.String(), "--flush-bytes", "131072", "--flush-age", "-1s"}

	owner := startServe(t, args...)
	runProc(t, secondProcessBound, append([]string{"serve"}, args...)...).
		failed(t, "data directory "+dir+" is in use by "+holderOf(owner, "serve"))
	otherArgs := slices.Clone(args)
	otherArgs[slices.Index(otherArgs, dir)] = t.TempDir()
	standby := spawnServe(t, otherArgs...)
	standby.waitLog(t, 30*time.Second, msgWaiting, "shard", shards[0])
	quick := &http.Client{Timeout: 5 * time.Second}
	for _, probe := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/livez", http.StatusOK},
		{http.MethodGet, "/readyz", http.StatusServiceUnavailable},
		{http.MethodPost, "/v1/shards/s0/rows", http.StatusServiceUnavailable},
		{http.MethodGet, "/v1/shards/s0", http.StatusServiceUnavailable},
	} {
		code, b, err := tryDo(quick, probe.method, standby.url(probe.path), server.ContentTypeNDJSON, ndjson([]string{"probe"}))
		if err != nil || code != probe.want {
			t.Fatalf("the standby answered %s %s with %d %s %v; want %d at once", probe.method, probe.path, code, b, err, probe.want)
		}
	}
	standby.stop(t) // while it waits: it must not claim the shards away from the data dir with their WAL
	if standby.find("shard open") != nil {
		t.Fatal("the standby on another data dir opened a shard")
	}

	// Producers: every batch is retried, on the current target, until acked.
	l := newLedger()
	var target atomic.Pointer[string]
	target.Store(new(owner.url("")))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var retriesMu sync.Mutex
	retries, duplicates := map[string]int{}, 0
	for w := range 4 {
		wg.Go(func() {
			c := &http.Client{Timeout: 10 * time.Second}
			for batch := 0; ; batch++ {
				select {
				case <-stop:
					return
				default:
				}
				ids := batchIDs(fmt.Sprintf("f-w%d", w), batch, 40)
				deadline := time.Now().Add(30 * time.Second)
				for {
					code, body, err := postRows(c, *target.Load(), shards[w%2], ids)
					if err == nil && code == http.StatusOK {
						l.record(ids, acked)
						if res, _ := appendResponse([]byte(body)); res.Duplicates > 0 {
							retriesMu.Lock()
							duplicates += res.Duplicates // a retry of rows the dead owner had written
							retriesMu.Unlock()
						}
						break
					}
					switch code {
					case 0, http.StatusConflict, http.StatusServiceUnavailable, http.StatusTooManyRequests: // retry
					default:
						l.record(ids, unknown)
						t.Errorf("producer %d: %d %s %v: not an answer to retry", w, code, body, err)
						return
					}
					l.record(ids, unknown) // until a retry is acknowledged
					retriesMu.Lock()
					retries[fmt.Sprint(code)]++
					retriesMu.Unlock()
					if time.Now().After(deadline) {
						t.Errorf("producer %d: batch %d not acknowledged within 30s; last answer %d %s %v", w, batch, code, body, err)
						return
					}
					time.Sleep(20 * time.Millisecond) // retry pacing, not synchronisation
				}
			}
		})
	}
	defer func() { // on an early failure, end the producers before the processes go
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	l.waitAcked(t, 2000, 60*time.Second)
	before := l.ackedCount()
	killed := time.Now()
	owner.kill(t)
	successor := spawnServe(t, args...) // the data dir's lock died with the owner
	target.Store(new(successor.url("")))
	readyc := &http.Client{Timeout: time.Second}
	for {
		code, _, _ := tryDo(readyc, http.MethodGet, successor.url("/readyz"), "", "")
		if code == http.StatusOK {
			break
		}
		if time.Since(killed) > ttl+margin {
			t.Fatalf("the successor was not ready %v after the owner's SIGKILL (lease TTL %v + margin %v)", time.Since(killed), ttl, margin)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, bounded above
	}
	failover := time.Since(killed)
	t.Logf("FAILOVER: the successor served both shards %v after the owner's SIGKILL (lease TTL %v; waited for the dead owner's lease: %v)",
		failover.Round(time.Millisecond), ttl, successor.find(msgWaiting) != nil)
	for _, s := range shards {
		successor.waitLog(t, time.Second, "shard open", "shard", s)
	}
	l.waitAcked(t, before+2000, 60*time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	l.mu.Lock()
	if len(l.unknown) > 0 || len(l.refused) > 0 {
		t.Errorf("%d ids still in doubt, %d refused: every batch must end acknowledged", len(l.unknown), len(l.refused))
	}
	l.mu.Unlock()
	t.Logf("%d ids acknowledged (%d before the SIGKILL); retried answers by status (0: no answer): %v; %d rows acknowledged as duplicates of a write before the kill",
		l.ackedCount(), before, retries, duplicates)

	for _, s := range shards {
		code, b := httpDo(t, http.MethodPost, successor.url("/v1/shards/"+s+"/flush"), "", "")
		if code != http.StatusOK {
			t.Fatalf("flush %s through the survivor: %d %s", s, code, b)
		}
		if st := shardStatus(t, successor, s); st.Epoch != 2 || st.MemtableRows != 0 {
			t.Fatalf("shard %s on the survivor: epoch %d, %d rows unflushed; want epoch 2, none", s, st.Epoch, st.MemtableRows)
		}
	}
	rep := merge(t, "--data-dir", dir, "--etcd-endpoints", endpoints)
	ids, m := readBase(t, dir)
	if rep.Base.Version != m.Version || rep.Base.Rows != int64(len(ids)) {
		t.Fatalf("merge reported base v%d with %d rows; the readers' manifest is v%d with %d distinct ids",
			rep.Base.Version, rep.Base.Rows, m.Version, len(ids))
	}
	checkBase(t, ids, l)
	if len(ids) != l.ackedCount() {
		t.Fatalf("the base holds %d ids; %d were acknowledged", len(ids), l.ackedCount())
	}
	successor.stop(t)
}

// TestGracefulShutdown: SIGTERM while producers post. Readiness drops
// first: /readyz answers 503 (and ingest 503) while /livez still answers,
// for --unready-delay, before the listener closes. The writer drains,
// flushes and commits, and releases its lease: a successor with a 60s lease
// TTL claims at once, finds every acknowledged row committed, and the
// merged base holds each exactly once — and no row refused while unready.
func TestGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--flush-bytes", "65536", "--lease-ttl", "60s"}
	p := startServe(t, append(args, "--unready-delay", "3s")...)
	if code, b := httpDo(t, http.MethodGet, p.url("/readyz"), "", ""); code != http.StatusOK {
		t.Fatalf("readyz once listening: %d %s", code, b)
	}
	l := newLedger()

	// A batch with a source offset, posted twice: the retry is all duplicates.
	first := batchIDs("once", 0, 100)
	for i, want := range []struct{ stored, dups int }{{100, 0}, {0, 100}} {
		code, b := httpDo(t, http.MethodPost, p.url("/v1/shards/default/rows?source=test&offset=100"), server.ContentTypeNDJSON, ndjson(first))
		var res server.AppendResponse
		if code != http.StatusOK || json.Unmarshal(b, &res) != nil || res.Acked != 100 || res.Stored != want.stored || res.Duplicates != want.dups {
			t.Fatalf("POST %d answered %d %s; want %d stored and %d duplicates of 100 acked", i, code, b, want.stored, want.dups)
		}
	}
	l.record(first, acked)

	c := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { produceUntilFailure(c, p.url(""), "default", fmt.Sprintf("g-w%d", w), 50, l) })
	}
	l.waitAcked(t, 2100, 60*time.Second)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, 30*time.Second, msgUnready)
	// Between the unready line and the listener's close (3s later): unready,
	// ingest refused, alive.
	quick := &http.Client{Timeout: time.Second}
	code, b, err := tryDo(quick, http.MethodGet, p.url("/readyz"), "", "")
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("readyz after SIGTERM: %d %s %v; want 503 while the listener is still open", code, b, err)
	}
	code, b, err = tryDo(quick, http.MethodGet, p.url("/livez"), "", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("livez while unready: %d %s %v; want 200", code, b, err)
	}
	probe := []string{"unready-probe"}
	code, body, err := postRows(quick, p.url(""), "default", probe)
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("ingest while unready: %d %s %v; want 503", code, body, err)
	}
	l.record(probe, refused)
	if p.exited() {
		t.Fatal("the writer exited before its unready window ended")
	}
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("writer serve exited with %v after SIGTERM", err)
	}
	p.waitLog(t, 0, "stopped")
	wg.Wait()
	l.mu.Lock()
	t.Logf("%d ids acknowledged before the listener closed; %d refused while unready, %d in doubt",
		len(l.acked), len(l.refused), len(l.unknown))
	l.mu.Unlock()

	start := time.Now()
	p2 := startServe(t, args...)
	took := time.Since(start)
	if p2.find(msgWaiting) != nil || took > 30*time.Second {
		t.Fatalf("the successor waited for the owner key (%v to serve): the lease was not released", took)
	}
	st := shardStatus(t, p2, "default")
	var committed int64
	for _, g := range st.Flushed {
		committed += g.Rows
	}
	if st.Epoch != 2 || st.MemtableRows != 0 || committed < int64(l.ackedCount()) || st.SourceOffsets["test"] != 100 {
		t.Fatalf("successor's status %+v: want epoch 2, nothing to replay, at least %d rows committed, source offset 100",
			st, l.ackedCount())
	}
	t.Logf("the successor (60s lease TTL) served %v after start; %d rows committed at shutdown", took.Round(time.Millisecond), committed)
	p2.stop(t)

	merge(t, "--data-dir", dir)
	ids, _ := readBase(t, dir)
	checkBase(t, ids, l)
}
