package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/server"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
	"github.com/rollwal/rollwal/wal"
)

// passwordEnv holds the etcd password when the configuration does not, so
// that it need not be written into a file or onto a command line.
const passwordEnv = "ROLLWAL_ETCD_PASSWORD"

// Config is the writer's configuration file: the settings of `writer
// serve`, of which merge, inspect, wal and snapshot share data_dir, table
// and etcd, and snapshot get snapshots too. Each command starts from
// defaultConfig, applies the file given with --config, then the flags set
// on its command line.
type Config struct {
	DataDir         string            `yaml:"data_dir"`
	Listen          string            `yaml:"listen"`
	AdminListen     string            `yaml:"admin_listen"`
	Table           string            `yaml:"table"`
	Shards          []string          `yaml:"shards"`
	FlushBytes      int64             `yaml:"flush_bytes"`
	FlushAge        time.Duration     `yaml:"flush_age"`
	MemoryBudget    int64             `yaml:"memory_budget"` // 0: the default (memory.go)
	LeaseTTL        time.Duration     `yaml:"lease_ttl"`
	MaxBodyBytes    int64             `yaml:"max_body_bytes"`
	ShutdownTimeout time.Duration     `yaml:"shutdown_timeout"`
	UnreadyDelay    time.Duration     `yaml:"unready_delay"`
	LogLevel        string            `yaml:"log_level"`
	Etcd            etcdclient.Config `yaml:"etcd"`
	Snapshots       SnapshotsConfig   `yaml:"snapshots"`
	Limits          LimitsConfig      `yaml:"limits"`
	HTTP            HTTPConfig        `yaml:"http"`
	Iceberg         IcebergConfig     `yaml:"iceberg"`
	// Storage is the object store of the generations (storage.go); a
	// table's own storage: replaces it.
	Storage StorageConfig `yaml:"storage"`
	// WAL is where the WALs live (walconfig.go).
	WAL WALConfig `yaml:"wal"`
	// Columns are the table's columns (id, _seq and _epoch are implicit).
	// Left out, a table has the columns its schema record holds, and a new
	// table the rollout schema (tableSchema).
	Columns []schema.Column `yaml:"columns,omitempty"`
	// Tables, when set, are the tables serve hosts (tables.go); table,
	// shards, columns and the flush settings are then their defaults.
	Tables []TableConfig `yaml:"tables,omitempty"`
}

func defaultConfig() Config {
	c := Config{
		DataDir: "./data", Listen: "127.0.0.1:8080", Table: "rollouts", Shards: []string{"default"},
		FlushBytes: 64 << 20, FlushAge: 30 * time.Second, LeaseTTL: 5 * time.Second,
		MaxBodyBytes: server.DefaultMaxBodyBytes, ShutdownTimeout: 30 * time.Second, LogLevel: "info",
		Snapshots: defaultSnapshots(), Limits: defaultLimits(), HTTP: defaultHTTP(),
	}
	c.Etcd.EnsureDefaults()
	return c
}

// setting binds a configuration key to the flag that overrides it.
type setting struct {
	key, flag string
	copy      func(dst, src *Config)
}

