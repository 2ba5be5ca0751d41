package main

// The WAL on object storage (wal: {backend: object}) through real `writer
// serve` processes on separate data directories — separate machines, as
// far as the disk goes: nothing is copied between them; they share one
// etcd and one bucket of a real S3 server (versitygw). The helpers that
// start and watch processes are in process_test.go, the bucket's in
// storage_process_test.go.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/etcdcluster"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/server"
)

// walObjectPrefix is where the default shard of the rollouts table keeps
// its WAL objects in the bucket (under the storage URL's prefix, tables/).
const walObjectPrefix = "tables/rollouts/shards/default/wal/"

// walObject is a listed WAL object: <epoch>-<first>-<last>.wal.
type walObject struct {
	key                string
	epoch, first, last uint64
}

func (o walObject) String() string {
	return fmt.Sprintf("%s (epoch %d, positions %d-%d)", strings.TrimPrefix(o.key, walObjectPrefix), o.epoch, o.first, o.last)
}

// listWAL lists the shard's WAL objects; a name under the prefix that is
// not a WAL object's fails the test.
func listWAL(t *testing.T, srv *s3test.Server, bucket string) []walObject {
	t.Helper()
	var objs []walObject
	for _, key := range listBucket(t, srv, bucket, walObjectPrefix) {
		base, ok := strings.CutSuffix(strings.TrimPrefix(key, walObjectPrefix), ".wal")
		parts := strings.Split(base, "-")
		if !ok || len(parts) != 3 {
			t.Fatalf("%s in the WAL prefix is not a WAL object's name", key)
		}
		var n [3]uint64
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 10, 64)
			if err != nil || len(p) != 20 {
				t.Fatalf("%s in the WAL prefix is not a WAL object's name: %q", key, p)
			}
			n[i] = v
		}
		objs = append(objs, walObject{key: key, epoch: n[0], first: n[1], last: n[2]})
	}
	return objs
}

func walEpochs(objs []walObject) map[uint64]int {
	m := map[uint64]int{}
	for _, o := range objs {
		m[o.epoch]++
	}
	return m
}

// localWALFiles lists the regular files under the data directory's WAL
// directories (any table, any shard): with the WAL in the bucket there
// must be none.
func localWALFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dataDir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if !d.IsDir() && (slices.Contains(parts[:len(parts)-1], "wal") || strings.HasSuffix(d.Name(), ".wal")) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("walk %s: %v", dataDir, err)
	}
	return files
}

func checkNoLocalWAL(t *testing.T, who, dataDir string) {
	t.Helper()
	if files := localWALFiles(t, dataDir); len(files) > 0 {
		t.Fatalf("%s's data directory %s holds WAL files %v: the WAL is in the bucket", who, dataDir, files)
	}
}

// objectWALConfig writes a serve configuration for dataDir: the default
// shard of the rollouts table, the shared etcd, the bucket on endpoint
// (the S3 server or a proxy in front of it), the WAL in the bucket, a 2s
// lease, no flush but the API's.
func objectWALConfig(t *testing.T, srv *s3test.Server, bucket, endpoint, etcdEndpoints, dataDir string) string {
	t.Helper()
	dir := t.TempDir()
	access, secret := filepath.Join(dir, "access"), filepath.Join(dir, "secret")
	writeTestFile(t, access, srv.AccessKey()+"\n")
	writeTestFile(t, secret, srv.SecretKey()+"\n")
	cfg := filepath.Join(dir, "writer.yaml")
	writeTestFile(t, cfg, fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\nshards: [default]\nflush_age: -1s\nlease_ttl: 2s\n"+
		"etcd: {endpoints: [%s]}\n"+
		"storage: {url: 's3://%s/tables', endpoint: '%s', path_style: true, access_key_file: '%s', secret_key_file: '%s'}\n"+
		"wal: {backend: object}\n",
		dataDir, etcdEndpoints, bucket, endpoint, access, secret))
	return cfg
}

// requireObjectWAL fails the test unless p opened the default shard's WAL
// in the bucket (wal: {backend: object}) rather than in its data directory.
func requireObjectWAL(t *testing.T, p *serveProc, who string) {
	t.Helper()
	if p.find("object wal opened", "shard", "default") != nil {
		return
	}
	local := p.find("wal opened", "shard", "default")
	t.Fatalf("%s (configured with wal: {backend: object}) did not open an object WAL; it opened %v", who, local)
}

