package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gocql/gocql"
)

// Tests against a real Cassandra node. ROLLWAL_CASSANDRA_HOSTS names it
// (scripts/cassandra start prints the line); scripts/test sets it. When it
// is set these tests run; when it is not they skip loudly, or fail under CI.
// All of them share one keyspace per test binary, created at the first use
// and dropped by TestMain, and use keys no other test uses.

const hostsEnv = "ROLLWAL_CASSANDRA_HOSTS"

func cassandraHosts(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(hostsEnv)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("ROLLWAL_CASSANDRA_HOSTS must be set by the test command")
		}
		t.Skip("\n" +
			"#####################################################################\n" +
			"### SKIPPED: ROLLWAL_CASSANDRA_HOSTS is not set, so the Cassandra\n" +
			"### snapshot backend is NOT tested. Start a node with\n" +
			"###   bash scripts/cassandra start    (needs java 17 and mvn)\n" +
			"### and export the ROLLWAL_CASSANDRA_HOSTS=... line it prints.\n" +
			"#####################################################################")
	}
	return strings.Split(v, ",")
}

// The shared keyspace and an admin session on it, for probes and raw
// statements the Store does not offer.
var (
	cassOnce     sync.Once
	cassErr      error
	cassAdmin    *gocql.Session
	cassKeyspace = fmt.Sprintf("rollwal_snapshot_test_%08x", runID)
)

func cassandraOptions(t testing.TB) CassandraOptions {
	hosts := cassandraHosts(t)
	cassOnce.Do(func() {
		opts := CassandraOptions{
			Hosts: hosts, Keyspace: cassKeyspace,
			Replication: map[string]string{"class": "SimpleStrategy", "replication_factor": "1"},
		}
		opts.EnsureDefaults()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if cassErr = CreateSchema(ctx, opts); cassErr != nil {
			return
		}
		cassAdmin, cassErr = connect(opts)
	})
	if cassErr != nil {
		t.Fatalf("cassandra at %v: %v", hosts, cassErr)
	}
	return CassandraOptions{Hosts: hosts, Keyspace: cassKeyspace}
}

// closeCassandra drops the test keyspace; TestMain calls it.
func closeCassandra() error {
	if cassAdmin == nil {
		return nil
	}
	defer cassAdmin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cassAdmin.Query("DROP KEYSPACE IF EXISTS " + cassKeyspace).WithContext(ctx).Exec(); err != nil {
		return fmt.Errorf("drop test keyspace %s: %w", cassKeyspace, err)
	}
	return nil
}

// newCassandra opens a store on the shared keyspace with opts' non-zero
// fields (TTL, Timeout, LegacyLastWriteWins) applied, closed at cleanup.
func newCassandra(t testing.TB, opts CassandraOptions) *Cassandra {
	t.Helper()
	base := cassandraOptions(t)
	opts.Hosts, opts.Keyspace = base.Hosts, base.Keyspace
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewCassandra(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newCassandraProbed wraps a store for the conformance suite: remaining is
// TTL("offset"), after checking that value and metadata expire with it.
func newCassandraProbed(t testing.TB, ttl time.Duration) *probedStore {
	c := newCassandra(t, CassandraOptions{TTL: ttl})
	return &probedStore{Store: c, ttl: ttl, remaining: func(ctx context.Context, key Key) (time.Duration, error) {
		ttls, err := cellTTLs(ctx, c, key)
		if err != nil {
			return 0, err
		}
		for _, x := range ttls[1:] {
			if (x == nil) != (ttls[0] == nil) || x != nil && (*x-*ttls[0] > 1 || *ttls[0]-*x > 1) {
				return 0, fmt.Errorf("cells expire apart: TTL(offset, value, metadata) = %s", fmtTTLs(ttls))
			}
		}
		if ttls[0] == nil {
			return 0, nil
		}
		return time.Duration(*ttls[0]) * time.Second, nil
	}}
}

// cellTTLs reads TTL("offset"), TTL(value), TTL(metadata); nil is no TTL.
func cellTTLs(ctx context.Context, c *Cassandra, key Key) ([3]*int, error) {
	var ttls [3]*int
	err := cassAdmin.Query(`SELECT TTL("offset"), TTL(value), TTL(metadata) FROM `+c.opts.Keyspace+"."+c.opts.Table+
		` WHERE table_name = ? AND shard = ? AND source = ?`, key.Table, key.Shard, key.Source).
		WithContext(ctx).Consistency(gocql.LocalQuorum).Scan(&ttls[0], &ttls[1], &ttls[2])
	return ttls, err
}

func fmtTTLs(ttls [3]*int) string {
	var s []string
	for _, x := range ttls {
		if x == nil {
			s = append(s, "null")
		} else {
			s = append(s, strconv.Itoa(*x))
		}
	}
	return strings.Join(s, ", ")
}

func TestCassandraConformance(t *testing.T) {
	cassandraHosts(t)
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("ttl=%s", ttl), func(t *testing.T) {
			runConformance(t, func(t *testing.T) Store { return newCassandraProbed(t, ttl) })
		})
	}
}

