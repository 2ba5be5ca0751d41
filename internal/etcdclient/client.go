package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// probeKey is read (count only) to prove that the cluster answers. No
// rollwal prefix contains it.
const probeKey = "\x00rollwal-etcdclient-probe"

// retryEvery paces the probe while no endpoint is reachable.
const retryEvery = 100 * time.Millisecond

// New validates c (after EnsureDefaults on a copy), creates a client and
// proves, within c.DialTimeout and ctx, that the cluster serves a
// linearizable read with these credentials. A failure names the endpoints
// and wraps its causes: the server's refusal (rpctypes.ErrAuthFailed, …),
// or on timeout context.DeadlineExceeded together with the last connection
// error (refused, TLS handshake, no leader). ctx bounds only New; the client
// lives until its Close.
func New(ctx context.Context, c Config) (*clientv3.Client, error) {
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := c.TLS.build()
	if err != nil {
		return nil, fmt.Errorf("etcdclient: %w", err) // a file changed since Validate
	}
	if tlsCfg == nil && c.usesTLS() {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12} // system roots
	}
	dctx, cancel := context.WithTimeoutCause(ctx, c.DialTimeout,
		fmt.Errorf("no answer within dial_timeout %s: %w", c.DialTimeout, context.DeadlineExceeded))
	defer cancel()
	cli, err := c.connect(dctx, tlsCfg)
	if err != nil {
		return nil, fmt.Errorf("etcdclient: connect to etcd at %s: %w%s",
			strings.Join(c.Endpoints, ", "), err, hint(err, tlsCfg != nil))
	}
	return cli, nil
}

// hints explain errors whose text does not point at the configuration to
// fix. A hint applies to clients with TLS, without, or (any) both.
var hints = []struct {
	substr string
	when   string // "tls", "plain" or "any"
	hint   string
}{
	{"x509: certificate signed by unknown authority", "tls",
		"tls.ca_file must hold the CA that signed the server's certificate"},
	{"x509: certificate is valid for", "tls",
		"the endpoint's host (or tls.server_name) must be a name in the server's certificate"},
	{"tls: certificate required", "tls",
		"the server requires a client certificate signed by a CA it trusts: set tls.cert_file and tls.key_file"},
	{"authentication handshake failed: EOF", "tls",
		"the server closed the TLS handshake: does it serve plain http?"},
	// The TLS server closes a plaintext connection with EOF or, as often
	// under load, a reset: either way the preface never arrives.
	{"error reading server preface", "plain",
		"the server closed the connection: if it serves TLS, use https:// endpoints"},
	{"etcdserver: user name is empty", "any",
		"the cluster has auth enabled: set username and password, or a client certificate"},
}

func hint(err error, tls bool) string {
	msg := err.Error()
	transport := map[bool]string{true: "tls", false: "plain"}[tls]
	for _, h := range hints {
		if (h.when == "any" || h.when == transport) && strings.Contains(msg, h.substr) {
			return " (hint: " + h.hint + ")"
		}
	}
	return ""
}

// connect reaches the cluster first without credentials: clientv3.New
// authenticates with a request that waits silently for a connection, which
// would hide why none came up. Once the cluster has answered, it connects
// again with the credentials.
func (c *Config) connect(ctx context.Context, tlsCfg *tls.Config) (*clientv3.Client, error) {
	cli, err := c.dial(ctx, tlsCfg, false)
	if err != nil {
		return nil, err
	}
	answer, err := c.ask(ctx, cli, tlsCfg)
	if err == nil && c.Username != "" {
		cli.Close()
		if cli, err = c.dial(ctx, tlsCfg, true); err != nil {
			return nil, err
		}
		answer, err = c.ask(ctx, cli, tlsCfg)
	}
	if err == nil && answer != nil && !errors.Is(answer, rpctypes.ErrPermissionDenied) {
		// Permission denied still proves the read: etcd checks
		// permissions after the read-index barrier.
		err = answer
	}
	if err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// dial creates a client, with the credentials when auth is true. Creating
// one with credentials authenticates under clientv3's own DialTimeout; the
// client's lifetime context is cut when ctx ends first, so that the
// attempt stays within ctx.
func (c *Config) dial(ctx context.Context, tlsCfg *tls.Config, auth bool) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            append([]string(nil), c.Endpoints...),
		DialTimeout:          c.DialTimeout,
		DialKeepAliveTime:    c.KeepAliveTime,
		DialKeepAliveTimeout: c.KeepAliveTimeout,
		TLS:                  tlsCfg,
		Logger:               zap.NewNop(),
	}
	if tlsCfg != nil && tlsCfg.ServerName != "" {
		// gRPC checks certificates against the connection's authority,
		// not tls.Config.ServerName.
		cfg.DialOptions = []grpc.DialOption{grpc.WithAuthority(tlsCfg.ServerName)}
	}
	if !auth {
		return clientv3.New(cfg)
	}
	cfg.Username, cfg.Password = c.Username, c.Password
	life, cut := context.WithCancel(context.Background())
	cfg.Context = life
	stop := context.AfterFunc(ctx, cut)
	cli, err := clientv3.New(cfg)
	if !stop() { // ctx ended: the client (if any) is cut off
		if err == nil {
			cli.Close()
		}
		err = context.Cause(ctx)
	}
	if err != nil {
		cut()
		return nil, fmt.Errorf("authenticate as %q: %w", c.Username, err)
	}
	return cli, nil
}

// ask makes linearizable count-only reads that fail fast rather than wait
// for a connection, until one gets an answer from the cluster: nil or the
// server's error (answer). Connection failures and "no leader" are retried;
// when ctx ends, err is its cause joined with the last of them. With TLS,
// the first connection failure is explained by checkTLS, and New fails at
// once when every endpoint refused TLS for good.
func (c *Config) ask(ctx context.Context, cli *clientv3.Client, tlsCfg *tls.Config) (answer, err error) {
	kv := pb.NewKVClient(cli.ActiveConnection())
	req := &pb.RangeRequest{Key: []byte(probeKey), CountOnly: true}
	var last, tlsErr error
	checked := tlsCfg == nil
	for {
		_, err := kv.Range(clientv3.WithRequireLeader(ctx), req, grpc.WaitForReady(false))
		switch code := status.Code(err); {
		case err == nil:
			return nil, nil
		case ctx.Err() != nil:
			return nil, timeoutError(ctx, last, tlsErr)
		case code == codes.Unavailable:
			last = rpctypes.Error(err)
			var server rpctypes.EtcdError
			if !checked && !errors.As(last, &server) {
				checked = true
				var refused bool
				if refused, tlsErr = c.checkTLS(ctx, tlsCfg); refused {
					return nil, fmt.Errorf("TLS: %w", tlsErr)
				}
			}
		default:
			return rpctypes.Error(err), nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryEvery):
		}
	}
}

func timeoutError(ctx context.Context, last, tlsErr error) error {
	switch {
	case last == nil:
		return context.Cause(ctx)
	case tlsErr == nil:
		return fmt.Errorf("%w; last error: %w", context.Cause(ctx), last)
	default:
		return fmt.Errorf("%w; TLS check: %w; last gRPC error: %w", context.Cause(ctx), tlsErr, last)
	}
}

// usesTLS reports whether an endpoint requires TLS.
func (c *Config) usesTLS() bool {
	for _, ep := range c.Endpoints {
		if kind, _ := parseEndpoint(ep); kind == tlsOnly {
			return true
		}
	}
	return false
}
