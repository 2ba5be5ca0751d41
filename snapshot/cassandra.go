package snapshot

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

// Defaults and bounds of the Cassandra backend.
const (
	DefaultCassandraTable   = "snapshots"
	DefaultCassandraTimeout = 15 * time.Second
	// MaxCassandraTTL is Cassandra's largest TTL, 20 years.
	MaxCassandraTTL = 630720000 * time.Second
	// casRounds bounds the advance/claim rounds of one Persist (each round
	// is one or two LWTs). A round only repeats when the row vanished or
	// changed between its two statements.
	casRounds = 3
)

// CassandraOptions configure NewCassandra and CreateSchema.
type CassandraOptions struct {
	// Hosts are the contact points, "host" or "host:port" (default port
	// 9042). Required.
	Hosts []string
	// Keyspace holds the table. Required. Keyspace and Table are lower-case
	// CQL identifiers: [a-z][a-z0-9_]{0,47}.
	Keyspace string
	// Table is the snapshot table; default DefaultCassandraTable.
	Table string
	// Consistency is the level of every read and of the commit phase of
	// every LWT; default LocalQuorum. It must be quorum-class (Quorum,
	// LocalQuorum or All) so that a read sees every committed write.
	Consistency gocql.Consistency
	// SerialConsistency is the level of the Paxos phase of every LWT;
	// default LocalSerial. LocalSerial serializes writers within one
	// datacenter only: use Serial if a zombie writer can run in another.
	SerialConsistency gocql.SerialConsistency
	// TTL, when positive, is set on every write (USING TTL, whole seconds,
	// rounded up; at most MaxCassandraTTL). Choose it once: the fence lasts
	// only as long as the row. Zero means snapshots never expire.
	TTL time.Duration
	// Timeout bounds each request on the client side; default
	// DefaultCassandraTimeout. Keep it above the server's write and CAS
	// timeouts so that a server timeout comes back typed, not as silence.
	Timeout time.Duration
	// CreateSchema makes NewCassandra call CreateSchema first.
	CreateSchema bool
	// Replication, when set, makes CreateSchema create the keyspace too,
	// e.g. {"class": "NetworkTopologyStrategy", "dc1": "3"}. Nil: the
	// keyspace must exist.
	Replication map[string]string
	// Datacenter, when set, is the local datacenter: requests go to its
	// hosts first. Empty: all hosts, round robin.
	Datacenter string
	// Username and Password, when Username is set, log in with Cassandra's
	// PasswordAuthenticator.
	Username, Password string
	// TLS, when set, encrypts every connection. Server certificates are
	// verified (against ServerName, or else each host's address) unless
	// InsecureSkipVerify is set. Nil: plain text.
	TLS *tls.Config
	// LegacyLastWriteWins writes with plain UPDATE and DELETE, with no
	// fence: a stale writer overwrites a newer snapshot (the bug the LWT
	// fence exists for). For parity with deployments that have not switched
	// yet; never mix the two modes on one table (see the package doc).
	LegacyLastWriteWins bool
	// Logger receives the driver's log lines; nil discards them.
	Logger *slog.Logger
}

var cqlIdent = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)
var replicationWord = regexp.MustCompile(`^[A-Za-z0-9_.]{1,128}$`)

// EnsureDefaults fills in the zero fields that have defaults.
func (o *CassandraOptions) EnsureDefaults() {
	if o.Table == "" {
		o.Table = DefaultCassandraTable
	}
	if o.Consistency == gocql.Any {
		o.Consistency = gocql.LocalQuorum
	}
	if o.SerialConsistency == 0 {
		o.SerialConsistency = gocql.LocalSerial
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultCassandraTimeout
	}
}

// Validate reports the first unusable option, as ErrInvalid.
func (o *CassandraOptions) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cassandra options: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case len(o.Hosts) == 0:
		return bad("no Hosts")
	case !cqlIdent.MatchString(o.Keyspace):
		return bad("keyspace %q: want [a-z][a-z0-9_]{0,47}", o.Keyspace)
	case !cqlIdent.MatchString(o.Table):
		return bad("table %q: want [a-z][a-z0-9_]{0,47}", o.Table)
	case o.TTL < 0 || o.TTL > MaxCassandraTTL:
		return bad("TTL %s: want 0 (none) up to %s", o.TTL, MaxCassandraTTL)
	case o.Password != "" && o.Username == "":
		return bad("Password is set without Username")
	}
	switch o.Consistency {
	case gocql.Quorum, gocql.LocalQuorum, gocql.All:
	default:
		return bad("consistency %s: want QUORUM, LOCAL_QUORUM or ALL (reads must see committed LWTs)", o.Consistency)
	}
	switch o.SerialConsistency {
	case gocql.Serial, gocql.LocalSerial:
	default:
		return bad("serial consistency %s: want SERIAL or LOCAL_SERIAL", o.SerialConsistency)
	}
	for k, v := range o.Replication {
		if !replicationWord.MatchString(k) || !replicationWord.MatchString(v) {
			return bad("replication %q: %q: want [A-Za-z0-9_.]", k, v)
		}
	}
	if o.Replication != nil && o.Replication["class"] == "" {
		return bad("replication needs a class")
	}
	return nil
}

