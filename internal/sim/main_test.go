package sim

import (
	"os"
	"testing"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
)

// etcd is the package's one embedded server. It outlives every simulated
// crash: a crash loses unsynced files, never committed metadata.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(etcd.Run(m)) }
