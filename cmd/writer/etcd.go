package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/internal/dirlock"
	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/vfs"
)

// addEtcdFlags binds the flags of an external etcd cluster. Without
// --etcd-endpoints the writer runs etcd embedded under the data dir.
func addEtcdFlags(f *pflag.FlagSet, c *etcdclient.Config) {
	listVar(f, &c.Endpoints, "etcd-endpoints", nil, "external etcd endpoints (default: etcd embedded under <data-dir>/etcd)")
	f.StringVar(&c.TLS.CAFile, "etcd-ca-file", "", "CA bundle that signs the etcd servers' certificates")
	f.StringVar(&c.TLS.CertFile, "etcd-cert-file", "", "client certificate for etcd")
	f.StringVar(&c.TLS.KeyFile, "etcd-key-file", "", "client key for etcd")
	f.StringVar(&c.Username, "etcd-username", "", "etcd user (the password comes from $ROLLWAL_ETCD_PASSWORD)")
	f.DurationVar(&c.DialTimeout, "etcd-dial-timeout", etcdclient.DefaultDialTimeout, "how long to wait for etcd at start")
	f.DurationVar(&c.RequestTimeout, "etcd-request-timeout", etcdclient.DefaultRequestTimeout, "deadline of every etcd request")
}

// metadata is the etcd the writer uses: embedded, an external cluster, or
// the embedded etcd of a running process on the same data dir.
type metadata struct {
	client         *clientv3.Client
	requestTimeout time.Duration
	embedded       *etcdembed.Server
	endpointFile   string
	lock           *dirlock.Lock // nil when the command uses another process's etcd
}

// openMetadata opens the etcd of a command on dataDir (see datadir.go):
// the configured cluster, else the embedded etcd a running process recorded
// in the endpoint file (for commands that do not write the data dir), else
// the embedded etcd, started under the data dir's lock. It fails at once,
// naming the holder, when another process holds the lock it needs.
func openMetadata(ctx context.Context, dataDir string, c etcdclient.Config, use dirUse, log *slog.Logger) (*metadata, error) {
	if len(c.Endpoints) > 0 {
		return openExternal(ctx, dataDir, c, use, log)
	}
	if use.follow {
		return openFollowed(ctx, dataDir, c)
	}
	if !use.writes {
		m, err := openRunning(ctx, dataDir, c, use, log)
		if m != nil || err != nil {
			return m, err
		}
	}
	lock, err := dirlock.Acquire(dataDir, use.command)
	if err != nil && !use.writes {
		return nil, fmt.Errorf("%w; it records no embedded etcd in %s (it is still starting, or it uses an external etcd: give this command the same --etcd-endpoints)",
			err, endpointFile(dataDir))
	} else if err != nil {
		return nil, err
	}
	dropStaleEndpoint(dataDir, log, "the process that wrote it is gone (the data directory's lock was free)")
	return startEmbedded(ctx, dataDir, c, lock, log)
}

// openRunning uses the etcd recorded in the endpoint file when it proves to
// be this data dir's, and refuses one that proves to be another's. With no
// usable record it takes the lock (to start the embedded etcd) or fails
// naming its holder; a nil metadata and error means "no record: start it".
func openRunning(ctx context.Context, dataDir string, c etcdclient.Config, use dirUse, log *slog.Logger) (*metadata, error) {
	r := readEndpoint(dataDir)
	if !r.found {
		return nil, nil
	}
	why := r.unverifiable
	if why == "" {
		cli, err := openRecorded(ctx, dataDir, r)
		if err == nil {
			return &metadata{client: cli, requestTimeout: c.RequestTimeout}, nil
		}
		if !errors.Is(err, errNotAnswering) {
			return nil, err
		}
		why = err.Error()
	} else {
		why = fmt.Sprintf("the endpoint file %s cannot be verified: %s", r.path, why)
	}
	lock, err := dirlock.Acquire(dataDir, use.command)
	if err != nil {
		return nil, fmt.Errorf("%s, and %w", why, err)
	}
	log.Warn(msgStaleStarted, "file", r.path, "reason", why)
	return startEmbedded(ctx, dataDir, c, lock, log)
}