// claimedEpoch is the epoch and WAL tail a serve logged at its claim of
// the default shard.
func claimedEpoch(t *testing.T, p *serveProc) (epoch, tail uint64) {
	t.Helper()
	rec := p.waitLog(t, 10*time.Second, "claimed shard", "shard", "default")
	e, _ := rec["epoch"].(float64)
	w, _ := rec["wal_tail"].(float64)
	if e == 0 {
		t.Fatalf("no epoch in %v", rec)
	}
	return uint64(e), uint64(w)
}

// epochStart is the start position recorded for epoch in the default
// shard's manifest, read with `writer inspect shard`.
func epochStart(t *testing.T, cfg string, epoch uint64) uint64 {
	t.Helper()
	out, err := run(t, "inspect", "shard", "default", "--config", cfg, "-o", "json")
	if err != nil {
		t.Fatalf("inspect shard: %v\n%s", err, out)
	}
	var d shardDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Manifest == nil {
		t.Fatalf("inspect shard output: %v\n%s", err, out)
	}
	for _, r := range d.Manifest.Epochs {
		if r.Epoch == epoch {
			return r.StartPosition
		}
	}
	t.Fatalf("the manifest has no record of epoch %d: %+v", epoch, d.Manifest.Epochs)
	return 0
}

// TestFailoverAcrossMachinesLosesNothing: two serves on separate data
// directories share an etcd and a bucket, both with the WAL in the bucket.
// The owner takes rows from concurrent producers, commits a generation
// midway (to the bucket), and is SIGKILLed while posts are in flight, so
// its acknowledged tail is in WAL objects only. The standby on the other
// data directory — which never had a file of the owner's — claims once the
// dead owner's lease ends, replays that tail from the bucket, takes more
// rows, flushes; a merge publishes a base (in the bucket) that holds every
// acknowledged id exactly once, and no id that was never posted.
func TestFailoverAcrossMachinesLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes, an etcd and an S3 server")
	}
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	cluster := etcdcluster.Start(t, etcdcluster.Options{Members: 1})
	etcdEndpoints := strings.Join(cluster.Endpoints(), ", ")
	dirA, dirB := t.TempDir(), t.TempDir()
	cfgA := objectWALConfig(t, srv, bucket, srv.Endpoint(), etcdEndpoints, dirA)
	cfgB := objectWALConfig(t, srv, bucket, srv.Endpoint(), etcdEndpoints, dirB)

	owner := startServe(t, "--config", cfgA)
	requireObjectWAL(t, owner, "the owner")
	epochA, _ := claimedEpoch(t, owner)
	standby := spawnServe(t, "--config", cfgB)
	standby.waitLog(t, 30*time.Second, msgWaiting, "shard", "default")
	t.Logf("owner (pid %d, epoch %d) serves; the standby (pid %d) on another data directory waits for its owner key",
		owner.cmd.Process.Pid, epochA, standby.cmd.Process.Pid)

	l := newLedger()
	c := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() { produceUntilFailure(c, owner.url(""), "default", fmt.Sprintf("x-w%d", w), 20, l) })
	}
	l.waitAcked(t, 600, 60*time.Second)
	flushShard(t, owner) // midway: what is acknowledged so far goes to a generation, the rest stays in the WAL
	st := shardStatus(t, owner, "default")
	flushedRows := int64(0)
	for _, g := range st.Flushed {
		flushedRows += g.Rows
	}
	l.waitAcked(t, l.ackedCount()+600, 60*time.Second)
	before := listWAL(t, srv, bucket) // while posts go on
	owner.kill(t)                     // mid-ingest: the producers are posting
	wg.Wait()
	l.mu.Lock()
	ackedA, inDoubt := len(l.acked), len(l.unknown)
	l.mu.Unlock()
	t.Logf("SIGKILL of the owner after %d acknowledged ids (%d rows committed in %d generations before), %d ids in doubt",
		ackedA, flushedRows, len(st.Flushed), inDoubt)
	if len(st.Flushed) == 0 || flushedRows == 0 {
		t.Fatalf("the midway flush committed nothing: %+v", st)
	}
	checkNoLocalWAL(t, "the owner", dirA)
	checkNoLocalWAL(t, "the standby", dirB)

	// What the owner left: WAL objects of its epoch in the bucket.
	left := listWAL(t, srv, bucket)
	t.Logf("WAL objects while posting: %d %v; after the SIGKILL: %d %v", len(before), walEpochs(before), len(left), walEpochs(left))
	if len(left) == 0 {
		t.Fatalf("no WAL object under %s after the SIGKILL: the acknowledged tail must be there", walObjectPrefix)
	}
	for _, o := range left {
		if o.epoch != epochA {
			t.Errorf("WAL object %v before the successor claimed: want epoch %d", o, epochA)
		}
	}

	killed := time.Now()
	standby.waitLog(t, 60*time.Second, msgListening)
	requireObjectWAL(t, standby, "the successor")
	epochB, tailB := claimedEpoch(t, standby)
	rep := standby.waitLog(t, 10*time.Second, "replayed WAL tail", "shard", "default")
	st = shardStatus(t, standby, "default")
	t.Logf("the successor served %v after the SIGKILL: epoch %d, WAL tail %d, replayed %v rows from the bucket (memtable %d rows)",
		time.Since(killed).Round(time.Millisecond), epochB, tailB, rep["rows"], st.MemtableRows)
	if epochB <= epochA || st.Epoch != epochB || st.Stopped != "" {
		t.Fatalf("successor's status %+v: want epoch above %d, running", st, epochA)
	}
	if st.MemtableRows == 0 {
		t.Fatal("the successor replayed nothing: the owner's unflushed tail should be in the bucket's WAL objects")
	}
	checkNoLocalWAL(t, "the successor", dirB)

	produceBatches(t, c, standby.url(""), "default", "x-b", 10, 20, l)
	if t.Failed() {
		t.FailNow()
	}
	mid := listWAL(t, srv, bucket)
	t.Logf("WAL objects after the successor's posts: %d by epoch %v", len(mid), walEpochs(mid))
	if walEpochs(mid)[epochB] == 0 {
		t.Errorf("no WAL object of the successor's epoch %d in the bucket after its acknowledged posts: %v", epochB, mid)
	}
	checkNoLocalWAL(t, "the successor", dirB)

	flushShard(t, standby)
	st = shardStatus(t, standby, "default")
	after := listWAL(t, srv, bucket)
	t.Logf("after the successor's flush (replay cursor %d): %d WAL objects %v", st.ReplayCursor, len(after), after)
	// The drain removes every object at or below the committed cursor but
	// the one holding the highest position: the tail the next claim lists
	// (positions continue past it).
	var tail uint64
	for _, o := range after {
		tail = max(tail, o.last)
	}
	for _, o := range after {
		if o.last <= st.ReplayCursor && o.last != tail {
			t.Errorf("WAL object %v is at or below the committed replay cursor %d, not the tail (%d), and was not removed", o, st.ReplayCursor, tail)
		}
		if o.epoch == epochA {
			t.Errorf("WAL object %v of the dead owner is still in the bucket after the successor committed past it", o)
		}
	}
	if tail != st.WALTail {
		t.Errorf("the bucket's highest WAL position is %d; the successor's WAL tail is %d", tail, st.WALTail)
	}
	if st.MemtableRows != 0 {
		t.Errorf("%d rows unflushed after the flush", st.MemtableRows)
	}
	standby.stop(t)
	checkNoLocalWAL(t, "the successor", dirB)

	mrep := merge(t, "--config", cfgB)
	ids := readStoreBase(t, srv, bucket, "rollouts")
	t.Logf("merge from the successor's data directory: %d generations, base v%d with %d rows; %d distinct ids",
		mrep.Generations, mrep.Base.Version, mrep.Base.Rows, len(ids))
	checkBase(t, ids, l)
	checkInspectBase(t, cfgB, "s3://"+bucket+"/tables/rollouts/base", mrep.Base.Rows)
	var unackedIn int
	l.mu.Lock()
	for id := range l.unknown {
		if ids[id] > 0 {
			unackedIn++
		}
	}
	acked := len(l.acked)
	l.mu.Unlock()
	if mrep.Base.Rows != int64(len(ids)) {
		t.Fatalf("the merge reported %d rows; the base holds %d distinct ids", mrep.Base.Rows, len(ids))
	}
	t.Logf("every one of %d acknowledged ids is in the base once; %d of %d ids in doubt made it (each once)", acked, unackedIn, inDoubt)
}

