package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	syscallTERM = syscall.SIGTERM
	syscallKILL = syscall.SIGKILL
)

// Log messages of `writer serve` the soak waits for.
const (
	msgHTTPUp    = "http server started; ready once the shards are claimed and replayed"
	msgListening = "listening"
)

// startWait bounds a serve's start: claiming (a killed owner's lease must
// expire first) and replaying the WAL.
const startWait = 3 * time.Minute

// proc is a running writer command whose stderr (JSON log lines) and stdout
// are kept.
type proc struct {
	cmd *exec.Cmd

	mu      sync.Mutex
	stderr  bytes.Buffer
	stdout  bytes.Buffer
	changed chan struct{} // closed and replaced on every stderr line
	done    chan struct{} // closed once exited and its output read
	waitErr error
}

// lockedWriter appends to a buffer under the proc's lock.
type lockedWriter struct {
	p   *proc
	buf *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.buf.Write(b)
}

func spawn(binary string, args ...string) (*proc, error) {
	cmd := exec.Command(binary, args...)
	p := &proc{cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	cmd.Stdout = lockedWriter{p, &p.stdout}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go p.readLog(stderr)
	return p, nil
}

func (p *proc) readLog(stderr io.Reader) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.stderr.Write(sc.Bytes())
		p.stderr.WriteByte('\n')
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
	io.Copy(io.Discard, stderr)
	err := p.cmd.Wait() // Wait closes the pipe: read it all first
	p.mu.Lock()
	p.waitErr = err
	p.mu.Unlock()
	close(p.done)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// tail is the last n lines of the process's log.
func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := strings.Split(strings.TrimRight(p.stderr.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// countLines counts stdout lines containing s.
func (p *proc) countLines(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Count(p.stdout.String(), s)
}

// find returns the first log record with message msg, or nil.
func (p *proc) find(msg string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for line := range strings.SplitSeq(p.stderr.String(), "\n") {
		if !strings.Contains(line, strconv.Quote(msg)) {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	return nil
}

// waitLog waits, at most d, for a log record with message msg.
func (p *proc) waitLog(ctx context.Context, d time.Duration, msg string) (map[string]any, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if rec := p.find(msg); rec != nil {
			return rec, nil
		}
		select {
		case <-changed:
		case <-p.done:
			if rec := p.find(msg); rec != nil {
				return rec, nil
			}
			return nil, fmt.Errorf("exited (%v) before logging %q; last lines:\n%s", p.err(), msg, p.tail(15))
		case <-deadline.C:
			return nil, fmt.Errorf("no %q logged within %v; last lines:\n%s", msg, d, p.tail(15))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stop signals the process and waits at most d for it to exit; past that
// it is killed and an error says so.
func (p *proc) stop(sig syscall.Signal, d time.Duration) error {
	if p.exited() {
		return nil
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		if err := p.err(); err != nil && sig != syscallKILL {
			return fmt.Errorf("%w; last lines:\n%s", err, p.tail(15))
		}
		return nil
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit within %v of %v; last lines:\n%s", d, sig, p.tail(15))
	}
}

// serveArgs are the serve's flags: small files and frequent flushes, so
// that a short run rolls segments, commits many generations and merges.
func (r *run) serveArgs() []string {
	return []string{"serve", "--data-dir", r.cfg.Dir, "--listen", r.addr,
		"--shards", strings.Join(r.cfg.Shards, ","), "--flush-bytes", strconv.Itoa(2 << 20), "--flush-age", "1s",
		"--lease-ttl", "5s", "--max-body-bytes", strconv.FormatInt(r.cfg.MaxBodyBytes, 10),
		"--shutdown-timeout", "30s", "--log-level", "info"}
}

// startServe starts a serve and waits until it serves every shard. Our
// address in its "http server started" record shows that we talk to our
// process, not to whoever else might hold the port.
func (r *run) startServe(ctx context.Context) error {
	start := time.Now()
	var lastErr error
	for attempt := range 5 {
		p, err := spawn(r.cfg.Writer, r.serveArgs()...)
		if err != nil {
			return err
		}
		_, err = p.waitLog(ctx, startWait, msgListening)
		if err == nil {
			if rec := p.find(msgHTTPUp); rec == nil || rec["addr"] != r.addr {
				p.stop(syscallKILL, time.Minute)
				return fmt.Errorf("serve logged %v, not our address %s", rec, r.addr)
			}
			r.mu.Lock()
			r.serve = p
			r.rep.Starts++
			r.rep.noteStart(time.Since(start))
			r.mu.Unlock()
			return nil
		}
		p.stop(syscallKILL, time.Minute)
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 500 * time.Millisecond) // the killed serve's socket lingers
	}
	return fmt.Errorf("start serve: %w", lastErr)
}

// ensureServe starts a serve if none is running.
func (r *run) ensureServe(ctx context.Context) error {
	r.mu.Lock()
	p := r.serve
	r.mu.Unlock()
	if p != nil && !p.exited() {
		return nil
	}
	if p != nil {
		r.fail("serve exited by itself (%v); last lines:\n%s", p.err(), p.tail(20))
	}
	return r.startServe(ctx)
}

// stopServe stops the running serve with sig.
func (r *run) stopServe(sig syscall.Signal) error {
	r.mu.Lock()
	p := r.serve
	r.serve = nil
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	if p.exited() {
		return fmt.Errorf("serve had exited by itself (%v); last lines:\n%s", p.err(), p.tail(20))
	}
	return p.stop(sig, time.Minute)
}

func (r *run) servePID() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serve == nil || r.serve.exited() {
		return 0, false
	}
	return r.serve.pid(), true
}

// startMerge starts `writer merge --every`, which must keep going across
// the serve's restarts.
func (r *run) startMerge() (*proc, error) {
	return spawn(r.cfg.Writer, "merge", "--data-dir", r.cfg.Dir, "--every", r.cfg.MergeEvery.String(), "-o", "json")
}

// writer runs one writer command to its end (bounded) and returns its
// output.
func (r *run) writer(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.cfg.Writer, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("writer %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// killLoop stops the serve every KillEvery, the second of every four times
// gracefully, and starts it again.
func (r *run) killLoop(ctx context.Context) {
	if r.cfg.KillEvery < 0 {
		return
	}
	for n := 1; waitCtx(ctx, r.cfg.KillEvery); n++ { // from the last start: a slow stop does not bunch the next
		sig := syscallKILL
		if n%4 == 2 {
			sig = syscallTERM
		}
		if err := r.stopServe(sig); err != nil {
			r.fail("stop serve with %v: %v", sig, err)
		}
		if sig == syscallKILL {
			r.count(&r.rep.Kills)
		} else {
			r.count(&r.rep.Terms)
		}
		r.logf("serve stopped with %v; starting it again", sig)
		if err := r.startServe(context.WithoutCancel(ctx)); err != nil {
			r.fail("restart serve: %v", err)
			return
		}
	}
}
