package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rollwal/rollwal/engine"
)

// TestDiskFullIs503 maps the engine's full disk: a refused append is 503
// disk_full with Retry-After (the shard recovers by itself, so a retry
// later succeeds); an append queued for the WAL when the disk filled may
// yet be stored, so it is an unknown outcome, not a refusal.
func TestDiskFullIs503(t *testing.T) {
	s := errorServer()
	refused := fmt.Errorf("%w: shard s0: wal: out of disk space", engine.ErrNoSpace)
	code, e := s.appendError(refused, nil)
	if code != http.StatusServiceUnavailable || e.Code != codeDiskFull {
		t.Fatalf("%v answered %d %+v, want 503 disk_full", refused, code, e)
	}
	rec := httptest.NewRecorder()
	s.failAt(rec, httptest.NewRequest(http.MethodPost, "/v1/shards/s0/rows", nil), 0, code, e)
	if rec.Header().Get("Retry-After") == "" {
		t.Fatalf("503 disk_full without Retry-After: %v", rec.Header())
	}
	queued := fmt.Errorf("%w: %w", engine.ErrUnknownOutcome, refused)
	if code, e := s.appendError(queued, nil); code != http.StatusConflict || e.Code != codeOutcomeUnknown {
		t.Fatalf("%v answered %d %+v, want 409 outcome_unknown", queued, code, e)
	}
}

// errorServer is a server for its mapping of errors alone: its host is
// never asked anything.
func errorServer() *Server { return New(Options{Host: new(engine.Host)}) }
