package shardmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/internal/etcderr"
	"github.com/rollwal/rollwal/schema"
)

// The table's schema record, /<prefix>/<table>/schema: the columns every
// writer and merge of the table must use. The first writer of a table
// records its configured columns; every later one, and every merge, is
// held to them, so that two processes given different configurations
// fail at start, naming the difference, instead of writing generations the
// merge cannot put in one table.

// ErrSchemaMismatch marks a configured schema that is not the table's.
var ErrSchemaMismatch = errs.New(errs.InvalidInput, "shardmeta: the configured columns are not the table's")

// MaxSchemaRecordBytes bounds one version's record: far below etcd's
// request limit.
const MaxSchemaRecordBytes = 256 << 10

// MaxSchemaVersions bounds a table's schema history (each version is kept
// for the WAL records and files written with it): a column added every
// week for nine years. Beyond, a change is refused.
const MaxSchemaVersions = 500

// SchemaRecord is one version of a table's schema. The current version is
// at Keys.Schema; every version, the current one included, at
// Keys.SchemaVersion (a table recorded before versions existed has its
// version 1 at Keys.Schema alone, and no field ids: they are derived).
type SchemaRecord struct {
	Version     int             `json:"version"`
	Fingerprint string          `json:"fingerprint"`
	Columns     []schema.Column `json:"columns"`
	// NextFieldID is the field id the next added column or field takes.
	NextFieldID int `json:"next_field_id,omitempty"`
	// Retired are names that dropped or renamed columns had: never used
	// again, since base files resolve columns by name.
	Retired []string `json:"retired,omitempty"`
	// Changes say, one sentence each, what this version changed.
	Changes []string `json:"changes,omitempty"`

	schema *schema.Schema
}

// Schema is the record's schema, with its field ids.
func (r *SchemaRecord) Schema() *schema.Schema { return r.schema }

// Schema returns the key of the table's current schema record.
func (k Keys) Schema() string { return k.Root() + "schema" }

// SchemaVersion returns the key of version v of the table's schema.
func (k Keys) SchemaVersion(v int) string { return fmt.Sprintf("%sschemas/%010d", k.Root(), v) }

// EnsureSchema records s as the table's schema when the table has none,
// and otherwise checks that s is the current version; a difference is an
// ErrSchemaMismatch naming it. It returns the current record. Like a
// claim, it rides out an etcd without a leader: a transient failure is
// tried again until ctx ends.
func EnsureSchema(ctx context.Context, cli *clientv3.Client, keys Keys, s *schema.Schema, timeout time.Duration) (*SchemaRecord, error) {
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	rec, err := firstSchemaRecord(s.Columns)
	if err != nil {
		return nil, err
	}
	data, err := encodeSchemaRecord(rec)
	if err != nil {
		return nil, err
	}
	return retryTransient(ctx, func() (*SchemaRecord, error) {
		return ensureSchemaOnce(ctx, cli, keys, rec, data, timeout)
	})
}

// retryTransient calls fn until it succeeds, fails for good or ctx ends.
func retryTransient(ctx context.Context, fn func() (*SchemaRecord, error)) (*SchemaRecord, error) {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rec, err := fn()
		if err == nil || !etcderr.Transient(err) || ctx.Err() != nil {
			return rec, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// ensureSchemaOnce records rec (encoded as data) unless the table has a
// record, which must then have rec's fingerprint.
func ensureSchemaOnce(ctx context.Context, cli *clientv3.Client, keys Keys, rec *SchemaRecord, data []byte, timeout time.Duration) (*SchemaRecord, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	k := keys.Schema()
	resp, err := cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(data)), clientv3.OpPut(keys.SchemaVersion(1), string(data))).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return nil, fmt.Errorf("shardmeta: record the schema of table %s: %w", keys.Table, err)
	}
	if resp.Succeeded {
		return rec, nil
	}
	stored, err := schemaFromGet(keys, k, resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return nil, err
	}
	if stored.Fingerprint != rec.Fingerprint {
		return nil, fmt.Errorf("%w: table %s has schema version %d, and %s", ErrSchemaMismatch, keys.Table, stored.Version,
			SchemaDifference(stored.Columns, rec.Columns))
	}
	return stored, nil
}

func schemaFromGet(keys Keys, k string, kvs []*mvccpb.KeyValue) (*SchemaRecord, error) {
	if len(kvs) != 1 {
		return nil, fmt.Errorf("shardmeta: the schema of table %s: expected one record at %s", keys.Table, k)
	}
	stored, err := decodeSchemaRecord(kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("shardmeta: the schema record of table %s at %s: %w", keys.Table, k, err)
	}
	return stored, nil
}