// walHold is a proxy in front of the S3 server that holds the first WAL
// object create after hold() until release: the owner's group commit is
// then in flight, stuck on the way to the store, deterministically.
type walHold struct {
	mu      sync.Mutex
	armed   bool
	held    chan string   // the name of the held create
	release chan struct{} // closed to forward it
	done    chan int      // the store's status for the held create
	once    sync.Once
}

func startWALHold(t *testing.T, target string) (*walHold, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	h := &walHold{held: make(chan string, 1), release: make(chan struct{}), done: make(chan int, 1)}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // the request is signed for the proxy's host
		},
		Transport: &http.Transport{DisableCompression: true},
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/"+walObjectPrefix) {
			rp.ServeHTTP(w, r)
			return
		}
		h.mu.Lock()
		hold := h.armed
		h.armed = false
		h.mu.Unlock()
		if !hold {
			rp.ServeHTTP(w, r)
			return
		}
		// The whole request is read before the test hears of it: the
		// owner is frozen next, and the forward must not wait for it.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.held <- r.URL.Path
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		rp.ServeHTTP(rec, r)
		h.done <- rec.status
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(h.forward) // before ts.Close: a held request would hang it
	return h, ts.URL
}

func (h *walHold) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

func (h *walHold) forward() { h.once.Do(func() { close(h.release) }) }

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// postResult is the answer to one post of ids (code 0: none came).
type postResult struct {
	what string
	ids  []string
	code int
	body string
	err  error
}

