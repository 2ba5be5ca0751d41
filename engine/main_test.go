package engine

import (
	"fmt"
	"os"
	"testing"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// etcd is the package's one embedded server; each test uses its own table.
var etcd etcdtest.Shared

func runTests(m *testing.M) int {
	srv, err := etcd.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		return 1
	}
	etcdClient, etcdEndpoints = srv.Client(), srv.Endpoints()
	return etcd.RunCheckingLeaks(m)
}

// tableName turns a test's name into a table name unique to this run of it.
func tableName(t testing.TB, suffix string) string { return etcdtest.Name(t, suffix, 100) }
