package etcdcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/internal/etcdcluster"
)

func TestMain(m *testing.M) {
	// Members, clients and helper goroutines must all be gone after the tests.
	goleak.VerifyTestMain(m)
}

// TestBuild runs first (file order), so a cold build is timed on its own.
func TestBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	p1, err := etcdcluster.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Build: %s in %v", p1, time.Since(began).Round(time.Millisecond))
	p2, err := etcdcluster.Build(ctx)
	if err != nil || p2 != p1 {
		t.Fatalf("second Build = %q, %v; want %q, nil", p2, err, p1)
	}
}

func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	step := stepper(t)

	c := etcdcluster.Start(t, etcdcluster.Options{})
	step("start 3 members")
	if c.Len() != 3 {
		t.Fatalf("Len = %d, want 3", c.Len())
	}
	cli := c.Client(t)
	put(ctx, t, cli, "a", "1")
	mustGet(ctx, t, cli, "a", "1")
	step("put/get through all endpoints")

	// Freeze the leader: the others elect a new one and accept writes.
	leader := waitLeader(ctx, t, c)
	if err := c.Pause(leader); err != nil {
		t.Fatal(err)
	}
	step(fmt.Sprintf("pause leader m%d", leader))
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	newLeader, err := c.WaitLeader(lctx)
	lcancel()
	if err != nil {
		t.Fatalf("no new leader after pausing m%d: %v", leader, err)
	}
	if newLeader == leader {
		t.Fatalf("WaitLeader returned the paused member m%d", leader)
	}
	step(fmt.Sprintf("new leader m%d elected", newLeader))
	for j := range c.Len() {
		if j == leader {
			continue
		}
		cj := c.Client(t, c.Endpoint(j))
		key := fmt.Sprintf("b/%d", j)
		put(ctx, t, cj, key, "2")
		mustGet(ctx, t, cj, key, "2")
	}
	step("writes through the other members")
	if err := c.Pause(leader); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := c.Resume(leader); err != nil {
		t.Fatal(err)
	}
	// The old leader rejoins as a follower and catches up.
	eventuallyGet(ctx, t, c.Endpoint(leader), "b/"+fmt.Sprint(newLeader), "2")
	step(fmt.Sprintf("resume m%d, caught up", leader))

	// Kill a follower, write without it, restart it: it serves the data.
	leader = waitLeader(ctx, t, c)
	f := (leader + 1) % c.Len()
	oldPID := c.PID(f)
	if err := c.Kill(f); err != nil {
		t.Fatal(err)
	}
	if c.PID(f) != 0 || alive(oldPID) {
		t.Fatalf("m%d (pid %d) still running after Kill", f, oldPID)
	}
	if err := c.Kill(f); err != nil { // not running: no-op
		t.Fatal(err)
	}
	step(fmt.Sprintf("kill follower m%d", f))
	put(ctx, t, c.Client(t, c.Endpoint(leader)), "c", "3")
	if err := c.Restart(f); err != nil {
		t.Fatal(err)
	}
	if c.PID(f) == 0 || c.PID(f) == oldPID {
		t.Fatalf("m%d: PID %d after Restart (was %d)", f, c.PID(f), oldPID)
	}
	step(fmt.Sprintf("restart m%d", f))
	cf := c.Client(t, c.Endpoint(f))
	mustGet(ctx, t, cf, "a", "1")
	mustGet(ctx, t, cf, "c", "3")
	if err := c.Restart(f); err == nil {
		t.Fatal("Restart of a running member succeeded")
	}
	step("data readable through restarted member")

	// Lose the quorum: no leader; restart both together and recover.
	leader = waitLeader(ctx, t, c)
	down := []int{(leader + 1) % 3, (leader + 2) % 3}
	if err := c.Kill(down...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leader(ctx); !errors.Is(err, etcdcluster.ErrNoLeader) {
		t.Fatalf("Leader with one of three members up = %v, want ErrNoLeader", err)
	}
	if err := c.Restart(); err != nil { // all members not running
		t.Fatal(err)
	}
	waitLeader(ctx, t, c)
	for i := range c.Len() {
		mustGet(ctx, t, c.Client(t, c.Endpoint(i)), "c", "3")
	}
	step(fmt.Sprintf("kill m%d,m%d (no quorum), restart together", down[0], down[1]))

	// Stop everything: no process is left.
	var pids []int
	for i := range c.Len() {
		if pid := c.PID(i); pid == 0 {
			t.Fatalf("m%d not running before Stop", i)
		} else {
			pids = append(pids, pid)
		}
	}
	if err := c.Pause(0); err != nil { // Stop must also end a paused member
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, pid := range pids {
		if c.PID(i) != 0 || alive(pid) {
			t.Errorf("m%d (pid %d) still running after Stop", i, pid)
		}
	}
	step("stop all (one paused)")
}

// TestStopPausedLeader stops a frozen old leader after the others replaced
// it. On SIGCONT it still believes it leads and would try to hand over
// leadership, so a naive SIGTERM can stall for etcd's 6 s transfer timeout.
func TestStopPausedLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	step := stepper(t)
	c := etcdcluster.Start(t, etcdcluster.Options{})
	old := waitLeader(ctx, t, c)
	if err := c.Pause(old); err != nil {
		t.Fatal(err)
	}
	waitLeader(ctx, t, c)
	step(fmt.Sprintf("start, pause leader m%d, new leader", old))
	began := time.Now()
	if err := c.Stop(old); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("Stop of the paused old leader took %v", d)
	}
	step(fmt.Sprintf("stop paused m%d", old))
	if err := c.Restart(old); err != nil {
		t.Fatal(err)
	}
	put(ctx, t, c.Client(t, c.Endpoint(old)), "k", "v")
	step(fmt.Sprintf("restart m%d, write through it", old))
}

