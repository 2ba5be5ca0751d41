package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/spf13/pflag"
	"golang.org/x/net/netutil"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/catalog/rest"
	"github.com/rollwal/rollwal/vfs"
)

// IcebergConfig is the iceberg: section.
type IcebergConfig struct {
	// RESTListen, when set, serves a read-only Iceberg REST catalog of the
	// table's base (namespace rollwal, table <table>) on a listener of its
	// own; see docs/iceberg-rest.md. With http.admin_token_file set, it
	// needs an admin token.
	RESTListen string `yaml:"rest_listen"`
}

// maxRESTConns bounds the REST listener's connections, and so the
// requests it serves at once (each reads etcd and a metadata file).
const maxRESTConns = 64

// msgIcebergREST is logged, with addr, once the REST catalog listens.
const msgIcebergREST = "iceberg REST catalog listening"

var icebergSettings = []setting{
	{"iceberg.rest_listen", "iceberg-rest-listen", func(d, s *Config) { d.Iceberg.RESTListen = s.Iceberg.RESTListen }},
}

func addIcebergFlags(f *pflag.FlagSet, c *IcebergConfig) {
	f.StringVar(&c.RESTListen, "iceberg-rest-listen", "", "address serving a read-only Iceberg REST catalog of the table's base (default: none; "+
		"it needs an admin token when --admin-token-file is set)")
}

// validateIceberg checks iceberg.rest_listen: an address, and not one of
// the other listeners'.
func (c *Config) validateIceberg() error {
	p := c.Iceberg.RESTListen
	if p == "" {
		return nil
	}
	if err := checkAddress(p); err != nil {
		return badValue("iceberg.rest_listen", p, "%v", err)
	}
	for _, o := range []struct{ key, addr string }{{"listen", c.Listen}, {"admin_listen", c.AdminListen}, {"http.probe_listen", c.HTTP.ProbeListen}} {
		if sameListener(p, o.addr) {
			return badValue("iceberg.rest_listen", p, "is also %s (%q): the Iceberg REST catalog needs a listener of its own", o.key, o.addr)
		}
	}
	return nil
}

// sameListener reports whether two checked addresses would bind the same
// port: the same port (not 0) on the same host, or on a host and a
// wildcard.
func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// conns is what the REST listener keeps of the descriptor limit.
func (c IcebergConfig) conns() int {
	if c.RESTListen == "" {
		return 0
	}
	return maxRESTConns
}

// listenIcebergREST listens on iceberg.rest_listen; nil when it is off.
func (o *serveOptions) listenIcebergREST() (net.Listener, error) {
	if o.iceberg.RESTListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.iceberg.RESTListen)
	if err != nil {
		return nil, fmt.Errorf("iceberg.rest_listen %s: %w", o.iceberg.RESTListen, err)
	}
	return ln, nil
}

// icebergRESTServer is the http.Server of the REST catalog over the base
// catalogs of the serve's tables in its etcd; nil when it is off. The table
// need not exist yet: until a merge creates it, the catalog answers 404s.
// Its timeouts and header limit are the http: section's.
func (o *serveOptions) icebergRESTServer(meta *metadata, log *slog.Logger) (*http.Server, error) {
	if o.iceberg.RESTListen == "" {
		return nil, nil
	}
	tokens, err := readTokens(o.http.AdminTokenFile)
	if err != nil {
		return nil, fmt.Errorf("http.admin_token_file %s: %w", o.http.AdminTokenFile, err)
	}
	log = log.With("listener", "iceberg_rest")
	cats := rest.Tables{}
	cfg := o.config()
	for _, t := range cfg.tables() {
		cat, err := catalog.New(catalog.Options{Client: meta.client, Prefix: catalog.BasePrefix(metaPrefix, t.Name), FS: vfs.Default,
			RequestTimeout: meta.requestTimeout, Logger: log})
		if err != nil {
			return nil, err
		}
		cats[t.Name] = cat
	}
	if len(tokens) == 0 {
		log.Warn("the Iceberg REST catalog needs no token: set http.admin_token_file to require one", "addr", o.iceberg.RESTListen)
	}
	h := o.http
	return &http.Server{
		Handler:           rest.NewHandler(cats, rest.Options{Tokens: tokens, Logger: log}),
		ReadHeaderTimeout: h.ReadHeaderTimeout,
		ReadTimeout:       h.ReadHeaderTimeout + h.BodyReadTimeout, // bodies are never read; a refused one is drained this long at most
		WriteTimeout:      h.WriteTimeout,
		IdleTimeout:       h.IdleTimeout,
		MaxHeaderBytes:    h.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, nil
}

// serveIcebergREST serves rs on ln, at most maxRESTConns connections at
// once, until drainHTTP shuts it down; over TLS with tlsCfg (http.tls,
// client certificates included). Its failure is logged, not fatal: ingest
// goes on without the readers' catalog.
func serveIcebergREST(rs *http.Server, ln net.Listener, tlsCfg *tls.Config, log *slog.Logger) {
	log.Info(msgIcebergREST, "addr", ln.Addr().String(), "scheme", scheme(tlsCfg))
	lim := netutil.LimitListener(ln, maxRESTConns)
	if tlsCfg != nil {
		lim = tls.NewListener(lim, tlsCfg)
	}
	go func() {
		if err := rs.Serve(lim); !errors.Is(err, http.ErrServerClosed) {
			log.Error("iceberg REST catalog stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

func init() {
	settings = append(settings, icebergSettings...)
	sections["main.IcebergConfig"] = "iceberg"
}
