// Package pyenv finds, for tests, the Python interpreter that scripts/pyenv
// sets up with the pinned readers (pyarrow, DuckDB with its iceberg
// extension, pyiceberg, Polars), by one rule everywhere: the test command
// sets ROLLWAL_PYTHON; in CI (CI set) a missing one fails the test with the
// command that fixes it; elsewhere the check is skipped, loudly.
package pyenv

import (
	"fmt"
	"os"
	"testing"
)

// Env is the variable naming the interpreter.
const Env = "ROLLWAL_PYTHON"

const fix = "ROLLWAL_PYTHON=$(bash scripts/pyenv | tail -n1) go test ./..."

// Python returns the interpreter, or skips the test (failing it in CI).
// unchecked says what goes unchecked without it.
func Python(t testing.TB, unchecked string) string {
	t.Helper()
	if py := os.Getenv(Env); py != "" {
		return py
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s must be set by the test command in CI (%s is checked with it): %s", Env, unchecked, fix)
	}
	msg := fmt.Sprintf("\n*** SKIPPED %s: %s is NOT checked. ***\n***   %s\n", t.Name(), unchecked, fix)
	fmt.Fprint(os.Stderr, msg) // shown without -v too
	t.Skip(msg)
	return ""
}

// Optional returns the interpreter, or "" (logged) when a test can still
// check the rest without it; in CI a missing one fails the test.
func Optional(t testing.TB, unchecked string) string {
	t.Helper()
	if py := os.Getenv(Env); py != "" {
		return py
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s must be set by the test command in CI (%s is checked with it): %s", Env, unchecked, fix)
	}
	t.Logf("%s not set: %s skipped", Env, unchecked)
	return ""
}
