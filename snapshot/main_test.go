package snapshot

import (
	"fmt"
	"os"
	"testing"

	"github.com/rollwal/rollwal/internal/etcdembed"
	"github.com/rollwal/rollwal/internal/etcdembed/etcdtest"
	"go.uber.org/goleak"
)

// etcd is the package's one embedded server, started by the first test
// that needs it.
var etcd etcdtest.Shared

func etcdServer(t testing.TB) *etcdembed.Server { return etcd.Server(t) }

func TestMain(m *testing.M) {
	code := etcd.Run(m)
	if err := closeCassandra(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
