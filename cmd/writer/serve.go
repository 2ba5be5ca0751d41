package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/server"
)

type serveOptions struct {
	dataDir         string
	listen          string
	table           string
	shards          []string
	flushBytes      int64
	flushAge        time.Duration
	leaseTTL        time.Duration
	maxBodyBytes    int64
	shutdownTimeout time.Duration
	logLevel        string
	etcd            etcdclient.Config
	adminListen     string
	configFile      string
	unreadyDelay    time.Duration
	snapshots       SnapshotsConfig
	limits          LimitsConfig
}

func newServe() *cobra.Command {
	o := serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Claim shards and serve HTTP ingest, flush, status, health and metrics until SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd.Flags()); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, newLogger(level))
		},
	}
	f := cmd.Flags()
	def := defaultConfig()
	addConfigFlag(f, &o.configFile)
	f.StringVar(&o.dataDir, "data-dir", def.DataDir, "data directory (WAL, generations, embedded etcd)")
	f.StringVar(&o.listen, "listen", def.Listen, "HTTP listen address (port 0 picks a free port)")
	f.StringVar(&o.adminListen, "admin-listen", def.AdminListen, "address of the admin listener serving /debug/pprof/ (default: none)")
	f.StringVar(&o.table, "table", def.Table, "table name")
	f.StringSliceVar(&o.shards, "shards", def.Shards, "shards to claim and serve")
	f.Int64Var(&o.flushBytes, "flush-bytes", def.FlushBytes, "seal a memtable at this many bytes")
	f.DurationVar(&o.flushAge, "flush-age", def.FlushAge, "seal a memtable once its oldest row is this old (negative: never)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", def.LeaseTTL, "TTL of the writer's etcd lease")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", def.MaxBodyBytes, "largest request body accepted")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "bound on draining requests, flushing and releasing the shards at SIGTERM")
	f.StringVar(&o.logLevel, "log-level", def.LogLevel, "log level: debug, info, warn or error")
	f.DurationVar(&o.unreadyDelay, "unready-delay", def.UnreadyDelay, "at SIGTERM, answer /readyz (and ingest) 503 this long before closing the listener: "+
		"set it to what a load balancer needs to see the writer unready, so that it stops routing here before connections are refused")
	addEtcdFlags(f, &o.etcd)
	addSnapshotFlags(f, &o.snapshots)
	addLimitFlags(f, &o.limits)
	return cmd
}

// run serves until ctx ends, then shuts down in order: unready (for
// --unready-delay, with the listener still open), stop taking requests,
// close the host (flush, release the leases), close the snapshot store and
// etcd.
func (o *serveOptions) run(ctx context.Context, log *slog.Logger) (err error) {
	// The data dir's lock, the metadata store and the snapshot store first:
	// a second serve on a data dir in use, or one whose snapshot store does
	// not answer, fails here, before it opens a port that probes would find.
	meta, err := openMetadata(ctx, o.dataDir, o.etcd, dirUse{command: "serve", writes: true}, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := meta.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close etcd: %w", cerr))
		}
	}()
	snaps, closeSnaps, err := openSnapshots(ctx, o.snapshots, meta, log)
	if err != nil {
		return err
	}
	defer closeSnaps()
	log.Info("snapshot store open", o.snapshotsAttrs()...)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	addr := ln.Addr().String()
	admin, err := startAdmin(o.adminListen, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer admin.Close()
	registry := prometheus.NewRegistry()
	if err := meta.registerMetrics(registry); err != nil {
		ln.Close()
		return err
	}
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hostOpts := engine.Options{
		DataDir: o.dataDir, Table: o.table, Etcd: meta.client, Logger: log, RequestTimeout: meta.requestTimeout,
		Address: "http://" + addr, Snapshots: snaps, LeaseTTL: o.leaseTTL,
		FlushBytes: o.flushBytes, FlushAge: o.flushAge, MemoryBudget: max(512<<20, 2*o.flushBytes),
		Registerer: registry,
	}
	o.limits.apply(&hostOpts)
	host, err := engine.NewHost(hostOpts)
	if err != nil {
		ln.Close()
		return err
	}
	srv := server.New(server.Options{Host: host, Shards: o.shards, Logger: log, Registry: registry, MaxBodyBytes: o.maxBodyBytes})
	httpSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }() // /livez and /readyz answer while the shards replay
	log.Info("http server started; ready once the shards are claimed and replayed", "addr", addr)

	var runErr error
	opened := true
	for _, name := range o.shards {
		start := time.Now()
		sh, err := host.Open(ctx, name)
		if err != nil {
			if ctx.Err() == nil { // else a signal came during replay: shut down cleanly
				runErr = fmt.Errorf("open shard %s: %w", name, err)
			}
			opened = false
			break
		}
		log.Info("shard open", "shard", name, "epoch", sh.Epoch(), "took", time.Since(start).Round(time.Millisecond).String())
	}
	if opened {
		srv.SetReady(true)
		log.Info("listening", "addr", addr, "shards", o.shards, "data_dir", o.dataDir)
		select {
		case <-ctx.Done():
			log.Info("shutting down", "timeout", o.shutdownTimeout.String())
		case err := <-served:
			runErr = fmt.Errorf("http server: %w", err)
		}
	}

	srv.SetReady(false)
	if opened && runErr == nil && o.unreadyDelay > 0 {
		log.Info("unready; the listener closes after the unready delay", "delay", o.unreadyDelay.String())
		select {
		case <-time.After(o.unreadyDelay):
		case err := <-served:
			runErr = fmt.Errorf("http server: %w", err)
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop http server: %w", err))
	}
	if err := host.Close(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("close shards: %w", err))
	}
	if runErr == nil {
		log.Info("stopped")
	}
	return runErr
}

// snapshotsAttrs describe the snapshot store for the log.
func (o *serveOptions) snapshotsAttrs() []any {
	if o.snapshots.Backend != backendCassandra {
		return []any{"backend", backendEtcd, "prefix", snapshotPrefix}
	}
	c := o.snapshots.Cassandra
	return []any{"backend", backendCassandra, "hosts", c.Hosts, "keyspace", c.Keyspace, "table", c.Table,
		"consistency", c.Consistency, "serial_consistency", c.SerialConsistency}
}
