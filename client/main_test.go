package client

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
)

// etcd is started by the first test that needs a real writer.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	code := etcd.Run(m) // stops the shared etcd (if a test started it) before the goroutines are counted
	if code != 0 {
		return code // a failed test may leave goroutines behind; its failure says more
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests and the shared etcd stopped:", err)
		return 1
	}
	return 0
}
