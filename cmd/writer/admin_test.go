package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestServeAdminListener: with --admin-listen, /debug/pprof/ answers on the
// admin listener and not on the ingest listener.
func TestServeAdminListener(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	p := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	defer p.stop(t)
	admin := loggedAddr(t, p.output(), "admin listening")
	if admin == "" {
		t.Fatalf("no admin listening line in the log:\n%s", p.output())
	}
	code, body := httpDo(t, http.MethodGet, "http://"+admin+"/debug/pprof/", "", "")
	if code != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("admin /debug/pprof/: %d %.200s", code, body)
	}
	if code, _ := httpDo(t, http.MethodGet, "http://"+admin+"/debug/pprof/cmdline", "", ""); code != http.StatusOK {
		t.Fatalf("admin /debug/pprof/cmdline: %d", code)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
		if code, body := httpDo(t, http.MethodGet, "http://"+p.addr+path, "", ""); code != http.StatusNotFound {
			t.Errorf("ingest listener %s: %d %.200s, want 404", path, code, body)
		}
	}
}

// TestServeHasNoAdminListenerByDefault: pprof is opt-in.
func TestServeHasNoAdminListenerByDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	defer p.stop(t)
	if addr := loggedAddr(t, p.output(), "admin listening"); addr != "" {
		t.Fatalf("an admin listener at %s without --admin-listen", addr)
	}
	if code, _ := httpDo(t, http.MethodGet, "http://"+p.addr+"/debug/pprof/", "", ""); code != http.StatusNotFound {
		t.Fatalf("ingest listener /debug/pprof/: %d, want 404", code)
	}
}

// loggedAddr returns the addr of the first JSON log line with message msg.
func loggedAddr(t *testing.T, log, msg string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
			return rec.Addr
		}
	}
	return ""
}
