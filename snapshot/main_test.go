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

// gocqlPoolRace ignores the reader goroutine of a gocql connection: the
// driver's pool may finish dialling a connection after Session.Close has
// closed the pool, and nothing then closes that connection (its reader
// waits on the socket until the node drops it). Seen once under -race in
// CI; it is the driver's goroutine, and every session this package opens
// is closed.
var gocqlPoolRace = goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Conn).recv")

func TestMain(m *testing.M) {
	code := etcd.Run(m)
	if err := closeCassandra(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(gocqlPoolRace); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