// rawRow reads the row as stored, bypassing Get: present reports whether a
// row exists at all (row marker or any live cell).
func rawRow(t testing.TB, c *Cassandra, key Key) (present bool, offset *int64) {
	t.Helper()
	err := cassAdmin.Query(`SELECT "offset" FROM `+c.opts.Keyspace+"."+c.opts.Table+
		` WHERE table_name = ? AND shard = ? AND source = ?`, key.Table, key.Shard, key.Source).
		WithContext(ctxFor(t)).Consistency(gocql.LocalQuorum).Scan(&offset)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return true, offset
}

// waitNotFound polls Get until the key reads as absent, for at most 20 s.
func waitNotFound(t testing.TB, s Store, key Key) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.Get(ctxFor(t), key)
		if errors.Is(err, ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatalf("Get while waiting for expiry: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s still readable 20 s after a 1 s TTL", key)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGuardExpiredRowIsRepaired: a row can outlive its offset cell. An
// INSERT without a TTL (here an LWT INSERT, as an older writer or a manual
// fix would make) writes an immortal row marker; a later write with a 1 s
// TTL leaves the marker alive after the cells expire: the row is present
// with a null offset. "IF offset <= ?" is false against null forever, so
// without the claim (IF offset = null) the key would conflict forever. The
// row reads as absent; the next persist repairs it; the fence holds again
// — until the next expiry, after which a lower offset lands (the TTL
// residual).
func TestGuardExpiredRowIsRepaired(t *testing.T) {
	noTTL := newCassandra(t, CassandraOptions{})
	short := newCassandra(t, CassandraOptions{TTL: time.Second})
	key := testKey(t)

	applied, err := cassAdmin.Query(`INSERT INTO `+noTTL.opts.Keyspace+"."+noTTL.opts.Table+
		` (table_name, shard, source, "offset", value, metadata) VALUES (?, ?, ?, 10, 0x00, {}) IF NOT EXISTS`,
		key.Table, key.Shard, key.Source).WithContext(ctxFor(t)).Consistency(gocql.LocalQuorum).
		SerialConsistency(gocql.LocalSerial).MapScanCAS(map[string]any{})
	if err != nil || !applied {
		t.Fatalf("legacy INSERT: applied=%v, %v", applied, err)
	}
	mustPersist(t, short, key, snap(11, "short-lived"))
	// Read at once, but a loaded machine (CI under -race) can take longer
	// than the TTL to get here: then it already expired, and the null
	// offset the legacy row has below is what shows that the write landed
	// (without it the offset would still be 10).
	if _, err := noTTL.Get(ctxFor(t), key); errors.Is(err, ErrNotFound) {
		t.Logf("the 1 s write expired before it was read back: %v", err)
	} else {
		wantStored(t, noTTL, key, snap(11, "short-lived"))
	}

	waitNotFound(t, noTTL, key)
	if present, off := rawRow(t, noTTL, key); !present || off != nil {
		t.Fatalf("after expiry: row present=%v offset=%v; want a present row with a null offset", present, off)
	}
	// The repair: the advance sees a null guard, the claim lands.
	mustPersist(t, noTTL, key, snap(12, "repaired"))
	wantStored(t, noTTL, key, snap(12, "repaired"))
	wantConflict(t, noTTL.Persist(ctxFor(t), key, snap(5, "stale")), key, 5, 12)
	wantStored(t, noTTL, key, snap(12, "repaired"))

	// The marker stays: a later short-TTL write poisons the row again, and
	// once it expires the fence is gone with it (a lower offset lands).
	mustPersist(t, short, key, snap(13, "short again"))
	waitNotFound(t, noTTL, key)
	if present, off := rawRow(t, noTTL, key); !present || off != nil {
		t.Fatalf("after the second expiry: present=%v offset=%v; want present, null", present, off)
	}
	mustPersist(t, noTTL, key, snap(6, "below the expired 13"))
	wantStored(t, noTTL, key, snap(6, "below the expired 13"))
}

// TestExpiredRowWithoutMarkerVanishes: rows this package writes carry no
// marker (every write is an UPDATE of all cells with one TTL), so when the
// cells expire the row is gone, not poisoned.
func TestExpiredRowWithoutMarkerVanishes(t *testing.T) {
	short := newCassandra(t, CassandraOptions{TTL: time.Second})
	key := testKey(t)
	mustPersist(t, short, key, snap(0, "first"))
	mustPersist(t, short, key, snap(4, "advance"))
	waitNotFound(t, short, key)
	if present, off := rawRow(t, short, key); present {
		t.Fatalf("after expiry: row present with offset %v; want no row", off)
	}
}

// TestZombieFlushCannotRegressSnapshot is issue #732 of kafka-flow at the
// store level: writer A persists 100 and stalls; ownership moves to B, which
// persists 200; A wakes up and flushes its stale 150. Last-write-wins
// regresses the snapshot to 150 (the bug, asserted so the test proves it can
// see it); the LWT fence keeps 200 and tells A it is behind.
func TestZombieFlushCannotRegressSnapshot(t *testing.T) {
	for _, legacy := range []bool{true, false} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			a := newCassandra(t, CassandraOptions{LegacyLastWriteWins: legacy})
			b := newCassandra(t, CassandraOptions{LegacyLastWriteWins: legacy})
			key := testKey(t)
			mustPersist(t, a, key, snap(100, "A@100"))
			mustPersist(t, b, key, snap(200, "B@200"))
			err := a.Persist(ctxFor(t), key, snap(150, "A@150 (zombie)"))
			if legacy {
				if err != nil {
					t.Fatalf("legacy zombie persist: %v", err)
				}
				wantStored(t, b, key, snap(150, "A@150 (zombie)")) // the regression
				return
			}
			wantConflict(t, err, key, 150, 200)
			wantStored(t, b, key, snap(200, "B@200"))
		})
	}
}