var settings = []setting{
	{"data_dir", "data-dir", func(d, s *Config) { d.DataDir = s.DataDir }},
	{"listen", "listen", func(d, s *Config) { d.Listen = s.Listen }},
	{"admin_listen", "admin-listen", func(d, s *Config) { d.AdminListen = s.AdminListen }},
	{"table", "table", func(d, s *Config) { d.Table = s.Table }},
	{"shards", "shards", func(d, s *Config) { d.Shards = s.Shards }},
	{"flush_bytes", "flush-bytes", func(d, s *Config) { d.FlushBytes = s.FlushBytes }},
	{"flush_age", "flush-age", func(d, s *Config) { d.FlushAge = s.FlushAge }},
	{"lease_ttl", "lease-ttl", func(d, s *Config) { d.LeaseTTL = s.LeaseTTL }},
	{"max_body_bytes", "max-body-bytes", func(d, s *Config) { d.MaxBodyBytes = s.MaxBodyBytes }},
	{"shutdown_timeout", "shutdown-timeout", func(d, s *Config) { d.ShutdownTimeout = s.ShutdownTimeout }},
	{"unready_delay", "unready-delay", func(d, s *Config) { d.UnreadyDelay = s.UnreadyDelay }},
	{"log_level", "log-level", func(d, s *Config) { d.LogLevel = s.LogLevel }},
	{"etcd.endpoints", "etcd-endpoints", func(d, s *Config) { d.Etcd.Endpoints = s.Etcd.Endpoints }},
	{"etcd.dial_timeout", "etcd-dial-timeout", func(d, s *Config) { d.Etcd.DialTimeout = s.Etcd.DialTimeout }},
	{"etcd.request_timeout", "etcd-request-timeout", func(d, s *Config) { d.Etcd.RequestTimeout = s.Etcd.RequestTimeout }},
	{"etcd.username", "etcd-username", func(d, s *Config) { d.Etcd.Username = s.Etcd.Username }},
	{"etcd.tls.ca_file", "etcd-ca-file", func(d, s *Config) { d.Etcd.TLS.CAFile = s.Etcd.TLS.CAFile }},
	{"etcd.tls.cert_file", "etcd-cert-file", func(d, s *Config) { d.Etcd.TLS.CertFile = s.Etcd.TLS.CertFile }},
	{"etcd.tls.key_file", "etcd-key-file", func(d, s *Config) { d.Etcd.TLS.KeyFile = s.Etcd.TLS.KeyFile }},
	{"snapshots.backend", "snapshots-backend", func(d, s *Config) { d.Snapshots.Backend = s.Snapshots.Backend }},
	{"snapshots.cassandra.hosts", "cassandra-hosts", func(d, s *Config) { d.Snapshots.Cassandra.Hosts = s.Snapshots.Cassandra.Hosts }},
	{"snapshots.cassandra.keyspace", "cassandra-keyspace", func(d, s *Config) { d.Snapshots.Cassandra.Keyspace = s.Snapshots.Cassandra.Keyspace }},
	{"snapshots.cassandra.table", "cassandra-table", func(d, s *Config) { d.Snapshots.Cassandra.Table = s.Snapshots.Cassandra.Table }},
	{"snapshots.cassandra.consistency", "cassandra-consistency", func(d, s *Config) {
		d.Snapshots.Cassandra.Consistency = s.Snapshots.Cassandra.Consistency
	}},
	{"snapshots.cassandra.serial_consistency", "cassandra-serial-consistency", func(d, s *Config) {
		d.Snapshots.Cassandra.SerialConsistency = s.Snapshots.Cassandra.SerialConsistency
	}},
	{"snapshots.cassandra.timeout", "cassandra-timeout", func(d, s *Config) { d.Snapshots.Cassandra.Timeout = s.Snapshots.Cassandra.Timeout }},
	{"snapshots.cassandra.username", "cassandra-username", func(d, s *Config) { d.Snapshots.Cassandra.Username = s.Snapshots.Cassandra.Username }},
	{"snapshots.cassandra.datacenter", "cassandra-datacenter", func(d, s *Config) {
		d.Snapshots.Cassandra.Datacenter = s.Snapshots.Cassandra.Datacenter
	}},
	{"snapshots.cassandra.tls.ca_file", "cassandra-ca-file", func(d, s *Config) { d.Snapshots.Cassandra.TLS.CAFile = s.Snapshots.Cassandra.TLS.CAFile }},
	{"snapshots.cassandra.tls.cert_file", "cassandra-cert-file", func(d, s *Config) {
		d.Snapshots.Cassandra.TLS.CertFile = s.Snapshots.Cassandra.TLS.CertFile
	}},
	{"snapshots.cassandra.tls.key_file", "cassandra-key-file", func(d, s *Config) { d.Snapshots.Cassandra.TLS.KeyFile = s.Snapshots.Cassandra.TLS.KeyFile }},
}

