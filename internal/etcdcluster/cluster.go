package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/rollwal/rollwal/internal/testproc"
)

// Options configures Start.
type Options struct {
	// Members is the number of etcd members; 0 means 3.
	Members int
	// Logger receives the helper's own events: members started, signalled
	// and exited, leaders found, start retries. nil logs them with t.Log.
	Logger *slog.Logger
}

// ErrNoLeader is returned (wrapped) by Leader when no member is confirmed
// as leader by a majority of the cluster.
var ErrNoLeader = errors.New("etcdcluster: no leader")

// errAddrInUse marks a member that exited because a port was taken.
var errAddrInUse = errors.New("address already in use")

const (
	heartbeatMs = 50
	electionMs  = 500

	buildTimeout    = 10 * time.Minute // cold build of etcd is ~1.5 min
	serveTimeout    = 60 * time.Second // Start and Restart
	leaderTimeout   = 30 * time.Second // WaitLeader without a context deadline
	stopTimeout     = 15 * time.Second // SIGTERM to exit
	killTimeout     = 10 * time.Second // SIGKILL to exit
	signalTimeout   = 5 * time.Second  // SIGSTOP/SIGCONT to take effect
	probeTimeout    = time.Second      // one Get or Status
	pollInterval    = 20 * time.Millisecond
	startAttempts   = 5
	maxOutputBuffer = 1 << 20
	logTailOnFail   = 64 << 10
	probeKey        = "etcdcluster-probe"
)

// LogLevelEnv names the environment variable that overrides the members'
// --log-level, "error" by default.
const LogLevelEnv = "ETCDCLUSTER_LOG_LEVEL"

// Cluster is a set of etcd member processes started by Start. Its methods
// are safe for concurrent use.
type Cluster struct {
	t        testing.TB
	bin      string
	log      *slog.Logger
	dir      string
	token    string
	logLevel string
	spawn    *testproc.Spawner

	mu             sync.Mutex
	members        []*member
	initialCluster string
	closed         bool
}

type member struct {
	name      string
	clientURL string
	peerURL   string
	dataDir   string
	logPath   string                 // written by etcd itself (--log-outputs)
	output    *testproc.OutputBuffer // the process's stdout and stderr: panics, early errors
	proc      *process               // current or most recent process; nil before the first start
	id        uint64                 // raft member ID, once seen in a Status response
}

