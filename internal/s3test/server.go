package s3test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/rollwal/rollwal/internal/testproc"
)

// region is the region the server is started with and clients sign for.
const region = "us-east-1"

const (
	buildTimeout    = 10 * time.Minute // a cold build is ~1-2 min, more on a loaded machine
	serveTimeout    = 30 * time.Second // Start and Restart
	stopTimeout     = 10 * time.Second // SIGTERM to exit
	killTimeout     = 5 * time.Second  // SIGKILL to exit
	probeTimeout    = time.Second      // one signed ListBuckets
	pollInterval    = 20 * time.Millisecond
	startAttempts   = 5
	maxOutputBuffer = 1 << 20
	outputOnFail    = 64 << 10
)

// errAddrInUse marks a server that exited because its port was taken.
var errAddrInUse = errors.New("address already in use")

// Server is a versitygw process started by Start. Its methods are safe for
// concurrent use.
type Server struct {
	t        testing.TB
	bin      string
	root     string
	port     int // fixed once Start returns
	access   string
	secret   string
	spawn    *testproc.Spawner
	output   *testproc.OutputBuffer
	buckets  atomic.Int64
	ctl      sync.Mutex // serialises Stop, Kill, Restart and cleanup
	mu       sync.Mutex // guards proc and closed
	proc     *process
	closed   bool
	starts   int
	bucketID string
}

type process struct {
	cmd       *exec.Cmd
	pid       int
	outOffset int  // output.Len() when it started
	signalled bool // we sent SIGTERM or SIGKILL; guarded by Server.mu
	done      chan struct{}
	waitErr   error // valid once done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start builds versitygw if needed and starts it on a free port of
// 127.0.0.1 with a fresh t.TempDir as its posix root and a random access key
// and secret, and waits (up to 30 s) until a request signed with them
// succeeds. A start that loses its port to another process is retried on a
// new port. Any failure fails the test, with the server's output. A
// t.Cleanup stops the server and prints its output if the test failed.
// StartBench starts a server for a benchmark, or returns why it cannot: a
// versitygw that cannot be built here skips a benchmark's S3 subject
// instead of failing `go test -bench`.
func StartBench(b *testing.B) (*Server, string) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	if _, err := Build(ctx); err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, "versitygw cannot be built here: " + msg
	}
	return Start(b), ""
}

func Start(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	bin, err := Build(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		t:      t,
		bin:    bin,
		root:   t.TempDir(), // before our Cleanup, so it is removed after the stop
		access: "S3T" + rand.Text()[:17],
		secret: rand.Text() + rand.Text()[:14],
		spawn:  testproc.NewSpawner(),
		output: &testproc.OutputBuffer{Max: maxOutputBuffer},
		// Bucket names from different servers differ too, so that a test
		// holding two servers never finds one's bucket on the other by
		// accident.
		bucketID: strings.ToLower(rand.Text()[:6]),
	}
	if err := checkXattrs(s.root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanup)

	began := time.Now()
	for attempt := 1; ; attempt++ {
		port, err := pickPortFn()
		if err != nil {
			t.Fatal(err)
		}
		s.port = port
		err = s.boot()
		if err == nil {
			break
		}
		_ = s.Kill()
		if errors.Is(err, errAddrInUse) && attempt < startAttempts {
			t.Logf("s3test: port %d taken, retrying on a new port (attempt %d): %v", port, attempt, firstLine(err))
			continue
		}
		t.Fatalf("s3test: start versitygw %s (attempt %d): %v", Version, attempt, err)
	}
	t.Logf("s3test: versitygw %s serving at %s (pid %d, root %s) after %v",
		Version, s.Endpoint(), s.PID(), s.root, time.Since(began).Round(time.Millisecond))
	return s
}

// boot starts a process on s.port and waits until it serves.
func (s *Server) boot() error {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	p, err := s.startProcess()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), serveTimeout)
	defer cancel()
	return s.waitServing(ctx, p)
}

