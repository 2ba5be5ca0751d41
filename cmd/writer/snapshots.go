package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/snapshot"
)

// The snapshots: section of the configuration: the store that serve
// persists source offsets into after each commit, and that snapshot get
// reads.

const (
	backendEtcd      = "etcd"
	backendCassandra = "cassandra"

	// cassandraPasswordEnv holds the Cassandra password when the
	// configuration does not, like passwordEnv for etcd.
	cassandraPasswordEnv = "ROLLWAL_CASSANDRA_PASSWORD"

	// snapshotPrefix is the root of the etcd snapshot store's keys.
	snapshotPrefix = "rollwal-snapshots"
)

// SnapshotsConfig chooses the snapshot store.
type SnapshotsConfig struct {
	// Backend is etcd (the writer's own etcd, embedded or external, keys
	// under rollwal-snapshots/) or cassandra (LWT-fenced, see
	// docs/snapshot-fencing.md).
	Backend   string          `yaml:"backend"`
	Cassandra CassandraConfig `yaml:"cassandra"`
}

// CassandraConfig is snapshots.cassandra: the settings of
// snapshot.CassandraOptions as a file spells them.
type CassandraConfig struct {
	Hosts             []string      `yaml:"hosts"`
	Keyspace          string        `yaml:"keyspace"`
	Table             string        `yaml:"table"`
	Consistency       string        `yaml:"consistency"`
	SerialConsistency string        `yaml:"serial_consistency"`
	TTL               time.Duration `yaml:"ttl"`
	Timeout           time.Duration `yaml:"timeout"`
	Username          string        `yaml:"username"`
	// Password is better left out of the file: $ROLLWAL_CASSANDRA_PASSWORD
	// fills it when a username is set.
	Password     string             `yaml:"password"`
	TLS          CassandraTLSConfig `yaml:"tls"`
	CreateSchema bool               `yaml:"create_schema"`
	Datacenter   string             `yaml:"datacenter"`
}

// CassandraTLSConfig is snapshots.cassandra.tls. Any key set turns TLS on;
// with no ca_file the system roots verify the servers.
type CassandraTLSConfig struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

func defaultSnapshots() SnapshotsConfig {
	return SnapshotsConfig{Backend: backendEtcd, Cassandra: CassandraConfig{
		Keyspace: "rollwal", Table: snapshot.DefaultCassandraTable,
		Consistency: gocql.LocalQuorum.String(), SerialConsistency: gocql.LocalSerial.String(),
		Timeout: snapshot.DefaultCassandraTimeout,
	}}
}

// addSnapshotFlags binds the flags of the common snapshots settings (see
// settings for their keys).
func addSnapshotFlags(f *pflag.FlagSet, s *SnapshotsConfig) {
	def := defaultSnapshots()
	c := &s.Cassandra
	f.StringVar(&s.Backend, "snapshots-backend", def.Backend, "snapshot-offset store: etcd (the writer's etcd) or cassandra")
	listVar(f, &c.Hosts, "cassandra-hosts", nil, "Cassandra contact points, host or host:port (implies --snapshots-backend cassandra)")
	f.StringVar(&c.Keyspace, "cassandra-keyspace", def.Cassandra.Keyspace, "Cassandra keyspace of the snapshot table")
	f.StringVar(&c.Table, "cassandra-table", def.Cassandra.Table, "Cassandra snapshot table")
	f.StringVar(&c.Consistency, "cassandra-consistency", def.Cassandra.Consistency, "consistency of reads and LWT commits: QUORUM, LOCAL_QUORUM or ALL")
	f.StringVar(&c.SerialConsistency, "cassandra-serial-consistency", def.Cassandra.SerialConsistency, "consistency of the LWTs' Paxos phase: SERIAL or LOCAL_SERIAL")
	f.DurationVar(&c.Timeout, "cassandra-timeout", def.Cassandra.Timeout, "client-side bound on each Cassandra request")
	f.StringVar(&c.Username, "cassandra-username", "", "Cassandra user (the password comes from $"+cassandraPasswordEnv+")")
	f.StringVar(&c.Datacenter, "cassandra-datacenter", "", "local datacenter, whose hosts take the requests first")
	f.StringVar(&c.TLS.CAFile, "cassandra-ca-file", "", "CA bundle that signs the Cassandra nodes' certificates (turns TLS on)")
	f.StringVar(&c.TLS.CertFile, "cassandra-cert-file", "", "client certificate for Cassandra (turns TLS on)")
	f.StringVar(&c.TLS.KeyFile, "cassandra-key-file", "", "client key for Cassandra")
}