func addConfigFlag(f *pflag.FlagSet, path *string) {
	f.StringVar(path, "config", "", "YAML configuration file; flags set on the command line override it")
}

// resolveConfig returns defaults ← the file at path (if any) ← the flags of
// f that were set on the command line, whose values flagged holds. A bad
// value is named by the flag or by the file's key it came from.
func resolveConfig(f *pflag.FlagSet, path string, flagged Config) (Config, error) {
	cfg := defaultConfig()
	if path != "" {
		if err := loadConfigFile(vfs.Default, path, &cfg); err != nil {
			return cfg, err
		}
	}
	changed := map[string]string{} // key → flag
	for _, s := range settings {
		if fl := f.Lookup(s.flag); fl != nil && fl.Changed {
			s.copy(&cfg, &flagged)
			changed[s.key] = "--" + s.flag
		}
	}
	if cfg.Etcd.Password == "" && cfg.Etcd.Username != "" {
		cfg.Etcd.Password = os.Getenv(passwordEnv)
	}
	if cs := &cfg.Snapshots.Cassandra; cs.Password == "" && cs.Username != "" {
		cs.Password = os.Getenv(cassandraPasswordEnv)
	}
	// --cassandra-hosts alone (as snapshot get has always taken it) means
	// the Cassandra store.
	if changed["snapshots.cassandra.hosts"] != "" && changed["snapshots.backend"] == "" {
		cfg.Snapshots.Backend = backendCassandra
	}
	err := cfg.Validate()
	if err == nil { // print the levels as Cassandra spells them, and the budget in effect
		cfg.MemoryBudget = cfg.memoryBudget()
		cs := &cfg.Snapshots.Cassandra
		cs.Consistency, cs.SerialConsistency = strings.ToUpper(cs.Consistency), strings.ToUpper(cs.SerialConsistency)
	}
	var ce *configError
	switch {
	case errors.As(err, &ce) && changed[ce.key] != "":
		ce.key = changed[ce.key]
	case err != nil && path != "":
		err = fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, err
}

// loadConfigFile decodes the file at path over cfg, strictly: an unknown
// key, a second document or a value of the wrong type is an error.
func loadConfigFile(fsys vfs.FS, path string, cfg *Config) error {
	data, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	doc, err := parseConfig(data)
	if err != nil || doc == nil {
		return wrapConfigErr(path, err)
	}
	if err := expandEnv(doc, os.LookupEnv); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return wrapConfigErr(path, explainYAML(doc.Decode(cfg)))
}

func wrapConfigErr(path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("config %s: %w", path, err)
}

// parseConfig parses the file's one document into a node tree (nil for an
// empty file) and checks its keys. Values are decoded later, from the tree,
// once the environment is expanded into it: expanding into the text would
// let a variable's quote or newline add keys of its own.
func parseConfig(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil && bytes.Contains(data, []byte("${")) {
		// The braces of a reference are YAML syntax inside [ ] and { }.
		return nil, fmt.Errorf(`%w (inside [ ] or { }, quote a reference: "${NAME}")`, err)
	} else if err != nil {
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document; put every setting in the first")
	}
	return &doc, checkKeys(data)
}

// checkKeys reports unknown keys. Decoding a tree cannot be made strict
// (yaml.Node.Decode has no KnownFields), so the text is decoded strictly
// once more, before expansion, keeping only its unknown-key errors: keys
// are never expanded, so those errors are the same either way, while a
// ${VAR} still in place of a number is no error of the file's.
func checkKeys(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var te *yaml.TypeError
	if err := dec.Decode(new(Config)); !errors.As(err, &te) {
		return err // nil, or an error not about values (a duplicate key)
	}
	var unknown []string
	for _, m := range te.Errors {
		if unknownField.MatchString(m) {
			unknown = append(unknown, m)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return explainYAML(&yaml.TypeError{Errors: unknown})
}

var (
	envRef       = regexp.MustCompile(`\$\{([^}\n]*)\}`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	unknownField = regexp.MustCompile(`field (\S+) not found in type (\S+)`)
)

// expandEnv replaces every ${NAME} in the tree's scalar values with the
// variable's value. Keys and comments are left alone, so that neither a
// commented-out setting nor a key can depend on the environment. A value
// stays one scalar whatever it holds (a quote, a newline, ": "), so a
// variable can never add a key; a plain scalar is then typed as YAML types
// it (a number, a duration, true), a quoted one stays a string. An unset
// variable is an error: an empty password or endpoint from a typo would
// fail later and far less clearly.
func expandEnv(doc *yaml.Node, lookup func(string) (string, bool)) error {
	var errs []error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch n.Kind {
		case yaml.ScalarNode:
			expandScalar(n, lookup, &errs)
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 { // values only, never keys
				walk(n.Content[i])
			}
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c)
			}
		} // an alias is expanded where its anchor is, once
	}
	walk(doc)
	return errors.Join(errs...)
}

func expandScalar(n *yaml.Node, lookup func(string) (string, bool), errs *[]error) {
	if !strings.Contains(n.Value, "${") {
		return
	}
	n.Value = envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := lookup(name)
		switch {
		case !envName.MatchString(name):
			*errs = append(*errs, fmt.Errorf("line %d: %s is not a variable reference: want ${NAME}", n.Line, m))
		case !ok:
			*errs = append(*errs, fmt.Errorf("line %d: environment variable %s is not set", n.Line, name))
		default:
			return v
		}
		return m
	})
	if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		n.Tag = "" // typed afresh from the expanded text, as a plain scalar in the file would be
	}
}