type process struct {
	cmd       *exec.Cmd
	pid       int
	start     int   // 1-based start number of this member
	logOffset int64 // size of the member's log file at start
	outOffset int   // output.Len() at start
	paused    bool  // guarded by Cluster.mu
	signalled bool  // guarded by Cluster.mu; we sent SIGTERM or SIGKILL
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

// Start builds the etcd binary if needed, starts an etcd cluster of
// opts.Members members on 127.0.0.1 and waits (up to 60 s) until every member
// answers a linearizable Get through its own endpoint and through a client to
// all endpoints. A start that loses a port race is retried on new ports. Any
// failure fails the test. A t.Cleanup kills all members, paused or not, waits
// for them to exit, and prints their logs if the test failed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	n := opts.Members
	if n == 0 {
		n = 3
	}
	if n < 0 {
		t.Fatalf("etcdcluster: Members = %d", n)
	}
	logger := opts.Logger
	if logger == nil {
		logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	bin, err := Build(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	logLevel := os.Getenv(LogLevelEnv)
	if logLevel == "" {
		logLevel = "error"
	}
	c := &Cluster{
		t:        t,
		bin:      bin,
		log:      logger,
		dir:      t.TempDir(), // before our Cleanup, so it is removed after the kill
		token:    fmt.Sprintf("etcdcluster-%d-%016x", os.Getpid(), rand.Uint64()),
		logLevel: logLevel,
		spawn:    testproc.NewSpawner(),
	}
	for i := range n {
		name := "m" + strconv.Itoa(i)
		c.members = append(c.members, &member{
			name:    name,
			logPath: filepath.Join(c.dir, name+".log"),
			output:  &testproc.OutputBuffer{Max: maxOutputBuffer},
		})
	}
	t.Cleanup(c.cleanup)

	began := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.boot(attempt)
		if err == nil {
			break
		}
		c.killAll()
		if errors.Is(err, errAddrInUse) && attempt < startAttempts {
			c.log.Info("etcdcluster: port taken, retrying start on new ports", "attempt", attempt, "err", err)
			continue
		}
		t.Fatalf("etcdcluster: start %d members (attempt %d): %v", n, attempt, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), serveTimeout)
	c.statuses(ctx) // learn member IDs while all members are up
	cancel()
	c.log.Info("etcdcluster: cluster serving", "members", n, "endpoints", c.Endpoints(), "took", time.Since(began).Round(time.Millisecond))
	return c
}

// boot starts every member on fresh ports and data dirs and waits until the
// cluster serves.
func (c *Cluster) boot(attempt int) error {
	n := len(c.members)
	ports, err := pickPortsFn(2 * n)
	if err != nil {
		return err
	}
	c.mu.Lock()
	peers := make([]string, n)
	for i, m := range c.members {
		m.clientURL = "http://127.0.0.1:" + strconv.Itoa(ports[2*i])
		m.peerURL = "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1])
		m.dataDir = filepath.Join(c.dir, fmt.Sprintf("%s.data.%d", m.name, attempt))
		peers[i] = m.name + "=" + m.peerURL
	}
	c.initialCluster = strings.Join(peers, ",")
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), serveTimeout)
	defer cancel()
	// Start members one after another, each once it serves its peer port.
	// A new member first asks every peer whether it already belongs to the
	// cluster, giving each up to 1 s: a peer that is not listening yet
	// answers at once (connection refused), while one that is bound but
	// still bootstrapping costs the whole second. Starting all at once made
	// Start take 1–3.5 s; one by one it takes a few hundred ms.
	for i := range c.members {
		c.mu.Lock()
		err := c.startLocked(i, "new")
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if err := c.waitPeerServing(ctx, i); err != nil {
			return err
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return c.waitServing(ctx, all, true)
}

// startLocked starts member i's process. c.mu must be held.
func (c *Cluster) startLocked(i int, state string) error {
	if c.closed {
		return errors.New("etcdcluster: cluster already cleaned up")
	}
	m := c.members[i]
	args := []string{
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", c.initialCluster,
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		"--heartbeat-interval", strconv.Itoa(heartbeatMs),
		"--election-timeout", strconv.Itoa(electionMs),
		"--logger", "zap",
		"--log-level", c.logLevel,
		// Relative to cmd.Dir: a comma in the test's temp dir would split an
		// absolute path, since this flag is a comma-separated list.
		"--log-outputs", filepath.Base(m.logPath),
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = childEnv()
	cmd.Stdout = m.output
	cmd.Stderr = m.output
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = killTimeout

	start := 1
	if m.proc != nil {
		start = m.proc.start + 1
	}
	p := &process{
		cmd:       cmd,
		start:     start,
		logOffset: fileSize(m.logPath),
		outOffset: m.output.Len(),
		done:      make(chan struct{}),
	}
	if err := c.spawn.Start(cmd); err != nil {
		return fmt.Errorf("etcdcluster: start member %d: %w", i, err)
	}
	p.pid = cmd.Process.Pid
	m.proc = p
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	c.log.Debug("etcdcluster: member started", "member", i, "pid", p.pid, "state", state,
		"client", m.clientURL, "peer", m.peerURL, "start", start)
	return nil
}

// waitPeerServing waits until member i answers HTTP on its peer URL, which
// it does once it has bootstrapped, before any election.
func (c *Cluster) waitPeerServing(ctx context.Context, i int) error {
	hc := &http.Client{Timeout: 250 * time.Millisecond}
	defer hc.CloseIdleConnections()
	url := c.members[i].peerURL + "/version"
	for {
		p := c.proc(i)
		if p.exited() {
			return c.exitError(i, p)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %d not serving peers at %s: %w (last: %v)", i, url, ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}

// waitServing waits until each member in idx answers a linearizable Get
// through its own endpoint (and, with all, through a client to every
// endpoint). It fails early if one of them exits.
func (c *Cluster) waitServing(ctx context.Context, idx []int, all bool) error {
	ready := make([]bool, len(c.members))
	var lastErr error
	for {
		pending := false
		for _, i := range idx {
			p := c.proc(i)
			if p == nil || p.exited() {
				return c.exitError(i, p)
			}
			if ready[i] {
				continue
			}
			if err := probeWhileRunning(ctx, p, c.Endpoint(i)); err != nil {
				lastErr = fmt.Errorf("member %d: %w", i, err)
				pending = true
			} else {
				ready[i] = true
			}
		}
		if !pending {
			if !all {
				return nil
			}
			err := probe(ctx, c.Endpoints()...)
			if err == nil {
				return nil
			}
			lastErr = fmt.Errorf("all endpoints: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("members %v not serving: %w (last probe: %v)", idx, ctx.Err(), lastErr)
		case <-time.After(pollInterval):
		}
	}
}

// exitError describes why member i is not running during a wait.
func (c *Cluster) exitError(i int, p *process) error {
	if p == nil {
		return fmt.Errorf("member %d was never started", i)
	}
	m := c.members[i]
	since := logSince(m.logPath, p.logOffset) + m.output.Since(p.outOffset)
	err := fmt.Errorf("member %d (pid %d) exited: %v", i, p.pid, p.waitErr)
	if strings.Contains(since, "address already in use") {
		err = fmt.Errorf("%w: %w", err, errAddrInUse)
	}
	return fmt.Errorf("%w; its output since start:\n%s", err, tail(since, 8<<10))
}

// probeWhileRunning is probe, cut short if p exits.
func probeWhileRunning(ctx context.Context, p *process, endpoint string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return probe(ctx, endpoint)
}

// probe does a linearizable Get through a fresh client to endpoints.
func probe(ctx context.Context, endpoints ...string) error {
	cli, err := newClient(endpoints, probeBackoff)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = cli.Get(ctx, probeKey)
	return err
}

// Reconnect backoff for gRPC connections. gRPC's default (1 s base, growing
// to 120 s) would make a probe sent before a member listens wait out its
// whole timeout, and a test client lose minutes after a long member outage.
var (
	probeBackoff  = backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 100 * time.Millisecond}
	clientBackoff = backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}
)

func newClient(endpoints []string, bo backoff.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           bo,
			MinConnectTimeout: time.Second,
		})},
		Logger: zap.NewNop(),
	})
}