func (o *CassandraOptions) ttlSeconds() int {
	return int((o.TTL + time.Second - 1) / time.Second)
}

// Cassandra is the Cassandra backend. See the package doc for the table,
// the statements and how Persist interprets their results.
type Cassandra struct {
	session *gocql.Session
	opts    CassandraOptions
	ttl     int // seconds; 0 = none
	stmt    statements
	// beforeStep, when set (by tests), runs before each LWT of Persist, to
	// let another writer act between the steps.
	beforeStep func(step string, round int)
}

var _ Store = (*Cassandra)(nil)

// NewCassandra connects, checks that every node is at or above the LWT
// version floor and that the table exists without a default TTL, and
// returns the backend. With CreateSchema set it creates the table (and the
// keyspace, given Replication) first.
func NewCassandra(ctx context.Context, opts CassandraOptions) (*Cassandra, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	session, err := connect(opts)
	if err != nil {
		return nil, err
	}
	c := &Cassandra{session: session, opts: opts, ttl: opts.ttlSeconds(), stmt: newStatements(opts.Keyspace, opts.Table)}
	if err := c.open(ctx); err != nil {
		session.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cassandra) open(ctx context.Context) error {
	if err := checkVersions(ctx, c.session); err != nil {
		return err
	}
	if c.opts.CreateSchema {
		if err := createSchema(ctx, c.session, c.opts); err != nil {
			return err
		}
	}
	return checkTable(ctx, c.session, c.opts)
}

// CreateSchema creates the snapshot table if it does not exist (and the
// keyspace, when opts.Replication is set), and waits for schema agreement.
// It does not alter an existing table.
func CreateSchema(ctx context.Context, opts CassandraOptions) error {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	session, err := connect(opts)
	if err != nil {
		return err
	}
	defer session.Close()
	return createSchema(ctx, session, opts)
}

// Schema returns the CREATE TABLE statement CreateSchema runs.
func Schema(keyspace, table string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
	table_name text,
	shard      text,
	source     text,
	"offset"   bigint,
	value      blob,
	metadata   frozen<map<text, text>>,
	PRIMARY KEY ((table_name, shard, source))
) WITH default_time_to_live = 0
  AND comment = 'rollwal snapshot offsets; written only by lightweight transactions (docs/snapshot-fencing.md)'`,
		keyspace, table)
}

func createSchema(ctx context.Context, session *gocql.Session, opts CassandraOptions) error {
	if opts.Replication != nil {
		parts := make([]string, 0, len(opts.Replication))
		for _, k := range slices.Sorted(maps.Keys(opts.Replication)) {
			parts = append(parts, fmt.Sprintf("'%s': '%s'", k, opts.Replication[k]))
		}
		stmt := fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = {%s}", opts.Keyspace, strings.Join(parts, ", "))
		if err := ddl(ctx, session, opts, stmt); err != nil {
			return err
		}
	}
	if err := ddl(ctx, session, opts, Schema(opts.Keyspace, opts.Table)); err != nil {
		return err
	}
	if err := session.AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("snapshot: cassandra: schema agreement after creating %s.%s: %w", opts.Keyspace, opts.Table, err)
	}
	return nil
}

func ddl(ctx context.Context, session *gocql.Session, opts CassandraOptions, stmt string) error {
	// Schema changes take longer than writes; give them a few timeouts.
	ctx, cancel := context.WithTimeout(ctx, 4*opts.Timeout)
	defer cancel()
	if err := session.Query(stmt).WithContext(ctx).Consistency(opts.Consistency).Exec(); err != nil {
		return fmt.Errorf("snapshot: cassandra: %s: %w", firstLine(stmt), err)
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func connect(opts CassandraOptions) (*gocql.Session, error) {
	cluster := gocql.NewCluster(opts.Hosts...)
	cluster.ProtoVersion = 4
	cluster.Consistency = opts.Consistency
	cluster.SerialConsistency = opts.SerialConsistency
	cluster.Timeout = opts.Timeout
	cluster.ConnectTimeout = opts.Timeout
	cluster.RetryPolicy = neverRetry{}
	cluster.Logger = driverLogger{opts.Logger}
	fallback := gocql.RoundRobinHostPolicy()
	if opts.Datacenter != "" {
		fallback = gocql.DCAwareRoundRobinPolicy(opts.Datacenter)
	}
	cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(fallback)
	if opts.Username != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: opts.Username, Password: opts.Password}
	}
	if opts.TLS != nil {
		cluster.SslOpts = &gocql.SslOptions{Config: opts.TLS, EnableHostVerification: !opts.TLS.InsecureSkipVerify}
	}
	session, err := cluster.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("snapshot: cassandra: connect to %v: %w", opts.Hosts, err)
	}
	return session, nil
}

// checkVersions refuses a cluster with a node below the LWT floor:
// CASSANDRA-12126 (fixed in 3.0.24, 3.11.10 and 4.0) let a non-applying LWT
// read state that a later read could contradict, which breaks the
// "stored offset" a conflict reports and the fence itself.
func checkVersions(ctx context.Context, session *gocql.Session) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultCassandraTimeout)
	defer cancel()
	var local string
	if err := session.Query(`SELECT release_version FROM system.local`).WithContext(ctx).Scan(&local); err != nil {
		return fmt.Errorf("snapshot: cassandra: read release_version: %w", err)
	}
	versions := map[string]string{"coordinator": local}
	iter := session.Query(`SELECT peer, release_version FROM system.peers`).WithContext(ctx).Iter()
	var peer, v string
	for iter.Scan(&peer, &v) {
		versions["peer "+peer] = v
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("snapshot: cassandra: read peers' release_version: %w", err)
	}
	for _, node := range slices.Sorted(maps.Keys(versions)) {
		if !lwtSafeVersion(versions[node]) {
			return fmt.Errorf("snapshot: cassandra: %s runs Cassandra %q, below the LWT floor 3.0.24 / 3.11.10 / 4.0 (CASSANDRA-12126)",
				node, versions[node])
		}
	}
	return nil
}

// lwtSafeVersion reports whether a release_version is at or above the
// floor: 4.0 and later, 3.11.10+, 3.0.24+.
func lwtSafeVersion(v string) bool {
	var n [3]int
	for i, part := range strings.SplitN(v, ".", 3) {
		digits := part
		if j := strings.IndexFunc(part, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = part[:j]
		}
		x, err := strconv.Atoi(digits)
		if err != nil {
			return false
		}
		n[i] = x
	}
	switch {
	case n[0] >= 4:
		return true
	case n[0] == 3 && n[1] == 11:
		return n[2] >= 10
	case n[0] == 3 && n[1] == 0:
		return n[2] >= 24
	}
	return false
}

// checkTable makes sure the table exists and has no default TTL: a table
// default would give cells written without USING TTL a lifetime the fence
// does not know about.
func checkTable(ctx context.Context, session *gocql.Session, opts CassandraOptions) error {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	var ttl int
	err := session.Query(`SELECT default_time_to_live FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
		opts.Keyspace, opts.Table).WithContext(ctx).Scan(&ttl)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return fmt.Errorf("snapshot: cassandra: table %s.%s does not exist; create it with CreateSchema or:\n%s",
			opts.Keyspace, opts.Table, Schema(opts.Keyspace, opts.Table))
	case err != nil:
		return fmt.Errorf("snapshot: cassandra: read the schema of %s.%s: %w", opts.Keyspace, opts.Table, err)
	case ttl != 0:
		return fmt.Errorf("%w: cassandra: table %s.%s has default_time_to_live = %d; the snapshot table must have none (set CassandraOptions.TTL instead)",
			ErrInvalid, opts.Keyspace, opts.Table, ttl)
	}
	return nil
}

// Close closes the session. It is safe to call more than once.
func (c *Cassandra) Close() error {
	c.session.Close()
	return nil
}

// neverRetry is the retry policy of every statement. gocql 1.7 applies a
// RetryPolicy whatever a query's idempotence, and re-sending an LWT whose
// first attempt timed out starts a second Paxos round whose answer hides
// the first one's outcome. Retrying is the caller's decision: Persist
// reports ErrUnknownOutcome and the caller persists again.
type neverRetry struct{}

func (neverRetry) Attempt(gocql.RetryableQuery) bool  { return false }
func (neverRetry) GetRetryType(error) gocql.RetryType { return gocql.Rethrow }

// driverLogger sends gocql's log lines to an slog.Logger, or nowhere.
type driverLogger struct{ l *slog.Logger }

func (d driverLogger) Print(v ...any) { d.log(fmt.Sprint(v...)) }
func (d driverLogger) Printf(format string, v ...any) {
	d.log(fmt.Sprintf(format, v...))
}
func (d driverLogger) Println(v ...any) { d.log(strings.TrimSuffix(fmt.Sprintln(v...), "\n")) }

func (d driverLogger) log(msg string) {
	if d.l != nil {
		d.l.Info(msg, "component", "gocql")
	}
}
