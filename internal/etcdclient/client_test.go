package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/etcdembed"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	// A failed New must not leave the client's goroutines behind.
	goleak.VerifyTestMain(m)
}

// slack is what a failing New may take beyond its DialTimeout.
const slack = 1500 * time.Millisecond

// startPlain starts an embedded etcd over http (or at clientURL) and stops
// it when the test ends. Clients made later are closed before it (cleanups
// run last-in, first-out; see the etcdembed package doc).
func startPlain(t *testing.T, clientURL string) *etcdembed.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: t.TempDir(), ClientURL: clientURL})
	if err != nil {
		t.Fatalf("etcdembed.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("stop etcd: %v", err)
		}
	})
	return srv
}

// startTLS starts an embedded etcd serving https on 127.0.0.1 with a
// certificate from ca, requiring client certificates signed by ca. It
// returns the endpoint.
func startTLS(t *testing.T, ca *testCA) string {
	t.Helper()
	certFile, keyFile := ca.issueServer(t, "etcd-server")
	cfg := embed.NewConfig()
	cfg.Name = "tls"
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ClientTLSInfo = transport.TLSInfo{
		CertFile:       certFile,
		KeyFile:        keyFile,
		TrustedCAFile:  ca.CAFile,
		ClientCertAuth: true,
	}
	// Port 0 on loopback, as etcdembed does: the kernel picks free ports.
	cu := url.URL{Scheme: "https", Host: "127.0.0.1:0"}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd with TLS: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd with TLS failed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd with TLS not ready after 30s")
	}
	return "https://" + e.Clients[0].Addr().String()
}

