package server

import (
	"fmt"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
)

var etcdClient *clientv3.Client

// etcd is the package's one embedded server.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	srv, err := etcd.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		return 1
	}
	etcdClient = srv.Client()
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
