package etcdcluster

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/testproc"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestStartRetriesTakenPort makes the first port pick return a client port
// that is already bound: the member exits, and Start retries on new ports.
func TestStartRetriesTakenPort(t *testing.T) {
	taken, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	pickPortsFn = func(n int) ([]int, error) {
		calls++
		ports, err := testproc.PickPorts(n)
		if calls == 1 && err == nil {
			ports[0] = taken.Addr().(*net.TCPAddr).Port
		}
		return ports, err
	}
	defer func() { pickPortsFn = testproc.PickPorts }()

	var logs syncBuffer
	c := Start(t, Options{Members: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if calls != 2 {
		t.Errorf("picked ports %d times, want 2", calls)
	}
	if !strings.Contains(logs.String(), "retrying start on new ports") || !strings.Contains(logs.String(), "address already in use") {
		t.Errorf("no retry logged:\n%s", logs.String())
	}
	if strings.HasSuffix(c.Endpoint(0), ":"+strings.Split(taken.Addr().String(), ":")[1]) {
		t.Errorf("member serves on the taken port %s", c.Endpoint(0))
	}
	if !strings.Contains(c.Logs(0), "address already in use") {
		t.Errorf("member log lacks the failed first attempt:\n%s", c.Logs(0))
	}
}

// TestRestartWaitsForTakenPort takes a killed member's client port; Restart
// keeps retrying until the port is free again.
func TestRestartWaitsForTakenPort(t *testing.T) {
	c := Start(t, Options{Members: 1})
	if err := c.Kill(0); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(c.Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp4", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Restart(0) }()

	// Free the port once the restarted member has run into it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for strings.Count(c.Logs(0), "address already in use") < 1 {
		select {
		case err := <-done:
			t.Fatalf("Restart returned %v while its port was taken", err)
		case <-ctx.Done():
			t.Fatalf("restarted member never hit the taken port; log:\n%s", c.Logs(0))
		case <-time.After(20 * time.Millisecond):
		}
	}
	taken.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Restart did not return after the port was freed")
	}
	if c.PID(0) == 0 {
		t.Fatal("member not running after Restart")
	}
}