// CheckSchemaRecord reports whether s fits a schema record, so that a
// configuration check refuses what a writer's start would.
func CheckSchemaRecord(s *schema.Schema) error {
	rec, err := firstSchemaRecord(s.Columns)
	if err == nil {
		_, err = encodeSchemaRecord(rec)
	}
	return err
}

// firstSchemaRecord is version 1 of a table of the given columns.
func firstSchemaRecord(cols []schema.Column) (*SchemaRecord, error) {
	return newSchemaRecord(1, cols, nil, nil)
}

// newSchemaRecord is version v of columns, with field ids assigned where
// they have none.
func newSchemaRecord(v int, cols []schema.Column, retired, changes []string) (*SchemaRecord, error) {
	withIDs, next := schema.WithFieldIDs(cols)
	s, err := schema.New(withIDs)
	if err != nil {
		return nil, err
	}
	return &SchemaRecord{Version: v, Fingerprint: s.Fingerprint(), Columns: s.Columns, NextFieldID: next,
		Retired: retired, Changes: changes, schema: s}, nil
}

func encodeSchemaRecord(rec *SchemaRecord) ([]byte, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSchemaRecordBytes {
		return nil, fmt.Errorf("shardmeta: the schema encodes to %d bytes of schema record, more than %d (fewer columns, fields or shorter docs)", len(data), MaxSchemaRecordBytes)
	}
	return data, nil
}

// LoadSchema reads the table's current schema record; nil when it has
// none.
func LoadSchema(ctx context.Context, cli *clientv3.Client, keys Keys) (*SchemaRecord, error) {
	rec, _, err := loadSchema(ctx, cli, keys)
	return rec, err
}

// loadSchema is LoadSchema and the record's modification revision.
func loadSchema(ctx context.Context, cli *clientv3.Client, keys Keys) (*SchemaRecord, int64, error) {
	resp, err := cli.Get(ctx, keys.Schema())
	if err != nil || len(resp.Kvs) == 0 {
		return nil, 0, err
	}
	rec, err := schemaFromGet(keys, keys.Schema(), resp.Kvs)
	if err != nil {
		return nil, 0, err
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// LoadSchemaVersion reads version v of the table's schema.
func LoadSchemaVersion(ctx context.Context, cli *clientv3.Client, keys Keys, v int) (*SchemaRecord, error) {
	resp, err := cli.Get(ctx, keys.SchemaVersion(v))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		// A table recorded before versions were kept has version 1 at
		// the current key only.
		cur, err := LoadSchema(ctx, cli, keys)
		if err != nil || (cur != nil && cur.Version == v) {
			return cur, err
		}
		return nil, fmt.Errorf("shardmeta: table %s has no schema version %d", keys.Table, v)
	}
	rec, err := schemaFromGet(keys, keys.SchemaVersion(v), resp.Kvs)
	if err == nil && rec.Version != v {
		err = fmt.Errorf("shardmeta: the record at %s is version %d", keys.SchemaVersion(v), rec.Version)
	}
	return rec, err
}

// ApplySchema moves the table's schema to the configured columns: the
// next version, if the change is one schema.Evolve allows (a refusal
// wraps schema.ErrSchemaChange and names it). A table without a record
// gets them as version 1. It returns the record the table has afterwards
// (the current one when nothing changes) and the changes; dryRun computes
// them without writing. The write is a compare-and-swap on the current
// record: of two racing applies, the second is computed again.
func ApplySchema(ctx context.Context, cli *clientv3.Client, keys Keys, configured []schema.Column, dryRun bool, timeout time.Duration) (*SchemaRecord, []string, error) {
	if err := keys.Validate(); err != nil {
		return nil, nil, err
	}
	for {
		rec, changes, err := applySchemaOnce(ctx, cli, keys, configured, dryRun, timeout)
		if !errors.Is(err, errSchemaRaced) {
			return rec, changes, err
		}
	}
}

var errSchemaRaced = errors.New("shardmeta: the schema record changed meanwhile")

func applySchemaOnce(ctx context.Context, cli *clientv3.Client, keys Keys, configured []schema.Column, dryRun bool, timeout time.Duration) (*SchemaRecord, []string, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cur, rev, err := loadSchema(rctx, cli, keys)
	if err != nil {
		return nil, nil, fmt.Errorf("shardmeta: read the schema of table %s: %w", keys.Table, err)
	}
	next, err := nextSchemaRecord(keys, cur, configured)
	if err != nil || next == cur || dryRun {
		return next, changesOf(next, cur), err
	}
	data, err := encodeSchemaRecord(next)
	if err != nil {
		return nil, nil, err
	}
	ops := []clientv3.Op{clientv3.OpPut(keys.Schema(), string(data)), clientv3.OpPut(keys.SchemaVersion(next.Version), string(data))}
	if cur != nil && cur.Version == 1 {
		// A table recorded before versions were kept has version 1 at
		// the current key alone: keep it for the WAL records and files
		// written with it.
		first, err := encodeSchemaRecord(cur)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, clientv3.OpPut(keys.SchemaVersion(1), string(first)))
	}
	resp, err := cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(keys.Schema()), "=", rev)).Then(ops...).Commit()
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("shardmeta: record schema version %d of table %s: %w", next.Version, keys.Table, err)
	case !resp.Succeeded:
		return nil, nil, errSchemaRaced
	}
	return next, next.Changes, nil
}