// TestClaimRaceBranches forces the branches of Persist that a race reaches
// only by chance, by letting another writer act right before a step.
func TestClaimRaceBranches(t *testing.T) {
	other := newCassandra(t, CassandraOptions{})
	t.Run("ClaimLostToLowerThenAdvance", func(t *testing.T) {
		c := newCassandra(t, CassandraOptions{})
		key := testKey(t)
		c.beforeStep = func(step string, round int) {
			if step == "claim" && round == 0 {
				mustPersist(t, other, key, snap(3, "state-3"))
			}
		}
		mustPersist(t, c, key, snap(8, "state-8"))
		wantStored(t, c, key, snap(8, "state-8"))
	})
	t.Run("ClaimLostToHigherConflicts", func(t *testing.T) {
		c := newCassandra(t, CassandraOptions{})
		key := testKey(t)
		c.beforeStep = func(step string, round int) {
			if step == "claim" {
				mustPersist(t, other, key, snap(12, "state-12"))
			}
		}
		wantConflict(t, c.Persist(ctxFor(t), key, snap(8, "state-8")), key, 8, 12)
		wantStored(t, c, key, snap(12, "state-12"))
	})
	t.Run("RowVanishingEveryRoundIsASpuriousConflict", func(t *testing.T) {
		c := newCassandra(t, CassandraOptions{})
		key := testKey(t)
		c.beforeStep = func(step string, round int) {
			switch step {
			case "claim":
				mustPersist(t, other, key, snap(3, "state-3"))
			case "advance":
				if err := other.Delete(ctxFor(t), key); err != nil {
					t.Fatal(err)
				}
			}
		}
		wantConflict(t, c.Persist(ctxFor(t), key, snap(8, "state-8")), key, 8, -1)
		c.beforeStep = nil
		mustPersist(t, c, key, snap(8, "state-8")) // the next persist resolves it
	})
	t.Run("RowDeletedBeforeAdvanceIsClaimed", func(t *testing.T) {
		c := newCassandra(t, CassandraOptions{})
		key := testKey(t)
		mustPersist(t, other, key, snap(1, "state-1"))
		// Make the advance see a deleted row: the claim then lands.
		c.beforeStep = func(step string, round int) {
			if step == "advance" && round == 0 {
				if err := other.Delete(ctxFor(t), key); err != nil {
					t.Fatal(err)
				}
			}
		}
		mustPersist(t, c, key, snap(0, "state-0"))
		wantStored(t, c, key, snap(0, "state-0"))
	})
}

