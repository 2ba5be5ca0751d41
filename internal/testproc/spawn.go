package testproc

import (
	"errors"
	"os/exec"
	"runtime"
	"sync"
)

// Spawner starts processes from one goroutine locked to its OS thread for
// its lifetime. Pdeathsig fires when the thread that forked the
// child exits, not the process (prctl(2)); the Go runtime ends a thread when
// a goroutine exits while locked to it, so forking from an arbitrary thread
// could kill a server in the middle of a test.
type Spawner struct {
	reqs chan spawnReq
	quit chan struct{}
	done chan struct{}
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func NewSpawner() *Spawner {
	s := &Spawner{reqs: make(chan spawnReq), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine, after every
		// process has been reaped.
		defer close(s.done)
		for {
			select {
			case r := <-s.reqs:
				r.err <- r.cmd.Start()
			case <-s.quit:
				return
			}
		}
	}()
	return s
}

// Start starts cmd from the spawner's thread.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	select {
	case s.reqs <- r:
		return <-r.err
	case <-s.done:
		return errors.New("testproc: the spawner is stopped")
	}
}

// Stop ends the spawner's thread; start no process after it.
func (s *Spawner) Stop() {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
}

// OutputBuffer keeps the last Max bytes written to it: a process's
// stdout and stderr, for the errors and logs of a failed test.
type OutputBuffer struct {
	Max     int
	mu      sync.Mutex
	dropped int
	buf     []byte
}

func (b *OutputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.Max; over > 0 {
		b.buf = b.buf[over:]
		b.dropped += over
	}
	return len(p), nil
}

// Len returns the total number of bytes ever written.
func (b *OutputBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped + len(b.buf)
}

// Since returns what was written after the first off bytes, as far as kept.
func (b *OutputBuffer) Since(off int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	off = max(off-b.dropped, 0)
	return string(b.buf[off:])
}