// newClient calls New and closes the client when the test ends.
func newClient(t *testing.T, c Config) *clientv3.Client {
	t.Helper()
	cli, err := New(context.Background(), c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// roundTrip proves cli works: a put, then a linearizable get of it.
func roundTrip(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/rollwal/k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := cli.Get(ctx, "/rollwal/k")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get /rollwal/k = %v, want v", resp.Kvs)
	}
}

// newFails calls New, expects it to fail within c.DialTimeout (plus slack)
// with an error naming every endpoint and containing each of wants, and
// returns the error.
func newFails(t *testing.T, c Config, wants ...string) error {
	t.Helper()
	began := time.Now()
	cli, err := New(context.Background(), c)
	took := time.Since(began)
	if err == nil {
		cli.Close()
		t.Fatal("New succeeded, want an error")
	}
	t.Logf("New failed after %s: %v", took.Round(time.Millisecond), err)
	c.EnsureDefaults()
	if limit := c.DialTimeout + slack; took > limit {
		t.Errorf("New took %s, want at most %s", took, limit)
	}
	for _, want := range append(append([]string(nil), c.Endpoints...), wants...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	return err
}

func TestNewPlainHTTP(t *testing.T) {
	srv := startPlain(t, "")
	cli := newClient(t, Config{Endpoints: srv.Endpoints()})
	roundTrip(t, cli)
	// Credentials are harmless while the cluster has auth off.
	roundTrip(t, newClient(t, Config{Endpoints: srv.Endpoints(), Username: "u", Password: "p"}))
	// A bare host:port works as well.
	roundTrip(t, newClient(t, Config{Endpoints: []string{strings.TrimPrefix(srv.Endpoints()[0], "http://")}}))
}

func TestNewUnixSocket(t *testing.T) {
	// Socket paths must stay short; t.TempDir() paths can be too long.
	dir, err := os.MkdirTemp("", "etcdclient")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ep := "unix://" + filepath.Join(dir, "etcd.sock")
	startPlain(t, ep)
	roundTrip(t, newClient(t, Config{Endpoints: []string{ep}}))
}

// tlsFixture is one TLS server and the files a client could use with it.
type tlsFixture struct {
	endpoint              string
	ca, otherCA           *testCA
	clientCert, clientKey string // from ca
	otherCert, otherKey   string // from otherCA
}

func newTLSFixture(t *testing.T) *tlsFixture {
	f := &tlsFixture{ca: newCA(t, "rollwal-test"), otherCA: newCA(t, "impostor")}
	f.endpoint = startTLS(t, f.ca)
	f.clientCert, f.clientKey = f.ca.issueClient(t, "writer")
	f.otherCert, f.otherKey = f.otherCA.issueClient(t, "writer")
	return f
}

func TestNewTLS(t *testing.T) {
	f := newTLSFixture(t)
	good := TLSConfig{CAFile: f.ca.CAFile, CertFile: f.clientCert, KeyFile: f.clientKey}
	cfg := func(tc TLSConfig) Config { return Config{Endpoints: []string{f.endpoint}, TLS: tc} }

	t.Run("ca and client cert connect", func(t *testing.T) {
		roundTrip(t, newClient(t, cfg(good)))
	})
	t.Run("server name override connects", func(t *testing.T) {
		tc := good
		tc.ServerName = serverName
		newClient(t, cfg(tc))
	})
	t.Run("insecure skip verify connects", func(t *testing.T) {
		newClient(t, cfg(TLSConfig{InsecureSkipVerify: true, CertFile: f.clientCert, KeyFile: f.clientKey}))
	})

	// A definite refusal fails at once, not after DialTimeout (5s).
	wrongName := good
	wrongName.ServerName = "other.test"
	for _, tc := range []struct {
		name  string
		tls   TLSConfig
		wants []string
	}{
		{"missing client cert is refused", TLSConfig{CAFile: f.ca.CAFile},
			[]string{"refused after the TLS handshake: remote error: tls: certificate required",
				"hint: the server requires a client certificate"}},
		// Go's TLS client offers only a certificate whose issuer is among
		// the CAs the server asks for: the server sees none.
		{"client cert of another CA is refused",
			TLSConfig{CAFile: f.ca.CAFile, CertFile: f.otherCert, KeyFile: f.otherKey},
			[]string{"tls: certificate required"}},
		{"wrong CA is refused",
			TLSConfig{CAFile: f.otherCA.CAFile, CertFile: f.clientCert, KeyFile: f.clientKey},
			[]string{"x509: certificate signed by unknown authority", "hint: tls.ca_file"}},
		{"system roots do not trust a private CA", TLSConfig{},
			[]string{"x509: certificate signed by unknown authority"}},
		// Also proves that ServerName reaches the handshake: gRPC would
		// check the certificate against 127.0.0.1 otherwise, and pass.
		{"wrong server name is refused", wrongName,
			[]string{"x509: certificate is valid for " + serverName + ", not other.test", "hint: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			newFails(t, cfg(tc.tls), tc.wants...)
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("New took %s to report a TLS refusal", took)
			}
		})
	}

	// Transient-looking failures are retried until DialTimeout.
	t.Run("plain http to a TLS server is refused", func(t *testing.T) {
		t.Parallel()
		ep := "http://" + strings.TrimPrefix(f.endpoint, "https://")
		newFails(t, Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second},
			"no answer within dial_timeout 2s", "hint: ", "use https://")
	})
	t.Run("https to a plain server is refused", func(t *testing.T) {
		t.Parallel()
		srv := startPlain(t, "")
		ep := "https://" + strings.TrimPrefix(srv.Endpoints()[0], "http://")
		newFails(t, Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, TLS: TLSConfig{InsecureSkipVerify: true}},
			"no answer within dial_timeout 2s", "handshake", "hint: ", "plain http")
	})
	// One endpoint that refuses TLS does not fail New while another works,
	// nor at once while another may yet come up.
	t.Run("one refusing endpoint of two", func(t *testing.T) {
		t.Parallel()
		c := cfg(good)
		c.Endpoints = []string{startRogueTLS(t, f.otherCA), f.endpoint}
		roundTrip(t, newClient(t, c))
	})
	t.Run("refusing endpoint and a down one", func(t *testing.T) {
		t.Parallel()
		rogue, down := startRogueTLS(t, f.otherCA), "https://"+closedPort(t)
		c := Config{Endpoints: []string{rogue, down}, DialTimeout: 2 * time.Second, TLS: good}
		began := time.Now()
		newFails(t, c, "no answer within dial_timeout 2s",
			"TLS check: "+rogue+": tls: failed to verify certificate", down+": dial tcp")
		if took := time.Since(began); took < c.DialTimeout {
			t.Errorf("New gave up after %s, before dial_timeout", took)
		}
	})
}

