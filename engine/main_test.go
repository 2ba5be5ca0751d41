package engine

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcdembed"
)

// etcdClient is one embedded etcd for the package's tests; each test uses
// its own table name, so their keys never meet.
var etcdClient *clientv3.Client

// etcdEndpoints are the embedded etcd's client URLs, for child processes.
var etcdEndpoints []string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChildWriter())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rollwal-engine-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		return 1
	}
	defer srv.Close()
	etcdClient, etcdEndpoints = srv.Client(), srv.Endpoints()
	return m.Run()
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

var tables atomic.Int64

// tableName turns a test's name into a table name unique to this run of it
// (tests run again under -count must not meet their earlier etcd state).
func tableName(t testing.TB, suffix string) string {
	name := fmt.Sprintf("%s%s-%d", nonName.ReplaceAllString(t.Name(), "_"), suffix, tables.Add(1))
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return name
}
