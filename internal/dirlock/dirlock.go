// Package dirlock keeps one writing process per data directory: an
// exclusive, non-blocking flock(2) on <dir>/LOCK.
//
// # Lifecycle
//
//	l, err := dirlock.Acquire(dataDir, "serve") // a *HeldError when another process holds it
//	...
//	err = l.Release()                           // or exit: the kernel drops the lock
//
// Acquire never waits: a second writer learns at once who holds the
// directory (pid, command, host, start time) and what to do, instead of
// blocking on the files of the first. Holding reads who holds it without
// taking it.
//
// # Why flock
//
// The kernel releases a flock when the last descriptor of its open file
// description closes, which includes the death of the process by SIGKILL:
// a crashed writer leaves no stale lock behind, only a stale record (below),
// which is ignored because the lock is free. On Linux a flock belongs to the
// open file description, not to the process, so a second Acquire in the same
// process conflicts with the first (the tests prove it). The descriptor is
// opened close-on-exec, so a child process never inherits the lock. On NFS,
// Linux emulates flock with POSIX record locks, which do conflict between
// machines but not within one process.
//
// # The record
//
// Once the lock is taken, its holder writes a JSON record of itself into the
// file:
//
//	{"pid":4242,"command":"serve","host":"h1","started":"2025-01-02T03:04:05Z"}
//
// The record is advisory, for messages: the lock is the flock, never the
// file's contents, so the file is never removed or replaced (a process that
// removed it would let two others lock two different inodes under one name).
// Release empties the record before it unlocks; a SIGKILL leaves it in place,
// which is harmless since the lock itself is free.
//
// # Files
//
// The LOCK file lives outside the durability argument of vfs.FS (its
// contents are never read back as data, and the lock is kernel state that
// no crash can tear), and flock needs a descriptor, which vfs.File does not
// expose; so this package opens it with the system calls directly.
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/vfs"
)

// FileName is the lock file's name inside the data directory.
const FileName = layout.LockName

// ErrHeld marks the error of Acquire when another open file description
// (usually another process) holds the lock; the error is a *HeldError.
var ErrHeld = errors.New("dirlock: data directory in use")

// retryFor bounds how long Acquire retries a conflict before it reports
// one: a Holding probe holds a shared lock for microseconds, and must not
// make a starting writer fail.
const retryFor = 100 * time.Millisecond

// maxRecord bounds the bytes of a record read back.
const maxRecord = 4096

// Holder is the record a lock's holder writes of itself. Its zero Pid
// means the holder has not recorded itself yet (or the record is damaged).
type Holder struct {
	Pid     int       `json:"pid"`
	Command string    `json:"command"`
	Host    string    `json:"host,omitempty"`
	Started time.Time `json:"started"`
}

// String describes the holder for messages: "pid 4242 (serve, on h1, since
// 2025-01-02T03:04:05Z)".
func (h Holder) String() string {
	if h.Pid == 0 {
		return "a process that has not recorded itself yet"
	}
	var parts []string
	if h.Command != "" {
		parts = append(parts, "writer "+h.Command)
	}
	if h.Host != "" {
		parts = append(parts, "on host "+h.Host)
	}
	if !h.Started.IsZero() {
		parts = append(parts, "since "+h.Started.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("pid %d", h.Pid)
	}
	return fmt.Sprintf("pid %d (%s)", h.Pid, strings.Join(parts, ", "))
}

// HeldError is Acquire's error when the directory is locked by another.
type HeldError struct {
	Dir    string // the data directory
	Path   string // its lock file
	Holder Holder // who holds it, as far as its record tells
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("data directory %s is in use by %s (lock file %s): stop that process first "+
		"(commands that only read can run beside it)", e.Dir, e.Holder, e.Path)
}

// Unwrap makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held lock of a data directory.
type Lock struct {
	dir    string
	path   string
	fd     int
	holder Holder

	once sync.Once
	err  error
}

// Path returns the lock file of dir.
func Path(dir string) string { return layout.LockFile(dir) }

// Acquire takes the lock of dir (created if missing) for command, without
// waiting, and records the caller as its holder. When another holds it, the
// error is a *HeldError naming that holder.
func Acquire(dir, command string) (*Lock, error) {
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dirlock: data directory %s: %w", dir, err)
	}
	path := Path(dir)
	fd, err := openFile(path, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return nil, fmt.Errorf("dirlock: open %s: %w", path, err)
	}
	if err := flockRetrying(fd); err != nil {
		h := readRecord(fd)
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, Path: path, Holder: h}
		}
		return nil, fmt.Errorf("dirlock: lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	l := &Lock{dir: dir, path: path, fd: fd,
		holder: Holder{Pid: os.Getpid(), Command: command, Host: host, Started: time.Now().UTC().Truncate(time.Second)}}
	if err := writeRecord(fd, l.holder); err != nil {
		return nil, errors.Join(fmt.Errorf("dirlock: record the holder in %s: %w", path, err), l.Release())
	}
	return l, nil
}

// flockRetrying takes the exclusive lock, retrying a conflict for retryFor.
func flockRetrying(fd int) error {
	deadline := time.Now().Add(retryFor)
	for {
		err := flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Holding reports whether dir's lock is held, by whom, without taking it
// (it probes with a shared lock it drops at once). A missing lock file is
// a free lock.
func Holding(dir string) (Holder, bool, error) {
	path := Path(dir)
	fd, err := openFile(path, unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return Holder{}, false, nil
	} else if err != nil {
		return Holder{}, false, fmt.Errorf("dirlock: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	err = flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		return readRecord(fd), true, nil
	case err != nil:
		return Holder{}, false, fmt.Errorf("dirlock: probe %s: %w", path, err)
	}
	return Holder{}, false, flock(fd, unix.LOCK_UN)
}

// Dir returns the locked data directory.
func (l *Lock) Dir() string { return l.dir }

// Holder returns the record this lock wrote.
func (l *Lock) Holder() Holder { return l.holder }

// Release empties the record and drops the lock. It is safe to call more
// than once; later calls return the first call's result.
func (l *Lock) Release() error {
	l.once.Do(func() {
		err := unix.Ftruncate(l.fd, 0)
		err = errors.Join(err, flock(l.fd, unix.LOCK_UN), unix.Close(l.fd))
		if err != nil {
			l.err = fmt.Errorf("dirlock: release %s: %w", l.path, err)
		}
	})
	return l.err
}

func openFile(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// writeRecord replaces the file's contents with h, under the lock.
func writeRecord(fd int, h Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return err
	}
	b = append(b, '\n')
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// readRecord reads the holder's record; an empty, partial or damaged one
// (the holder is between its lock and its write) is the zero Holder.
func readRecord(fd int) Holder {
	buf := make([]byte, maxRecord)
	n := 0
	for n < len(buf) {
		k, err := unix.Pread(fd, buf[n:], int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || k == 0 {
			break
		}
		n += k
	}
	var h Holder
	if json.Unmarshal(buf[:n], &h) != nil || h.Pid <= 0 {
		return Holder{}
	}
	return h
}
