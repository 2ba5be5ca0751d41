package main

import (
	"context"
	"crypto/tls"
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

	"github.com/rollwal/rollwal/catalog/rest"
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/schema"
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
	memoryBudget    int64
	http            HTTPConfig
	iceberg         IcebergConfig
	columns         []schema.Column
	tables          []TableConfig
	storage         StorageConfig
	wal             WALConfig
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
	listVar(f, &o.shards, "shards", def.Shards, "shards to claim and serve")
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
	addMemoryFlag(f, &o.memoryBudget)
	addHTTPFlags(f, &o.http)
	addIcebergFlags(f, &o.iceberg)
	return cmd
}

// run serves until ctx ends, then shuts down in order: unready (for
// --unready-delay, with the listener still open), stop taking requests,
// close the host (flush, release the leases), close the snapshot store and
// etcd.
func (o *serveOptions) run(ctx context.Context, log *slog.Logger) (err error) {
	setMemoryLimit(log, o.config())            // first, so that the embedded etcd starts under it too (memory.go)
	creds, err := loadCredentials(o.http, log) // tokens and certificates, again at each SIGHUP (reload.go)
	if err != nil {
		return err
	}
	defer creds.catchHangup()()
	tlsCfg := creds.listenerTLS() // nil unless http.tls.cert_file
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
	restSrv, err := o.icebergRESTServer(meta, log) // nil unless iceberg.rest_listen (icebergrest.go)
	if err != nil {
		return err
	}
	lns, err := o.openListeners()
	if err != nil {
		return err
	}
	addr := lns.ingest.Addr().String()
	admin, err := startAdmin(o.adminListen, tlsCfg, log)
	if err != nil {
		lns.close()
		return err
	}
	defer admin.Close()
	registry := prometheus.NewRegistry()
	if err := meta.registerMetrics(registry); err != nil {
		lns.close()
		return err
	}
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(readVersion()))
	if err := creds.register(registry); err != nil {
		lns.close()
		return err
	}
	cfg := o.config()
	srvOpts := server.Options{Logger: log, Registry: registry, MaxBodyBytes: o.maxBodyBytes}
	if err := o.serverOptions(&srvOpts, cfg.memoryBudget(), log); err != nil {
		lns.close()
		return err
	}
	objstores := newStores(registry, log) // one Store per distinct storage: section
	for _, t := range cfg.tables() {
		hostOpts := cfg.tableOptions(t) // what config check validated (engineopts.go)
		if hostOpts.Store, err = objstores.open(ctx, cfg.storageKey(t), cfg.storageFor(t)); err != nil {
			lns.close()
			closeHosts(context.Background(), srvOpts.Tables, log)
			return err
		}
		hostOpts.Etcd, hostOpts.Logger, hostOpts.RequestTimeout = meta.client, log.With("table", t.Name), meta.requestTimeout
		hostOpts.Address, hostOpts.Snapshots = scheme(tlsCfg)+"://"+addr, snaps
		hostOpts.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"table": t.Name}, registry)
		if hostOpts.Schema, err = tableSchema(ctx, meta.client, t.Name, mustSchema(t.Columns)); err != nil {
			lns.close()
			closeHosts(context.Background(), srvOpts.Tables, log)
			return err
		}
		host, err := engine.NewHost(hostOpts)
		if err != nil {
			lns.close()
			closeHosts(context.Background(), srvOpts.Tables, log)
			return err
		}
		srvOpts.Tables = append(srvOpts.Tables, server.Table{Name: t.Name, Host: host, Schema: hostOpts.Schema, Shards: t.Shards})
	}
	if err := srvOpts.Validate(); err != nil {
		lns.close()
		closeHosts(context.Background(), srvOpts.Tables, log)
		return err
	}
	srv := server.New(srvOpts)
	servers, served := lns.serve(srv, tlsCfg) // /livez and /readyz answer while the shards replay
	creds.srv = srv
	if restSrv != nil {
		serveIcebergREST(restSrv, lns.rest, tlsCfg, log)
		servers = append(servers, restSrv)
		creds.rest = restSrv.Handler.(*rest.Handler)
	}
	creds.reloadOnHangup(ctx)
	log.Info("http server started; ready once the shards are claimed and replayed", "addr", addr, "probe_addr", lns.probeAddr(),
		"scheme", scheme(tlsCfg), "client_certs", creds.clientCerts())

	runErr := openShards(ctx, srvOpts.Tables, log)
	opened := runErr == nil && ctx.Err() == nil
	if opened {
		srv.SetReady(true)
		log.Info("listening", "addr", addr, "tables", tableNames(srvOpts.Tables), "shards", o.shards, "data_dir", o.dataDir)
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
	drainHTTP(servers, o.shutdownTimeout/2, log)
	if err := closeHosts(shutdownCtx, srvOpts.Tables, log); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if runErr == nil {
		log.Info("stopped")
	}
	return runErr
}

