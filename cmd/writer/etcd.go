package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/internal/etcdembed"
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
}

func openMetadata(ctx context.Context, dataDir string, c etcdclient.Config, log *slog.Logger) (*metadata, error) {
	if len(c.Endpoints) == 0 {
		srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dataDir, "etcd"), Logger: log})
		if err != nil {
			return nil, err
		}
		return &metadata{client: srv.Client(), requestTimeout: c.RequestTimeout, embedded: srv}, nil
	}
	c.Password = os.Getenv("ROLLWAL_ETCD_PASSWORD")
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
		return m.embedded.Close()
	}
	return m.client.Close()
}
