package etcdembed

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	// etcd 3.7.3 stops every goroutine it started once the client is closed
	// first and the server through Close: no goleak ignores are needed.
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return srv
}

func put(t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, k, v); err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
}

func get(t *testing.T, cli *clientv3.Client, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %d kvs, want 1", k, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	srv := start(t, Options{Dir: dir})
	eps := srv.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") || strings.HasSuffix(eps[0], ":0") {
		t.Fatalf("Endpoints() = %v, want one http://127.0.0.1:<port>", eps)
	}
	put(t, srv.Client(), "/k", "v1")
	began := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Close took %s; the client must be closed before the server", took)
	}

	srv = start(t, Options{Dir: dir})
	defer srv.Close()
	if got := get(t, srv.Client(), "/k"); got != "v1" {
		t.Fatalf("after restart /k = %q, want v1", got)
	}
}

func TestCloseTwice(t *testing.T) {
	srv := start(t, Options{Dir: t.TempDir()})
	if err := srv.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A fixed unix socket keeps the endpoint across restarts, so a client of the
// caller's own reconnects to the next incarnation.
func TestUnixSocketClientSurvivesRestart(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "etcdembed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	opts := Options{Dir: t.TempDir(), ClientURL: "unix://" + filepath.Join(sockDir, "c.sock")}
	srv := start(t, opts)
	if got := srv.Endpoints(); len(got) != 1 || got[0] != opts.ClientURL {
		t.Fatalf("Endpoints() = %v, want [%s]", got, opts.ClientURL)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put(t, cli, "/k", "v1")
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	srv = start(t, opts)
	defer srv.Close()
	put(t, cli, "/k", "v2") // the old client, reconnected
	if got := get(t, srv.Client(), "/k"); got != "v2" {
		t.Fatalf("/k = %q, want v2", got)
	}
	cli.Close() // before srv.Close: see the package doc
}

func TestStartCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv, err := Start(ctx, Options{Dir: t.TempDir()})
	if err == nil {
		srv.Close()
		t.Fatal("Start with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start: %v, want context.Canceled", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no dir", Options{}, "Dir is required"},
		{"bad name", Options{Dir: "x", Name: "a b"}, "Options.Name"},
		{"bad scheme", Options{Dir: "x", ClientURL: "https://127.0.0.1:1"}, "scheme must be http or unix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

type recordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { m += " " + a.String(); return true })
	h.msgs = append(h.msgs, m)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// A normal start and stop forwards nothing at error level: the shutdown
// noise etcd logs as errors is muted.
func TestQuietStartAndClose(t *testing.T) {
	h := &recordingHandler{}
	srv := start(t, Options{Dir: t.TempDir(), Logger: slog.New(h)})
	put(t, srv.Client(), "/k", "v")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if !strings.HasPrefix(m, "DEBUG") {
			t.Errorf("unexpected log record: %s", m)
		}
	}
}
