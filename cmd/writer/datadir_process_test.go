package main

// Real processes on one data directory: a second writer fails fast naming
// the first, readers use the running serve's etcd, and a stale or foreign
// etcd.endpoint is named, recovered from, or refused. The helpers that
// start and watch processes are in process_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/internal/dirlock"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/server"
)

// secondProcessBound is how long a command beside a data dir in use may
// take: it must fail or succeed, never wait for the first process.
const secondProcessBound = 10 * time.Second

// procResult is how a one-shot writer process ended.
type procResult struct {
	p    *serveProc
	args []string
	err  error // its exit status
	took time.Duration
}

func (r procResult) stdout() string { return r.p.stdout.String() }
func (r procResult) stderr() string { return r.p.output() }

// runProc runs `writer ARGS…` as a child process and waits for it at most
// d; a child still running then fails the test (and is killed).
func runProc(t *testing.T, d time.Duration, args ...string) procResult {
	t.Helper()
	start := time.Now()
	p := spawnWriter(t, args...)
	err := p.wait(t, d)
	r := procResult{p: p, args: args, err: err, took: time.Since(start)}
	t.Logf("writer %s: exit %v after %v", strings.Join(args[:min(2, len(args))], " "), err, r.took.Round(time.Millisecond))
	return r
}

// failed checks the process exited 1 with a message holding every want.
func (r procResult) failed(t *testing.T, want ...string) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(r.err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("writer %v: exit %v; want exit status 1\nstdout:\n%s\nstderr:\n%s", r.args, r.err, r.stdout(), lastLines(r.stderr(), 20))
	}
	for _, w := range want {
		if !strings.Contains(r.stderr(), w) {
			t.Errorf("writer %v: stderr does not say %q:\n%s", r.args, w, lastLines(r.stderr(), 20))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// succeeded checks the process exited 0 and returns its stdout.
func (r procResult) succeeded(t *testing.T) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("writer %v: %v\nstdout:\n%s\nstderr:\n%s", r.args, r.err, r.stdout(), lastLines(r.stderr(), 20))
	}
	return r.stdout()
}

// postAndFlush posts ids to the default shard with a source offset, then
// flushes, so that merge and snapshot get have something to show.
func postAndFlush(t *testing.T, p *serveProc, ids []string, offset int) {
	t.Helper()
	code, b := httpDo(t, http.MethodPost, p.url(fmt.Sprintf("/v1/shards/default/rows?source=src&offset=%d", offset)),
		server.ContentTypeNDJSON, ndjson(ids))
	if code != http.StatusOK {
		t.Fatalf("post: %d %s", code, b)
	}
	if code, b := httpDo(t, http.MethodPost, p.url("/v1/shards/default/flush"), "", ""); code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, b)
	}
}

func holderOf(p *serveProc, command string) string {
	return fmt.Sprintf("pid %d (writer %s", p.cmd.Process.Pid, command)
}

