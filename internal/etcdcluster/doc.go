// Package etcdcluster runs real multi-member etcd clusters as separate OS
// processes, for tests of other packages that need to inject faults into etcd
// itself: stopping, killing, restarting and freezing (SIGSTOP) individual
// members, and observing leader changes.
//
// It is a test helper. Import it only from _test.go files.
//
// # The binary
//
// The etcd server is not downloaded. [Build] compiles
// github.com/rollwal/rollwal/internal/cmd/etcd, a two-line main around
// go.etcd.io/etcd/server/v3/etcdmain, so the server version is exactly the one
// pinned in go.mod. The binary is written to a directory under [os.TempDir]
// whose name is a hash of go.sum, go.mod, the etcd main source and the Go
// version. Later test runs and concurrent test binaries reuse it; the first
// cold build takes a minute or two, and a link from a warm build cache takes
// seconds. [Start] calls Build itself, so calling Build directly is needed only
// to build ahead of time, e.g. from TestMain.
//
// # Usage
//
//	func TestFailover(t *testing.T) {
//		c := etcdcluster.Start(t, etcdcluster.Options{Members: 3})
//		cli := c.Client(t) // all endpoints; closed on cleanup
//
//		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
//		defer cancel()
//		leader, err := c.WaitLeader(ctx)
//		if err != nil {
//			t.Fatal(err)
//		}
//		if err := c.Pause(leader); err != nil { // SIGSTOP: frozen, not dead
//			t.Fatal(err)
//		}
//		if _, err := c.WaitLeader(ctx); err != nil { // a new leader among the others
//			t.Fatal(err)
//		}
//		_, err = cli.Put(ctx, "k", "v")
//		...
//	}
//
// Members are addressed by index, 0 to Len()-1; accessors such as Endpoint
// panic on an index out of range, control methods return an error. Stop, Kill
// and Restart take several members at once, or none to mean all (for Restart:
// all that are not running). Restart members needed for a quorum in one call,
// since Restart waits until each serves a linearizable read.
//
// Every member listens on 127.0.0.1 only, on ports chosen below the kernel's
// ephemeral port range so that a member restarted on its old ports does not
// collide with outgoing connections. A start that loses a port race to
// another process is retried on fresh ports; a restart, on the same ports
// until its wait ends.
//
// Members run with --heartbeat-interval 50 and --election-timeout 500, so a
// lost leader is replaced in roughly 0.5–1.5 s and the smallest lease TTL the
// server grants is 1 s. Members write their logs at --log-level error to one
// file per member (see [Cluster.Logs]); all of them are printed with t.Logf if
// the test fails. Set ETCDCLUSTER_LOG_LEVEL=info (or debug) to get more.
//
// # Lifetime
//
// Start registers a t.Cleanup that SIGKILLs every member still running,
// including paused ones, and waits for each to exit; data directories live
// under t.TempDir and are removed afterwards. On Linux each member is also
// started with Pdeathsig=SIGKILL from a dedicated OS thread, so members die
// with the test binary even if it is killed before cleanup runs.
//
// Member control methods return errors instead of failing the test, so they
// may be called from any goroutine (for example a chaos loop). Every wait is
// bounded and polls a condition; none relies on a fixed sleep.
//
// Stop is graceful (SIGTERM). A leader hands over leadership on SIGTERM and
// waits up to 6 s for a peer to take it; Stop avoids that stall by stopping
// followers before leaders and resuming a paused member before signalling it.
// Kill is immediate.
//
// Clients from [Cluster.Client] cap gRPC's reconnect backoff at 1 s, so they
// find a restarted member promptly.
package etcdcluster