func postAsync(c *http.Client, p *serveProc, what string, ids []string, out chan<- postResult) {
	go func() {
		code, body, err := postRows(c, p.url(""), "default", ids)
		out <- postResult{what: what, ids: ids, code: code, body: body, err: err}
	}()
}

// TestZombieWALPutIsFenced: the owner's group commit is on its way to the
// bucket (held by a proxy in front of the S3 server) when the owner is
// frozen with SIGSTOP, and more posts reach it while frozen. A successor
// on another data directory claims once the frozen owner's 2s lease ends
// (recording the WAL tail it listed as its epoch's start) and takes rows.
// Then the held create is let through, so the zombie's object lands in the
// bucket after the claim, and the owner is resumed: none of its posts is
// acknowledged; every object of its epoch created after the claim starts
// above the successor's start position. The successor is SIGKILLed and a
// third serve, on a third data directory, replays everything in the
// bucket: it skips the zombie's late records, and the merged base holds
// exactly the ids acknowledged by the owner before the freeze and by the
// successor, once each — none of the zombie's.
func TestZombieWALPutIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes, an etcd and an S3 server")
	}
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	cluster := etcdcluster.Start(t, etcdcluster.Options{Members: 1})
	etcdEndpoints := strings.Join(cluster.Endpoints(), ", ")
	hold, proxy := startWALHold(t, srv.Endpoint())
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	cfgA := objectWALConfig(t, srv, bucket, proxy, etcdEndpoints, dirA) // the owner reaches the bucket through the proxy
	cfgB := objectWALConfig(t, srv, bucket, srv.Endpoint(), etcdEndpoints, dirB)
	cfgC := objectWALConfig(t, srv, bucket, srv.Endpoint(), etcdEndpoints, dirC)

	owner := startServe(t, "--config", cfgA)
	requireObjectWAL(t, owner, "the owner")
	epochA, _ := claimedEpoch(t, owner)
	var want []string // acknowledged: must be in the base once each
	var walRows int   // acknowledged and only in the WAL: what a replay must find
	for batch := range 2 {
		ids := batchIDs("z-a", batch, 20)
		postOffsetless(t, owner, ids)
		want = append(want, ids...)
	}
	flushShard(t, owner) // one generation in the bucket
	for batch := 2; batch < 4; batch++ {
		ids := batchIDs("z-a", batch, 20)
		postOffsetless(t, owner, ids)
		want = append(want, ids...)
		walRows += len(ids)
	}
	t.Logf("owner (pid %d, epoch %d): %d ids acknowledged, %d of them in a generation", owner.cmd.Process.Pid, epochA, len(want), len(want)-walRows)

	// A post whose group commit the proxy holds on its way to the store;
	// the owner is frozen with it in flight.
	slow := &http.Client{Timeout: 90 * time.Second}
	results := make(chan postResult, 8)
	hold.hold()
	inflight := batchIDs("z-inflight", 0, 20)
	postAsync(slow, owner, "in flight at SIGSTOP", inflight, results)
	var heldPath string
	select {
	case heldPath = <-hold.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the owner's WAL create did not reach the proxy within 30s")
	}
	owner.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { owner.cmd.Process.Signal(syscall.SIGCONT) })
	heldKey := strings.TrimPrefix(heldPath, "/"+bucket+"/")
	t.Logf("owner frozen with its create of %s held by the proxy", strings.TrimPrefix(heldKey, walObjectPrefix))
	var zombie []string // sent to the owner from the freeze on: none may be acknowledged or in the base
	zombie = append(zombie, inflight...)
	for i := range 2 {
		ids := batchIDs("z-stopped", i, 20)
		postAsync(slow, owner, "sent while stopped", ids, results)
		zombie = append(zombie, ids...)
	}

	successor := spawnServe(t, "--config", cfgB)
	successor.waitLog(t, 60*time.Second, msgListening)
	requireObjectWAL(t, successor, "the successor")
	epochB, tailB := claimedEpoch(t, successor)
	startB := epochStart(t, cfgB, epochB)
	claimed := listWAL(t, srv, bucket)
	t.Logf("successor (pid %d) claimed epoch %d, start position %d (WAL tail %d); the bucket holds %v",
		successor.cmd.Process.Pid, epochB, startB, tailB, claimed)
	if epochB <= epochA {
		t.Fatalf("successor's epoch %d is not above the owner's %d", epochB, epochA)
	}
	for _, o := range claimed {
		if o.key == heldKey {
			t.Fatalf("the held create %s is in the bucket before the proxy let it through", o)
		}
		if o.epoch == epochA && o.last > startB {
			t.Errorf("object %v of the owner's epoch reaches above the successor's start %d at its claim", o, startB)
		}
	}
	checkNoLocalWAL(t, "the successor", dirB)
	for batch := range 3 {
		ids := batchIDs("z-b", batch, 20)
		postOffsetless(t, successor, ids)
		want = append(want, ids...)
		walRows += len(ids)
	}

	// The zombie's create lands now, after the claim, while it is frozen.
	hold.forward()
	select {
	case code := <-hold.done:
		if code != http.StatusOK {
			t.Fatalf("the store answered the zombie's held create with %d; want 200 (the late object must land)", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held create was not answered within 30s")
	}
	late := listWAL(t, srv, bucket)
	var lateA []walObject
	for _, o := range late {
		if o.epoch == epochA && !slices.ContainsFunc(claimed, func(c walObject) bool { return c.key == o.key }) {
			lateA = append(lateA, o)
		}
	}
	t.Logf("objects of the owner's epoch %d created after the successor's claim: %v", epochA, lateA)
	if !slices.ContainsFunc(lateA, func(o walObject) bool { return o.key == heldKey }) {
		t.Fatalf("the zombie's late object %s is not in the bucket: %v", heldKey, late)
	}

	owner.signal(t, syscall.SIGCONT)
	t.Logf("owner resumed")
	deadline := time.After(60 * time.Second)
	for range 3 {
		select {
		case r := <-results:
			t.Logf("zombie post (%s): %d %s %v", r.what, r.code, strings.TrimSpace(r.body), r.err)
			if r.code == http.StatusOK {
				t.Errorf("the zombie acknowledged a post %s: %d %s", r.what, r.code, r.body)
			} else if r.code != http.StatusConflict && r.code != http.StatusServiceUnavailable {
				t.Errorf("the zombie answered a post %s with %d %s %v; want 409 or 503", r.what, r.code, r.body, r.err)
			}
		case <-deadline:
			t.Fatal("the resumed owner did not answer its posts within 60s")
		}
	}
	after := batchIDs("z-after", 0, 20)
	zombie = append(zombie, after...)
	code, body, err := postRows(slow, owner.url(""), "default", after)
	t.Logf("zombie post after SIGCONT: %d %s %v", code, strings.TrimSpace(body), err)
	if code == http.StatusOK || (code != http.StatusConflict && code != http.StatusServiceUnavailable) {
		t.Errorf("post to the resumed owner: %d %s %v; want 409 or 503", code, body, err)
	}
	if owner.find("shard stopped", "shard", "default") == nil {
		t.Errorf("the resumed owner did not log its shard stopped (fenced)")
	}

	// Nothing of the owner's epoch created after the claim may be where a
	// replay takes it: each starts above the successor's start position.
	final := listWAL(t, srv, bucket)
	for _, o := range final {
		if o.epoch != epochA || slices.ContainsFunc(claimed, func(c walObject) bool { return c.key == o.key }) {
			continue
		}
		if o.first <= startB {
			t.Errorf("late object %v of the owner's epoch starts at or below the successor's start %d: a replay would take it", o, startB)
		}
	}
	t.Logf("the bucket's WAL objects before the later replay: %v", final)
	if t.Failed() {
		t.FailNow()
	}

	// A later replay, of everything in the bucket, by a third writer.
	successor.kill(t)
	third := startServe(t, "--config", cfgC)
	requireObjectWAL(t, third, "the third writer")
	epochC, _ := claimedEpoch(t, third)
	rep := third.waitLog(t, 10*time.Second, "replayed WAL tail", "shard", "default")
	st := shardStatus(t, third, "default")
	t.Logf("third writer: epoch %d, replayed %v rows (from %v to %v); memtable %d rows; want %d",
		epochC, rep["rows"], rep["from"], rep["to"], st.MemtableRows, walRows)
	if st.Epoch != epochC || epochC <= epochB || st.Stopped != "" {
		t.Fatalf("third writer's status %+v: want epoch %d above %d, running", st, epochC, epochB)
	}
	if st.MemtableRows != walRows {
		t.Errorf("the third writer replayed %d rows; %d acknowledged rows are in the WAL alone (the zombie's %d must be skipped)",
			st.MemtableRows, walRows, len(inflight))
	}
	checkNoLocalWAL(t, "the third writer", dirC)
	flushShard(t, third)
	st = shardStatus(t, third, "default")
	t.Logf("after the third writer's flush (replay cursor %d): WAL objects %v", st.ReplayCursor, listWAL(t, srv, bucket))
	third.stop(t)
	owner.kill(t)

	mrep := merge(t, "--config", cfgC)
	ids := readStoreBase(t, srv, bucket, "rollouts")
	t.Logf("merge: %d generations, base v%d with %d rows", mrep.Generations, mrep.Base.Version, mrep.Base.Rows)
	var found []string
	for _, id := range zombie {
		if ids[id] > 0 {
			found = append(found, id)
		}
	}
	if len(found) > 0 {
		t.Fatalf("%d ids the zombie never acknowledged are in the base, e.g. %v", len(found), found[:min(len(found), 5)])
	}
	checkExactlyOnce(t, "rollouts", ids, want)
	t.Logf("the base holds exactly the %d acknowledged ids, once each; none of the zombie's %d", len(want), len(zombie))
}

// postOffsetless posts ids to the default shard; the post must be
// acknowledged.
func postOffsetless(t *testing.T, p *serveProc, ids []string) {
	t.Helper()
	code, b := httpDo(t, http.MethodPost, p.url("/v1/shards/default/rows"), server.ContentTypeNDJSON, ndjson(ids))
	if res, err := appendResponse(b); code != http.StatusOK || err != nil || res.Acked != len(ids) {
		t.Fatalf("post of %d rows: %d %s", len(ids), code, b)
	}
}

// checkInspectBase runs `writer inspect base` with the configuration and
// fails unless it reports the base in the store (dir, readers' manifest)
// with rows rows.
func checkInspectBase(t *testing.T, cfg, dir string, rows int64) {
	t.Helper()
	out, err := run(t, "inspect", "base", "--config", cfg, "-o", "json")
	if err != nil {
		t.Fatalf("inspect base: %v\n%s", err, out)
	}
	var rep struct {
		Dir             string `json:"dir"`
		Rows            int64  `json:"rows"`
		ReadersManifest string `json:"readers_manifest"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect base -o json: %v\n%s", err, out)
	}
	if rep.Dir != dir || rep.Rows != rows || !strings.HasPrefix(rep.ReadersManifest, dir+"/_manifest/") {
		t.Fatalf("inspect base: dir %q, %d rows, readers' manifest %q; want %s, %d rows, a manifest under it", rep.Dir, rep.Rows, rep.ReadersManifest, dir, rows)
	}
}
