package main

// Snapshot offsets through real `writer serve` processes, on the backend
// the configuration's snapshots section names: the etcd store, or the real
// Cassandra node that $ROLLWAL_CASSANDRA_HOSTS names (scripts/test starts
// it). The helpers that start and watch processes are in process_test.go.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/rollwal/rollwal/internal/etcdcluster"
	"github.com/rollwal/rollwal/server"
)

// Log messages of the engine's snapshot persists the tests wait for.
const (
	msgPersistFailed  = "snapshot persist failed; retrying in the background"
	msgPersistRefused = "snapshot persist refused: a newer writer holds a higher offset"
)

// cassandraHostsEnv names the Cassandra node of the tests.
const cassandraHostsEnv = "ROLLWAL_CASSANDRA_HOSTS"

// snapCassandraHosts returns the test node's contact points. As in the
// snapshot package's tests: unset, the test skips loudly, or fails under CI.
func snapCassandraHosts(t *testing.T) []string {
	t.Helper()
	v := os.Getenv(cassandraHostsEnv)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("ROLLWAL_CASSANDRA_HOSTS must be set by the test command")
		}
		t.Skip("\n" +
			"#####################################################################\n" +
			"### SKIPPED: ROLLWAL_CASSANDRA_HOSTS is not set, so writer serve on\n" +
			"### the Cassandra snapshot backend is NOT tested. Start a node with\n" +
			"###   bash scripts/cassandra start    (needs java 17 and mvn)\n" +
			"### and export the ROLLWAL_CASSANDRA_HOSTS=... line it prints.\n" +
			"#####################################################################")
	}
	return strings.Split(v, ",")
}

// snapTable is a snapshot table of its own for one test: a fresh keyspace,
// created with `writer snapshot create-schema` and dropped at cleanup, and
// an admin session for the statements the writer does not offer.
type snapTable struct {
	hosts           []string
	keyspace, table string
	admin           *gocql.Session
}

func newSnapTable(t *testing.T) *snapTable {
	t.Helper()
	hosts := snapCassandraHosts(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	st := &snapTable{hosts: hosts, keyspace: "rollwal_writer_test_" + hex.EncodeToString(b[:]), table: "offsets"}
	cluster := gocql.NewCluster(hosts...)
	cluster.ProtoVersion = 4
	cluster.Consistency = gocql.LocalQuorum
	cluster.Timeout, cluster.ConnectTimeout = 30*time.Second, 30*time.Second
	admin, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("cassandra at %v: %v", hosts, err)
	}
	st.admin = admin
	t.Cleanup(func() {
		defer admin.Close()
		if err := st.exec("DROP KEYSPACE IF EXISTS " + st.keyspace); err != nil {
			t.Errorf("drop the test keyspace: %v", err)
		}
	})
	out := runProc(t, 2*time.Minute, "snapshot", "create-schema", "--hosts", strings.Join(hosts, ","),
		"--keyspace", st.keyspace, "--table", st.table, "--replication-factor", "1").succeeded(t)
	t.Logf("snapshot create-schema: %s", strings.TrimSpace(out))
	return st
}

func (st *snapTable) exec(stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return st.admin.Query(stmt).WithContext(ctx).Exec()
}

// section is the snapshots section of a configuration file for the table.
func (st *snapTable) section() string {
	return fmt.Sprintf("snapshots:\n  backend: cassandra\n  cassandra:\n    hosts: [%s]\n    keyspace: %s\n    table: %s\n    timeout: 10s\n",
		strings.Join(st.hosts, ", "), st.keyspace, st.table)
}

// offsetConfig writes a serve configuration: dataDir, the default shard,
// no age-based flush (the tests flush through the API), a short lease, and
// the given etcd and snapshots sections.
func offsetConfig(t *testing.T, dataDir, sections string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "writer.yaml")
	writeTestFile(t, path, fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\nshards: [default]\nflush_age: 1h\nlease_ttl: 2s\n%s", dataDir, sections))
	return path
}

// postOffset posts ids to the default shard with source and offset; every
// post must be acknowledged. It returns the answer.
func postOffset(t *testing.T, p *serveProc, source string, offset int64, ids []string) server.AppendResponse {
	t.Helper()
	code, b := httpDo(t, http.MethodPost, p.url(fmt.Sprintf("/v1/shards/default/rows?source=%s&offset=%d", source, offset)),
		server.ContentTypeNDJSON, ndjson(ids))
	res, err := appendResponse(b)
	if code != http.StatusOK || err != nil || res.Acked != len(ids) {
		t.Fatalf("post of %d rows of %s at offset %d: %d %s", len(ids), source, offset, code, b)
	}
	return res
}

func flushShard(t *testing.T, p *serveProc) {
	t.Helper()
	if code, b := httpDo(t, http.MethodPost, p.url("/v1/shards/default/flush"), "", ""); code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, b)
	}
}