// startRogueTLS serves TLS on loopback with a certificate from ca, and
// nothing else: it closes every connection after the handshake.
func startRogueTLS(t *testing.T, ca *testCA) string {
	t.Helper()
	certFile, keyFile := ca.issueServer(t, "rogue")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return "https://" + l.Addr().String()
}

// enableAuth creates root and a user "writer" who may only touch /rollwal/,
// then turns auth on.
func enableAuth(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "rollwal"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "rollwal", "/rollwal/", clientv3.GetPrefixRangeEnd("/rollwal/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "writer", "writer-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "writer", "rollwal"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
}

func TestNewAuth(t *testing.T) {
	srv := startPlain(t, "")
	enableAuth(t, srv.Client())
	cfg := func(user, pw string) Config {
		return Config{Endpoints: srv.Endpoints(), Username: user, Password: pw}
	}

	t.Run("wrong password fails", func(t *testing.T) {
		err := newFails(t, cfg("root", "wrong"), `authenticate as "root"`, "authentication failed")
		if !errors.Is(err, rpctypes.ErrAuthFailed) {
			t.Errorf("error %v does not wrap rpctypes.ErrAuthFailed", err)
		}
	})
	t.Run("unknown user fails", func(t *testing.T) {
		newFails(t, cfg("nobody", "pw"), "authentication failed")
	})
	t.Run("right password connects", func(t *testing.T) {
		roundTrip(t, newClient(t, cfg("root", "root-pw")))
	})
	// The probe key is outside writer's permissions: a denied probe still
	// proves the cluster answered, so New succeeds, and the client is
	// really restricted.
	t.Run("restricted user connects", func(t *testing.T) {
		cli := newClient(t, cfg("writer", "writer-pw"))
		roundTrip(t, cli)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Get(ctx, "/elsewhere"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("get outside /rollwal/: %v, want permission denied", err)
		}
	})
	t.Run("no credentials are refused", func(t *testing.T) {
		newFails(t, cfg("", ""), "user name is empty", "hint: the cluster has auth enabled")
	})
}

// closedPort returns the address of a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestNewUnreachable(t *testing.T) {
	ep := "http://" + closedPort(t)
	const timeout = 2 * time.Second
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"plain", Config{Endpoints: []string{ep}, DialTimeout: timeout}},
		{"with password", Config{Endpoints: []string{ep}, DialTimeout: timeout, Username: "u", Password: "p"}},
		{"two endpoints", Config{Endpoints: []string{ep, "http://" + closedPort(t)}, DialTimeout: timeout}},
		{"host:port", Config{Endpoints: []string{strings.TrimPrefix(ep, "http://")}, DialTimeout: timeout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			err := newFails(t, tc.cfg, "connection refused", "no answer within dial_timeout 2s")
			if took := time.Since(began); took < timeout {
				t.Errorf("New gave up after %s, before dial_timeout: a server may be starting", took)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
			}
		})
	}
}

// The caller's context bounds New too.
func TestNewContext(t *testing.T) {
	ep := "http://" + closedPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(200 * time.Millisecond)
		cancel()
	})
	defer wg.Wait()
	began := time.Now()
	cli, err := New(ctx, Config{Endpoints: []string{ep}, DialTimeout: time.Minute})
	if err == nil {
		cli.Close()
		t.Fatal("New succeeded against a closed port")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("New took %s after its context was canceled", took)
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), ep) {
		t.Errorf("error %v: want context.Canceled naming %s", err, ep)
	}
}

func TestNewInvalidConfig(t *testing.T) {
	_, err := New(context.Background(), Config{})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(Config{}): %v, want ErrInvalidConfig", err)
	}
}