// cassandraPID finds the Cassandra JVM to freeze: ROLLWAL_CASSANDRA_PID, or
// the pid `scripts/cassandra status` reports. It refuses any process that is
// not a CassandraDaemon.
func cassandraPID(t testing.TB) int {
	t.Helper()
	src := "ROLLWAL_CASSANDRA_PID"
	v := os.Getenv(src)
	if v == "" {
		src = "bash ../scripts/cassandra status"
		out, _ := exec.Command("bash", "../scripts/cassandra", "status").CombinedOutput()
		m := regexp.MustCompile(`running \(pid (\d+)\)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("cannot find the Cassandra JVM to SIGSTOP: %s said %q; start the node with scripts/cassandra or set ROLLWAL_CASSANDRA_PID", src, out)
		}
		v = string(m[1])
	}
	pid, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: pid %q: %v", src, v, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "CassandraDaemon") {
		t.Fatalf("%s: pid %d is not a CassandraDaemon (%v)", src, pid, err)
	}
	return pid
}

// freeze SIGSTOPs pid and returns the function that SIGCONTs it. A watchdog
// process resumes the node after 30 s even if this test binary dies while
// the node is frozen; cleanup resumes it and ends the watchdog.
func freeze(t testing.TB, pid int) (resume func()) {
	t.Helper()
	dog := exec.Command("sh", "-c", fmt.Sprintf("sleep 30; kill -CONT %d", pid))
	if err := dog.Start(); err != nil {
		t.Fatalf("watchdog: %v", err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %d: %v", pid, err)
			}
			_ = dog.Process.Kill()
			_ = dog.Wait()
		})
	}
	t.Cleanup(resume)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		resume()
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	waitStopped(t, pid)
	return resume
}

// waitStopped returns once every thread of pid is stopped. kill(SIGSTOP)
// returns before threads running on other CPUs have stopped; on a busy
// machine a request sent at once could still be answered.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: threads still running 10 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether every thread of pid is in state T (stopped).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// TestUnknownOutcomeConverges freezes the Cassandra JVM (SIGSTOP) while
// persists are in flight: one gives up at its context deadline, the other at
// the driver's request timeout (gocql.ErrTimeoutNoResponse). Both must be
// ErrUnknownOutcome — the requests sit in the node's socket and may still
// apply when it wakes. After SIGCONT, persisting the same offsets again
// returns nil (the "<=" fence admits our own landed write, and a new Paxos
// round finishes any half-done one), Get shows them, and lower offsets
// conflict.
func TestUnknownOutcomeConverges(t *testing.T) {
	cassandraHosts(t)
	pid := cassandraPID(t)
	c := newCassandra(t, CassandraOptions{Timeout: time.Second})
	byDeadline, byTimeout := testKey(t), testKey(t)
	mustPersist(t, c, byDeadline, snap(5, "five")) // prepares the advance
	mustPersist(t, c, byTimeout, snap(5, "five"))
	mustPersist(t, c, testKey(t), snap(1, "prepares the claim"))

	resume := freeze(t, pid)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	errDeadline := c.Persist(ctx, byDeadline, snap(9, "nine"))
	cancel()
	errTimeout := c.Persist(context.Background(), byTimeout, snap(9, "nine"))
	resume()
	for _, r := range []struct {
		name  string
		err   error
		cause error
	}{{"context deadline", errDeadline, context.DeadlineExceeded}, {"driver timeout", errTimeout, gocql.ErrTimeoutNoResponse}} {
		if !errors.Is(r.err, ErrUnknownOutcome) || !errors.Is(r.err, r.cause) {
			t.Errorf("%s: Persist against a frozen node = %v; want ErrUnknownOutcome wrapping %v", r.name, r.err, r.cause)
		}
		t.Logf("%s: %v", r.name, r.err)
	}
	if t.Failed() {
		return
	}
	for _, key := range []Key{byDeadline, byTimeout} {
		retryUntilAnswered(t, c, key, snap(9, "nine"))
		wantStored(t, c, key, snap(9, "nine"))
		wantConflict(t, c.Persist(ctxFor(t), key, snap(7, "stale")), key, 7, 9)
	}
}

// retryUntilAnswered persists sn until the node answers (at most 60 s). Any
// answer but success fails the test: a conflict would mean the fence
// refused our own write.
func retryUntilAnswered(t *testing.T, s Store, key Key, sn Snapshot) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := s.Persist(ctxFor(t), key, sn)
		if err == nil {
			return
		}
		if errors.Is(err, ErrConflict) || time.Now().After(deadline) {
			t.Fatalf("retry after SIGCONT: %v", err)
		}
		t.Logf("retry after SIGCONT: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
}

// TestNodeKilledDuringPersists SIGKILLs the Cassandra JVM while a writer
// persists ascending offsets of one key, restarts it over its data
// (commitlog replay) and checks what the writer was told: every offset
// acknowledged before the kill is still there (the stored one is at least
// the last acknowledged), persists in flight came back as errors — none was
// reported stored without being so — and after the restart the key never
// moves backwards, and the writer continues from where it was.
func TestNodeKilledDuringPersists(t *testing.T) {
	cassandraHosts(t)
	pid := cassandraPID(t)
	c := newCassandra(t, CassandraOptions{Timeout: time.Second})
	key := testKey(t)
	var acked atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for off := int64(1); ; off++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := c.Persist(ctx, key, snap(off, fmt.Sprint("offset ", off)))
			cancel()
			if err != nil {
				done <- err
				return
			}
			acked.Store(off)
		}
	}()
	waitUntil(t, "50 persists acknowledged", func() bool { return acked.Load() >= 50 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatal("persists kept succeeding 30 s after the node was killed")
	}
	last := acked.Load()
	t.Logf("killed after %d acknowledged persists; the one in flight: %v", last, err)
	if err == nil {
		t.Fatal("the writer stopped without an error")
	}
	restartCassandra(t)
	c2 := newCassandra(t, CassandraOptions{Timeout: 5 * time.Second})
	got, gerr := c2.Get(ctxFor(t), key)
	if gerr != nil {
		t.Fatalf("after the restart: Get = %v, %v", got, gerr)
	}
	if got.Offset < last || got.Offset > last+1 {
		t.Fatalf("after the restart the key holds offset %d; %d was acknowledged before the kill (and at most %d in flight)", got.Offset, last, last+1)
	}
	// The persist in flight may still land now: its Paxos round is
	// finished by the next one on the key. Either way, nothing goes back.
	var conflict *ConflictError
	if err := c2.Persist(ctxFor(t), key, snap(last-1, "behind")); !errors.As(err, &conflict) || conflict.Stored < last {
		t.Fatalf("persist of %d after the restart: %v; want a conflict with the stored offset ≥ %d", last-1, err, last)
	}
	next := conflict.Stored + 1
	mustPersist(t, c2, key, snap(next, "after the restart"))
	wantStored(t, c2, key, snap(next, "after the restart"))
}

// restartCassandra starts the killed node again over its data through
// scripts/cassandra restart, bounded.
func restartCassandra(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "../scripts/cassandra", "restart").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/cassandra restart: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	// The shared admin session's pool marked the node down; gocql would
	// take up to its reconnect interval to try again. Later tests need it now.
	opts := CassandraOptions{Hosts: cassandraHosts(t), Keyspace: cassKeyspace}
	opts.EnsureDefaults()
	fresh, err := connect(opts)
	if err != nil {
		t.Fatalf("reconnecting after the restart: %v", err)
	}
	old := cassAdmin
	cassAdmin = fresh
	old.Close()
}

// waitUntil polls cond (bounded: it turns a hang into a failure).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCassandraRejectsBadOptions(t *testing.T) {
	ok := CassandraOptions{Hosts: []string{"127.0.0.1"}, Keyspace: "ks"}
	for name, mutate := range map[string]func(o *CassandraOptions){
		"no hosts":            func(o *CassandraOptions) { o.Hosts = nil },
		"no keyspace":         func(o *CassandraOptions) { o.Keyspace = "" },
		"upper-case keyspace": func(o *CassandraOptions) { o.Keyspace = "Ks" },
		"quoted table":        func(o *CassandraOptions) { o.Table = `t"; DROP` },
		"negative TTL":        func(o *CassandraOptions) { o.TTL = -time.Second },
		"TTL over 20 years":   func(o *CassandraOptions) { o.TTL = MaxCassandraTTL + time.Second },
		"consistency ONE":     func(o *CassandraOptions) { o.Consistency = gocql.One },
		"serial QUORUM":       func(o *CassandraOptions) { o.SerialConsistency = gocql.SerialConsistency(gocql.Quorum) },
		"replication quote":   func(o *CassandraOptions) { o.Replication = map[string]string{"class": "x'y"} },
		"replication class":   func(o *CassandraOptions) { o.Replication = map[string]string{"dc1": "3"} },
	} {
		o := ok
		mutate(&o)
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v; want ErrInvalid", name, err)
		}
	}
	o := ok
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Table != DefaultCassandraTable || o.Consistency != gocql.LocalQuorum || o.SerialConsistency != gocql.LocalSerial {
		t.Errorf("defaults: %+v", o)
	}
}