// TestSecondProcessOnDataDirFailsFast: while `writer serve` holds a data
// dir (embedded etcd), a second serve and a generate fail within seconds,
// exit 1, naming the dir and serve's pid — the second serve opens no port —
// while merge, inspect and snapshot get succeed through serve's etcd (the
// endpoint it recorded, verified), and wal repair --yes refuses naming the
// holder. With an external etcd the lock holds all the same: a second serve
// and repair are refused, and inspect without the etcd names the holder.
func TestSecondProcessOnDataDirFailsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--lease-ttl", "60s", "--flush-age", "-1s")
	ids := batchIDs("fast", 0, 50)
	postAndFlush(t, p, ids, 50)
	inUse := "data directory " + dir + " is in use by " + holderOf(p, "serve")

	// On serve's own address: a serve that listened before it took the
	// lock would fail on the address instead.
	second := runProc(t, secondProcessBound, "serve", "--listen", p.addr, "--data-dir", dir)
	second.failed(t, inUse, "stop that process first")
	if second.p.find(msgHTTPUp) != nil || strings.Contains(second.stderr(), "--listen") {
		t.Fatalf("the refused serve went for its HTTP port:\n%s", second.stderr())
	}
	runProc(t, secondProcessBound, "generate", "--data-dir", dir, "--rows", "10", "--shards", "1").failed(t, inUse)
	runProc(t, secondProcessBound, "wal", "repair", "--data-dir", dir, "--shard", "default", "--yes").
		failed(t, "refusing to repair shard default: "+inUse)
	// verify reads regardless (its verdict on the records is not this
	// test's subject), warning that a writer holds the data dir.
	verify := runProc(t, secondProcessBound, "wal", "verify", "--data-dir", dir, "--shard", "default")
	if !strings.Contains(verify.stdout(), "1 segments") || strings.Contains(verify.stderr(), "in use by") {
		t.Errorf("wal verify beside serve did not read the WAL: %v\n%s\n%s", verify.err, verify.stdout(), verify.stderr())
	}
	if verify.p.find("wal: a writer holds the data directory; its shards may be appending while this reads (a tail being written reads as torn)") == nil {
		t.Error("wal verify beside serve did not warn that a writer holds the data dir")
	}

	var rep mergeReport
	if err := json.Unmarshal([]byte(runProc(t, secondProcessBound, "merge", "--data-dir", dir, "-o", "json").succeeded(t)), &rep); err != nil ||
		rep.RowsStaged != int64(len(ids)) || rep.Base.Rows != int64(len(ids)) {
		t.Fatalf("merge beside serve: %+v %v; want %d rows staged", rep, err, len(ids))
	}
	var sums []shardSummary
	if err := json.Unmarshal([]byte(runProc(t, secondProcessBound, "inspect", "shards", "--data-dir", dir, "-o", "json").succeeded(t)), &sums); err != nil ||
		len(sums) != 1 || sums[0].Owner == nil || sums[0].Owner.Address != "http://"+p.addr {
		t.Fatalf("inspect shards beside serve: %+v %v; want serve at %s as the owner", sums, err, p.addr)
	}
	var snap snapshotOutput
	if err := json.Unmarshal([]byte(runProc(t, secondProcessBound, "snapshot", "get", "default/src", "--data-dir", dir, "-o", "json").succeeded(t)), &snap); err != nil ||
		snap.Offset != 50 {
		t.Fatalf("snapshot get beside serve: %+v %v; want offset 50", snap, err)
	}
	if h, held, err := dirlock.Holding(dir); err != nil || !held || h.Pid != p.cmd.Process.Pid || h.Command != "serve" {
		t.Fatalf("after the readers the lock is %+v held=%v %v; want serve's still", h, held, err)
	}
	p.stop(t)
	ids2, _ := readBase(t, dir)
	if len(ids2) != len(ids) {
		t.Fatalf("the base holds %d ids; want %d", len(ids2), len(ids))
	}

	// The same with an external etcd: the lock is the data dir's, not etcd's.
	ext, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	endpoints := strings.Join(ext.Endpoints(), ",")
	dir = t.TempDir()
	p = startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--lease-ttl", "60s", "--etcd-endpoints", endpoints)
	postAndFlush(t, p, batchIDs("ext", 0, 20), 20)
	inUse = "data directory " + dir + " is in use by " + holderOf(p, "serve")
	runProc(t, secondProcessBound, "serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--etcd-endpoints", endpoints).failed(t, inUse)
	runProc(t, secondProcessBound, "wal", "repair", "--data-dir", dir, "--shard", "default", "--yes").failed(t, "refusing to repair", inUse)
	runProc(t, secondProcessBound, "inspect", "shards", "--data-dir", dir).failed(t, inUse, "it records no embedded etcd", "--etcd-endpoints")
	runProc(t, secondProcessBound, "inspect", "shards", "--data-dir", dir, "--etcd-endpoints", endpoints).succeeded(t)
	p.stop(t)
}

// TestGenerateStopsOnSignal: a long `writer generate` holds the data dir (a
// serve beside it fails fast naming it) and stops within seconds of SIGTERM,
// exit 1 saying it was interrupted, with what it appended committed; the
// data dir is then free.
func TestGenerateStopsOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	g := spawnWriter(t, "generate", "--data-dir", dir, "--rows", "100000000", "--shards", "1", "--producers", "2",
		"--flush-bytes", "1048576", "-v", "-o", "json")
	g.waitLog(t, 60*time.Second, "claimed shard")
	runProc(t, secondProcessBound, "serve", "--listen", "127.0.0.1:0", "--data-dir", dir).
		failed(t, "data directory "+dir+" is in use by "+holderOf(g, "generate"))

	g.signal(t, syscall.SIGTERM)
	start := time.Now()
	err := g.wait(t, secondProcessBound)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(g.output(), "writer: interrupted: appended ") {
		t.Fatalf("generate after SIGTERM: %v after %v; want exit 1 saying it was interrupted\n%s", err, time.Since(start), lastLines(g.output(), 10))
	}
	t.Logf("generate stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	var rep report
	if err := json.Unmarshal(g.stdout.Bytes(), &rep); err != nil || rep.Rows == 0 || rep.Rows >= 100000000 {
		t.Fatalf("the interrupted generate's report: %v\n%.500s", err, g.stdout.String())
	}
	var sums []shardSummary
	if err := json.Unmarshal([]byte(runProc(t, secondProcessBound, "inspect", "shards", "--data-dir", dir, "-o", "json").succeeded(t)), &sums); err != nil ||
		len(sums) != 1 || sums[0].Rows != rep.Rows {
		t.Fatalf("inspect after the interrupted generate: %+v %v; want %d rows committed", sums, err, rep.Rows)
	}
}

