package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"go.uber.org/goleak"
)

// TestMain lets the test binary act as the writer command in testscript
// scripts: testscript.Main runs main when the binary is invoked under the
// name "writer" (a hard link it puts on $PATH), and the tests otherwise.
//
// A helper child (the binary re-executed to run one helper test, such as
// the serve tests' TestServeHelperProcess) skips that setup: it exits from
// inside its test, so testscript.Main would never remove the directory it
// made for the link.
func TestMain(m *testing.M) {
	if helperChild() {
		os.Exit(m.Run())
	}
	testscript.Main(leakChecked{m}, map[string]func(){"writer": main})
}

// leakChecked runs the tests, then checks that no goroutine of the
// in-process commands outlived them (testscript.Main exits itself, so the
// check rides inside Run).
type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	if code := l.m.Run(); code != 0 {
		return code // a failed test may leave goroutines behind; its failure says more
	}
	// The reader of a gocql connection that the driver's pool dialled after
	// Session.Close is the driver's, not ours (see snapshot/main_test.go).
	if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Conn).recv")); err != nil {
		fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests:", err)
		return 1
	}
	return 0
}

func helperChild() bool {
	if os.Getenv(serveHelperEnv) == "1" {
		return true
	}
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.run=") && strings.Contains(a, "HelperProcess") {
			return true
		}
	}
	return false
}

// TestCLI runs the scripts of testdata/script: every command with good and
// bad flags and configuration, its exit code and its messages.
func TestCLI(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:  "testdata/script",
		Cmds: map[string]func(*testscript.TestScript, bool, []string){"flipbyte": flipByte},
	})
}

// flipByte inverts the byte at OFFSET of the one file matching PATTERN
// (a glob, as generated names are random); a negative OFFSET counts from
// the end of the data, before any trailing zeros (the space a WAL segment
// reserves past its last record). It damages files as a bad disk would: a
// torn or corrupt record.
//
//	flipbyte PATTERN OFFSET
func flipByte(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: flipbyte PATTERN OFFSET")
	}
	matches, err := filepath.Glob(ts.MkAbs(args[0]))
	ts.Check(err)
	if len(matches) != 1 {
		ts.Fatalf("flipbyte: %s matches %d files, want 1: %v", args[0], len(matches), matches)
	}
	off, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	data, err := os.ReadFile(matches[0])
	ts.Check(err)
	if off < 0 {
		off += int64(len(bytes.TrimRight(data, "\x00")))
	}
	if off < 0 || off >= int64(len(data)) {
		ts.Fatalf("flipbyte: offset %s outside the %d bytes of %s", args[1], len(data), matches[0])
	}
	data[off] ^= 0xff
	ts.Check(os.WriteFile(matches[0], data, 0o644))
	ts.Logf("flipped byte %d of %s", off, matches[0])
}