// startProcess starts versitygw on s.port and s.root. s.ctl must be held.
func (s *Server) startProcess() (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("s3test: server already cleaned up")
	}
	// Flags, not the environment: versitygw reads ROOT_ACCESS_KEY, VGW_*
	// and others from it, so it gets a minimal one.
	cmd := exec.Command(s.bin,
		"--access", s.access,
		"--secret", s.secret,
		"--region", region,
		"--port", "127.0.0.1:"+strconv.Itoa(s.port),
		"--keep-alive",
		"posix", s.root,
	)
	cmd.Dir = s.root
	cmd.Env = childEnv()
	cmd.Stdout = s.output
	cmd.Stderr = s.output
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = killTimeout

	s.starts++
	fmt.Fprintf(s.output, "--- s3test: start %d on port %d ---\n", s.starts, s.port)
	p := &process{cmd: cmd, outOffset: s.output.Len(), done: make(chan struct{})}
	if err := s.spawn.Start(cmd); err != nil {
		return nil, fmt.Errorf("s3test: start %s: %w", s.bin, err)
	}
	p.pid = cmd.Process.Pid
	s.proc = p
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitServing polls until p answers a ListBuckets signed with our
// credentials: a server that is not ours, holding our port, refuses the
// signature. It fails at once if p exits.
func (s *Server) waitServing(ctx context.Context, p *process) error {
	cli, closeIdle := s.newClient(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	defer closeIdle()
	var lastErr error
	for {
		if p.exited() {
			return s.exitError(p)
		}
		err := probe(ctx, cli, p)
		if err == nil {
			if p.exited() { // answered, then died: not a server to hand out
				return s.exitError(p)
			}
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("versitygw (pid %d) not serving at %s: %w (last probe: %v); its output since start:\n%s",
				p.pid, s.Endpoint(), ctx.Err(), lastErr, tail(s.output.Since(p.outOffset), 8<<10))
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// probe sends one signed ListBuckets, cut short if p exits: until then a
// request to a port someone else holds may hang for the whole probe timeout.
func probe(ctx context.Context, cli *s3.Client, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := cli.ListBuckets(ctx, &s3.ListBucketsInput{})
	return err
}

// exitError describes why p is not running during a wait.
func (s *Server) exitError(p *process) error {
	since := s.output.Since(p.outOffset)
	err := fmt.Errorf("versitygw (pid %d, port %d) exited: %v", p.pid, s.port, p.waitErr)
	if strings.Contains(since, "address already in use") {
		err = fmt.Errorf("%w: %w", err, errAddrInUse)
	}
	return fmt.Errorf("%w; its output since start:\n%s", err, tail(since, 8<<10))
}

// Endpoint returns the server's URL, http://127.0.0.1:<port>. It stays the
// same across Restart.
func (s *Server) Endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// AccessKey returns the access key id the server accepts.
func (s *Server) AccessKey() string { return s.access }

// SecretKey returns the secret of AccessKey.
func (s *Server) SecretKey() string { return s.secret }

// Region returns the region to sign requests for: "us-east-1".
func (s *Server) Region() string { return region }

// Root returns the server's posix root directory: one subdirectory per
// bucket, one file per object, metadata in xattrs.
func (s *Server) Root() string { return s.root }

// PID returns the server's process id, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.pid
}

// Output returns everything the server has written to stdout and stderr
// across its starts (the last 1 MiB), one line per request.
func (s *Server) Output() string { return s.output.Since(0) }

// Client returns an S3 client for the server: path-style addressing, static
// credentials, the server's region and endpoint, the SDK's default retryer.
// optFns adjust the options (e.g. o.RetryMaxAttempts = 1) before the client
// is built. Its idle connections are closed on t's cleanup.
func (s *Server) Client(t testing.TB, optFns ...func(*s3.Options)) *s3.Client {
	cli, closeIdle := s.newClient(optFns...)
	t.Cleanup(closeIdle)
	return cli
}

func (s *Server) newClient(optFns ...func(*s3.Options)) (*s3.Client, func()) {
	// A transport of its own, so that the client's connections can be closed
	// (goleak) and a restart of one server never reuses another's.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(s.Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.access, s.secret, ""),
		HTTPClient:   &http.Client{Transport: tr},
	}
	return s3.New(opts, optFns...), tr.CloseIdleConnections
}

// Bucket creates a new, empty bucket with a name unique to this call and
// returns its name. A failure fails t.
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("s3test-%s-%04d-%08x", s.bucketID, s.buckets.Add(1), mrand.Uint32())
	cli, closeIdle := s.newClient()
	defer closeIdle()
	ctx, cancel := context.WithTimeout(context.Background(), serveTimeout)
	defer cancel()
	if _, err := cli.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s at %s: %v", name, s.Endpoint(), err)
	}
	return name
}

