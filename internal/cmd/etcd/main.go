// Command etcd runs a real etcd server from the etcd module version pinned
// in this repository's go.mod. It exists only so that tests (see package
// internal/etcdcluster) can run etcd members as separate OS processes without
// downloading a release binary; it accepts exactly etcd's own flags.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
