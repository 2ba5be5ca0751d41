package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/internal/etcdembed"
	"github.com/rollwal/rollwal/internal/vfs"
)

// addEtcdFlags binds the flags of an external etcd cluster. Without
// --etcd-endpoints the writer runs etcd embedded under the data dir.
func addEtcdFlags(f *pflag.FlagSet, c *etcdclient.Config) {
	f.StringSliceVar(&c.Endpoints, "etcd-endpoints", nil, "external etcd endpoints (default: etcd embedded under <data-dir>/etcd)")
	f.StringVar(&c.TLS.CAFile, "etcd-ca-file", "", "CA bundle that signs the etcd servers' certificates")
	f.StringVar(&c.TLS.CertFile, "etcd-cert-file", "", "client certificate for etcd")
	f.StringVar(&c.TLS.KeyFile, "etcd-key-file", "", "client key for etcd")
	f.StringVar(&c.Username, "etcd-username", "", "etcd user (the password comes from $ROLLWAL_ETCD_PASSWORD)")
	f.DurationVar(&c.DialTimeout, "etcd-dial-timeout", etcdclient.DefaultDialTimeout, "how long to wait for etcd at start")
	f.DurationVar(&c.RequestTimeout, "etcd-request-timeout", etcdclient.DefaultRequestTimeout, "deadline of every etcd request")
}

// metadata is the etcd the writer uses: embedded, or an external cluster.
type metadata struct {
	client         *clientv3.Client
	requestTimeout time.Duration
	embedded       *etcdembed.Server
	endpointFile   string
}

// endpointFile is where a process running the embedded etcd records its
// client endpoint, so that other commands on the same data dir (a merge
// while serve runs) use that etcd instead of failing on its locked files.
func endpointFile(dataDir string) string { return filepath.Join(dataDir, "etcd.endpoint") }

func writeEndpoint(path string, endpoints []string) error {
	tmp := path + ".tmp"
	f, err := vfs.Default.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(strings.Join(endpoints, ",") + "\n"))
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		return err
	}
	return vfs.Default.Rename(tmp, path)
}

// runningEndpoints returns the endpoints another process recorded, if any.
func runningEndpoints(dataDir string) []string {
	f, err := vfs.Default.Open(endpointFile(dataDir))
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), ",")
}

func openMetadata(ctx context.Context, dataDir string, c etcdclient.Config, log *slog.Logger) (*metadata, error) {
	if len(c.Endpoints) == 0 {
		srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dataDir, "etcd"), Logger: log})
		if err != nil {
			return nil, err
		}
		m := &metadata{client: srv.Client(), requestTimeout: c.RequestTimeout, embedded: srv, endpointFile: endpointFile(dataDir)}
		if err := writeEndpoint(m.endpointFile, srv.Endpoints()); err != nil {
			log.Warn("record the embedded etcd's endpoint for other commands", "err", err)
		}
		return m, nil
	}
	if c.Password == "" { // a configuration file may carry it
		c.Password = os.Getenv(passwordEnv)
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cli, err := etcdclient.New(ctx, c)
	if err != nil {
		return nil, err
	}
	return &metadata{client: cli, requestTimeout: c.RequestTimeout}, nil
}

func (m *metadata) Close() error {
	if m.embedded != nil {
		vfs.Default.Remove(m.endpointFile)
		return m.embedded.Close()
	}
	return m.client.Close()
}
