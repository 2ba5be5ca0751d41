package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Defaults for Options.
const (
	DefaultName         = "rollwal"
	DefaultStartTimeout = 30 * time.Second
	DefaultCloseTimeout = 10 * time.Second
	// DefaultQuotaBytes is etcd's own default backend quota: past it etcd
	// raises the NOSPACE alarm and refuses every write.
	DefaultQuotaBytes = 2 << 30
	// DefaultCompactionRetention is how many revisions compaction keeps.
	DefaultCompactionRetention = 1000
	// DefaultMaintenanceInterval is how often the maintenance loop reads
	// the database's size and compacts, defragments or disarms.
	DefaultMaintenanceInterval = 10 * time.Second
	// DefaultDefragFloorBytes is the database size below which the loop
	// never defragments: under it free space costs nothing that matters
	// against the quota.
	DefaultDefragFloorBytes = 64 << 20
	// maxQuotaBytes is etcd's suggested maximum backend size.
	maxQuotaBytes = 8 << 30
	// probeTimeout bounds the client's first read after the server is ready.
	probeTimeout = 5 * time.Second
)

// Options configure Start. The zero value of every field but Dir is usable.
type Options struct {
	// Dir holds etcd's data (its member/ directory). Required. Starting again
	// on the same Dir recovers the data.
	Dir string
	// Logger receives etcd's error-level log entries; nil logs nothing.
	Logger *slog.Logger
	// Name is the member name, [A-Za-z0-9._-]; default DefaultName. A data
	// dir remembers its member, so keep the name stable across restarts.
	Name string
	// ClientURL optionally fixes the client listener, e.g.
	// "unix:///tmp/x/etcd.sock" or "http://127.0.0.1:23790", so that the
	// endpoint stays the same across restarts. Default: http on 127.0.0.1
	// with a port the kernel picks.
	ClientURL string
	// StartTimeout bounds the wait for the server to become ready (on top of
	// ctx); default DefaultStartTimeout.
	StartTimeout time.Duration
	// CloseTimeout bounds Close; default DefaultCloseTimeout.
	CloseTimeout time.Duration

	// QuotaBytes is the backend quota (etcd's --quota-backend-bytes);
	// default DefaultQuotaBytes, at most 8 GiB.
	QuotaBytes int64
	// CompactionRetention is how many revisions compaction keeps behind the
	// head (revision retention); default DefaultCompactionRetention. A
	// negative value disables compaction altogether: tests only.
	CompactionRetention int64
	// MaintenanceInterval is the period of the maintenance loop (compact,
	// defragment, disarm a NOSPACE alarm, refresh the metrics); default
	// DefaultMaintenanceInterval.
	MaintenanceInterval time.Duration
	// DefragFloorBytes: the loop defragments only a database at least this
	// large of which a quarter or more is free; default
	// DefaultDefragFloorBytes.
	DefragFloorBytes int64
	// Registerer receives the writer_etcd_* metrics; nil registers none
	// (RegisterMetrics can register them later).
	Registerer prometheus.Registerer
	// UnsafeNoFsync turns off etcd's fsyncs: tests only (a crash loses
	// acknowledged metadata writes).
	UnsafeNoFsync bool
}