// Stop sends SIGTERM and waits until the server has exited; after 10 s it is
// killed and that is reported as an error. Stopping a stopped server does
// nothing.
func (s *Server) Stop() error {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	return s.signalAndWait("stop", syscall.SIGTERM, stopTimeout)
}

// Kill sends SIGKILL and waits until the server has exited: a crash, with
// no chance to finish requests in flight. Killing a stopped server does
// nothing.
func (s *Server) Kill() error {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	return s.signalAndWait("kill", syscall.SIGKILL, killTimeout)
}

func (s *Server) signalAndWait(op string, sig syscall.Signal, timeout time.Duration) error {
	s.mu.Lock()
	p := s.proc
	if p == nil || p.exited() {
		s.mu.Unlock()
		return nil
	}
	p.signalled = true
	_ = p.cmd.Process.Signal(sig)
	s.mu.Unlock()

	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("s3test: %s versitygw (pid %d): still running after %v, killed", op, p.pid, timeout)
	case <-time.After(killTimeout):
		return fmt.Errorf("s3test: %s versitygw (pid %d): still running after SIGKILL", op, p.pid)
	}
}

// Restart starts the server again, after Stop or Kill, with the same port,
// root and credentials, and waits (up to 30 s) until it serves them. It is
// an error to restart a running server. If the port was taken while the
// server was down, it keeps trying until the wait ends.
func (s *Server) Restart() error {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if pid := s.PID(); pid != 0 {
		return fmt.Errorf("s3test: restart versitygw: still running (pid %d)", pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), serveTimeout)
	defer cancel()
	for {
		p, err := s.startProcess()
		if err != nil {
			return err
		}
		err = s.waitServing(ctx, p)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			_ = s.signalAndWait("kill", syscall.SIGKILL, killTimeout)
			return fmt.Errorf("s3test: restart versitygw on port %d: %w", s.port, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("s3test: restart versitygw on port %d: %w", s.port, err)
		case <-time.After(10 * pollInterval):
		}
	}
}

func (s *Server) cleanup() {
	s.ctl.Lock()
	err := s.signalAndWait("stop", syscall.SIGTERM, stopTimeout)
	s.mu.Lock()
	s.closed = true
	p := s.proc
	s.mu.Unlock()
	s.ctl.Unlock()
	s.spawn.Stop()
	if err != nil {
		s.t.Error(err)
	}
	if p != nil && !p.signalled {
		// It died on its own: worth a line even if the test passed.
		s.t.Logf("s3test: versitygw (pid %d) exited by itself: %v", p.pid, p.waitErr)
	}
	if s.t.Failed() {
		s.t.Logf("s3test: versitygw output (root %s):\n%s", s.root, tail(s.Output(), outputOnFail))
	}
}

// childEnv is a minimal environment: versitygw takes much of its
// configuration (ROOT_ACCESS_KEY, VGW_*, LOGFILE, WEBHOOK, ...) from
// variables, and none of the caller's should reach it.
func childEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("[... %d bytes elided ...]\n%s", len(s)-n, s[len(s)-n:])
}

func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}
