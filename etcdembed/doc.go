// Package etcdembed runs a single-node etcd server inside the process: the
// metadata plane of rollwal's embedded default and of every test that needs
// real etcd transactions.
//
// # Lifecycle
//
//	srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: dataDir + "/etcd"})
//	...
//	cli := srv.Client()        // one client, created and probed at Start
//	eps := srv.Endpoints()     // for processes or clients of your own
//	...
//	err = srv.Close()          // closes the client, then the server; idempotent
//
// Start returns only once the server has joined its one-member cluster and
// answered a linearizable read through Client, or with an error that says
// what it waited for. All data lives under Options.Dir; starting again on the
// same Dir recovers it (keys, revisions, leases — a lease's TTL restarts at
// full length).
//
// # Addresses
//
// By default the client and peer listeners bind 127.0.0.1 on ports the kernel
// picks (port 0), so parallel test packages never collide and there is no
// racy "find a free port, close it, reuse it" step. The price is that every
// Start gets new ports: a client created against one incarnation cannot reach
// the next. When a client must survive a server restart, set
// Options.ClientURL to a fixed address, e.g. a unix socket
// "unix:///tmp/x/etcd.sock" (keep socket paths under ~100 bytes).
//
// The advertised URLs of a port-0 server say ":0"; never enable a client's
// AutoSyncInterval against it (it would learn the unusable advertised
// address).
//
// # Timing
//
// Heartbeat and election ticks are 10 ms and 100 ms: a single member elects
// itself within tens of milliseconds, and the smallest lease TTL the server
// grants becomes 1 s (it is 2 s with etcd's defaults), which short-TTL
// failover tests need.
//
// # Shutdown
//
// Close closes the package's client before the server (a client holding a
// keepalive stream makes the server's graceful gRPC stop wait out its request
// timeout, seconds instead of milliseconds), calls embed's Close exactly once
// (a second call panics inside etcd), and waits for it at most
// CloseTimeout. Clients created by the caller should be closed before Close
// for the same reason.
//
// # Maintenance
//
// Every manifest commit is a revision, and etcd keeps revisions until they
// are compacted; its file shrinks only when defragmented, and at the quota
// (Options.QuotaBytes, 2 GiB) every write fails with "database space
// exceeded". A goroutine started by Start calls Maintain every
// Options.MaintenanceInterval (10 s): it compacts to head −
// Options.CompactionRetention (1,000 revisions, physically), defragments
// when the database is at least Options.DefragFloorBytes (64 MiB) and a
// quarter or more of it is free, and after a NOSPACE alarm compacts, defragments and
// disarms it once the database is under 90% of the quota. Revision rather
// than time retention, because the history kept is then bounded by 1,000
// values at any commit rate. etcd's own revision compactor (same retention,
// fixed 5-minute period) stays on as a backstop. Stats returns what the
// last pass saw; the writer_etcd_* metrics (Options.Registerer or
// RegisterMetrics) follow it. Close stops the loop, canceling a pass in
// flight, before it closes the client.
//
// # Logs
//
// etcd logs through zap. With a nil Options.Logger nothing is logged. With a
// logger, error-level entries are forwarded to it as slog records until Close
// begins; from then on nothing is forwarded, because a normal shutdown logs
// "http: Server closed" and "use of closed network connection" at error level.
// One benign error a fresh member logs at start ("failed to update storage
// version ... missing term information"; the version monitor retries) is
// dropped too.
//
// # Goroutines
//
// With the client closed first and the server stopped through Close, etcd
// 3.7.3 leaves no goroutine behind: test packages can run goleak in TestMain
// without ignores (this package's tests do).
package etcdembed
