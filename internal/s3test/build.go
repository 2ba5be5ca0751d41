package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rollwal/rollwal/internal/testproc"
	"github.com/rollwal/rollwal/vfs"
)

const (
	// Version is the versitygw release the tests run against. It is the
	// only place the version is written.
	Version = "v1.8.0"

	versitygwModule = "github.com/versity/versitygw"
	versitygwMain   = versitygwModule + "/cmd/versitygw"
)

// builds memoises Build for the whole process.
var builds = testproc.NewBuildOnce()

// Build compiles versitygw at [Version] (go install
// github.com/versity/versitygw/cmd/versitygw@Version) and returns the path of
// the binary.
//
// The build runs at most once per process: the first result, success or
// compiler failure, is returned to every later caller, except a build cut
// short by ctx, which a later call tries again. Across processes the binary
// is cached in a directory under os.TempDir keyed by the module, Version and
// the Go version; a file lock there makes concurrent test binaries build it
// once, and the binary is moved into place by rename, so no one ever runs a
// partial file. A failed build returns the go command's full output.
func Build(ctx context.Context) (string, error) {
	return builds.Do(ctx, "s3test: versitygw", build)
}

func build(ctx context.Context) (string, error) {
	dir := filepath.Join(os.TempDir(), "rollwal-versitygw-"+buildKey())
	exe := "versitygw"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	out := filepath.Join(dir, exe)
	if built(out) {
		return out, nil
	}
	if err := vfs.Default.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if built(out) { // another process built it while we waited for the lock
		return out, nil
	}
	goBin, err := testproc.GoCommand()
	if err != nil {
		return "", err
	}

	// go install writes GOBIN/versitygw; give it a private GOBIN and rename
	// the result into place. (Files are changed through vfs.Default, as
	// internal/lint requires outside vfs.)
	gobin := filepath.Join(dir, fmt.Sprintf("tmp-%d-%x", os.Getpid(), rand.Uint64()))
	if err := vfs.Default.MkdirAll(gobin, 0o700); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	defer func() { _ = vfs.Default.RemoveAll(gobin) }()

	target := versitygwMain + "@" + Version
	cmd := exec.CommandContext(ctx, goBin, "install", target)
	cmd.Dir = dir // outside any module: pkg@version ignores go.mod anyway
	cmd.Env = append(os.Environ(),
		"GOBIN="+gobin,
		"GOFLAGS=-mod=mod", // a -mod=vendor or readonly from the caller would refuse pkg@version
		"GOWORK=off",
	)
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	began := time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("s3test: go install %s: %w", target, ctx.Err())
		}
		return "", fmt.Errorf("s3test: go install %s (GOBIN=%s) failed after %v: %v\n%s",
			target, gobin, time.Since(began).Round(time.Second), err, output.String())
	}
	if err := vfs.Default.Rename(filepath.Join(gobin, exe), out); err != nil {
		return "", fmt.Errorf("s3test: go install %s succeeded but: %w\n%s", target, err, output.String())
	}
	return out, nil
}

func built(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}

// buildKey hashes everything that decides what the binary contains: the
// module and its version (fixed by the module's go.sum in the checksum
// database) and the toolchain.
func buildKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s@%s\n%s %s/%s\n", versitygwMain, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// lockDir takes an exclusive lock on dir/lock, polling so that ctx is
// honoured, and returns its release.
func lockDir(ctx context.Context, dir string) (func(), error) {
	name := filepath.Join(dir, "lock")
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		var c vfs.File
		if c, err = vfs.Default.Create(name); err == nil {
			_ = c.Close()
			f, err = os.Open(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("s3test: build lock: %w", err)
	}
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("s3test: build lock %s: %w", name, err)
		}
		if ok {
			return func() { unlock(f); f.Close() }, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("s3test: waiting for another process's versitygw build (lock %s): %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