var memberName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// EnsureDefaults fills in the zero fields that have defaults.
func (o *Options) EnsureDefaults() {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.QuotaBytes == 0 {
		o.QuotaBytes = DefaultQuotaBytes
	}
	if o.CompactionRetention == 0 {
		o.CompactionRetention = DefaultCompactionRetention
	}
	if o.MaintenanceInterval <= 0 {
		o.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if o.DefragFloorBytes <= 0 {
		o.DefragFloorBytes = DefaultDefragFloorBytes
	}
}

// Validate reports the first unusable option.
func (o *Options) Validate() error {
	if o.Dir == "" {
		return errors.New("etcdembed: Options.Dir is required")
	}
	if !memberName.MatchString(o.Name) {
		return fmt.Errorf("etcdembed: Options.Name %q: want 1-128 characters of [A-Za-z0-9._-]", o.Name)
	}
	if o.QuotaBytes < 0 || o.QuotaBytes > maxQuotaBytes {
		return fmt.Errorf("etcdembed: Options.QuotaBytes %d: want 1 to %d bytes (8 GiB)", o.QuotaBytes, int64(maxQuotaBytes))
	}
	if o.ClientURL != "" {
		u, err := url.Parse(o.ClientURL)
		if err != nil {
			return fmt.Errorf("etcdembed: Options.ClientURL: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "unix" {
			return fmt.Errorf("etcdembed: Options.ClientURL %q: scheme must be http or unix", o.ClientURL)
		}
	}
	return nil
}

// Server is a running embedded etcd and the one client made for it.
type Server struct {
	opts      Options
	e         *embed.Etcd
	cli       *clientv3.Client
	endpoints []string
	mute      atomic.Bool // set when Close begins: silences shutdown noise

	maint   maintenance
	metrics *metrics

	closeOnce sync.Once
	closeErr  error
}

// Start starts etcd with data under opts.Dir and returns once it serves
// linearizable reads, or an error (after stopping whatever had started) when
// it fails, ctx ends, or opts.StartTimeout passes.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, metrics: newMetrics()}
	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start etcd in %s: %w", opts.Dir, err)
	}
	s.e = e
	if err := s.open(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if opts.Registerer != nil {
		if err := s.RegisterMetrics(opts.Registerer); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	s.startMaintenance()
	if opts.Logger != nil {
		opts.Logger.Debug("embedded etcd ready", "dir", opts.Dir,
			"endpoints", s.endpoints, "took", time.Since(start))
	}
	return s, nil
}

// The embedded etcd's raft log in memory: a snapshot every snapshotCount
// entries, snapshotCatchUpEntries kept after it.
const (
	snapshotCount          = 1000
	snapshotCatchUpEntries = 100
)

// config builds the embed configuration: one member on loopback, fast ticks,
// revision compaction, the quota, and our logger.
func (s *Server) config() (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = s.opts.Name
	cfg.Dir = s.opts.Dir
	cfg.TickMs, cfg.ElectionMs = 10, 100
	// etcd's own revision compactor runs every 5 minutes (fixed in etcd);
	// the maintenance loop compacts to the same retention every
	// MaintenanceInterval, which is what bounds the history at high commit
	// rates. etcd's stays as the backstop.
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "0" // off
	if r := s.opts.CompactionRetention; r > 0 {
		cfg.AutoCompactionRetention = strconv.FormatInt(r, 10)
	}
	cfg.QuotaBackendBytes = s.opts.QuotaBytes
	// etcd keeps every raft entry since its last snapshot in memory, each
	// with its whole value: at its defaults (a snapshot every 10,000
	// entries, 5,000 kept after it for followers) a writer's commits grew
	// the process by hundreds of MiB between snapshots (scripts/soak: RSS
	// from 55 MiB to 1 GiB in 45 minutes). One member has no followers to
	// catch up, and a snapshot here is cheap, so snapshot often.
	cfg.SnapshotCount, cfg.SnapshotCatchUpEntries = snapshotCount, snapshotCatchUpEntries
	cfg.UnsafeNoFsync = s.opts.UnsafeNoFsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZap(s.opts.Logger, &s.mute))
	clientURL := "http://127.0.0.1:0"
	if s.opts.ClientURL != "" {
		clientURL = s.opts.ClientURL
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: client URL: %w", err)
	}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	return cfg, nil
}

// open waits for readiness, then creates and probes the client.
func (s *Server) open(ctx context.Context) error {
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	s.endpoints = s.clientEndpoints()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.endpoints,
		DialTimeout: probeTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("etcdembed: client for %v: %w", s.endpoints, err)
	}
	s.cli = cli
	// clientv3.New does not block in 3.7: prove the path works with a read.
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, "\x00etcdembed-probe", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcdembed: first read from %v: %w", s.endpoints, err)
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcdembed: waiting for etcd in %s: %w", s.opts.Dir, context.Cause(ctx))
	}
	timer := time.NewTimer(s.opts.StartTimeout)
	defer timer.Stop()
	select {
	case <-s.e.Server.ReadyNotify():
		return nil
	case err := <-s.e.Err():
		return fmt.Errorf("etcdembed: etcd in %s failed while starting: %w", s.opts.Dir, err)
	case <-s.e.Server.StopNotify():
		return fmt.Errorf("etcdembed: etcd in %s stopped while starting", s.opts.Dir)
	case <-timer.C:
		return fmt.Errorf("etcdembed: etcd in %s not ready after %s (a corrupt or foreign data dir?)",
			s.opts.Dir, s.opts.StartTimeout)
	case <-ctx.Done():
		return fmt.Errorf("etcdembed: waiting for etcd in %s: %w", s.opts.Dir, context.Cause(ctx))
	}
}

// clientEndpoints names the listener as clients dial it: the real port for a
// port-0 http listener, the configured URL for a unix socket.
func (s *Server) clientEndpoints() []string {
	if u := s.opts.ClientURL; u != "" && !isPortZero(u) {
		return []string{u}
	}
	eps := make([]string, 0, len(s.e.Clients))
	for _, l := range s.e.Clients {
		eps = append(eps, "http://"+l.Addr().String())
	}
	return eps
}

func isPortZero(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "http" && u.Port() == "0"
}

// Endpoints returns the client URLs, for clientv3.Config.Endpoints.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Client returns the client created at Start. It is closed by Close; do not
// close it yourself.
func (s *Server) Client() *clientv3.Client { return s.cli }

// Dir returns the data directory.
func (s *Server) Dir() string { return s.opts.Dir }

// Close closes the client, then stops the server, waiting at most
// Options.CloseTimeout. It is safe to call more than once; later calls return
// the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	s.mute.Store(true)
	s.stopMaintenance() // it uses the client
	var errs []error
	if s.cli != nil {
		// Close reports the cancellation of its own context; that is success.
		if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("etcdembed: close client: %w", err))
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.e.Close()
	}()
	timer := time.NewTimer(s.opts.CloseTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		errs = append(errs, fmt.Errorf("etcdembed: etcd in %s did not stop within %s",
			s.opts.Dir, s.opts.CloseTimeout))
	}
	return errors.Join(errs...)
}