// Len returns the number of members.
func (c *Cluster) Len() int { return len(c.members) }

// Endpoints returns the client URLs of all members, running or not, in
// member order.
func (c *Cluster) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.clientURL
	}
	return eps
}

// Endpoint returns member i's client URL, http://127.0.0.1:<port>. It stays
// the same across Restart.
func (c *Cluster) Endpoint(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].clientURL
}

// Client returns a new client to the given endpoints, or to all members if
// none are given. It is closed on t's cleanup. Like every etcd v3.7 client it
// does not wait for a connection: put a deadline on each request. Its gRPC
// reconnect backoff is capped at 1 s (gRPC's default grows to 2 min), so it
// finds a restarted member quickly.
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cli, err := newClient(endpoints, clientBackoff)
	if err != nil {
		t.Fatalf("etcdcluster: client to %v: %v", endpoints, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// PID returns the process id of member i, or 0 if it is not running. A
// paused member is running.
func (c *Cluster) PID(i int) int {
	p := c.proc(i)
	if p == nil || p.exited() {
		return 0
	}
	return p.pid
}

// Logs returns member i's etcd log (all starts, appended) followed by
// anything the process wrote to stdout or stderr, such as a panic.
func (c *Cluster) Logs(i int) string {
	m := c.members[i]
	s := logSince(m.logPath, 0)
	if out := m.output.Since(0); out != "" {
		s += "--- stdout/stderr ---\n" + out
	}
	return s
}

func (c *Cluster) proc(i int) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].proc
}

func (c *Cluster) checkIndex(i int) error {
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("etcdcluster: no member %d in a cluster of %d", i, len(c.members))
	}
	return nil
}

// indices returns the distinct members of idx in ascending order, or every
// member if idx is empty, after checking them.
func (c *Cluster) indices(idx []int) ([]int, error) {
	if len(idx) == 0 {
		idx = make([]int, len(c.members))
		for i := range idx {
			idx[i] = i
		}
	}
	for _, i := range idx {
		if err := c.checkIndex(i); err != nil {
			return nil, err
		}
	}
	idx = slices.Clone(idx)
	slices.Sort(idx)
	return slices.Compact(idx), nil
}

// Stop sends SIGTERM to the given members (all if none are given) and waits
// until each has exited; a paused member is resumed so that it can handle the
// signal. A member that has not exited after 15 s is killed and reported as an
// error. Members not running are skipped.
func (c *Cluster) Stop(members ...int) error {
	return c.terminate("stop", syscall.SIGTERM, stopTimeout, members)
}

