package etcdclient

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults for Config.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
	DefaultKeepAliveTime    = 10 * time.Second
	DefaultKeepAliveTimeout = 3 * time.Second
)

// ErrInvalidConfig marks every error Validate returns.
var ErrInvalidConfig = errors.New("etcdclient: invalid config")

// Config describes how to reach an external etcd cluster. The zero value of
// every field but Endpoints is usable. Field names in errors are the YAML
// keys.
type Config struct {
	// Endpoints are the cluster's client URLs: "https://10.0.0.1:2379",
	// "http://…", "unix:///run/etcd.sock", "unixs://…", or a bare
	// "host:port" (TLS when the tls section is set). The port is required.
	// http:// and TLS cannot be mixed: the client uses one transport for
	// every endpoint.
	Endpoints []string `yaml:"endpoints"`
	// DialTimeout bounds New, connection and first read included; default
	// DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// RequestTimeout is the deadline callers give every RPC they make with
	// the client; default DefaultRequestTimeout. New does not apply it: a
	// clientv3.Client has no per-call default deadline.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// KeepAliveTime is the idle time after which the client pings the
	// server; KeepAliveTimeout is how long it waits for the answer before
	// closing the connection. Defaults DefaultKeepAliveTime and
	// DefaultKeepAliveTimeout.
	KeepAliveTime    time.Duration `yaml:"keepalive_time"`
	KeepAliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// Username and Password authenticate against etcd's auth; set both or
	// neither. They are not needed for client-certificate authentication.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS configures https:// and unixs:// endpoints.
	TLS TLSConfig `yaml:"tls"`
}

// TLSConfig configures the client side of TLS. An https endpoint with an
// empty TLSConfig verifies the server against the system's roots.
type TLSConfig struct {
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates; empty means the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the PEM client certificate (chain) and its
	// key, for servers that require client certificates. Both or neither.
	// They are read once, by New: restart to pick up rotated files.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name the servers' certificates are checked
	// against (by default the endpoint's host).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. For tests only:
	// it defeats the point of TLS.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// enabled reports whether any TLS option is set.
func (t TLSConfig) enabled() bool { return t != TLSConfig{} }

// EnsureDefaults fills in the zero fields that have defaults.
func (c *Config) EnsureDefaults() {
	setDefault(&c.DialTimeout, DefaultDialTimeout)
	setDefault(&c.RequestTimeout, DefaultRequestTimeout)
	setDefault(&c.KeepAliveTime, DefaultKeepAliveTime)
	setDefault(&c.KeepAliveTimeout, DefaultKeepAliveTimeout)
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

// Validate reports the first unusable option, wrapping ErrInvalidConfig. It
// reads the TLS files to check that they exist and parse. Zero durations are
// accepted (EnsureDefaults replaces them); negative ones are not.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c *Config) validate() error {
	if err := c.validateEndpoints(); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"dial_timeout", c.DialTimeout},
		{"request_timeout", c.RequestTimeout},
		{"keepalive_time", c.KeepAliveTime},
		{"keepalive_timeout", c.KeepAliveTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s is negative (%s)", d.name, d.v)
		}
	}
	if c.Password != "" && c.Username == "" {
		return errors.New("password is set without username")
	}
	if c.Username != "" && c.Password == "" {
		return fmt.Errorf("username %q is set without password", c.Username)
	}
	_, err := c.TLS.build()
	return err
}

// Endpoint transports. An endpoint's transport decides whether the client
// may use TLS on it; see validateEndpoints.
const (
	plainOnly = iota // http://: the client drops TLS for every endpoint
	tlsOnly          // https://, unixs://
	either           // unix://, host:port: TLS exactly when configured
)

// validateEndpoints checks each endpoint's form, then that one transport
// fits them all. clientv3 picks the transport of the whole client from the
// first endpoint, so http:// next to TLS would fail (or silently skip TLS)
// depending on the order.
func (c *Config) validateEndpoints() error {
	if len(c.Endpoints) == 0 {
		return errors.New("endpoints: at least one etcd endpoint is required")
	}
	var plain, secure string // the first endpoint of each kind
	for i, ep := range c.Endpoints {
		kind, err := parseEndpoint(ep)
		if err != nil {
			return fmt.Errorf("endpoints[%d] %q: %w", i, ep, err)
		}
		switch {
		case kind == plainOnly && plain == "":
			plain = ep
		case kind == tlsOnly && secure == "":
			secure = ep
		}
	}
	switch {
	case plain != "" && secure != "":
		return fmt.Errorf("endpoints mix %q and %q: use one transport for all", plain, secure)
	case plain != "" && c.TLS.enabled():
		return fmt.Errorf("tls is set but endpoint %q is plain http: use https://", plain)
	}
	return nil
}

// parseEndpoint checks one endpoint and returns its transport.
func parseEndpoint(ep string) (int, error) {
	if ep == "" {
		return 0, errors.New("empty")
	}
	if strings.TrimSpace(ep) != ep {
		return 0, errors.New("leading or trailing space")
	}
	if scheme, path, ok := strings.Cut(ep, ":"); ok && (scheme == "unix" || scheme == "unixs") {
		if strings.TrimLeft(path, "/") == "" {
			return 0, errors.New("unix socket path is empty")
		}
		if scheme == "unixs" {
			return tlsOnly, nil
		}
		return either, nil
	}
	if !strings.Contains(ep, "://") {
		if err := checkHostPort(ep); err != nil {
			return 0, fmt.Errorf("want http(s)://host:port, unix(s)://path or host:port: %w", err)
		}
		return either, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return 0, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return 0, fmt.Errorf("scheme %q: want http, https, unix or unixs", u.Scheme)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return 0, errors.New("want scheme://host:port with nothing after the port (credentials go in username and password)")
	}
	if err := checkHostPort(u.Host); err != nil {
		return 0, err
	}
	if u.Scheme == "https" {
		return tlsOnly, nil
	}
	return plainOnly, nil
}

// checkHostPort requires a host and a numeric port in 1-65535. A missing
// port is an error rather than gRPC's default of 443: etcd listens on 2379.
func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("%w (etcd's client port is usually 2379)", err)
	}
	if host == "" {
		return errors.New("missing host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 1-65535", port)
	}
	return nil
}

// String formats c with the password redacted, so that a Config printed or
// logged (also as a field of a larger struct) does not leak it.
func (c Config) String() string {
	if c.Password != "" {
		c.Password = "REDACTED"
	}
	type plain Config // no String method: no recursion
	return fmt.Sprintf("%+v", plain(c))
}
