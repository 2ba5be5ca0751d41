package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/server"
	"github.com/rollwal/rollwal/vfs"
)

// HTTPConfig is the http: section: what one client, or many, may hold of
// the writer (connections, time, body bytes in flight) and who may do
// what (bearer tokens). See server/listen.go, server/inflight.go and
// server/auth.go.
type HTTPConfig struct {
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	BodyReadTimeout   time.Duration `yaml:"body_read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`
	// MaxConns bounds the ingest listener's connections; serve lowers it
	// to leave descriptors for files (connLimit).
	MaxConns int `yaml:"max_conns"`
	// MaxInflightBytes 0 is one eighth of the memory budget, at least
	// max_body_bytes; MaxInflightRequests 0 is one per MiB of it, at
	// least 16.
	MaxInflightBytes    int64         `yaml:"max_inflight_bytes"`
	MaxInflightRequests int           `yaml:"max_inflight_requests"`
	InflightWait        time.Duration `yaml:"inflight_wait"`
	// ProbeListen, when set, serves /livez, /readyz and /metrics on a
	// listener of their own, which ingest's connections cannot fill.
	ProbeListen string `yaml:"probe_listen"`
	// The token files hold one bearer token a line (several: all are
	// accepted, for rotation); read at start and at every SIGHUP
	// (reload.go).
	IngestTokenFile string `yaml:"ingest_token_file"`
	AdminTokenFile  string `yaml:"admin_token_file"`
	// TLS, when its cert_file is set, serves the ingest, admin and Iceberg
	// REST listeners over TLS; the probe listener stays plain HTTP.
	TLS HTTPTLSConfig `yaml:"tls"`
}

// HTTPTLSConfig is the http.tls: section: the server side of TLS on
// serve's listeners. Its files are read at start and again at every
// SIGHUP (reload.go), which swaps in a renewed certificate.
type HTTPTLSConfig struct {
	// CertFile and KeyFile are the PEM server certificate (chain, leaf
	// first) and its key; both or neither. Set, the ingest listener, the
	// admin listener and the Iceberg REST listener serve HTTPS (HTTP/1.1
	// only). The probe listener never does: kubelet's httpGet probes
	// do not verify a certificate, and probes need nothing a TLS listener
	// would protect.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, a PEM bundle of CA certificates, makes every TLS
	// listener require a client certificate that one of them signed
	// (tls.RequireAndVerifyClientCert): mutual TLS. It needs CertFile.
	ClientCAFile string `yaml:"client_ca_file"`
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `yaml:"min_version"`
}

func defaultHTTP() HTTPConfig {
	return HTTPConfig{
		ReadHeaderTimeout: server.DefaultReadHeaderTimeout, BodyReadTimeout: server.DefaultBodyReadTimeout,
		WriteTimeout: server.DefaultWriteTimeout, IdleTimeout: server.DefaultIdleTimeout,
		MaxHeaderBytes: server.DefaultMaxHeaderBytes, MaxConns: server.DefaultMaxConns, InflightWait: server.DefaultInflightWait,
		TLS: HTTPTLSConfig{MinVersion: "1.2"},
	}
}

var httpSettings = []setting{
	{"http.max_conns", "max-conns", func(d, s *Config) { d.HTTP.MaxConns = s.HTTP.MaxConns }},
	{"http.max_inflight_bytes", "max-inflight-bytes", func(d, s *Config) { d.HTTP.MaxInflightBytes = s.HTTP.MaxInflightBytes }},
	{"http.max_inflight_requests", "max-inflight-requests", func(d, s *Config) { d.HTTP.MaxInflightRequests = s.HTTP.MaxInflightRequests }},
	{"http.body_read_timeout", "body-read-timeout", func(d, s *Config) { d.HTTP.BodyReadTimeout = s.HTTP.BodyReadTimeout }},
	{"http.probe_listen", "probe-listen", func(d, s *Config) { d.HTTP.ProbeListen = s.HTTP.ProbeListen }},
	{"http.ingest_token_file", "ingest-token-file", func(d, s *Config) { d.HTTP.IngestTokenFile = s.HTTP.IngestTokenFile }},
	{"http.admin_token_file", "admin-token-file", func(d, s *Config) { d.HTTP.AdminTokenFile = s.HTTP.AdminTokenFile }},
	{"http.tls.cert_file", "tls-cert-file", func(d, s *Config) { d.HTTP.TLS.CertFile = s.HTTP.TLS.CertFile }},
	{"http.tls.key_file", "tls-key-file", func(d, s *Config) { d.HTTP.TLS.KeyFile = s.HTTP.TLS.KeyFile }},
	{"http.tls.client_ca_file", "tls-client-ca-file", func(d, s *Config) { d.HTTP.TLS.ClientCAFile = s.HTTP.TLS.ClientCAFile }},
	{"http.tls.min_version", "tls-min-version", func(d, s *Config) { d.HTTP.TLS.MinVersion = s.HTTP.TLS.MinVersion }},
}

