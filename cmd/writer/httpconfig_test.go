package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/server"
)

// TestHTTPConfig: the http: section reads from the file, is overridden by
// its flags, reaches the server's options (the in-flight bytes from the
// memory budget when unset, the tokens from their files), and a value out
// of range is an error naming the key (or the flag) and the value, exactly
// as serve would refuse it.
func TestHTTPConfig(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "ingest.tokens")
	writeTestFile(t, tokens, "# rotated 2024-05\nold-token-0123456789\n\nnew-token-0123456789\n")
	resolve := func(yaml string, args ...string) (Config, error) {
		path := filepath.Join(dir, "w.yaml")
		writeTestFile(t, path, yaml)
		var flagged Config
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addHTTPFlags(f, &flagged.HTTP)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return resolveConfig(f, path, flagged)
	}
	got, err := resolve("http:\n  idle_timeout: 30s\n  max_conns: 500\n  ingest_token_file: "+tokens+"\n", "--max-conns", "64")
	if h := got.HTTP; err != nil || h.IdleTimeout != 30*time.Second || h.MaxConns != 64 || h.ReadHeaderTimeout != server.DefaultReadHeaderTimeout {
		t.Fatalf("resolved %+v, %v", got.HTTP, err)
	}
	so := server.Options{MaxBodyBytes: got.MaxBodyBytes}
	if err := got.HTTP.apply(&so, 1<<30, 64); err != nil {
		t.Fatal(err)
	}
	if so.MaxInflightBytes != 128<<20 || so.HTTP.MaxConns != 64 || so.HTTP.IdleTimeout != 30*time.Second ||
		!slices.Equal(so.IngestTokens, []string{"old-token-0123456789", "new-token-0123456789"}) || so.AdminTokens != nil {
		t.Fatalf("server options %+v", so)
	}

	badToken := filepath.Join(dir, "bad.tokens")
	writeTestFile(t, badToken, "short\n")
	for _, tc := range []struct {
		yaml string
		args []string
		want string
	}{
		{"http:\n  read_header_timeout: 10ms\n", nil, "http.read_header_timeout 10ms: must be in 100ms..10m"},
		{"http:\n  body_read_timeout: 5m\n", nil, "http.write_timeout 2m0s: must exceed http.body_read_timeout"},
		{"http:\n  max_header_bytes: 100\n", nil, "http.max_header_bytes 100"},
		{"", []string{"--max-conns", "1"}, "--max-conns 1: must be in 16..1000000"},
		{"max_body_bytes: 1000\nhttp:\n  max_inflight_bytes: 999\n", nil, "http.max_inflight_bytes 999: must be 0 (an eighth of the memory budget) or in max_body_bytes (1000)"},
		{"http:\n  max_inflight_requests: -1\n", nil, "http.max_inflight_requests -1"},
		{"http:\n  inflight_wait: 2m\n", nil, "http.inflight_wait 2m0s"},
		{"http:\n  probe_listen: 127.0.0.1:8080\n", nil, "http.probe_listen \"127.0.0.1:8080\": is also listen"},
		{"", []string{"--admin-token-file", badToken}, "--admin-token-file \"" + badToken + "\": line 1 is not a bearer token"},
		{"http:\n  ingest_token_file: " + filepath.Join(dir, "none") + "\n", nil, "http.ingest_token_file"},
		{"http:\n  max_con: 3\n", nil, `unknown key "max_con" in section http`},
	} {
		_, err := resolve(tc.yaml, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: %v, want an error containing %q", tc.yaml, tc.args, err, tc.want)
		}
	}
}

// TestConnLimitLeavesDescriptors: the connection limit is max_conns, or
// lower where the descriptor limit would not leave the reserve for files;
// a limit that leaves almost nothing is an error saying what to raise.
func TestConnLimitLeavesDescriptors(t *testing.T) {
	reserve := fdReserve(4, true)
	if reserve != 256+4*32+server.MaxProbeConns {
		t.Fatalf("reserve for 4 shards and probes: %d", reserve)
	}
	for _, tc := range []struct {
		want   int
		nofile uint64
		got    int
	}{{1024, 1 << 20, 1024}, {1024, 1024, 1024 - reserve}, {100, 1<<63 + 5, 100}} {
		if got, err := fitConns(tc.want, tc.nofile, reserve); err != nil || got != tc.got {
			t.Errorf("max_conns %d under RLIMIT_NOFILE %d: %d, %v; want %d", tc.want, tc.nofile, got, err, tc.got)
		}
	}
	if _, err := fitConns(1024, uint64(reserve)+10, reserve); err == nil || !strings.Contains(err.Error(), "raise it") {
		t.Errorf("a descriptor limit leaving 10 connections: %v, want an error", err)
	}
	if n, err := (HTTPConfig{MaxConns: 1 << 30}).connLimit(1); err != nil || n <= 0 || n >= 1<<30 {
		t.Errorf("this process's limit: %d, %v; want one below its RLIMIT_NOFILE", n, err)
	}
}
