package etcdcluster

import (
	"bufio"
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
	"strings"

	"github.com/rollwal/rollwal/internal/testproc"
	"github.com/rollwal/rollwal/vfs"
)

const (
	modulePath = "github.com/rollwal/rollwal"
	mainPkg    = modulePath + "/internal/cmd/etcd"
	mainSrc    = "internal/cmd/etcd/main.go"
)

// builds memoises Build for the whole process.
var builds = testproc.NewBuildOnce()

// Build compiles the etcd server binary (package
// github.com/rollwal/rollwal/internal/cmd/etcd) and returns its path.
//
// The build runs at most once per process: the first result, success or
// compiler failure, is returned to every later caller. The one exception is a
// build cut short by ctx, which is not remembered, so a later call with a live
// context tries again. The binary is cached across processes in a directory
// under os.TempDir keyed by a hash of go.sum (plus go.mod, the main source and
// the Go version), and written by atomic rename, so concurrent test binaries
// can share it. A compiler failure is returned with the full go build output.
func Build(ctx context.Context) (string, error) {
	return builds.Do(ctx, "etcdcluster: etcd", build)
}

func build(ctx context.Context) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	key, err := buildKey(root)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), "rollwal-etcd-"+key)
	exe := "etcd"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	out := filepath.Join(dir, exe)
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		return out, nil
	}
	if err := vfs.Default.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("etcdcluster: %w", err)
	}
	goBin, err := testproc.GoCommand()
	if err != nil {
		return "", err
	}

	// Build to a unique name and rename into place: other test binaries may
	// be building the same key right now, and a reader must never see a
	// partially written executable. (Files are changed through vfs.Default,
	// as internal/lint requires outside vfs.)
	tmpName := fmt.Sprintf("%s.tmp-%d-%x", out, os.Getpid(), rand.Uint64())
	defer func() { _ = vfs.Default.Remove(tmpName) }() // fails harmlessly after the rename

	cmd := exec.CommandContext(ctx, goBin, "build", "-buildvcs=false", "-o", tmpName, mainPkg)
	cmd.Dir = root
	cmd.Env = os.Environ()
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("etcdcluster: go build %s: %w", mainPkg, ctx.Err())
		}
		return "", fmt.Errorf("etcdcluster: go build %s in %s: %v\n%s", mainPkg, root, err, output.String())
	}
	if err := vfs.Default.Rename(tmpName, out); err != nil {
		return "", fmt.Errorf("etcdcluster: %w", err)
	}
	return out, nil
}

// moduleRoot walks up from the working directory (a package directory while
// `go test` runs) to the go.mod that declares this module.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("etcdcluster: %w", err)
	}
	for dir := wd; ; {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("etcdcluster: no go.mod for module %s at or above %s", modulePath, wd)
		}
		dir = parent
	}
}

func declaresModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

// buildKey hashes everything that decides what the binary contains.
func buildKey(root string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"go.sum", "go.mod", mainSrc} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil && !(name == "go.sum" && errors.Is(err, os.ErrNotExist)) {
			return "", fmt.Errorf("etcdcluster: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}