// sections names the YAML section of each configuration type, for errors.
var sections = map[string]string{
	"main.Config": "", "etcdclient.Config": "etcd", "etcdclient.TLSConfig": "etcd.tls",
	"main.SnapshotsConfig": "snapshots", "main.CassandraConfig": "snapshots.cassandra",
	"main.CassandraTLSConfig": "snapshots.cassandra.tls", "main.LimitsConfig": "limits",
}

// explainYAML rewrites the decoder's messages in the file's terms: unknown
// keys by name and section, and how to spell a duration.
func explainYAML(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		if sm := unknownField.FindStringSubmatch(m); sm != nil {
			where := ""
			if s := sections[sm[2]]; s != "" {
				where = " in section " + s
			}
			m = strings.Replace(m, sm[0], fmt.Sprintf("unknown key %q%s", sm[1], where), 1)
		}
		if strings.Contains(m, "time.Duration") {
			m += ` (durations are strings such as "500ms", "30s" or "5m")`
		}
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "; "))
}

// configError names a configuration key, its value and what is wrong.
type configError struct {
	key, value, reason string
}

func (e *configError) Error() string { return fmt.Sprintf("%s %s: %s", e.key, e.value, e.reason) }

func badValue(key string, value any, format string, args ...any) error {
	v := fmt.Sprint(value)
	switch x := value.(type) {
	case string:
		v = strconv.Quote(x)
	case []string:
		v = listString(x)
	}
	return &configError{key: key, value: v, reason: fmt.Sprintf(format, args...)}
}

