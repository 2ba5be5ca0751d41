package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// logBuffer is a log's text, safe for the server's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the log lines holding all of parts.
func (l *logBuffer) lines(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// TestProbe503sLogQuietly: a probe polls, so the 503s of an unready
// /readyz are logged at DEBUG and only each change of its answer above it
// (35k WARN lines in one crash run before); a producer's 503 is still
// logged at WARN.
func TestProbe503sLogQuietly(t *testing.T) {
	var log logBuffer
	f := newServerFixture(t, nil, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	for range 50 {
		if code, _, b := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusServiceUnavailable {
			t.Fatalf("readyz before SetReady: %d %s", code, b)
		}
	}
	f.srv.SetReady(true)
	for range 5 {
		f.get(t, "/readyz")
	}
	f.srv.SetReady(false)
	if code, _ := f.post(t, "/v1/shards/s0/rows", ndjson("a")); code != http.StatusServiceUnavailable {
		t.Fatalf("ingest while unready: %d", code)
	}
	if got := log.lines("level=WARN", "path=/readyz"); len(got) != 0 {
		t.Errorf("%d probe 503s logged at WARN, want none; first: %s", len(got), got[0])
	}
	if got := log.lines("level=DEBUG", "path=/readyz", "status=503"); len(got) != 50 {
		t.Errorf("%d probe 503s logged at DEBUG, want 50", len(got))
	}
	if got := log.lines("level=INFO", "readyz: "); len(got) != 2 || !strings.Contains(got[0], "unready") || !strings.Contains(got[1], "readyz: ready") {
		t.Errorf("changes of readiness logged as %q, want one line unready, one ready", got)
	}
	if got := log.lines("level=WARN", "path=/v1/shards/s0/rows", "status=503"); len(got) != 1 {
		t.Errorf("a producer's 503 logged %d times at WARN, want once", len(got))
	}
}