// openFollowed uses the etcd recorded in the endpoint file when it proves
// to be this data dir's, and fails otherwise, whatever the lock says: a
// follower waits for a running process rather than start the etcd itself.
func openFollowed(ctx context.Context, dataDir string, c etcdclient.Config) (*metadata, error) {
	r := readEndpoint(dataDir)
	switch {
	case !r.found:
		return nil, fmt.Errorf("no running serve has recorded its embedded etcd in %s", r.path)
	case r.unverifiable != "":
		return nil, fmt.Errorf("the endpoint file %s cannot be verified: %s", r.path, r.unverifiable)
	}
	cli, err := openRecorded(ctx, dataDir, r)
	if err != nil {
		return nil, err
	}
	return &metadata{client: cli, requestTimeout: c.RequestTimeout}, nil
}

// startEmbedded starts the embedded etcd under the lock held, makes sure of
// the data dir's identity, and records the endpoint for other commands.
func startEmbedded(ctx context.Context, dataDir string, c etcdclient.Config, lock *dirlock.Lock, log *slog.Logger) (*metadata, error) {
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: layout.EtcdDir(dataDir), Logger: log})
	if err != nil {
		return nil, errors.Join(err, lock.Release())
	}
	dir := absDir(dataDir)
	id, cluster, err := ensureIdentity(ctx, srv.Client(), dir, c.RequestTimeout, log)
	if err != nil {
		return nil, errors.Join(err, srv.Close(), lock.Release())
	}
	m := &metadata{client: srv.Client(), requestTimeout: c.RequestTimeout, embedded: srv, endpointFile: endpointFile(dataDir), lock: lock}
	rec := endpointRecord{Endpoints: srv.Endpoints(), ClusterID: clusterID(cluster), Identity: id.ID, DataDir: dir,
		Pid: os.Getpid(), Command: lock.Holder().Command}
	if err := writeEndpoint(m.endpointFile, rec); err != nil {
		log.Warn("record the embedded etcd's endpoint for other commands", "file", m.endpointFile, "err", err)
	}
	return m, nil
}

// openExternal connects to the configured cluster; a command that writes
// the data dir holds its lock all the same.
func openExternal(ctx context.Context, dataDir string, c etcdclient.Config, use dirUse, log *slog.Logger) (*metadata, error) {
	if c.Password == "" { // a configuration file may carry it
		c.Password = os.Getenv(passwordEnv)
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var lock *dirlock.Lock
	if use.writes {
		var err error
		if lock, err = dirlock.Acquire(dataDir, use.command); err != nil {
			return nil, err
		}
		dropStaleEndpoint(dataDir, log, "this process uses an external etcd and holds the data directory's lock")
	}
	cli, err := etcdclient.New(ctx, c)
	if err != nil {
		return nil, errors.Join(err, release(lock))
	}
	return &metadata{client: cli, requestTimeout: c.RequestTimeout, lock: lock}, nil
}

func release(l *dirlock.Lock) error {
	if l == nil {
		return nil
	}
	return l.Release()
}

// registerMetrics registers the embedded etcd's writer_etcd_* gauges
// (database size, in-use size, quota, revisions, compactions, defrags) on
// reg; nothing for an external cluster or another process's etcd.
func (m *metadata) registerMetrics(reg prometheus.Registerer) error {
	if m.embedded == nil {
		return nil
	}
	return m.embedded.RegisterMetrics(reg)
}

// Close closes etcd (removing the endpoint record of an embedded one), then
// releases the data dir's lock.
func (m *metadata) Close() error {
	var err error
	if m.embedded != nil {
		vfs.Default.Remove(m.endpointFile)
		err = m.embedded.Close()
	} else {
		err = m.client.Close()
	}
	return errors.Join(err, release(m.lock))
}