func addHTTPFlags(f *pflag.FlagSet, h *HTTPConfig) {
	def := defaultHTTP()
	f.IntVar(&h.MaxConns, "max-conns", def.MaxConns, "connections the ingest listener serves at once (lowered to fit the descriptor limit)")
	f.Int64Var(&h.MaxInflightBytes, "max-inflight-bytes", def.MaxInflightBytes, "body bytes ingest requests in flight may hold (0: an eighth of the memory budget)")
	f.IntVar(&h.MaxInflightRequests, "max-inflight-requests", def.MaxInflightRequests, "ingest requests in flight (0: one per MiB of --max-inflight-bytes, at least 16)")
	f.DurationVar(&h.BodyReadTimeout, "body-read-timeout", def.BodyReadTimeout, "bound on reading an ingest body; a slower one is answered 408")
	f.StringVar(&h.ProbeListen, "probe-listen", def.ProbeListen, "address serving only /livez, /readyz and /metrics (default: none, they are on --listen)")
	f.StringVar(&h.IngestTokenFile, "ingest-token-file", def.IngestTokenFile, "file of bearer tokens that ingest and /v1/ reads need (default: none needed)")
	f.StringVar(&h.AdminTokenFile, "admin-token-file", def.AdminTokenFile, "file of bearer tokens that flush needs (default: the ingest tokens)")
	f.StringVar(&h.TLS.CertFile, "tls-cert-file", def.TLS.CertFile, "PEM server certificate: serve ingest, admin and Iceberg REST over HTTPS (default: plain HTTP; probes stay plain)")
	f.StringVar(&h.TLS.KeyFile, "tls-key-file", def.TLS.KeyFile, "PEM key of --tls-cert-file")
	f.StringVar(&h.TLS.ClientCAFile, "tls-client-ca-file", def.TLS.ClientCAFile, "PEM CA bundle: the TLS listeners require client certificates it signed (default: none asked)")
	f.StringVar(&h.TLS.MinVersion, "tls-min-version", def.TLS.MinVersion, "oldest TLS version accepted: 1.2 or 1.3")
}

// validateHTTP checks the http: section as serve would use it.
func (c *Config) validateHTTP() error {
	if err := c.HTTP.validateTimes(); err != nil {
		return err
	}
	if err := c.HTTP.validateSizes(c.MaxBodyBytes); err != nil {
		return err
	}
	if err := c.validateProbeListen(); err != nil {
		return err
	}
	for _, f := range []struct{ key, path string }{{"http.ingest_token_file", c.HTTP.IngestTokenFile}, {"http.admin_token_file", c.HTTP.AdminTokenFile}} {
		if _, err := readTokens(f.path); err != nil {
			return badValue(f.key, f.path, "%v", err)
		}
	}
	_, err := c.HTTP.TLS.build()
	return err
}

