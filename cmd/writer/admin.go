package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// adminServer serves the profiling endpoints on a listener of their own.
// pprof exposes the process's memory and command line and can make it burn
// CPU on request, so it is opt-in and never on the ingest listener, where
// producers connect. Importing net/http/pprof also registers its handlers
// on http.DefaultServeMux; nothing in the writer serves that mux.
type adminServer struct {
	srv  *http.Server
	addr string
	done chan error
}

// startAdmin serves /debug/pprof/ at addr, over TLS with tlsCfg (http.tls,
// client certificates included); an empty addr serves nothing and returns
// a nil server, whose methods do nothing.
func startAdmin(addr string, tlsCfg *tls.Config, log *slog.Logger) (*adminServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a := &adminServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	go func() { a.done <- a.srv.Serve(ln) }()
	log.Info("admin listening", "addr", a.addr, "paths", "/debug/pprof/", "scheme", scheme(tlsCfg))
	return a, nil
}

// Close stops the listener at once: a profile in progress is cut short
// rather than holding up the exit.
func (a *adminServer) Close() error {
	if a == nil {
		return nil
	}
	err := a.srv.Close()
	if serr := <-a.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
