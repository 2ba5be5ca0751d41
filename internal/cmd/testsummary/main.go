// Command testsummary sits behind `go test -json` in scripts/test: it
// prints the tests' output as `go test` would, records every test's
// result in a file, and, called with -summary, prints one line of counts
// over every run recorded there and the names of the tests that failed or
// were skipped, so that a skipped test is never silent.
//
//	go test -json ./... | go run ./internal/cmd/testsummary -record results.tsv
//	go run ./internal/cmd/testsummary -summary results.tsv
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// event is the part of a test2json event read here.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on pass and fail
}

func main() {
	record := flag.String("record", "", "append each test's result to this file (read stdin as go test -json)")
	summary := flag.String("summary", "", "print the summary of the results recorded in this file")
	flag.Parse()
	var err error
	switch {
	case *record != "":
		err = recordRun(os.Stdin, os.Stdout, *record)
	case *summary != "":
		err = printSummary(os.Stdout, *summary)
	default:
		err = errors.New("want -record FILE or -summary FILE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
}

// recordRun prints what plain `go test` would of the events on in — the
// packages' lines, and a test's output only when it fails (go test -json
// runs verbosely) — and appends a line "result<TAB>package<TAB>test" per
// finished test to path. A package that fails with tests unfinished (a
// panic, a timeout) has their output printed too.
func recordRun(in io.Reader, out io.Writer, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	held := map[string]*strings.Builder{} // package + top-level test → output so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(out, sc.Text()) // not an event (a build error): pass it on
			continue
		}
		if err := take(e, out, f, held); err != nil {
			return err
		}
	}
	return sc.Err()
}

// take handles one event; see recordRun.
func take(e event, out, results io.Writer, held map[string]*strings.Builder) error {
	top, _, _ := strings.Cut(e.Test, "/")
	key := e.Package + "\x00" + top
	switch {
	case e.Action == "output" && e.Test == "" && e.Output == "PASS\n":
		// verbose mode's line; plain go test prints only "ok"
	case e.Action == "build-output", e.Action == "output" && e.Test == "":
		io.WriteString(out, e.Output)
	case e.Action == "output":
		if held[key] == nil {
			held[key] = &strings.Builder{}
		}
		held[key].WriteString(e.Output)
	case e.Test == "" && e.Action == "fail":
		for k, b := range held {
			if strings.HasPrefix(k, e.Package+"\x00") {
				io.WriteString(out, b.String())
				delete(held, k)
			}
		}
	}
	if e.Test == "" || (e.Action != "pass" && e.Action != "fail" && e.Action != "skip") {
		return nil
	}
	if e.Test == top {
		if e.Action == "fail" && held[key] != nil {
			io.WriteString(out, held[key].String())
		}
		delete(held, key)
	}
	_, err := fmt.Fprintf(results, "%s\t%s\t%s\t%.2f\n", e.Action, e.Package, e.Test, e.Elapsed)
	return err
}

// slowest is how many of the longest top-level tests the summary names:
// where to look when the suite outgrows its time.
const slowest = 10

// printSummary prints "N passed, N failed, N skipped" over the recorded
// results, then the failed and the skipped tests by name, then the slowest
// top-level tests.
func printSummary(out io.Writer, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	byResult := map[string][]string{}
	var timed []timing
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.Split(line, "\t")
		if len(parts) < 3 {
			continue
		}
		name := parts[1] + "." + parts[2]
		byResult[parts[0]] = append(byResult[parts[0]], name)
		if len(parts) == 4 && parts[0] != "skip" && !strings.Contains(parts[2], "/") {
			if secs, err := strconv.ParseFloat(parts[3], 64); err == nil {
				timed = append(timed, timing{name, secs})
			}
		}
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", len(byResult["pass"]), len(byResult["fail"]), len(byResult["skip"]))
	for _, r := range []struct{ result, label string }{{"fail", "failed"}, {"skip", "skipped"}} {
		runs := map[string]int{} // a test of two runs (go test, then -race) counts twice
		for _, n := range byResult[r.result] {
			runs[n]++
		}
		for _, n := range slices.Sorted(maps.Keys(runs)) {
			if runs[n] > 1 {
				fmt.Fprintf(out, "  %s: %s (%d runs)\n", r.label, n, runs[n])
			} else {
				fmt.Fprintf(out, "  %s: %s\n", r.label, n)
			}
		}
	}
	slices.SortStableFunc(timed, func(a, b timing) int { return cmp.Compare(b.secs, a.secs) })
	for _, t := range timed[:min(slowest, len(timed))] {
		fmt.Fprintf(out, "  slow: %s %.1fs\n", t.name, t.secs)
	}
	return nil
}

// timing is one run of a top-level test.
type timing struct {
	name string
	secs float64
}
