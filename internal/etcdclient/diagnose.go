package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"strings"
	"time"
)

// tlsCheckWait bounds how long checkTLS waits for a server to refuse the
// client after the handshake.
const tlsCheckWait = 200 * time.Millisecond

// checkTLS connects to every endpoint with cfg and returns what went wrong
// with TLS, one entry per failing endpoint, or nil. refused reports that
// every endpoint refused TLS in a way that retrying will not fix. gRPC
// cannot always say what went wrong: under TLS 1.3 a server refuses a
// client certificate only after the client's side of the handshake is
// done, and gRPC, writing its preface by then, often reports just "broken
// pipe". Here the client writes nothing and reads the server's alert.
func (c *Config) checkTLS(ctx context.Context, cfg *tls.Config) (refused bool, err error) {
	var errs joined
	refused = true
	for _, ep := range c.Endpoints {
		if err := checkTLSEndpoint(ctx, ep, cfg); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			refused = refused && isRefusal(err)
		} else {
			refused = false
		}
	}
	if len(errs) == 0 {
		return false, nil
	}
	return refused, errs
}

// isRefusal reports a definite TLS failure: the server's certificate does
// not verify, the server sent an alert, or it does not speak TLS.
func isRefusal(err error) bool {
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var op *net.OpError
	return errors.As(err, &verify) || errors.As(err, &header) ||
		(errors.As(err, &op) && op.Op == "remote error")
}

// joined is errors.Join on one line.
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }

func checkTLSEndpoint(ctx context.Context, ep string, cfg *tls.Config) error {
	network, addr, name := dialAddress(ep)
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = name
	}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	wait := time.Now().Add(tlsCheckWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(wait) {
		wait = dl
	}
	if err := conn.SetReadDeadline(wait); err != nil {
		return err
	}
	// A server that accepted the client waits for the client to speak.
	_, err = conn.Read(make([]byte, 1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case err == nil:
		return nil // the server spoke first; not a TLS problem
	default:
		return fmt.Errorf("refused after the TLS handshake: %w", err)
	}
}

// dialAddress returns how to dial an endpoint that Validate accepted, and
// the name its certificate should carry by default (as clientv3 does: the
// host, or a socket file's base name).
func dialAddress(ep string) (network, addr, serverName string) {
	if scheme, rest, _ := strings.Cut(ep, ":"); scheme == "unix" || scheme == "unixs" {
		p := rest
		if strings.HasPrefix(rest, "//") {
			p = strings.TrimPrefix(rest, "//") // unix:///abs or unix://rel
		}
		return "unix", p, path.Base(p)
	}
	hostPort := ep
	if u, err := url.Parse(ep); err == nil && strings.Contains(ep, "://") {
		hostPort = u.Host
	}
	host, _, _ := net.SplitHostPort(hostPort)
	return "tcp", hostPort, host
}
