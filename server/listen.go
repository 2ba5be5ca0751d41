package server

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// A connection costs a descriptor and some 20–30 KiB of buffers and
// goroutine stack for as long as the client keeps it, whether it sends
// anything or not. So every phase of a request has a deadline, idle
// keep-alives end, and a listener accepts a bounded number of connections
// at once: a further client waits in the kernel's accept queue until one
// ends, which the deadlines bound. Probes on the ingest listener wait in
// that queue too; Options.HTTP.MaxConns is meant to be well above the
// producers' connections, and a probe listener (ProbeServer) takes probes
// out of it altogether.

// Defaults of HTTPOptions.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyReadTimeout   = time.Minute
	// DefaultWriteTimeout is BodyReadTimeout and a minute for the
	// append, with the default BodyReadTimeout; set it with a longer one.
	DefaultWriteTimeout = 2 * time.Minute
	// DefaultIdleTimeout is above the 90 s after which Go's transport
	// drops an idle connection itself, so that a Go producer closes first
	// and never sends on a connection the server is closing.
	DefaultIdleTimeout    = 2 * time.Minute
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxConns       = 1024
)

// MaxProbeConns bounds the connections of a probe listener.
const MaxProbeConns = 32

// HTTPOptions bound the connections of the listeners the server is served
// on. Zero fields take the defaults above.
type HTTPOptions struct {
	// ReadHeaderTimeout bounds reading a request's headers, from its
	// first byte (a new connection: from its accept).
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds reading an ingest body, from the request's
	// admission; a body cut by it is answered 408.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers (ingest: from its
	// admission) to its answer written; it covers reading the body and
	// the append, so it must exceed BodyReadTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers; more is answered 431.
	MaxHeaderBytes int
	// MaxConns bounds the connections a listener serves at once.
	MaxConns int
}

func (o *HTTPOptions) ensureDefaults() {
	setDefault(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDefault(&o.BodyReadTimeout, DefaultBodyReadTimeout)
	setDefault(&o.WriteTimeout, DefaultWriteTimeout)
	setDefault(&o.IdleTimeout, DefaultIdleTimeout)
	setDefault(&o.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&o.MaxConns, DefaultMaxConns)
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// HTTPServer returns the http.Server of the ingest listener: every
// endpoint, with the timeouts of Options.HTTP. Serve it on Listener(ln).
func (s *Server) HTTPServer() *http.Server { return s.httpServer(s, s.conns) }

// ProbeServer returns the http.Server of an optional probe listener:
// /livez, /readyz and /metrics only, none of them behind a token, with the
// timeouts of Options.HTTP. Serve it on ProbeListener(ln): its connections
// are not counted against the ingest listener's, so that probes answer
// however many clients hold the ingest listener.
func (s *Server) ProbeServer() *http.Server { return s.httpServer(s.http.wrap(s.probes), s.probeConns) }

func (s *Server) httpServer(h http.Handler, conns *connCount) *http.Server {
	o := s.opts.HTTP
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		// ReadTimeout bounds the bodies of the endpoints that read none
		// (what net/http drains after the handler); ingest sets its own.
		ReadTimeout:    o.ReadHeaderTimeout + o.BodyReadTimeout,
		WriteTimeout:   o.WriteTimeout,
		IdleTimeout:    o.IdleTimeout,
		MaxHeaderBytes: o.MaxHeaderBytes,
		ConnState:      conns.track,
		ErrorLog:       slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
	}
}

// Listener bounds ln to Options.HTTP.MaxConns connections at once.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, s.opts.HTTP.MaxConns)
}

// ProbeListener bounds ln to the few connections probes need.
func ProbeListener(ln net.Listener) net.Listener { return netutil.LimitListener(ln, MaxProbeConns) }

// connCount counts the open connections of a listener.
type connCount struct {
	mu         sync.Mutex
	open, peak int
	gauge      prometheus.Gauge
}

// newConnCounts returns the counts of the ingest and the probe listener.
func newConnCounts(reg prometheus.Registerer) (ingest, probes *connCount) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "writer_http_open_connections", Help: "HTTP connections open, by listener (ingest or probe).",
	}, []string{"listener"})
	reg.MustRegister(g)
	return &connCount{gauge: g.WithLabelValues("ingest")}, &connCount{gauge: g.WithLabelValues("probe")}
}

func (c *connCount) track(_ net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.open++
		c.peak = max(c.peak, c.open)
	case http.StateClosed, http.StateHijacked:
		c.open--
	default:
		return
	}
	c.gauge.Set(float64(c.open))
}

// Conns returns the connections of the ingest listener open now and the
// most open at once.
func (s *Server) Conns() (open, peak int) {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.conns.open, s.conns.peak
}
