package shardmeta

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// The package's one embedded etcd server, started by the first test that
// needs it (fuzz workers and pure tests never do); each test uses its own
// table.
var (
	etcdOnce sync.Once
	etcdSrv  *etcdembed.Server
	etcdDir  string
	etcdErr  error
)

func server(t testing.TB) *etcdembed.Server {
	t.Helper()
	etcdOnce.Do(func() {
		if etcdDir, etcdErr = os.MkdirTemp("", "shardmeta-etcd"); etcdErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		etcdSrv, etcdErr = etcdembed.Start(ctx, etcdembed.Options{Dir: etcdDir})
	})
	if etcdErr != nil {
		t.Fatalf("embedded etcd: %v", etcdErr)
	}
	return etcdSrv
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	code := m.Run()
	if etcdSrv != nil {
		if err := etcdSrv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if etcdDir != "" {
		os.RemoveAll(etcdDir)
	}
	if code == 0 {
		// etcd 3.7.3 leaves no goroutine behind once closed: no ignores.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

var tableSeq atomic.Int64

var nonName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// newStore returns a Store on a table no other test uses.
func newStore(t *testing.T) *Store {
	t.Helper()
	table := fmt.Sprintf("%s-%d", nonName.ReplaceAllString(t.Name(), "_"), tableSeq.Add(1))
	if len(table) > MaxNameLen {
		table = table[len(table)-MaxNameLen:]
	}
	return NewStore(server(t).Client(), Keys{Prefix: "rollwal-test", Table: table}, StoreOptions{})
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