// TestStaleEndpointIsRecovered: after serve's SIGKILL its etcd.endpoint
// names an etcd nothing answers for; inspect and merge say the file is
// stale (naming it) and start the data dir's own etcd, within seconds. An
// endpoint file of an earlier version (unverifiable) whose address accepts
// connections and never answers is stale too while the lock is free. While
// the lock is held, a dead record fails fast naming the holder.
func TestStaleEndpointIsRecovered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	file := endpointFile(dir)
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--lease-ttl", "60s", "--flush-age", "-1s")
	ids := batchIDs("stale", 0, 40)
	postAndFlush(t, p, ids, 40)
	p.kill(t)
	stale, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("serve's SIGKILL left no endpoint file: %v", err)
	}

	r := runProc(t, secondProcessBound, "inspect", "shards", "--data-dir", dir, "-o", "json")
	r.succeeded(t)
	rec := r.p.find(msgStaleStarted, "file", file)
	if rec == nil || !strings.Contains(fmt.Sprint(rec["reason"]), "nothing listens there") {
		t.Fatalf("inspect did not name the stale file %s (nothing listening):\n%s", file, lastLines(r.stderr(), 10))
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("inspect left an endpoint file behind: %v", err)
	}

	// The format of earlier versions, at an address that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	writeTestFile(t, file, "http://"+ln.Addr().String()+"\n")
	m := runProc(t, secondProcessBound, "merge", "--data-dir", dir, "-o", "json")
	var rep mergeReport
	if err := json.Unmarshal([]byte(m.succeeded(t)), &rep); err != nil || rep.RowsStaged != int64(len(ids)) {
		t.Fatalf("merge after the stale file: %+v %v; want %d rows staged", rep, err, len(ids))
	}
	if m.p.find(msgStaleStarted, "file", file) == nil {
		t.Fatalf("merge did not name the stale file %s of the earlier format:\n%s", file, lastLines(m.stderr(), 10))
	}

	// The lock held (here by this process), the record dead: fail fast.
	writeTestFile(t, file, string(stale))
	lock, err := dirlock.Acquire(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	runProc(t, secondProcessBound, "inspect", "base", "--data-dir", dir).
		failed(t, "the etcd recorded in "+file, "does not answer", fmt.Sprintf("in use by pid %d (writer test", os.Getpid()))
	if b, err := os.ReadFile(file); err != nil || string(b) != string(stale) {
		t.Fatalf("the refused inspect changed %s: %q %v", file, b, err)
	}
	lock.Release()
	got, _ := readBase(t, dir)
	if len(got) != len(ids) {
		t.Fatalf("the base holds %d ids; want %d", len(got), len(ids))
	}
}

