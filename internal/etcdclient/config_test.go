package etcdclient

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnsureDefaults(t *testing.T) {
	var c Config
	c.EnsureDefaults()
	want := Config{DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second,
		KeepAliveTime: 10 * time.Second, KeepAliveTimeout: 3 * time.Second}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("defaults: %v, want %v", c, want)
	}
	set := Config{DialTimeout: 1, RequestTimeout: 2, KeepAliveTime: 3, KeepAliveTimeout: 4}
	c = set
	c.EnsureDefaults()
	if fmt.Sprint(c) != fmt.Sprint(set) {
		t.Errorf("EnsureDefaults changed set fields: %v, want %v", c, set)
	}
}

func TestValidate(t *testing.T) {
	ca := newCA(t, "validate")
	cert, key := ca.issueClient(t, "client")
	_, otherKey := ca.issueClient(t, "other")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := writeFile(t, "not.pem", "hello\n")
	keyAsCA := key // a PEM file whose block is not a certificate
	badCert := writeFile(t, "bad-cert.pem", "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n")

	eps := func(e ...string) Config { return Config{Endpoints: e} }
	https := func(tc TLSConfig) Config { return Config{Endpoints: []string{"https://127.0.0.1:2379"}, TLS: tc} }
	with := func(f func(*Config)) Config {
		c := eps("http://127.0.0.1:2379")
		f(&c)
		return c
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for a valid config
	}{
		// Valid.
		{"http", eps("http://127.0.0.1:2379"), ""},
		{"http trailing slash", eps("http://127.0.0.1:2379/"), ""},
		{"three https", eps("https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://[::1]:2379"), ""},
		{"host:port", eps("127.0.0.1:2379", "localhost:2379"), ""},
		{"unix", eps("unix:///run/etcd.sock"), ""},
		{"unix relative", eps("unix:etcd.sock"), ""},
		{"unixs", eps("unixs:///run/etcd.sock"), ""},
		{"https without ca uses system roots", https(TLSConfig{}), ""},
		{"https with ca, cert and key", https(TLSConfig{CAFile: ca.CAFile, CertFile: cert, KeyFile: key}), ""},
		{"https with server name", https(TLSConfig{CAFile: ca.CAFile, ServerName: "etcd"}), ""},
		{"https insecure", https(TLSConfig{InsecureSkipVerify: true}), ""},
		{"host:port with tls", Config{Endpoints: []string{"127.0.0.1:2379"}, TLS: TLSConfig{CAFile: ca.CAFile}}, ""},
		{"unix with tls", Config{Endpoints: []string{"unix:///s"}, TLS: TLSConfig{CAFile: ca.CAFile}}, ""},
		{"user and password", with(func(c *Config) { c.Username, c.Password = "u", "p" }), ""},
		{"zero durations", with(func(c *Config) { c.DialTimeout, c.RequestTimeout = 0, 0 }), ""},

		// Endpoints.
		{"no endpoints", Config{}, "endpoints: at least one"},
		{"empty endpoint", eps("http://127.0.0.1:2379", ""), `endpoints[1] "": empty`},
		{"space", eps(" http://127.0.0.1:2379"), "leading or trailing space"},
		{"bad scheme", eps("ftp://127.0.0.1:2379"), `endpoints[0] "ftp://127.0.0.1:2379": scheme "ftp"`},
		{"url without port", eps("https://etcd.example"), `"https://etcd.example": address etcd.example: missing port`},
		{"host without port", eps("etcd.example"), `endpoints[0] "etcd.example": want http(s)://host:port`},
		{"url without host", eps("http://:2379"), "missing host"},
		{"port not a number", eps("127.0.0.1:http"), `port "http" is not a number`},
		{"url port not a number", eps("http://127.0.0.1:http"), `invalid port ":http"`},
		{"port out of range", eps("127.0.0.1:70000"), `port "70000"`},
		{"port zero", eps("127.0.0.1:0"), `port "0"`},
		{"path", eps("http://127.0.0.1:2379/v3"), "nothing after the port"},
		{"query", eps("http://127.0.0.1:2379?x=1"), "nothing after the port"},
		{"credentials in url", eps("http://u:p@127.0.0.1:2379"), "credentials go in username and password"},
		{"bad url", eps("http://[::1:2379"), `endpoints[0] "http://[::1:2379"`},
		{"empty unix path", eps("unix://"), "unix socket path is empty"},
		{"mixed http and https", eps("http://127.0.0.1:1", "https://127.0.0.1:2"),
			`endpoints mix "http://127.0.0.1:1" and "https://127.0.0.1:2"`},
		{"mixed http and unixs", eps("unixs:///s", "http://127.0.0.1:1"), "endpoints mix"},
		{"tls with http", Config{Endpoints: []string{"http://127.0.0.1:2379"}, TLS: TLSConfig{CAFile: ca.CAFile}},
			`tls is set but endpoint "http://127.0.0.1:2379" is plain http`},

		// Timeouts.
		{"negative dial_timeout", with(func(c *Config) { c.DialTimeout = -time.Second }), "dial_timeout is negative (-1s)"},
		{"negative request_timeout", with(func(c *Config) { c.RequestTimeout = -1 }), "request_timeout is negative"},
		{"negative keepalive_time", with(func(c *Config) { c.KeepAliveTime = -1 }), "keepalive_time is negative"},
		{"negative keepalive_timeout", with(func(c *Config) { c.KeepAliveTimeout = -1 }), "keepalive_timeout is negative"},

		// Credentials.
		{"password without username", with(func(c *Config) { c.Password = "p" }), "password is set without username"},
		{"username without password", with(func(c *Config) { c.Username = "u" }), `username "u" is set without password`},

		// TLS files.
		{"cert without key", https(TLSConfig{CertFile: cert}), "tls.cert_file " + cert + " is set without tls.key_file"},
		{"key without cert", https(TLSConfig{KeyFile: key}), "tls.key_file " + key + " is set without tls.cert_file"},
		{"missing ca", https(TLSConfig{CAFile: missing}), "tls.ca_file: open " + missing + ": no such file"},
		{"ca not pem", https(TLSConfig{CAFile: notPEM}), "tls.ca_file: " + notPEM + ": no PEM certificate found"},
		{"ca is a key", https(TLSConfig{CAFile: keyAsCA}), "tls.ca_file: " + keyAsCA + `: PEM block 1 is "EC PRIVATE KEY"`},
		{"ca does not parse", https(TLSConfig{CAFile: badCert}), "tls.ca_file: " + badCert + ": PEM block 1: x509:"},
		{"missing cert", https(TLSConfig{CertFile: missing, KeyFile: key}), "open " + missing + ": no such file"},
		{"missing key", https(TLSConfig{CertFile: cert, KeyFile: missing}), "tls.key_file " + missing},
		{"cert not pem", https(TLSConfig{CertFile: notPEM, KeyFile: key}),
			"tls.cert_file " + notPEM + ", tls.key_file " + key + ": tls: failed to find any PEM data in certificate input"},
		{"key not pem", https(TLSConfig{CertFile: cert, KeyFile: notPEM}), "failed to find any PEM data in key input"},
		{"key of another cert", https(TLSConfig{CertFile: cert, KeyFile: otherKey}), "private key does not match public key"},
		{"insecure with ca", https(TLSConfig{CAFile: ca.CAFile, InsecureSkipVerify: true}),
			"tls.insecure_skip_verify is set together with tls.ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate: %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestConfigStringRedactsPassword(t *testing.T) {
	c := Config{Endpoints: []string{"http://127.0.0.1:2379"}, Username: "root", Password: "s3cret"}
	type outer struct{ Etcd Config }
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", outer{c}), fmt.Sprintf("%v", &c)} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "REDACTED") || !strings.Contains(s, "root") {
			t.Errorf("%s: want the password redacted, the rest shown", s)
		}
	}
	if c.Password != "s3cret" {
		t.Error("String changed the config")
	}
}