// build loads the certificate, its key and the client CAs into the
// tls.Config of serve's TLS listeners; nil when cert_file is not set. An
// error names the key (and the file) at fault.
func (t HTTPTLSConfig) build() (*tls.Config, error) {
	var version uint16
	switch t.MinVersion {
	case "1.2":
		version = tls.VersionTLS12
	case "1.3":
		version = tls.VersionTLS13
	default:
		return nil, badValue("http.tls.min_version", t.MinVersion, `want "1.2" or "1.3"`)
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return nil, badValue("http.tls.cert_file", t.CertFile, "is set without http.tls.key_file: set both or neither")
	case t.KeyFile != "" && t.CertFile == "":
		return nil, badValue("http.tls.key_file", t.KeyFile, "is set without http.tls.cert_file: set both or neither")
	case t.ClientCAFile != "" && t.CertFile == "":
		return nil, badValue("http.tls.client_ca_file", t.ClientCAFile,
			"needs http.tls.cert_file and http.tls.key_file: client certificates are asked for only over TLS")
	case t.CertFile == "":
		return nil, nil
	}
	certPEM, err := vfs.ReadFile(vfs.Default, t.CertFile)
	if err != nil {
		return nil, badValue("http.tls.cert_file", t.CertFile, "%v", err)
	}
	keyPEM, err := vfs.ReadFile(vfs.Default, t.KeyFile)
	if err != nil {
		return nil, badValue("http.tls.key_file", t.KeyFile, "%v", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, badValue("http.tls.cert_file", t.CertFile, "with http.tls.key_file %q: %v", t.KeyFile, err)
	}
	if leaf := cert.Leaf; leaf != nil && time.Now().After(leaf.NotAfter) {
		return nil, badValue("http.tls.cert_file", t.CertFile, "expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   version,
		// HTTP/1.1 only: the connection limits, deadlines and in-flight
		// accounting are per connection, as on the plain listeners.
		NextProtos: []string{"http/1.1"},
	}
	if t.ClientCAFile != "" {
		pool, err := loadCertPool(t.ClientCAFile)
		if err != nil {
			return nil, badValue("http.tls.client_ca_file", t.ClientCAFile, "%v", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// loadCertPool reads a PEM bundle of certificates, every block of which
// must be a certificate that parses: a truncated or mixed-up bundle is an
// error at start, not every client's "unknown authority".
func loadCertPool(path string) (*x509.CertPool, error) {
	data, err := vfs.ReadFile(vfs.Default, path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %s, not a CERTIFICATE", n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		pool.AddCert(c)
	}
	if n == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

func (h HTTPConfig) validateTimes() error {
	switch {
	case h.ReadHeaderTimeout < 100*time.Millisecond || h.ReadHeaderTimeout > 10*time.Minute:
		return badValue("http.read_header_timeout", h.ReadHeaderTimeout, "must be in 100ms..10m")
	case h.BodyReadTimeout < time.Second || h.BodyReadTimeout > time.Hour:
		return badValue("http.body_read_timeout", h.BodyReadTimeout, "must be in 1s..1h")
	case h.WriteTimeout <= h.BodyReadTimeout || h.WriteTimeout > 2*time.Hour:
		return badValue("http.write_timeout", h.WriteTimeout, "must exceed http.body_read_timeout (%v: it covers reading the body and the append) and be at most 2h", h.BodyReadTimeout)
	case h.IdleTimeout < time.Second || h.IdleTimeout > time.Hour:
		return badValue("http.idle_timeout", h.IdleTimeout, "must be in 1s..1h")
	case h.InflightWait < 0 || h.InflightWait > time.Minute:
		return badValue("http.inflight_wait", h.InflightWait, "must be in 0s..1m (0s: refuse at once)")
	}
	return nil
}

func (h HTTPConfig) validateSizes(maxBody int64) error {
	switch {
	case h.MaxHeaderBytes < 4<<10 || h.MaxHeaderBytes > 1<<20:
		return badValue("http.max_header_bytes", h.MaxHeaderBytes, "must be in 4096..1048576")
	case h.MaxConns < 16 || h.MaxConns > 1_000_000:
		return badValue("http.max_conns", h.MaxConns, "must be in 16..1000000")
	case h.MaxInflightBytes != 0 && (h.MaxInflightBytes < maxBody || h.MaxInflightBytes > 1<<40):
		return badValue("http.max_inflight_bytes", h.MaxInflightBytes,
			"must be 0 (an eighth of the memory budget) or in max_body_bytes (%d)..1TiB: a body of any accepted size must be admissible", maxBody)
	case h.MaxInflightRequests < 0 || h.MaxInflightRequests > 100_000:
		return badValue("http.max_inflight_requests", h.MaxInflightRequests, "must be 0 (one per MiB of max_inflight_bytes) or in 1..100000")
	}
	return nil
}

func (c *Config) validateProbeListen() error {
	p := c.HTTP.ProbeListen
	if p == "" {
		return nil
	}
	if err := checkAddress(p); err != nil {
		return badValue("http.probe_listen", p, "%v", err)
	}
	if !strings.HasSuffix(p, ":0") && (p == c.Listen || p == c.AdminListen) {
		return badValue("http.probe_listen", p, "is also listen or admin_listen: probes need a listener of their own")
	}
	return nil
}

// bearerToken is the token68 syntax of RFC 6750, at least 16 characters:
// a token with a space, a quote or a stray carriage return in it is a
// mistake that would otherwise only show as every producer's 401.
var bearerToken = regexp.MustCompile(`^[A-Za-z0-9._~+/-]{16,}=*$`)

// readTokens reads a token file: one token a line; blank lines and lines
// starting with # are skipped. No path: no tokens.
func readTokens(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := vfs.ReadFile(vfs.Default, path)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !bearerToken.MatchString(line) {
			return nil, fmt.Errorf("line %d is not a bearer token: want at least 16 of A-Z a-z 0-9 . _ ~ + / - (then = padding)", i+1)
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return nil, errors.New("holds no token")
	}
	return out, nil
}

// apply sets the section on the server's options. budget is the engine's
// memory budget, which the in-flight bytes default to an eighth of; conns
// is the connection limit connLimit chose.
func (h HTTPConfig) apply(o *server.Options, budget int64, conns int) error {
	var err error
	if o.IngestTokens, err = readTokens(h.IngestTokenFile); err != nil {
		return fmt.Errorf("http.ingest_token_file %s: %w", h.IngestTokenFile, err)
	}
	if o.AdminTokens, err = readTokens(h.AdminTokenFile); err != nil {
		return fmt.Errorf("http.admin_token_file %s: %w", h.AdminTokenFile, err)
	}
	o.MaxInflightBytes = h.MaxInflightBytes
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = server.InflightBytesFor(budget, o.MaxBodyBytes)
	}
	o.MaxInflightRequests = h.MaxInflightRequests
	o.InflightWait = h.InflightWait
	if o.InflightWait == 0 {
		o.InflightWait = -1 // the server's 0 is its default
	}
	o.HTTP = server.HTTPOptions{ReadHeaderTimeout: h.ReadHeaderTimeout, BodyReadTimeout: h.BodyReadTimeout,
		WriteTimeout: h.WriteTimeout, IdleTimeout: h.IdleTimeout, MaxHeaderBytes: h.MaxHeaderBytes, MaxConns: conns}
	return nil
}

// connLimit is max_conns, lowered where the process's descriptor limit
// (RLIMIT_NOFILE; Go raises the soft limit to the hard one at start)
// would not also leave fdReserve for everything else the writer opens.
func (h HTTPConfig) connLimit(shards int) (int, error) { return h.connLimitKeeping(shards, 0) }

// connLimitKeeping is connLimit keeping extra descriptors more, for the
// connections of another listener (the Iceberg REST catalog's).
func (h HTTPConfig) connLimitKeeping(shards, extra int) (int, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return fitConns(h.MaxConns, rl.Cur, fdReserve(shards, h.ProbeListen != "")+extra)
}

// fdReserve is the descriptors kept from connections: 256 for the
// process (embedded etcd's files and sockets, the etcd and snapshot
// clients, the admin listener, logs), 32 a shard (WAL segments, generation
// and producer-state files, directories opened to fsync them) and the
// probe listener's connections.
func fdReserve(shards int, probes bool) int {
	n := 256 + 32*shards
	if probes {
		n += server.MaxProbeConns
	}
	return n
}

// fitConns is min(want, nofile − reserve), and an error when that leaves
// fewer than 16 connections.
func fitConns(want int, nofile uint64, reserve int) (int, error) {
	room := int64(min(nofile, 1<<31)) - int64(reserve)
	if room < 16 {
		return 0, fmt.Errorf("the descriptor limit (RLIMIT_NOFILE %d) leaves %d connections after the %d kept for files; raise it (ulimit -n, LimitNOFILE=) or host fewer shards",
			nofile, max(room, 0), reserve)
	}
	return int(min(int64(want), room)), nil
}

func init() {
	settings = append(settings, httpSettings...)
	sections["main.HTTPConfig"] = "http"
	sections["main.HTTPTLSConfig"] = "http.tls"
}