// Kill sends SIGKILL to the given members (all if none are given) and waits
// until each has exited. Members not running are skipped.
func (c *Cluster) Kill(members ...int) error {
	return c.terminate("kill", syscall.SIGKILL, killTimeout, members)
}

func (c *Cluster) terminate(op string, sig syscall.Signal, timeout time.Duration, members []int) error {
	idx, err := c.indices(members)
	if err != nil {
		return err
	}
	if sig != syscall.SIGTERM || len(c.members) == 1 {
		return c.signalAndWait(op, sig, timeout, idx)
	}
	// A leader that gets SIGTERM hands leadership to the peer it has been
	// connected to longest and waits, up to 6 s, until that peer takes
	// over. That wait runs out if the peer is stopping too, was just killed,
	// or if the "leader" is a resumed member whose term is already over. So
	// stop followers before leaders, and before signalling a leader or a
	// paused member, resume it and wait until it is either a leader backed
	// by a majority (hand-over works) or no leader at all.
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	leads := c.reportedLeaders(ctx)
	cancel()
	var first, last []int
	for _, i := range idx {
		if slices.Contains(leads, i) {
			last = append(last, i)
		} else {
			first = append(first, i)
		}
	}
	var errs []error
	for _, group := range [][]int{first, last} {
		for _, i := range group {
			if slices.Contains(leads, i) || c.paused(i) {
				c.settle(i)
			}
		}
		errs = append(errs, c.signalAndWait(op, sig, timeout, group))
	}
	return errors.Join(errs...)
}

func (c *Cluster) paused(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.members[i].proc
	return p != nil && !p.exited() && p.paused
}

// settle resumes member i if it is paused and waits, for a few election
// timeouts at most, until it does not consider itself leader or a majority
// of the cluster agrees that it is. It is best effort: Stop works either
// way, only slower.
func (c *Cluster) settle(i int) {
	if c.PID(i) == 0 {
		return
	}
	_ = c.Resume(i)
	ctx, cancel := context.WithTimeout(context.Background(), 6*electionMs*time.Millisecond)
	defer cancel()
	quorum := len(c.members)/2 + 1
	for {
		_, sts := c.statuses(ctx)
		k := slices.IndexFunc(sts, func(s memberStatus) bool { return s.i == i })
		if k < 0 || sts[k].err != nil || sts[k].leader != sts[k].id {
			return
		}
		agree := 0
		for _, s := range sts {
			if s.err == nil && s.leader == sts[k].id && s.term == sts[k].term {
				agree++
			}
		}
		if agree >= quorum {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pollInterval):
		}
	}
}

func (c *Cluster) signalAndWait(op string, sig syscall.Signal, timeout time.Duration, idx []int) error {
	type target struct {
		i int
		p *process
	}
	var targets []target
	c.mu.Lock()
	for _, i := range idx {
		p := c.members[i].proc
		if p == nil || p.exited() {
			continue
		}
		p.signalled = true
		_ = p.cmd.Process.Signal(sig)
		if p.paused {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			p.paused = false
		}
		targets = append(targets, target{i, p})
	}
	c.mu.Unlock()

	var errs []error
	deadline := time.After(timeout)
	for _, tg := range targets {
		select {
		case <-tg.p.done:
		case <-deadline:
			_ = tg.p.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-tg.p.done:
				errs = append(errs, fmt.Errorf("etcdcluster: %s member %d (pid %d): still running after %v, killed", op, tg.i, tg.p.pid, timeout))
			case <-time.After(killTimeout):
				errs = append(errs, fmt.Errorf("etcdcluster: %s member %d (pid %d): still running after SIGKILL", op, tg.i, tg.p.pid))
				continue
			}
		}
		c.log.Debug("etcdcluster: member exited", "op", op, "member", tg.i, "pid", tg.p.pid, "status", tg.p.waitErr)
	}
	return errors.Join(errs...)
}