// snapshotGet runs `writer snapshot get default/SOURCE --config cfg`.
func snapshotGet(t *testing.T, cfg, source string) (snapshotOutput, procResult) {
	t.Helper()
	r := runProc(t, 60*time.Second, "snapshot", "get", "default/"+source, "--config", cfg, "-o", "json")
	var out snapshotOutput
	if r.err == nil {
		if err := json.Unmarshal([]byte(r.stdout()), &out); err != nil {
			t.Fatalf("snapshot get output: %v\n%s", err, r.stdout())
		}
	}
	return out, r
}

// waitSnapshot polls `snapshot get` until the stored offset of source is
// want, at most d.
func waitSnapshot(t *testing.T, cfg, source string, want int64, d time.Duration) {
	t.Helper()
	t.Logf("waiting (at most %v) for snapshot get default/%s to show offset %d", d, source, want)
	deadline := time.Now().Add(d)
	for {
		got, r := snapshotGet(t, cfg, source)
		if r.err == nil && got.Offset == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot get default/%s after %v: offset %d, exit %v, stderr %s; want offset %d",
				source, d, got.Offset, r.err, lastLines(r.stderr(), 5), want)
		}
		time.Sleep(500 * time.Millisecond) // polling interval, bounded by the deadline
	}
}

// TestOffsetsSurviveCrash: serve on each snapshot backend acknowledges rows
// with source offsets, among them an out-of-order offset and a batch whose
// every row is a duplicate, and is SIGKILLed before any flush, so nothing
// was committed or persisted. A restart on the same data dir replays the
// offsets from the WAL; after the next commit `writer snapshot get` (the
// configured backend) shows exactly the highest acknowledged offset of
// every source. On Cassandra a persist that fails (the table is dropped
// under the running writer) is retried in the background and lands once
// the table is back.
func TestOffsetsSurviveCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Run("etcd", func(t *testing.T) {
		dir := t.TempDir()
		offsetsSurviveCrash(t, offsetConfig(t, dir, "snapshots:\n  backend: etcd\n"), nil)
	})
	t.Run("cassandra", func(t *testing.T) {
		st := newSnapTable(t)
		dir := t.TempDir()
		offsetsSurviveCrash(t, offsetConfig(t, dir, st.section()), st)
	})
}

func offsetsSurviveCrash(t *testing.T, cfg string, st *snapTable) {
	backend := "etcd"
	if st != nil {
		backend = "cassandra"
	}
	p := startServe(t, "--config", cfg)
	if p.find("snapshot store open", "backend", backend) == nil {
		t.Fatalf("serve did not open the %s snapshot store", backend)
	}
	want := map[string]int64{}
	post := func(source string, offset int64, ids []string) server.AppendResponse {
		res := postOffset(t, p, source, offset, ids)
		want[source] = max(want[source], offset)
		return res
	}
	post("stream-a", 10, batchIDs("crash-a", 0, 5))
	firstB := batchIDs("crash-b", 0, 5)
	post("stream-b", 7, firstB)
	post("topic/3", 1000, batchIDs("crash-t", 0, 5))
	post("stream-a", 20, batchIDs("crash-a", 1, 5))
	post("stream-b", 3, batchIDs("crash-b", 1, 5)) // out of order: 7 stays the highest
	post("stream-a", 30, batchIDs("crash-a", 2, 5))
	if res := post("stream-b", 9, firstB); res.Stored != 0 || res.Duplicates != len(firstB) { // every row a duplicate
		t.Fatalf("the repeated batch stored %d, %d duplicates; want all %d duplicates", res.Stored, res.Duplicates, len(firstB))
	}
	t.Logf("acknowledged, not flushed: highest offsets %v", want)
	p.kill(t)

	p2 := startServe(t, "--config", cfg)
	for source := range want { // nothing was committed before the kill, so nothing persisted
		if _, r := snapshotGet(t, cfg, source); r.err == nil || !strings.Contains(r.stderr(), "snapshot: not found") {
			t.Fatalf("snapshot get default/%s before any commit: exit %v, %s; want not found", source, r.err, lastLines(r.stderr(), 3))
		}
	}
	flushShard(t, p2) // the next commit covers the replayed offsets
	for source, off := range want {
		waitSnapshot(t, cfg, source, off, 30*time.Second)
	}
	t.Logf("after SIGKILL, restart and one commit the %s store holds %v", backend, want)
	if st == nil {
		// The etcd store is the writer's own metadata store: a persist
		// cannot fail there while the commit before it succeeds. The engine
		// test TestFailedPersistIsRetried covers the retry on a failing store.
		p2.stop(t)
		return
	}

	// A persist that fails is retried and lands.
	if err := st.exec(fmt.Sprintf("DROP TABLE %s.%s", st.keyspace, st.table)); err != nil {
		t.Fatal(err)
	}
	postOffset(t, p2, "stream-a", 40, batchIDs("crash-a", 3, 5))
	flushShard(t, p2) // committed in etcd; the persist fails
	p2.waitLog(t, 30*time.Second, msgPersistFailed, "source", "stream-a", "offset", "40")
	if _, r := snapshotGet(t, cfg, "stream-a"); r.err == nil {
		t.Fatal("snapshot get succeeded on a dropped table")
	}
	runProc(t, 2*time.Minute, "snapshot", "create-schema", "--hosts", strings.Join(st.hosts, ","),
		"--keyspace", st.keyspace, "--table", st.table).succeeded(t)
	waitSnapshot(t, cfg, "stream-a", 40, 60*time.Second)
	t.Logf("the failed persist of stream-a@40 was retried and landed once the table was back")
	p2.stop(t)
}