// Validate reports the first unusable setting, naming its key and value.
func (c *Config) Validate() error {
	for _, check := range []func() error{c.validatePlaces, c.validateColumns, c.validateShards, c.validateTables, c.validateSizes, c.validateEtcd, c.validateSnapshots, c.Limits.validate, c.validateHTTP, c.validateIceberg,
		c.validateStorage, c.validateWAL, c.validateMemory, c.validateEngine} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateColumns checks the table's columns as the engine will.
func (c *Config) validateColumns() error {
	if err := checkColumns(c.Columns); err != nil {
		return badValue("columns", len(c.Columns), "%v", err)
	}
	return nil
}

// mustSchema is the schema of validated columns; nil for none configured.
func mustSchema(cols []schema.Column) *schema.Schema {
	if cols == nil {
		return nil
	}
	s, err := schema.New(cols)
	if err != nil {
		panic(fmt.Sprintf("columns not validated: %v", err))
	}
	return s
}

// chosenTable is the table a command that works on one works on: --table
// (one of tables: when the configuration has them), else the first.
func (c *Config) chosenTable(f *pflag.FlagSet) (TableConfig, error) {
	if len(c.Tables) == 0 || f.Changed("table") {
		if t, ok := c.table(c.Table); ok {
			return t, nil
		}
		names := make([]string, len(c.Tables))
		for i, t := range c.Tables {
			names[i] = t.Name
		}
		return TableConfig{}, fmt.Errorf("--table %s: not a table of the configuration (tables: %s)", c.Table, strings.Join(names, ", "))
	}
	return c.tables()[0], nil
}

func (c *Config) validatePlaces() error {
	switch {
	case c.DataDir == "":
		return badValue("data_dir", c.DataDir, "must not be empty")
	case shardmeta.Keys{Prefix: "rollwal", Table: c.Table}.Validate() != nil:
		return badValue("table", c.Table, "%v", shardmeta.Keys{Prefix: "rollwal", Table: c.Table}.Validate())
	}
	if err := checkAddress(c.Listen); err != nil {
		return badValue("listen", c.Listen, "%v", err)
	}
	if c.AdminListen == "" {
		return nil
	}
	if err := checkAddress(c.AdminListen); err != nil {
		return badValue("admin_listen", c.AdminListen, "%v", err)
	}
	if c.AdminListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		return badValue("admin_listen", c.AdminListen, "is also listen: pprof must not be served where producers connect")
	}
	return nil
}

// checkAddress accepts host:port with a numeric port (0 picks a free one).
func checkAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 0-65535", port)
	}
	return nil
}

func (c *Config) validateShards() error { return checkShards("shards", c.Shards) }

func checkShards(key string, shards []string) error {
	if len(shards) == 0 {
		return badValue(key, "[]", "need at least one shard")
	}
	seen := map[string]bool{}
	for _, s := range shards {
		if err := shardmeta.ValidateShard(s); err != nil {
			return badValue(key, shards, "%v", err)
		}
		if seen[s] {
			return badValue(key, shards, "%q named twice", s)
		}
		seen[s] = true
	}
	return nil
}

// Upper bounds of settings that have no natural one: past them a value is
// a mistake (a unit, a digit too many), refused before serve starts.
const (
	maxLeaseTTL  = 10 * time.Minute
	maxBodyLimit = 16 * wal.MaxPayloadSize // room for NDJSON's syntax around a record's values
)

func (c *Config) validateSizes() error {
	var level slog.Level
	switch {
	case c.FlushBytes <= 0:
		return badValue("flush_bytes", c.FlushBytes, "must be positive")
	case c.FlushBytes > maxMemoryBudget/2:
		return badValue("flush_bytes", c.FlushBytes, "must be at most 512 GiB (%d), half the largest memory_budget", int64(maxMemoryBudget/2))
	case c.FlushAge == 0:
		return badValue("flush_age", c.FlushAge, "use a positive age, or a negative one to disable age-based flushes")
	case c.LeaseTTL < time.Second || c.LeaseTTL > maxLeaseTTL:
		return badValue("lease_ttl", c.LeaseTTL, "must be at least 1s and at most %v (a successor waits this long after a writer dies)", maxLeaseTTL)
	case c.MaxBodyBytes <= 0:
		return badValue("max_body_bytes", c.MaxBodyBytes, "must be positive")
	case c.MaxBodyBytes > maxBodyLimit:
		return badValue("max_body_bytes", c.MaxBodyBytes, "must be at most 1 GiB (%d): a body decodes into one WAL record of at most %d bytes", int64(maxBodyLimit), int64(wal.MaxPayloadSize))
	case c.ShutdownTimeout <= 0:
		return badValue("shutdown_timeout", c.ShutdownTimeout, "must be positive")
	case c.UnreadyDelay < 0:
		return badValue("unready_delay", c.UnreadyDelay, "must not be negative")
	case level.UnmarshalText([]byte(c.LogLevel)) != nil:
		return badValue("log_level", c.LogLevel, "want debug, info, warn or error")
	}
	return nil
}