var cqlIdentifier = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// validateSnapshots checks the backend and, for cassandra, every setting
// (TLS files read); cassandra settings that only a Cassandra store would
// use are refused beside the etcd backend, which would ignore them.
func (c *Config) validateSnapshots() error {
	s := c.Snapshots
	cs := s.Cassandra
	switch s.Backend {
	case backendCassandra:
	case backendEtcd:
		switch {
		case len(cs.Hosts) > 0:
			return badValue("snapshots.cassandra.hosts", cs.Hosts, "is set but snapshots.backend is etcd: set backend: cassandra to use them")
		case cs.Username != "":
			return badValue("snapshots.cassandra.username", cs.Username, "is set but snapshots.backend is etcd")
		case cs.TLS.InsecureSkipVerify:
			return badValue("snapshots.cassandra.tls.insecure_skip_verify", true, "is set but snapshots.backend is etcd")
		}
		for _, f := range []struct{ key, v string }{{"ca_file", cs.TLS.CAFile}, {"cert_file", cs.TLS.CertFile},
			{"key_file", cs.TLS.KeyFile}, {"server_name", cs.TLS.ServerName}} {
			if f.v != "" {
				return badValue("snapshots.cassandra.tls."+f.key, f.v, "is set but snapshots.backend is etcd")
			}
		}
		return nil
	default:
		return badValue("snapshots.backend", s.Backend, "want etcd or cassandra")
	}
	if len(cs.Hosts) == 0 {
		return badValue("snapshots.cassandra.hosts", "[]", "backend cassandra needs at least one contact point (host or host:port)")
	}
	for _, h := range cs.Hosts {
		if err := checkCassandraHost(h); err != nil {
			return badValue("snapshots.cassandra.hosts", cs.Hosts, "%q: %v", h, err)
		}
	}
	for _, id := range []struct{ key, v string }{{"snapshots.cassandra.keyspace", cs.Keyspace}, {"snapshots.cassandra.table", cs.Table}} {
		if !cqlIdentifier.MatchString(id.v) {
			return badValue(id.key, id.v, "want a lower-case CQL identifier, [a-z][a-z0-9_]{0,47}")
		}
	}
	if _, err := cs.consistency(); err != nil {
		return badValue("snapshots.cassandra.consistency", cs.Consistency, "%v", err)
	}
	if _, err := cs.serialConsistency(); err != nil {
		return badValue("snapshots.cassandra.serial_consistency", cs.SerialConsistency, "%v", err)
	}
	switch {
	case cs.TTL < 0 || cs.TTL > snapshot.MaxCassandraTTL:
		return badValue("snapshots.cassandra.ttl", cs.TTL, "want 0 (snapshots never expire) up to %s", snapshot.MaxCassandraTTL)
	case cs.Timeout <= 0:
		return badValue("snapshots.cassandra.timeout", cs.Timeout, "must be positive")
	case cs.Password != "" && cs.Username == "":
		return badValue("snapshots.cassandra.password", "REDACTED", "is set without snapshots.cassandra.username")
	case cs.Username != "" && cs.Password == "":
		return badValue("snapshots.cassandra.username", cs.Username, "is set without a password: put it in $%s (or snapshots.cassandra.password)", cassandraPasswordEnv)
	}
	if _, err := cs.TLS.build(); err != nil {
		return err
	}
	opts, err := cs.options(nil)
	if err != nil {
		return err
	}
	if err := opts.Validate(); err != nil { // anything the checks above missed
		return fmt.Errorf("snapshots.cassandra: %w", err)
	}
	return nil
}

// checkCassandraHost accepts "host" (a name or an IP address, IPv6 bare
// or bracketed) and "host:port" with a port in 1-65535.
func checkCassandraHost(h string) error {
	host, port, err := net.SplitHostPort(h)
	switch {
	case h == "":
		return fmt.Errorf("empty host")
	case err != nil && (!strings.Contains(h, ":") || net.ParseIP(h) != nil):
		return nil
	case err != nil:
		return fmt.Errorf("want host or host:port: %w", err)
	case host == "":
		return fmt.Errorf("want host or host:port: no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 1-65535", port)
	}
	return nil
}

