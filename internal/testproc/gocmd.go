package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// GoCommand returns the go command of the toolchain that built this test
// binary if it is present, and otherwise the one on PATH.
func GoCommand() (string, error) {
	name := "go"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	// runtime.GOROOT is deprecated for general use, but the toolchain that
	// built this binary is exactly the one wanted here.
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("testproc: no go command in GOROOT/bin or PATH: %w", err)
	}
	return p, nil
}
