package snapshot

import (
	"fmt"
	"os"
	"testing"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"go.uber.org/goleak"
)

// etcd is the package's one embedded server, started by the first test
// that needs it.
var etcd etcdtest.Shared

func etcdServer(t testing.TB) *etcdembed.Server { return etcd.Server(t) }

// gocqlPoolRace ignores the reader goroutine of a gocql connection. Once,
// under -race in CI, two readers of connections the driver's pool had
// dialled (created by Conn.init) outlived Session.Close of every session
// this package opens; the likely cause is a pool refill that finished after
// Close. It is the driver's goroutine, holding nothing of ours.
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