// openShards claims and opens every table's shards, in order. A signal
// during a replay (ctx ended) is no error: serve shuts down cleanly.
func openShards(ctx context.Context, tables []server.Table, log *slog.Logger) error {
	for _, t := range tables {
		for _, name := range t.Shards {
			start := time.Now()
			sh, err := t.Host.Open(ctx, name)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if len(tables) > 1 {
					return fmt.Errorf("table %s: open shard %s: %w", t.Name, name, err)
				}
				return fmt.Errorf("open shard %s: %w", name, err)
			}
			log.Info("shard open", "table", t.Name, "shard", name, "epoch", sh.Epoch(), "took", time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// closeHosts closes every table's host (flush, release the leases).
func closeHosts(ctx context.Context, tables []server.Table, log *slog.Logger) error {
	var errs []error
	for _, t := range tables {
		if err := t.Host.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("table %s: close shards: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}

func tableNames(tables []server.Table) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.Name
	}
	return out
}

// msgCutConnections is logged when the drain at shutdown ran out of time.
const msgCutConnections = "connections still open after the drain are closed"

// drainHTTP stops the HTTP servers: no new connections, and the requests in
// flight finish, for at most d. Past that the connections still open are
// closed: a client trickling its body (or a stuck one) must not hold the
// shards' flush and release, which the rest of the shutdown timeout is for.
// A request cut so never got an acknowledgement, so nothing is lost.
func drainHTTP(servers []*http.Server, d time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil {
			log.Warn(msgCutConnections, "drain", d.String(), "err", err)
			hs.Close()
		}
	}
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

// listeners are serve's HTTP listeners: ingest (every endpoint) and, when
// http.probe_listen is set, probes; when iceberg.rest_listen is, the
// Iceberg REST catalog.
type listeners struct {
	ingest, probes, rest net.Listener
}

// openListeners listens on --listen, http.probe_listen and iceberg.rest_listen.
func (o *serveOptions) openListeners() (*listeners, error) {
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	lns := &listeners{ingest: ln}
	if lns.rest, err = o.listenIcebergREST(); err != nil {
		ln.Close()
		return nil, err
	}
	if o.http.ProbeListen == "" {
		return lns, nil
	}
	if lns.probes, err = net.Listen("tcp", o.http.ProbeListen); err != nil {
		lns.close()
		return nil, fmt.Errorf("http.probe_listen %s: %w", o.http.ProbeListen, err)
	}
	return lns, nil
}

// scheme is the URL scheme of the TLS listeners: https with tlsCfg.
func scheme(tlsCfg *tls.Config) string {
	if tlsCfg != nil {
		return "https"
	}
	return "http"
}

func (l *listeners) close() {
	l.ingest.Close()
	if l.probes != nil {
		l.probes.Close()
	}
	if l.rest != nil {
		l.rest.Close()
	}
}

func (l *listeners) probeAddr() string {
	if l.probes == nil {
		return ""
	}
	return l.probes.Addr().String()
}

// serve serves srv on the listeners, each with its connection limit; the
// channel gets the first error of any. With tlsCfg the ingest listener
// serves TLS (a connection's handshake, bounded by the header timeout,
// takes one of its places); the probe listener always serves plain HTTP,
// which kubelet's and load balancers' HTTP probes speak.
func (l *listeners) serve(srv *server.Server, tlsCfg *tls.Config) ([]*http.Server, <-chan error) {
	served := make(chan error, 2)
	hs := srv.HTTPServer()
	ingest := srv.Listener(l.ingest)
	if tlsCfg != nil {
		ingest = tls.NewListener(ingest, tlsCfg)
	}
	go func() { served <- hs.Serve(ingest) }()
	servers := []*http.Server{hs}
	if l.probes != nil {
		ps := srv.ProbeServer()
		go func() { served <- ps.Serve(server.ProbeListener(l.probes)) }()
		servers = append(servers, ps)
	}
	return servers, served
}

// serverOptions sets the http: section on the server's options: the
// connection limit fitted to the descriptor limit, the in-flight limits
// from the memory budget, the tokens read from their files.
func (o *serveOptions) serverOptions(so *server.Options, budget int64, log *slog.Logger) error {
	conns, err := o.http.connLimitKeeping(len(o.shards), o.iceberg.conns())
	if err != nil {
		return err
	}
	if conns < o.http.MaxConns {
		log.Warn("connection limit lowered to leave descriptors for files", "max_conns", o.http.MaxConns, "limit", conns)
	}
	return o.http.apply(so, budget, conns)
}