// changesOf is what next changes from cur: nothing when they are one.
func changesOf(next, cur *SchemaRecord) []string {
	if next == nil || next == cur {
		return nil
	}
	return next.Changes
}

// nextSchemaRecord is the record configured makes of cur: cur itself when
// nothing changes.
func nextSchemaRecord(keys Keys, cur *SchemaRecord, configured []schema.Column) (*SchemaRecord, error) {
	if cur == nil {
		rec, err := firstSchemaRecord(configured)
		if err == nil {
			rec.Changes = []string{fmt.Sprintf("create table %s with %d columns", keys.Table, len(configured))}
		}
		return rec, err
	}
	ev, err := schema.Evolve(cur.Columns, cur.Retired, configured, cur.NextFieldID)
	if err != nil {
		return nil, fmt.Errorf("table %s at schema version %d: %w", keys.Table, cur.Version, err)
	}
	if len(ev.Changes) == 0 {
		return cur, nil
	}
	if cur.Version >= MaxSchemaVersions {
		return nil, fmt.Errorf("%w: table %s has %d schema versions, the most a table keeps", schema.ErrSchemaChange, keys.Table, cur.Version)
	}
	next, err := newSchemaRecord(cur.Version+1, ev.Columns, ev.Retired, ev.Changes)
	if err != nil {
		return nil, fmt.Errorf("table %s: schema version %d: %w", keys.Table, cur.Version+1, err)
	}
	next.NextFieldID = max(next.NextFieldID, ev.NextID)
	return next, nil
}

func decodeSchemaRecord(data []byte) (*SchemaRecord, error) {
	var r SchemaRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	withIDs, next := schema.WithFieldIDs(r.Columns)
	s, err := schema.New(withIDs)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	case r.Version < 1:
		return nil, fmt.Errorf("%w: version %d", ErrInvalidManifest, r.Version)
	case s.Fingerprint() != r.Fingerprint:
		return nil, fmt.Errorf("%w: fingerprint %s, the columns have %s", ErrInvalidManifest, r.Fingerprint, s.Fingerprint())
	case r.NextFieldID != 0 && r.NextFieldID < next:
		return nil, fmt.Errorf("%w: next field id %d is taken", ErrInvalidManifest, r.NextFieldID)
	}
	r.Columns, r.NextFieldID, r.schema = s.Columns, max(r.NextFieldID, next), s
	return &r, nil
}

// SchemaDifference names the first difference between the stored columns
// and the configured ones, in words an operator can act on.
func SchemaDifference(stored, configured []schema.Column) string {
	for i := range max(len(stored), len(configured)) {
		switch {
		case i >= len(stored):
			return fmt.Sprintf("the configuration adds column %q (%s), which the table does not have", configured[i].Name, configured[i].TypeString())
		case i >= len(configured):
			return fmt.Sprintf("the configuration lacks the table's column %q (%s)", stored[i].Name, stored[i].TypeString())
		}
		s, c := stored[i], configured[i]
		switch {
		case s.Name != c.Name:
			return fmt.Sprintf("column %d is %q in the table and %q in the configuration", i, s.Name, c.Name)
		case s.TypeString() != c.TypeString():
			return fmt.Sprintf("column %q is %s in the table and %s in the configuration", s.Name, s.TypeString(), c.TypeString())
		case s.Nullable != c.Nullable:
			return fmt.Sprintf("column %q is %s in the table and %s in the configuration", s.Name, nullability(s.Nullable), nullability(c.Nullable))
		}
	}
	return "the columns differ"
}

func nullability(n bool) string {
	if n {
		return "nullable"
	}
	return "not nullable"
}