// validateEtcd checks an external cluster's settings in full (TLS files
// included), and that none is set for the embedded etcd, which would
// silently ignore them.
func (c *Config) validateEtcd() error {
	e := c.Etcd
	if len(e.Endpoints) > 0 {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		return nil
	}
	for _, f := range []struct{ key, v string }{{"etcd.tls.ca_file", e.TLS.CAFile}, {"etcd.tls.cert_file", e.TLS.CertFile},
		{"etcd.tls.key_file", e.TLS.KeyFile}, {"etcd.tls.server_name", e.TLS.ServerName}} {
		if f.v != "" {
			return badValue(f.key, f.v, "is set but etcd.endpoints is empty: the embedded etcd takes no TLS")
		}
	}
	switch {
	case e.TLS.InsecureSkipVerify:
		return badValue("etcd.tls.insecure_skip_verify", true, "is set but etcd.endpoints is empty: the embedded etcd takes no TLS")
	case e.Username != "":
		return badValue("etcd.username", e.Username, "is set but etcd.endpoints is empty: the embedded etcd takes no user")
	case e.DialTimeout < 0:
		return badValue("etcd.dial_timeout", e.DialTimeout, "must not be negative")
	case e.RequestTimeout < 0:
		return badValue("etcd.request_timeout", e.RequestTimeout, "must not be negative")
	}
	return nil
}

// redacted returns c with the etcd and Cassandra passwords hidden, for
// printing.
func (c Config) redacted() Config {
	if c.Etcd.Password != "" {
		c.Etcd.Password = "REDACTED"
	}
	if c.Snapshots.Cassandra.Password != "" {
		c.Snapshots.Cassandra.Password = "REDACTED"
	}
	return c
}

// newConfig groups the configuration commands.
func newConfig() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check the configuration file"}
	var path string
	check := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration (defaults ← --config file) and print the effective settings, password redacted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveConfig(cmd.Flags(), path, Config{})
			if err != nil {
				return err
			}
			enc := yaml.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent(2)
			if err := errors.Join(enc.Encode(cfg.redacted()), enc.Close()); err != nil {
				return err
			}
			return printDefaultColumns(cmd.OutOrStdout(), cfg)
		},
	}
	addConfigFlag(check.Flags(), &path)
	cmd.AddCommand(check)
	return cmd
}

