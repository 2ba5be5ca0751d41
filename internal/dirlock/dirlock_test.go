package dirlock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the tests, or, in the child process that
// TestHeldByChildProcess starts (helperEnv set), holds a lock until killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		holdUntilKilled(dir)
	}
	goleak.VerifyTestMain(m)
}

// helperEnv names the directory the child process locks.
const helperEnv = "DIRLOCK_HELPER_DIR"

// holdUntilKilled is the child: it takes the lock, says so on stdout, and
// holds it until it is killed (or its stdin closes).
func holdUntilKilled(dir string) {
	l, err := Acquire(dir, "helper")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	bufio.NewReader(os.Stdin).ReadString('\n')
	l.Release()
	os.Exit(0)
}

// TestSecondAcquireInProcessFails: flock locks belong to the open file
// description, so a second Acquire in the same process conflicts with the
// first (Linux), names this process, and works again after Release.
func TestSecondAcquireInProcessFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // missing: Acquire creates it
	l, err := Acquire(dir, "serve")
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Holder(); h.Pid != os.Getpid() || h.Command != "serve" || h.Started.IsZero() {
		t.Fatalf("the lock recorded %+v", h)
	}
	start := time.Now()
	_, err = Acquire(dir, "generate")
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire in one process: %v; want a *HeldError", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the refused Acquire took %v", took)
	}
	if he.Holder.Pid != os.Getpid() || he.Holder.Command != "serve" || he.Dir != dir {
		t.Fatalf("HeldError %+v; want this pid and command serve", he)
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid()), "writer serve", "stop that process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not name %q", err, want)
		}
	}
	if h, held, err := Holding(dir); err != nil || !held || h.Pid != os.Getpid() {
		t.Fatalf("Holding while held: %+v %v %v", h, held, err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	if h, held, err := Holding(dir); err != nil || held {
		t.Fatalf("Holding after Release: %+v %v %v", h, held, err)
	}
	if b, err := os.ReadFile(Path(dir)); err != nil || len(b) != 0 {
		t.Fatalf("Release left the record %q (%v)", b, err)
	}
	l2, err := Acquire(dir, "generate")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestHeldByChildProcess: a child process that holds the lock makes Acquire
// fail at once naming the child's pid and command; once the child is
// SIGKILLed (no Release ran), the kernel has dropped the lock and Acquire
// succeeds, ignoring the dead child's record.
func TestHeldByChildProcess(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), helperEnv+"="+dir)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	defer func() {
		child.Process.Kill()
		<-done
	}()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "locked" {
			t.Fatalf("the child said %q", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not lock within 30s")
	}

	_, err = Acquire(dir, "serve")
	var he *HeldError
	if !errors.As(err, &he) || he.Holder.Pid != child.Process.Pid || he.Holder.Command != "helper" {
		t.Fatalf("Acquire beside the child (pid %d): %v (%+v)", child.Process.Pid, err, he)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", child.Process.Pid)) {
		t.Fatalf("the error does not name the child's pid: %v", err)
	}
	if h, held, err := Holding(dir); err != nil || !held || h.Pid != child.Process.Pid {
		t.Fatalf("Holding beside the child: %+v %v %v", h, held, err)
	}

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		done <- nil // for the deferred wait
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not die within 30s of SIGKILL")
	}
	if b, _ := os.ReadFile(Path(dir)); !strings.Contains(string(b), fmt.Sprint(child.Process.Pid)) {
		t.Fatalf("the killed child's record is gone (%q): the test proves nothing about stale records", b)
	}
	if _, held, err := Holding(dir); err != nil || held {
		t.Fatalf("Holding after the child's SIGKILL: held=%v %v", held, err)
	}
	l, err := Acquire(dir, "serve")
	if err != nil {
		t.Fatalf("Acquire after the holder's SIGKILL: %v", err)
	}
	defer l.Release()
	if h, held, _ := Holding(dir); !held || h.Pid != os.Getpid() || h.Command != "serve" {
		t.Fatalf("the new holder's record: %+v held=%v", h, held)
	}
}

// TestHolderString: the messages name what is known of a holder.
func TestHolderString(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		h    Holder
		want string
	}{
		{Holder{}, "a process that has not recorded itself yet"},
		{Holder{Pid: 7}, "pid 7"},
		{Holder{Pid: 7, Command: "serve", Host: "h1", Started: at}, "pid 7 (writer serve, on host h1, since 2025-01-02T03:04:05Z)"},
	} {
		if got := tc.h.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.h, got, tc.want)
		}
	}
}

// TestDamagedRecordIsUnknownHolder: a record that is not JSON (a holder
// between its lock and its write, or a foreign file) names no pid.
func TestDamagedRecordIsUnknownHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, "serve")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := os.WriteFile(Path(dir), []byte(`{"pid":`), 0o644); err != nil { // in place: the same inode
		t.Fatal(err)
	}
	_, err = Acquire(dir, "generate")
	var he *HeldError
	if !errors.As(err, &he) || he.Holder.Pid != 0 || !strings.Contains(err.Error(), "not recorded itself") {
		t.Fatalf("Acquire beside a damaged record: %v", err)
	}
}
