package shardmeta

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// etcd is the package's one embedded server, started by the first test
// that needs it (fuzz workers and pure tests never do); each test uses its
// own table.
var etcd etcdtest.Shared

func server(t testing.TB) *etcdembed.Server { return etcd.Server(t) }

func TestMain(m *testing.M) {
	code := etcd.Run(m)
	if code == 0 {
		// etcd 3.7.3 leaves no goroutine behind once closed: no ignores.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newStore returns a Store on a table no other test uses.
func newStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(server(t).Client(), Keys{Prefix: "rollwal-test", Table: etcdtest.Name(t, "", MaxNameLen)}, StoreOptions{})
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// grant returns a fresh lease, revoked when the test ends.
func grant(t *testing.T) clientv3.LeaseID {
	t.Helper()
	resp, err := server(t).Client().Grant(testCtx(t), 60)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = server(t).Client().Revoke(ctx, resp.ID)
	})
	return resp.ID
}