// printDefaultColumns shows, as YAML comments, the columns a table
// without columns: gets: its recorded ones, or for a new table the
// rollout schema. Comments, so that the output read back as a
// configuration still sets none.
func printDefaultColumns(w io.Writer, cfg Config) error {
	if cfg.Columns != nil {
		return nil
	}
	text, err := yaml.Marshal(map[string][]schema.Column{"columns": schema.Rollout().Columns})
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# columns: not set: the table's recorded columns, or for a new table the rollout schema:\n")
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(text), "\n"), "\n") {
		b.WriteString("# " + line)
	}
	b.WriteString("\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// storeOptions are the settings of the commands that work on a data dir
// and its metadata without serving: merge, inspect, wal and snapshot get.
type storeOptions struct {
	configFile string
	dataDir    string
	table      string
	etcd       etcdclient.Config
	schema     *schema.Schema // the table's columns
	// tables are every table of the configuration when it has tables:
	// and --table was not given; merge merges each.
	tables []TableConfig
	// storage is the chosen table's object store, storageKey its section
	// for errors; storages those of tables, by name.
	storage    StorageConfig
	storageKey string
	storages   map[string]storageChoice
}

// addDataFlags binds --config, --data-dir and --table.
func addDataFlags(f *pflag.FlagSet, o *storeOptions) {
	def := defaultConfig()
	addConfigFlag(f, &o.configFile)
	f.StringVar(&o.dataDir, "data-dir", def.DataDir, "data directory")
	f.StringVar(&o.table, "table", def.Table, "table name")
}

// addStoreFlags binds the data flags and those of etcd.
func addStoreFlags(f *pflag.FlagSet, o *storeOptions) {
	addDataFlags(f, o)
	addEtcdFlags(f, &o.etcd)
}

// resolve applies the configuration file under the flags set.
func (o *storeOptions) resolve(f *pflag.FlagSet) error {
	cfg, err := resolveConfig(f, o.configFile, Config{DataDir: o.dataDir, Table: o.table, Etcd: o.etcd})
	if err != nil {
		return err
	}
	o.dataDir, o.etcd = cfg.DataDir, cfg.Etcd
	t, err := cfg.chosenTable(f)
	if err != nil {
		return err
	}
	o.table, o.schema = t.Name, mustSchema(t.Columns)
	o.storage, o.storageKey = cfg.storageFor(t), cfg.storageKey(t)
	if len(cfg.Tables) > 0 && !f.Changed("table") {
		o.tables = cfg.tables()
		o.storages = map[string]storageChoice{}
		for _, t := range o.tables {
			o.storages[t.Name] = storageChoice{cfg.storageKey(t), cfg.storageFor(t)}
		}
	}
	return nil
}

// config is the serve options as a Config, for resolveConfig.
func (o *serveOptions) config() Config {
	return Config{DataDir: o.dataDir, Listen: o.listen, AdminListen: o.adminListen, Table: o.table,
		Shards: o.shards, FlushBytes: o.flushBytes, FlushAge: o.flushAge, LeaseTTL: o.leaseTTL,
		MaxBodyBytes: o.maxBodyBytes, ShutdownTimeout: o.shutdownTimeout, UnreadyDelay: o.unreadyDelay, LogLevel: o.logLevel, Etcd: o.etcd,
		Snapshots: o.snapshots, Limits: o.limits, HTTP: o.http, MemoryBudget: o.memoryBudget, Iceberg: o.iceberg, Columns: o.columns,
		Tables: o.tables, Storage: o.storage, WAL: o.wal}
}

// resolve applies the configuration file under the flags set.
func (o *serveOptions) resolve(f *pflag.FlagSet) error {
	c, err := resolveConfig(f, o.configFile, o.config())
	if err != nil {
		return err
	}
	o.dataDir, o.listen, o.adminListen, o.table, o.shards = c.DataDir, c.Listen, c.AdminListen, c.Table, c.Shards
	o.flushBytes, o.flushAge, o.leaseTTL = c.FlushBytes, c.FlushAge, c.LeaseTTL
	o.maxBodyBytes, o.shutdownTimeout, o.unreadyDelay, o.logLevel, o.etcd = c.MaxBodyBytes, c.ShutdownTimeout, c.UnreadyDelay, c.LogLevel, c.Etcd
	o.snapshots, o.limits, o.http, o.memoryBudget = c.Snapshots, c.Limits, c.HTTP, c.MemoryBudget
	o.iceberg, o.columns, o.tables, o.storage, o.wal = c.Iceberg, c.Columns, c.Tables, c.Storage, c.WAL
	return nil
}
