package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryCountsEveryResult: the output of the events is passed on as
// go test prints it; results of two runs recorded in one file add up, and
// the summary names every failed and skipped test, subtests included.
func TestSummaryCountsEveryResult(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.tsv")
	run1 := `{"Action":"run","Package":"p/a","Test":"TestA"}
{"Action":"output","Package":"p/a","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p/a","Test":"TestA","Output":"    a_test.go:1: quiet\n"}
{"Action":"pass","Package":"p/a","Test":"TestA","Elapsed":1.5}
{"Action":"skip","Package":"p/a","Test":"TestB"}
{"Action":"output","Package":"p/a","Test":"TestC/sub","Output":"    c_test.go:9: broke\n"}
{"Action":"fail","Package":"p/a","Test":"TestC/sub","Elapsed":2.2}
{"Action":"output","Package":"p/a","Test":"TestC","Output":"--- FAIL: TestC\n"}
{"Action":"fail","Package":"p/a","Test":"TestC","Elapsed":2.25}
{"Action":"output","Package":"p/a","Test":"TestP","Output":"panic: boom\n"}
{"Action":"output","Package":"p/a","Output":"FAIL\tp/a\t0.1s\n"}
{"Action":"fail","Package":"p/a"}
# p/b [build failed]
`
	var out bytes.Buffer
	if err := recordRun(strings.NewReader(run1), &out, path); err != nil {
		t.Fatal(err)
	}
	// A passing test's output is dropped, a failing one's printed when it
	// ends, an unfinished one's when its package fails.
	if want := "    c_test.go:9: broke\n--- FAIL: TestC\nFAIL\tp/a\t0.1s\npanic: boom\n# p/b [build failed]\n"; out.String() != want {
		t.Fatalf("output passed on:\n%q\nwant\n%q", out.String(), want)
	}
	run2 := `{"Action":"pass","Package":"p/c","Test":"TestD","Elapsed":0.5}
{"Action":"skip","Package":"p/c","Test":"TestE"}
{"Action":"skip","Package":"p/a","Test":"TestB"}
`
	if err := recordRun(strings.NewReader(run2), &bytes.Buffer{}, path); err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	if err := printSummary(&sum, path); err != nil {
		t.Fatal(err)
	}
	want := "2 passed, 2 failed, 3 skipped\n" +
		"  failed: p/a.TestC\n  failed: p/a.TestC/sub\n" +
		"  skipped: p/a.TestB (2 runs)\n  skipped: p/c.TestE\n" +
		"  slow: p/a.TestC 2.2s\n  slow: p/a.TestA 1.5s\n  slow: p/c.TestD 0.5s\n"
	if sum.String() != want {
		t.Fatalf("summary:\n%s\nwant\n%s", sum.String(), want)
	}
}
