// Package etcdclient configures and creates the client of an external etcd
// cluster, for deployments whose metadata plane is not the embedded etcd
// (package etcdembed, which stays the default).
//
// # Lifecycle
//
//	var c etcdclient.Config        // from YAML: endpoints, tls, …
//	c.EnsureDefaults()
//	if err := c.Validate(); err != nil { … } // `writer config check`
//	cli, err := etcdclient.New(ctx, c)      // validates again, connects, probes
//	…
//	rctx, cancel := context.WithTimeout(ctx, c.RequestTimeout) // every RPC
//	…
//	cli.Close()
//
// Validate checks the form of every endpoint, that one transport fits them
// all, the credentials, the timeouts, and that the TLS files exist and
// parse; its errors wrap ErrInvalidConfig and name the YAML key and the
// file.
//
// # Fail now, not on first use
//
// clientv3.New does not connect: against a wrong endpoint it returns a
// client whose first request waits out its deadline and then says only
// "context deadline exceeded". New instead returns only after a
// linearizable read has been answered with the configured credentials, or
// fails with an error that names the endpoints and carries the cause:
//
//	etcdclient: connect to etcd at http://10.0.0.1:2379: no answer within
//	dial_timeout 5s: context deadline exceeded; last error: … connect:
//	connection refused
//
// To get that cause, the probe reads without waiting for a connection
// (gRPC's WaitForReady off) and retries every 100ms, until DialTimeout or
// ctx ends, while gRPC reports the endpoints unavailable (refused, closed,
// no leader): a server that is still starting gets the whole DialTimeout.
//
// With a username, it first reaches the cluster without credentials (etcd
// answers "user name is empty"), because clientv3.New authenticates with a
// request that waits silently; then it connects again with the
// credentials, so a wrong password fails at once with rpctypes.ErrAuthFailed.
// A user without permission on the probe key passes: etcd checks
// permissions only after the read-index barrier.
//
// With TLS, the first failed connection is examined by a handshake of its
// own to every endpoint (gRPC often reports a refused client certificate
// as "broken pipe"). When every endpoint refuses for good — the server's
// certificate does not verify, or the server sends a TLS alert such as
// "certificate required" — New fails at once:
//
//	etcdclient: connect to etcd at https://10.0.0.1:2379: TLS:
//	https://10.0.0.1:2379: tls: failed to verify certificate: x509:
//	certificate signed by unknown authority (hint: tls.ca_file must hold …)
//
// # TLS
//
// https:// and unixs:// endpoints always use TLS, with the system roots
// unless tls.ca_file is set; bare host:port and unix:// endpoints use TLS
// when the tls section is set. http:// never does, and clientv3 picks one
// transport for all endpoints from the first one, so Validate rejects
// http:// next to TLS. tls.server_name is passed to gRPC as the
// connection's authority: gRPC verifies certificates against that, not
// against tls.Config.ServerName. Certificates are read once, by New;
// restart to pick up rotated files.
//
// # Logs
//
// The client logs nothing (a zap no-op logger): New's errors carry what
// matters, and clientv3 logs every retried request at warning level.
package etcdclient