const childEnv = "ETCDCLUSTER_TEST_CHILD"

// TestMembersDieWithTestProcess runs this test binary again as a child that
// starts a cluster, SIGKILLs the child, so that no cleanup runs, and checks
// that Pdeathsig took the members down with it.
func TestMembersDieWithTestProcess(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		childStartsCluster(t)
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux-only")
	}
	step := stepper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMembersDieWithTestProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "CHILD "); ok {
			f := strings.Fields(rest)
			dir = f[0]
			for _, s := range f[1:] {
				pid, err := strconv.Atoi(s)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 3 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child reported pids %v, want 3", pids)
	}
	// The child's temp dirs outlive it: no cleanup runs after SIGKILL.
	t.Cleanup(func() { os.RemoveAll(dir) })
	step("child started a 3-member cluster")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, pid := range pids {
		for alive(pid) {
			select {
			case <-ctx.Done():
				t.Fatalf("member pid %d still alive after its test process was killed", pid)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	step("SIGKILL child: all members gone")
}

func childStartsCluster(t *testing.T) {
	c := etcdcluster.Start(t, etcdcluster.Options{})
	fmt.Printf("CHILD %s %d %d %d\n", filepath.Dir(t.TempDir()), c.PID(0), c.PID(1), c.PID(2))
	// Wait to be killed; give up (and clean up normally) after a while.
	<-time.After(30 * time.Second)
	t.Error("child was not killed")
}

// TestCleanupKillsPausedMember checks that a member left paused by a test is
// gone once that test's cleanup has run.
func TestCleanupKillsPausedMember(t *testing.T) {
	step := stepper(t)
	var pid int
	t.Run("inner", func(t *testing.T) {
		c := etcdcluster.Start(t, etcdcluster.Options{Members: 1})
		pid = c.PID(0)
		if err := c.Pause(0); err != nil {
			t.Fatal(err)
		}
		if c.PID(0) != pid {
			t.Fatalf("PID of a paused member = %d, want %d", c.PID(0), pid)
		}
	})
	if pid == 0 {
		t.Fatal("inner test did not start a member")
	}
	if alive(pid) {
		t.Fatalf("paused member (pid %d) survived cleanup", pid)
	}
	step("1-member cluster, paused, cleaned up")
}

func stepper(t *testing.T) func(string) {
	last := time.Now()
	return func(what string) {
		t.Helper()
		now := time.Now()
		t.Logf("%-45s %v", what, now.Sub(last).Round(time.Millisecond))
		last = now
	}
}

func waitLeader(ctx context.Context, t *testing.T, c *etcdcluster.Cluster) int {
	t.Helper()
	i, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func put(ctx context.Context, t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, k, v); err != nil {
		t.Fatalf("put %s via %v: %v", k, cli.Endpoints(), err)
	}
}

func get(ctx context.Context, cli *clientv3.Client, k string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, k)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) != 1 {
		return "", fmt.Errorf("get %s: %d keys", k, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value), nil
}

func mustGet(ctx context.Context, t *testing.T, cli *clientv3.Client, k, want string) {
	t.Helper()
	got, err := get(ctx, cli, k)
	if err != nil || got != want {
		t.Fatalf("get %s via %v = %q, %v; want %q", k, cli.Endpoints(), got, err, want)
	}
}

// eventuallyGet polls a linearizable Get through a fresh client per attempt
// (no reconnect backoff) until it returns want, for up to 10 s.
func eventuallyGet(ctx context.Context, t *testing.T, ep, k, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, time.Second)
		got, err := get(actx, cli, k)
		acancel()
		cli.Close()
		if err == nil && got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("get %s via %s = %q, %v; want %q", k, ep, got, err, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// alive reports whether a process with this pid exists and is not a zombie
// (the members of a killed child test process are reparented, and reaped
// whenever their new parent gets to it, if ever).
func alive(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) && runtime.GOOS != "linux"
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}
