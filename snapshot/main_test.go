package snapshot

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/etcdembed"
	"go.uber.org/goleak"
)

// The package's one embedded etcd server, started by the first test that
// needs it.
var (
	etcdOnce sync.Once
	etcdSrv  *etcdembed.Server
	etcdDir  string
	etcdErr  error
)

func etcdServer(t testing.TB) *etcdembed.Server {
	t.Helper()
	etcdOnce.Do(func() {
		if etcdDir, etcdErr = os.MkdirTemp("", "snapshot-etcd"); etcdErr != nil {
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
	if err := closeCassandra(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
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
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
