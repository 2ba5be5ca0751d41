package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/catalog/rest"
	"github.com/rollwal/rollwal/server"
)

// credentials are serve's bearer tokens and TLS certificate, read from
// their files at start and again at every SIGHUP, so that a writer that
// runs for months rotates them without a restart (and without its
// replay). A reload takes all of them or none: a file that does not load
// leaves every credential as it was, and says which file and why. Which
// credentials exist is fixed at start (the files are named by the
// configuration): a reload rotates tokens and certificates, it never
// turns a requirement on or off.
type credentials struct {
	http HTTPConfig
	log  *slog.Logger
	tls  atomic.Pointer[tls.Config] // nil without http.tls

	// Set once serve has built them; nil when absent.
	srv  *server.Server
	rest *rest.Handler

	reloads  *prometheus.CounterVec
	notAfter prometheus.Gauge
	hup      chan os.Signal
}

// loadCredentials reads the TLS files for the listeners serve opens
// first; the tokens follow in the server's options (HTTPConfig.apply).
func loadCredentials(h HTTPConfig, log *slog.Logger) (*credentials, error) {
	c := &credentials{http: h, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "writer_credentials_reloads_total",
			Help: "Reloads of the token files and the TLS certificate at SIGHUP, by result (ok, failed: nothing changed)."}, []string{"result"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{Name: "writer_tls_certificate_expiry_timestamp_seconds",
			Help: "When the certificate the TLS listeners present expires (Unix seconds); 0 without http.tls."}),
	}
	cfg, err := h.TLS.build()
	if err != nil {
		return nil, err
	}
	c.setTLS(cfg)
	return c, nil
}

func (c *credentials) setTLS(cfg *tls.Config) {
	if cfg == nil {
		return
	}
	c.tls.Store(cfg)
	if leaf := cfg.Certificates[0].Leaf; leaf != nil {
		c.notAfter.Set(float64(leaf.NotAfter.Unix()))
	}
}

// listenerTLS is the tls.Config of serve's TLS listeners: each handshake
// takes the certificate and client CAs current at that moment. nil
// without http.tls.
func (c *credentials) listenerTLS() *tls.Config {
	if c.tls.Load() == nil {
		return nil
	}
	return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return c.tls.Load(), nil }}
}

// clientCerts says whether the listeners require client certificates.
func (c *credentials) clientCerts() bool {
	cfg := c.tls.Load()
	return cfg != nil && cfg.ClientAuth != tls.NoClientCert
}

func (c *credentials) register(r prometheus.Registerer) error {
	for _, m := range []prometheus.Collector{c.reloads, c.notAfter} {
		if err := r.Register(m); err != nil {
			return err
		}
	}
	c.reloads.WithLabelValues("ok")
	c.reloads.WithLabelValues("failed")
	return nil
}

// reload reads every credential file again and swaps them in together;
// on any error it changes nothing.
func (c *credentials) reload() error {
	ingest, err := readTokens(c.http.IngestTokenFile)
	if err != nil {
		return fmt.Errorf("http.ingest_token_file %s: %w", c.http.IngestTokenFile, err)
	}
	admin, err := readTokens(c.http.AdminTokenFile)
	if err != nil {
		return fmt.Errorf("http.admin_token_file %s: %w", c.http.AdminTokenFile, err)
	}
	cfg, err := c.http.TLS.build()
	if err != nil {
		return err
	}
	if c.rest != nil {
		if err := c.rest.SetTokens(admin); err != nil {
			return fmt.Errorf("http.admin_token_file %s: %w", c.http.AdminTokenFile, err)
		}
	}
	if c.srv != nil {
		c.srv.SetTokens(ingest, admin)
	}
	c.setTLS(cfg)
	attrs := []any{"ingest_tokens", len(ingest), "admin_tokens", len(admin)}
	if cfg != nil && cfg.Certificates[0].Leaf != nil {
		attrs = append(attrs, "cert_expires", cfg.Certificates[0].Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.log.Info(msgCredentialsReloaded, attrs...)
	return nil
}

const (
	msgCredentialsReloaded = "credentials reloaded"
	msgCredentialsKept     = "credentials not reloaded; the previous ones stay in use"
)

// catchHangup takes SIGHUP from the start of serve, which would otherwise
// end the process (Go's default); one that comes before reloadOnHangup
// waits for it. stop gives SIGHUP back.
func (c *credentials) catchHangup() (stop func()) {
	c.hup = make(chan os.Signal, 1)
	signal.Notify(c.hup, syscall.SIGHUP)
	return func() { signal.Stop(c.hup) }
}

// reloadOnHangup reloads the credentials at every SIGHUP until ctx ends.
// It starts once srv and rest are set, which it reads.
func (c *credentials) reloadOnHangup(ctx context.Context) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.hup:
				if err := c.reload(); err != nil {
					c.reloads.WithLabelValues("failed").Inc()
					c.log.Error(msgCredentialsKept, "err", err)
					continue
				}
				c.reloads.WithLabelValues("ok").Inc()
			}
		}
	}()
}
