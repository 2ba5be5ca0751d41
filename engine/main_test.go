package engine

import (
	"fmt"
	"os"
	"testing"

	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
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
	code := etcd.Run(m) // stops the shared etcd before the goroutines are counted
	if code != 0 {
		return code // a failed test may leave goroutines behind; its failure says more
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests and the shared etcd stopped:", err)
		return 1
	}
	return 0
}

// tableName turns a test's name into a table name unique to this run of it.
func tableName(t testing.TB, suffix string) string { return etcdtest.Name(t, suffix, 100) }
