package server

import (
	"fmt"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
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
	return etcd.RunCheckingLeaks(m)
}