// Restart starts the given members again (all members not running if none
// are given) on their old ports and data dirs with --initial-cluster-state
// existing, then waits up to 60 s until each answers a linearizable Get
// through its own endpoint, which needs a quorum: restart members that are
// needed for a quorum together, in one call. It is an error to restart a
// running member. A member that exits because its port is taken is started
// again until the wait ends. On failure, members that did start are left
// running.
func (c *Cluster) Restart(members ...int) error {
	explicit := len(members) > 0
	idx, err := c.indices(members)
	if err != nil {
		return err
	}
	c.mu.Lock()
	var todo []int
	for _, i := range idx {
		p := c.members[i].proc
		if p != nil && !p.exited() {
			if explicit {
				c.mu.Unlock()
				return fmt.Errorf("etcdcluster: restart member %d: still running (pid %d)", i, p.pid)
			}
			continue
		}
		todo = append(todo, i)
	}
	for _, i := range todo {
		if err := c.startLocked(i, "existing"); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), serveTimeout)
	defer cancel()
	for {
		err := c.waitServing(ctx, todo, false)
		if err == nil {
			c.log.Debug("etcdcluster: members restarted and serving", "members", todo)
			return nil
		}
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			return fmt.Errorf("etcdcluster: restart %v: %w", todo, err)
		}
		// A port of ours was taken while the member was down; start the
		// members that exited again and keep waiting.
		c.log.Info("etcdcluster: restart lost a port race, retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdcluster: restart %v: %w", todo, err)
		case <-time.After(10 * pollInterval):
		}
		c.mu.Lock()
		for _, i := range todo {
			if p := c.members[i].proc; p.exited() {
				if err := c.startLocked(i, "existing"); err != nil {
					c.mu.Unlock()
					return err
				}
			}
		}
		c.mu.Unlock()
	}
}

// Pause freezes member i with SIGSTOP and waits until the kernel reports it
// stopped. Its sockets stay open, so peers and clients see a hung process,
// not a dead one. Pausing a paused member does nothing.
func (c *Cluster) Pause(i int) error {
	return c.setPaused(i, true)
}

// Resume continues a paused member with SIGCONT and waits until it runs.
// Resuming a running member that is not paused does nothing.
func (c *Cluster) Resume(i int) error {
	return c.setPaused(i, false)
}

func (c *Cluster) setPaused(i int, pause bool) error {
	if err := c.checkIndex(i); err != nil {
		return err
	}
	op, sig := "resume", syscall.SIGCONT
	if pause {
		op, sig = "pause", syscall.SIGSTOP
	}
	c.mu.Lock()
	p := c.members[i].proc
	if p == nil || p.exited() {
		c.mu.Unlock()
		return fmt.Errorf("etcdcluster: %s member %d: not running", op, i)
	}
	if p.paused == pause {
		c.mu.Unlock()
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("etcdcluster: %s member %d: %w", op, i, err)
	}
	p.paused = pause
	c.mu.Unlock()

	deadline := time.Now().Add(signalTimeout)
	for {
		stopped, err := processStopped(p.pid)
		if err != nil || stopped == pause {
			break // on platforms without /proc, trust the signal
		}
		if p.exited() {
			return fmt.Errorf("etcdcluster: %s member %d: exited: %v", op, i, p.waitErr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdcluster: %s member %d (pid %d): not %sed after %v", op, i, p.pid, op, signalTimeout)
		}
		time.Sleep(pollInterval)
	}
	c.log.Debug("etcdcluster: member "+op+"d", "member", i, "pid", p.pid)
	return nil
}

type memberStatus struct {
	i          int
	id, leader uint64
	term       uint64
	err        error
}

// Leader asks every running, unpaused member for its status and returns the
// index of the leader: a member that reports itself leader, at the highest
// such term, and that a majority of all members (itself included) report as
// leader at that term. Otherwise it returns an error wrapping ErrNoLeader.
// Each status request is bounded by 1 s and by ctx.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	live, sts := c.statuses(ctx)
	best := -1
	for k, s := range sts {
		if s.err == nil && s.id != 0 && s.leader == s.id && (best < 0 || s.term > sts[best].term) {
			best = k
		}
	}
	if best < 0 {
		return -1, fmt.Errorf("%w among running members %v: %s", ErrNoLeader, live, describe(sts))
	}
	lead := sts[best]
	agree := 0
	for _, s := range sts {
		if s.err == nil && s.leader == lead.id && s.term == lead.term {
			agree++
		}
	}
	if quorum := len(c.members)/2 + 1; agree < quorum {
		return -1, fmt.Errorf("%w: member %d claims term %d but only %d of %d members agree: %s",
			ErrNoLeader, lead.i, lead.term, agree, quorum, describe(sts))
	}
	return lead.i, nil
}