// TestEndpointOfAnotherDirectoryIsRefused: directory A's serve is killed
// and its port now answers as directory B's etcd (B's serve runs). Merge,
// inspect and snapshot get on A are refused naming the file and both
// identities, and write nothing; both bases stay as they were. Removing the
// stale file as the message says, A's commands start A's own etcd; the
// file of an earlier version (unverifiable) pointing at B's etcd is taken
// for stale, never used. Each directory then merges through its own etcd and
// holds exactly its own rows.
func TestEndpointOfAnotherDirectoryIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	fileA := endpointFile(dirA)
	args := func(dir string) []string {
		return []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--lease-ttl", "60s", "--flush-age", "-1s"}
	}
	pA := startServe(t, args(dirA)...)
	idsA := batchIDs("dir-a", 0, 30)
	postAndFlush(t, pA, idsA, 30)
	runProc(t, secondProcessBound, "merge", "--data-dir", dirA).succeeded(t)
	pA.kill(t)
	pB := startServe(t, args(dirB)...)
	idsB := batchIDs("dir-b", 0, 45)
	postAndFlush(t, pB, idsB, 45)
	runProc(t, secondProcessBound, "merge", "--data-dir", dirB).succeeded(t)

	// A's record, as if B's etcd had been given A's old port.
	var recA, recB endpointRecord
	for file, rec := range map[string]*endpointRecord{fileA: &recA, endpointFile(dirB): &recB} {
		b, err := os.ReadFile(file)
		if err == nil {
			err = json.Unmarshal(b, rec)
		}
		if err != nil {
			t.Fatalf("endpoint record %s: %v", file, err)
		}
	}
	recA.Endpoints = recB.Endpoints
	b, _ := json.Marshal(recA)
	writeTestFile(t, fileA, string(b))
	_, baseA := readBase(t, dirA)
	_, baseB := readBase(t, dirB)

	for _, cmd := range [][]string{
		{"merge", "--data-dir", dirA},
		{"inspect", "base", "--data-dir", dirA},
		{"snapshot", "get", "default/src", "--data-dir", dirA},
	} {
		runProc(t, secondProcessBound, cmd...).failed(t,
			fmt.Sprintf("etcd at %s serves data directory %s (identity %s), not data directory %s (identity %s",
				hostsOf(recB.Endpoints), recB.DataDir, recB.Identity, recA.DataDir, recA.Identity),
			"the endpoint file "+fileA+" is stale; nothing was written",
			"No process holds the data directory: remove "+fileA)
	}
	checkBaseUnchanged(t, dirA, baseA, idsA)
	checkBaseUnchanged(t, dirB, baseB, idsB)
	if _, err := os.Stat(filepath.Join(dirA, dirlock.FileName)); err == nil {
		if _, held, _ := dirlock.Holding(dirA); held {
			t.Fatal("a refused command holds A's lock")
		}
	}

	// As the message says: remove the file; A's own etcd serves A.
	if err := os.Remove(fileA); err != nil {
		t.Fatal(err)
	}
	runProc(t, secondProcessBound, "inspect", "base", "--data-dir", dirA).succeeded(t)
	// The file of an earlier version naming B's etcd (the old bug): stale, not used.
	writeTestFile(t, fileA, recB.Endpoints[0]+"\n")
	m := runProc(t, secondProcessBound, "merge", "--data-dir", dirA)
	m.succeeded(t)
	if m.p.find(msgStaleStarted, "file", fileA) == nil {
		t.Fatalf("merge of A did not name the unverifiable file:\n%s", lastLines(m.stderr(), 10))
	}
	checkBaseUnchanged(t, dirA, baseA, idsA)
	checkBaseUnchanged(t, dirB, baseB, idsB)

	// Each merges new rows through its own etcd.
	more := batchIDs("dir-b", 1, 15)
	postAndFlush(t, pB, more, 60)
	runProc(t, secondProcessBound, "merge", "--data-dir", dirB).succeeded(t)
	runProc(t, secondProcessBound, "merge", "--data-dir", dirA).succeeded(t)
	pB.stop(t)
	checkBaseIDs(t, dirA, idsA)
	checkBaseIDs(t, dirB, append(idsB, more...))
}

// checkBaseUnchanged checks the base of dir is still at the readers'
// manifest version it was, with exactly ids.
func checkBaseUnchanged(t *testing.T, dir string, was publish.ReaderManifest, ids []string) {
	t.Helper()
	_, m := readBase(t, dir)
	if m.Version != was.Version || !slices.Equal(m.Files, was.Files) {
		t.Fatalf("the base of %s moved from version %d (%d files) to %d (%d files)", dir, was.Version, len(was.Files), m.Version, len(m.Files))
	}
	checkBaseIDs(t, dir, ids)
}

// checkBaseIDs checks the base of dir, read through its latest readers'
// manifest, holds each of ids once and nothing else.
func checkBaseIDs(t *testing.T, dir string, ids []string) {
	t.Helper()
	got, _ := readBase(t, dir)
	var have []string
	for id, n := range got {
		if n != 1 {
			t.Fatalf("id %s is in the base of %s %d times", id, dir, n)
		}
		have = append(have, id)
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(have, want) {
		t.Fatalf("the base of %s holds %d ids; want its own %d", dir, len(have), len(want))
	}
}
