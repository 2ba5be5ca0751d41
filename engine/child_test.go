package engine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A child writer is this test binary started again with childEnv set: a
// real second process that shares the data dir and etcd, so that tests can
// SIGKILL a writer at any moment. It prints "READY <epoch>" once it owns the
// shard and "ACK <id> <id> …" after every acknowledged append.
const childEnv = "ROLLWAL_TEST_CHILD"

type childConfig struct {
	Dir, Table, Name string
	Endpoints        []string
}

func (c childConfig) env() []string {
	return append(os.Environ(), childEnv+"=1",
		"ROLLWAL_CHILD_DIR="+c.Dir, "ROLLWAL_CHILD_TABLE="+c.Table, "ROLLWAL_CHILD_NAME="+c.Name,
		"ROLLWAL_CHILD_ENDPOINTS="+strings.Join(c.Endpoints, ","))
}

func childOptions(dir, table, name string, cli *clientv3.Client) Options {
	return Options{
		DataDir: dir, Table: table, Etcd: cli, WriterID: name,
		LeaseTTL: 2 * time.Second, FlushBytes: 256 << 10, MemoryBudget: 64 << 20,
		BudgetWait: 5 * time.Second, WALSegmentSize: 256 << 10,
	}
}

func runChildWriter() int {
	cfg := childConfig{Dir: os.Getenv("ROLLWAL_CHILD_DIR"), Table: os.Getenv("ROLLWAL_CHILD_TABLE"),
		Name: os.Getenv("ROLLWAL_CHILD_NAME"), Endpoints: strings.Split(os.Getenv("ROLLWAL_CHILD_ENDPOINTS"), ",")}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println("ERR", err)
		return 2
	}
	ctx := context.Background()
	h, err := NewHost(childOptions(cfg.Dir, cfg.Table, cfg.Name, cli))
	if err != nil {
		fmt.Println("ERR", err)
		return 2
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	s, err := h.Open(octx, "s0")
	cancel()
	if err != nil {
		fmt.Println("ERR", err)
		return 2
	}
	fmt.Println("READY", s.Epoch())
	var out sync.Mutex
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			childProduce(ctx, s, fmt.Sprintf("%s-p%d", cfg.Name, p), &out)
		}()
	}
	wg.Wait()
	return 3
}

// childProduce appends until the shard stops, reporting each ack on stdout
// in one write, so a SIGKILL never leaves half a line.
func childProduce(ctx context.Context, s *Shard, prefix string, out *sync.Mutex) {
	for k := 0; ; k++ {
		batch := rows(fmt.Sprintf("%s-%d", prefix, k), 0, 8)
		if _, err := s.Append(ctx, batch, Source{}); err != nil {
			out.Lock()
			fmt.Println("ERR", err)
			out.Unlock()
			return
		}
		var line strings.Builder
		line.WriteString("ACK")
		for _, r := range batch {
			line.WriteString(" " + r["id"].(string))
		}
		line.WriteString("\n")
		out.Lock()
		os.Stdout.WriteString(line.String())
		out.Unlock()
	}
}

// child is a running child writer as the parent sees it.
type child struct {
	cmd   *exec.Cmd
	ready chan uint64
	mu    sync.Mutex
	acked []string
	lines chan struct{} // a token per ACK line
	done  chan struct{}
	errs  []string
}

func startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = cfg.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, ready: make(chan uint64, 1), lines: make(chan struct{}, 1<<20), done: make(chan struct{})}
	go c.read(bufio.NewScanner(stdout))
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *child) read(sc *bufio.Scanner) {
	defer close(c.done)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "READY":
			var e uint64
			fmt.Sscan(f[1], &e)
			c.ready <- e
		case "ACK":
			c.mu.Lock()
			c.acked = append(c.acked, f[1:]...)
			c.mu.Unlock()
			c.lines <- struct{}{}
		default:
			c.mu.Lock()
			c.errs = append(c.errs, sc.Text())
			c.mu.Unlock()
		}
	}
}

// kill SIGKILLs the child and waits until its output is fully read.
func (c *child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
	<-c.done
}

func (c *child) waitReady(t *testing.T) uint64 {
	t.Helper()
	select {
	case e := <-c.ready:
		return e
	case <-c.done:
		t.Fatalf("child writer exited before it was ready: %v", c.errs)
	case <-time.After(90 * time.Second):
		t.Fatal("child writer not ready after 90s")
	}
	return 0
}

// waitAcks blocks until the child has reported n ACK lines, and returns
// true; false when the child stopped itself first because its lease was
// lost (a 2 s lease can lapse on a loaded machine): a failover too, and
// the right reaction of a writer, which must then acknowledge nothing.
func (c *child) waitAcks(t *testing.T, n int) bool {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for range n {
		select {
		case <-c.lines:
		case <-c.done:
			if c.fencedItself() {
				return false
			}
			t.Fatalf("child writer exited: %v", c.errs)
		case <-timeout:
			t.Fatalf("child writer did not acknowledge %d appends within 60s", n)
		}
	}
	return true
}

// fencedItself reports whether every error the exited child printed is
// the fence of a lost lease.
func (c *child) fencedItself() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		if !strings.Contains(e, "fenced") || !strings.Contains(e, "lease was lost") {
			return false
		}
	}
	return len(c.errs) > 0
}
