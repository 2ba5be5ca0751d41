package main

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeSetsMemoryLimit: real processes. serve sets the Go memory limit
// to the ceiling derived from --memory-budget and logs it, as the process's
// own go_gc_gomemlimit_bytes shows; with GOMEMLIMIT in the environment it
// leaves that limit alone and says so.
func TestServeSetsMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const budget = 256 << 20
	want := memoryCeiling(budget, 64<<20) // in flight: max(budget / 8, max_body_bytes 64 MiB)
	args := []string{"--listen", "127.0.0.1:0", "--memory-budget", strconv.Itoa(budget), "--flush-age", "-1s"}

	p := startServe(t, append(args, "--data-dir", t.TempDir())...)
	rec := p.find(msgMemoryLimit)
	if rec == nil || rec["limit"] != float64(want) || rec["memory_budget"] != float64(budget) {
		t.Fatalf("serve logged %v; want %q with limit %d and memory_budget %d", rec, msgMemoryLimit, want, budget)
	}
	if got := goMemLimit(t, p); got != want {
		t.Fatalf("go_gc_gomemlimit_bytes %d; want the derived ceiling %d", got, want)
	}
	p.stop(t)

	t.Setenv("GOMEMLIMIT", "1GiB")
	p = startServe(t, append(args, "--data-dir", t.TempDir())...)
	if p.find(msgMemoryLimitEnv, "gomemlimit", "1GiB") == nil || p.find(msgMemoryLimit) != nil {
		t.Fatalf("serve with GOMEMLIMIT set did not leave the limit to it:\n%s", lastLines(p.output(), 20))
	}
	if got := goMemLimit(t, p); got != 1<<30 {
		t.Fatalf("go_gc_gomemlimit_bytes %d with GOMEMLIMIT=1GiB", got)
	}
	p.stop(t)
}

// goMemLimit reads go_gc_gomemlimit_bytes from the process's /metrics.
func goMemLimit(t *testing.T, p *serveProc) int64 {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	code, body, err := tryDo(c, http.MethodGet, p.url("/metrics"), "", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gc_gomemlimit_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("no go_gc_gomemlimit_bytes in /metrics:\n%.2000s", body)
	return 0
}
