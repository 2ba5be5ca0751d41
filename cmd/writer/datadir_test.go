package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/internal/dirlock"
	"github.com/rollwal/rollwal/internal/etcdclient"
)

// startEmbeddedForTest starts dir's embedded etcd as a command would:
// under the data dir's lock, with the endpoint recorded.
func startEmbeddedForTest(t *testing.T, dir string) *metadata {
	t.Helper()
	lock, err := dirlock.Acquire(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	m, err := startEmbedded(context.Background(), dir, etcdclient.Config{RequestTimeout: 5 * time.Second}, lock,
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEndpointRecordIsVerified: the record a process running the embedded
// etcd writes verifies against that etcd; a record whose cluster id or
// identity differs from what the etcd answers, a data dir other than the
// etcd's, and an etcd without an identity are refused naming the file;
// a record nothing answers is told apart (the lock decides), at once.
func TestEndpointRecordIsVerified(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := startEmbeddedForTest(t, dir)
	defer m.Close()
	r := readEndpoint(dir)
	if !r.found || r.unverifiable != "" || r.rec.Pid != os.Getpid() || r.rec.Command != "test" ||
		r.rec.ClusterID == "" || r.rec.Identity == "" || r.rec.DataDir != absDir(dir) {
		t.Fatalf("the endpoint record: %+v", r)
	}
	cli, err := openRecorded(ctx, dir, r)
	if err != nil {
		t.Fatalf("the record of the running etcd: %v", err)
	}
	cli.Close()

	refused := func(name string, dataDir string, r recorded, want ...string) {
		t.Helper()
		cli, err := openRecorded(ctx, dataDir, r)
		var mm *endpointMismatchError
		if !errors.As(err, &mm) {
			if cli != nil {
				cli.Close()
			}
			t.Fatalf("%s: %v; want a refusal", name, err)
		}
		for _, w := range append(want, "the endpoint file "+r.path+" is stale", "nothing was written") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the refusal %q does not say %q", name, err, w)
			}
		}
	}
	bad := r
	bad.rec.ClusterID = "1"
	refused("another cluster id", dir, bad, "serves cluster "+r.rec.ClusterID)
	bad = r
	bad.rec.Identity = "someone-else"
	refused("another identity", dir, bad, "serves data directory "+absDir(dir)+" (identity "+r.rec.Identity+")",
		"not data directory "+absDir(dir)+" (identity someone-else")
	other := t.TempDir()
	refused("another data dir", other, r, "serves data directory "+absDir(dir), "not data directory "+absDir(other))

	bare, err := etcdembed.Start(ctx, etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	bad = r
	bad.rec.Endpoints = bare.Endpoints()
	refused("an etcd without an identity", dir, bad, "no rollwal data directory")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	bad = r
	bad.rec.Endpoints = []string{"http://" + ln.Addr().String()}
	start := time.Now()
	if _, err := openRecorded(ctx, dir, bad); !errors.Is(err, errNotAnswering) || !strings.Contains(err.Error(), r.path) {
		t.Fatalf("a dead endpoint: %v; want errNotAnswering naming the file", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("telling a dead endpoint took %v", took)
	}
}

// TestEndpointRecordFormats: the one-line file of earlier versions, a
// damaged file and a record written for another directory are read as
// unverifiable (the lock then decides); no file is not found.
func TestEndpointRecordFormats(t *testing.T) {
	dir := t.TempDir()
	if r := readEndpoint(dir); r.found {
		t.Fatalf("no file read as %+v", r)
	}
	rec, _ := json.Marshal(endpointRecord{Endpoints: []string{"http://127.0.0.1:1"}, ClusterID: "1", Identity: "x", DataDir: "/elsewhere"})
	for _, tc := range []struct{ text, want string }{
		{"http://127.0.0.1:2379\n", "the format of an earlier version"},
		{`{"endpoints":`, "not a valid endpoint record"},
		{`{"endpoints":[]}`, "not a valid endpoint record"},
		{string(rec), "written for data directory /elsewhere, not " + absDir(dir)},
	} {
		writeTestFile(t, endpointFile(dir), tc.text)
		r := readEndpoint(dir)
		if !r.found || !strings.Contains(r.unverifiable, tc.want) {
			t.Errorf("%q: read as %+v; want unverifiable: %q", tc.text, r, tc.want)
		}
	}
}

// TestIdentityFollowsTheDirectory: the identity is made once; a data dir
// that starts under another path keeps it and records its new path, so the
// record written there verifies, and one naming the old path does not.
func TestIdentityFollowsTheDirectory(t *testing.T) {
	root := t.TempDir()
	a, c := filepath.Join(root, "a"), filepath.Join(root, "c")
	m := startEmbeddedForTest(t, a)
	first := readEndpoint(a).rec
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = startEmbeddedForTest(t, a)
	if again := readEndpoint(a).rec; again.Identity != first.Identity {
		t.Fatalf("a restart made a new identity: %s, then %s", first.Identity, again.Identity)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a, c); err != nil {
		t.Fatal(err)
	}
	m = startEmbeddedForTest(t, c)
	defer m.Close()
	r := readEndpoint(c)
	if r.rec.Identity != first.Identity || r.rec.DataDir != absDir(c) || r.unverifiable != "" {
		t.Fatalf("after the move: %+v; want identity %s at %s", r, first.Identity, absDir(c))
	}
	cli, err := openRecorded(context.Background(), c, r)
	if err != nil {
		t.Fatalf("the moved directory's own record: %v", err)
	}
	cli.Close()
	var mm *endpointMismatchError
	if cli, err := openRecorded(context.Background(), a, r); !errors.As(err, &mm) {
		if cli != nil {
			cli.Close()
		}
		t.Fatalf("the etcd of %s checked for its old path %s: %v; want a refusal", c, a, err)
	} else {
		t.Logf("refused: %v", err)
	}
}