// TestPausedOwnerCannotMoveOffsetBack: two serves share an external etcd
// and a Cassandra snapshot table. The owner commits stream@150 while its
// persist fails (the table is dropped), so the persist waits for a retry;
// then the owner is frozen with SIGSTOP. The table is back, the owner's
// lease runs out, and a second serve claims the shard, commits stream@200
// and persists it. Resumed with SIGCONT, the old owner retries its persist
// of 150: the LWT fence refuses it (stored 200), and `writer snapshot get`
// still shows 200.
//
// The frozen owner keeps its data dir's lock, so the successor runs on
// another data dir, into which the owner's shard files (all flushed, and
// still while it is frozen) are copied as a shared disk would show them: a
// claimant must find the WAL up to what the manifest has committed.
func TestPausedOwnerCannotMoveOffsetBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	st := newSnapTable(t)
	cluster := etcdcluster.Start(t, etcdcluster.Options{Members: 1})
	etcdSection := fmt.Sprintf("etcd:\n  endpoints: [%s]\n", strings.Join(cluster.Endpoints(), ", "))
	dirA, dirB := t.TempDir(), t.TempDir()
	cfgA := offsetConfig(t, dirA, etcdSection+st.section())
	cfgB := offsetConfig(t, dirB, etcdSection+st.section())
	const source = "stream"

	owner := startServe(t, "--config", cfgA)
	postOffset(t, owner, source, 100, batchIDs("zombie-a", 0, 5))
	flushShard(t, owner)
	waitSnapshot(t, cfgA, source, 100, 30*time.Second)

	if err := st.exec(fmt.Sprintf("DROP TABLE %s.%s", st.keyspace, st.table)); err != nil {
		t.Fatal(err)
	}
	postOffset(t, owner, source, 150, batchIDs("zombie-a", 1, 5))
	flushShard(t, owner) // committed in etcd; the persist of 150 fails and waits for a retry
	owner.waitLog(t, 30*time.Second, msgPersistFailed, "source", source, "offset", "150")
	owner.signal(t, syscall.SIGSTOP) // while the table is gone no retry can land
	t.Cleanup(func() { owner.cmd.Process.Signal(syscall.SIGCONT) })
	t.Logf("owner (pid %d) frozen with a pending persist of %s@150", owner.cmd.Process.Pid, source)
	runProc(t, 2*time.Minute, "snapshot", "create-schema", "--hosts", strings.Join(st.hosts, ","),
		"--keyspace", st.keyspace, "--table", st.table).succeeded(t)

	copyTree(t, filepath.Join(dirA, "rollouts"), filepath.Join(dirB, "rollouts"))
	t.Logf("waiting (at most 60s) for a second serve to claim the shard once the frozen owner's 2s lease ends")
	successor := spawnServe(t, "--config", cfgB)
	successor.waitLog(t, 60*time.Second, msgListening)
	postOffset(t, successor, source, 200, batchIDs("zombie-b", 0, 5))
	flushShard(t, successor)
	waitSnapshot(t, cfgB, source, 200, 30*time.Second)
	t.Logf("the successor persisted %s@200", source)

	owner.signal(t, syscall.SIGCONT)
	t.Logf("waiting (at most 60s) for the resumed owner's retry of %s@150 to be refused", source)
	owner.waitLog(t, 60*time.Second, msgPersistRefused, "source", source, "offset", "150", "stored", "200")
	got, r := snapshotGet(t, cfgA, source)
	if r.err != nil || got.Offset != 200 {
		t.Fatalf("snapshot get after the zombie's persist: offset %d, %v; want 200", got.Offset, r.err)
	}
	if owner.exited() {
		t.Fatalf("the resumed owner exited: %v", owner.waitErr)
	}
	t.Logf("the zombie's late persist of 150 was refused by the fence; the store still holds 200")
	successor.stop(t)
}

// copyTree copies the regular files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// TestServeFailsAtStartWithoutCassandra: serve configured with a Cassandra
// that does not answer exits 1 at start naming the hosts, before it opens
// its HTTP port.
func TestServeFailsAtStartWithoutCassandra(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := offsetConfig(t, t.TempDir(), fmt.Sprintf("snapshots:\n  backend: cassandra\n  cassandra:\n    hosts: [%s]\n    timeout: 2s\n", host))
	r := runProc(t, 60*time.Second, "serve", "--config", cfg)
	r.failed(t, "snapshots: cassandra at "+host+" (keyspace rollwal, table snapshots)")
	if r.p.find(msgHTTPUp) != nil {
		t.Fatal("serve opened its HTTP port before its snapshot store answered")
	}
}