// statuses asks every running, unpaused member for its status, in parallel,
// and remembers the member IDs it learns.
func (c *Cluster) statuses(ctx context.Context) (live []int, sts []memberStatus) {
	c.mu.Lock()
	var eps []string
	for i, m := range c.members {
		if p := m.proc; p != nil && !p.exited() && !p.paused {
			live = append(live, i)
			eps = append(eps, m.clientURL)
		}
	}
	c.mu.Unlock()

	sts = make([]memberStatus, len(live))
	var wg sync.WaitGroup
	for k, i := range live {
		wg.Go(func() { sts[k] = status(ctx, i, eps[k]) })
	}
	wg.Wait()

	c.mu.Lock()
	for _, s := range sts {
		if s.err == nil && s.id != 0 {
			c.members[s.i].id = s.id
		}
	}
	c.mu.Unlock()
	return live, sts
}

// reportedLeaders returns the members that some running, unpaused member
// names as leader, confirmed or not, paused or not.
func (c *Cluster) reportedLeaders(ctx context.Context) []int {
	_, sts := c.statuses(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	var leads []int
	for i, m := range c.members {
		for _, s := range sts {
			if s.err == nil && m.id != 0 && s.leader == m.id {
				leads = append(leads, i)
				break
			}
		}
	}
	return leads
}

func status(ctx context.Context, i int, ep string) memberStatus {
	s := memberStatus{i: i}
	cli, err := newClient([]string{ep}, probeBackoff)
	if err != nil {
		s.err = err
		return s
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := cli.Status(ctx, ep)
	if err != nil {
		s.err = err
		return s
	}
	s.id, s.leader, s.term = resp.Header.MemberId, resp.Leader, resp.RaftTerm
	return s
}

func describe(sts []memberStatus) string {
	parts := make([]string, len(sts))
	for k, s := range sts {
		if s.err != nil {
			parts[k] = fmt.Sprintf("m%d: %v", s.i, s.err)
		} else {
			parts[k] = fmt.Sprintf("m%d: id=%x leader=%x term=%d", s.i, s.id, s.leader, s.term)
		}
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// WaitLeader polls Leader until it finds a leader among the running, unpaused
// members, and returns its index. Without a deadline on ctx it gives up after
// 30 s. Right after the leader is paused or killed, this returns the new
// leader once one is elected, never the old one.
func (c *Cluster) WaitLeader(ctx context.Context) (int, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderTimeout)
		defer cancel()
	}
	began := time.Now()
	for {
		i, err := c.Leader(ctx)
		if err == nil {
			c.log.Debug("etcdcluster: leader", "member", i, "waited", time.Since(began).Round(time.Millisecond))
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("etcdcluster: wait for leader: %w; last: %w", ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}

// killAll SIGKILLs every running member (paused ones too) and waits for
// them; failures are reported on t.
func (c *Cluster) killAll() {
	c.mu.Lock()
	var procs []*process
	var idx []int
	for i, m := range c.members {
		if p := m.proc; p != nil && !p.exited() {
			p.signalled = true
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // harmless; SIGKILL needs no resume
			p.paused = false
			procs = append(procs, p)
			idx = append(idx, i)
		}
	}
	c.mu.Unlock()
	deadline := time.After(killTimeout)
	for k, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			c.t.Errorf("etcdcluster: member %d (pid %d) still running %v after SIGKILL", idx[k], p.pid, killTimeout)
		}
	}
}

func (c *Cluster) cleanup() {
	c.killAll()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.spawn.Stop()

	c.mu.Lock()
	for i, m := range c.members {
		if p := m.proc; p != nil && !p.signalled {
			// The member died on its own: worth a line even if the test passed.
			c.t.Logf("etcdcluster: member %d (pid %d) exited by itself: %v", i, p.pid, p.waitErr)
		}
	}
	c.mu.Unlock()
	if c.t.Failed() {
		for i := range c.members {
			c.t.Logf("etcdcluster: member %d log (%s, level %s):\n%s", i, c.members[i].logPath, c.logLevel, tail(c.Logs(i), logTailOnFail))
		}
	}
}

// childEnv is the environment without ETCD_* variables, which etcd would
// read as flags.
func childEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "ETCD_")
	})
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func logSince(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("[... %d bytes elided ...]\n%s", len(s)-n, s[len(s)-n:])
}

// testLogger logs through t.Log, one line per record, with wall-clock times
// to the millisecond so member events can be lined up with etcd's own logs.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
