// Package etcdtest gives a test package one embedded etcd server, started
// the first time something asks for it (so fuzz workers and tests that need
// no etcd never start one), and names unique to each test, so that tests
// sharing the server never meet each other's keys.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"go.uber.org/goleak"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/vfs"
)

// Shared is a package's embedded etcd. The zero value is ready to use.
type Shared struct {
	once sync.Once
	srv  *etcdembed.Server
	dir  string
	err  error
}

// Start starts the server on first use and returns it.
func (s *Shared) Start() (*etcdembed.Server, error) {
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "rollwal-test-etcd-"); s.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// No fsync: a test's etcd never outlives a machine crash, and many
		// tests on two cores otherwise wait on its disk more than on
		// their own work. A benchmark of what production waits for sets
		// ROLLWAL_BENCH_ETCD_FSYNC=1.
		noFsync := os.Getenv("ROLLWAL_BENCH_ETCD_FSYNC") == ""
		s.srv, s.err = etcdembed.Start(ctx, etcdembed.Options{Dir: s.dir, UnsafeNoFsync: noFsync})
	})
	return s.srv, s.err
}

// Server is Start for a test: a failure to start fails the test.
func (s *Shared) Server(t testing.TB) *etcdembed.Server {
	t.Helper()
	srv, err := s.Start()
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	return srv
}

// Run runs the package's tests, then closes the server if one started.
// It returns the exit code for os.Exit.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		code = 1
	}
	return code
}

// RunCheckingLeaks is Run, then, when every test passed, a check that no
// goroutine outlived the tests and the shared server (go.uber.org/goleak):
// every goroutine a package starts must be stopped by what started it.
func (s *Shared) RunCheckingLeaks(m *testing.M) int {
	if code := s.Run(m); code != 0 {
		return code // a failed test may leave goroutines behind; its failure says more
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests and the shared etcd stopped:", err)
		return 1
	}
	return 0
}

// Close stops the server and removes its data; nil when none started.
func (s *Shared) Close() error {
	var err error
	if s.srv != nil {
		err = s.srv.Close()
	}
	if s.dir != "" {
		err = errors.Join(err, vfs.Default.RemoveAll(s.dir))
	}
	return err
}

var (
	nonName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
	names   atomic.Int64
)

// Name turns the test's name and suffix into a key-safe name ([A-Za-z0-9._-],
// at most max bytes) unique to this run of the test: tests run again under
// -count must not meet their earlier state.
func Name(t testing.TB, suffix string, max int) string {
	name := fmt.Sprintf("%s%s-%d", nonName.ReplaceAllString(t.Name(), "_"), suffix, names.Add(1))
	if len(name) > max {
		name = name[len(name)-max:]
	}
	return name
}