// TestNewCassandraRefusesTableWithDefaultTTL: a table default TTL would
// expire cells the fence counts on, behind its back.
func TestNewCassandraRefusesTableWithDefaultTTL(t *testing.T) {
	opts := cassandraOptions(t)
	opts.Table = fmt.Sprintf("with_default_ttl_%d", keySeq.Add(1))
	stmt := strings.Replace(Schema(opts.Keyspace, opts.Table), "default_time_to_live = 0", "default_time_to_live = 60", 1)
	if err := cassAdmin.Query(stmt).WithContext(ctxFor(t)).Exec(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCassandra(ctxFor(t), opts); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "default_time_to_live") {
		t.Fatalf("NewCassandra on a table with a default TTL = %v; want ErrInvalid naming default_time_to_live", err)
	}
	opts.Table = "does_not_exist"
	if _, err := NewCassandra(ctxFor(t), opts); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("NewCassandra on a missing table = %v", err)
	}
}

// BenchmarkSnapshotPersist: what the fence costs. 64 persists in flight,
// each worker advancing its own key, first with plain (last-write-wins)
// UPDATEs, then with the LWT persist, on the same node. Reports persists/s,
// and for lwt the ratio to plain (x-plain; below 1 is the price of Paxos).
func BenchmarkSnapshotPersist(b *testing.B) {
	const inflight = 64
	var plainRate float64
	for _, mode := range []struct {
		name   string
		legacy bool
	}{{"plain", true}, {"lwt", false}} {
		b.Run(mode.name, func(b *testing.B) {
			s := newCassandra(b, CassandraOptions{LegacyLastWriteWins: mode.legacy, TTL: time.Hour})
			keys := make([]Key, inflight)
			for i := range keys {
				keys[i] = testKey(b)
			}
			value := make([]byte, 256)
			ctx := ctxFor(b)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range inflight {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := s.Persist(ctx, keys[w], Snapshot{Offset: i, Value: value}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			rate := float64(b.N) / time.Since(start).Seconds()
			b.ReportMetric(rate, "persists/s")
			if mode.legacy {
				plainRate = rate
			} else if plainRate > 0 {
				b.ReportMetric(rate/plainRate, "x-plain")
			}
		})
	}
}