// consistency parses the read/commit level; it must be quorum-class.
func (c CassandraConfig) consistency() (gocql.Consistency, error) {
	v, err := gocql.ParseConsistencyWrapper(c.Consistency)
	if err == nil && (v == gocql.Quorum || v == gocql.LocalQuorum || v == gocql.All) {
		return v, nil
	}
	return 0, fmt.Errorf("want QUORUM, LOCAL_QUORUM or ALL (a read must see every committed LWT)")
}

func (c CassandraConfig) serialConsistency() (gocql.SerialConsistency, error) {
	var v gocql.SerialConsistency
	if err := v.UnmarshalText([]byte(strings.ToUpper(c.SerialConsistency))); err != nil {
		return 0, fmt.Errorf("want SERIAL or LOCAL_SERIAL")
	}
	return v, nil
}

// options returns the store's options; log receives the driver's lines.
func (c CassandraConfig) options(log *slog.Logger) (snapshot.CassandraOptions, error) {
	cons, err := c.consistency()
	if err != nil {
		return snapshot.CassandraOptions{}, badValue("snapshots.cassandra.consistency", c.Consistency, "%v", err)
	}
	serial, err := c.serialConsistency()
	if err != nil {
		return snapshot.CassandraOptions{}, badValue("snapshots.cassandra.serial_consistency", c.SerialConsistency, "%v", err)
	}
	tlsCfg, err := c.TLS.build()
	if err != nil {
		return snapshot.CassandraOptions{}, err
	}
	return snapshot.CassandraOptions{
		Hosts: c.Hosts, Keyspace: c.Keyspace, Table: c.Table, Consistency: cons, SerialConsistency: serial,
		TTL: c.TTL, Timeout: c.Timeout, CreateSchema: c.CreateSchema, Datacenter: c.Datacenter,
		Username: c.Username, Password: c.Password, TLS: tlsCfg, Logger: log,
	}, nil
}

// build returns the TLS configuration, or nil when no key is set. Errors
// name the key and the file.
func (t CassandraTLSConfig) build() (*tls.Config, error) {
	if t == (CassandraTLSConfig{}) {
		return nil, nil
	}
	const k = "snapshots.cassandra.tls."
	if t.InsecureSkipVerify && t.CAFile != "" {
		return nil, badValue(k+"insecure_skip_verify", true, "is set together with %sca_file, which it would ignore: drop one", k)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pool, err := readCAFile(t.CAFile)
		if err != nil {
			return nil, badValue(k+"ca_file", t.CAFile, "%v", err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return nil, badValue(k+"cert_file", t.CertFile, "is set without %skey_file", k)
	case t.KeyFile != "" && t.CertFile == "":
		return nil, badValue(k+"key_file", t.KeyFile, "is set without %scert_file", k)
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, badValue(k+"cert_file", t.CertFile, "with key_file %q: %v", t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readCAFile reads a PEM bundle in which every block must be a certificate
// that parses, so that a wrong file fails here rather than as "unknown
// authority" at the first handshake.
func readCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, fmt.Errorf("no PEM certificate in the file")
	}
	return pool, nil
}

// openSnapshots opens the configured store: etcd through meta (the
// writer's etcd), or Cassandra, which must answer now: an error names the
// hosts. The returned func closes what was opened.
func openSnapshots(ctx context.Context, s SnapshotsConfig, meta *metadata, log *slog.Logger) (snapshot.Store, func(), error) {
	if s.Backend == backendCassandra {
		return openCassandraSnapshots(ctx, s.Cassandra, log)
	}
	st, err := snapshot.NewEtcd(meta.client, snapshotPrefix, snapshot.EtcdOptions{RequestTimeout: meta.requestTimeout})
	if err != nil {
		return nil, nil, err
	}
	return st, func() {}, nil
}

func openCassandraSnapshots(ctx context.Context, c CassandraConfig, log *slog.Logger) (snapshot.Store, func(), error) {
	opts, err := c.options(log)
	if err != nil {
		return nil, nil, err
	}
	st, err := snapshot.NewCassandra(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshots: cassandra at %s (keyspace %s, table %s): %w", strings.Join(c.Hosts, ","), c.Keyspace, c.Table, err)
	}
	return st, func() { st.Close() }, nil
}
