package client

import (
	"os"
	"testing"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
)

// etcd is started by the first test that needs a real writer.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(etcd.RunCheckingLeaks(m)) }
