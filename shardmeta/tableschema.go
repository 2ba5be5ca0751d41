package shardmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
var ErrSchemaMismatch = errors.New("shardmeta: the configured columns are not the table's")

// MaxSchemaRecordBytes bounds the record: far below etcd's request limit.
const MaxSchemaRecordBytes = 256 << 10

// SchemaRecord is the stored schema of a table.
type SchemaRecord struct {
	Version     int             `json:"version"`
	Fingerprint string          `json:"fingerprint"`
	Columns     []schema.Column `json:"columns"`
}

// Schema returns the table's schema record key.
func (k Keys) Schema() string { return k.Root() + "schema" }

// EnsureSchema records s as the table's schema when the table has none,
// and otherwise checks that s is the recorded one; a difference is an
// ErrSchemaMismatch naming it. It returns the record. Like a claim, it
// rides out an etcd without a leader: a transient failure is tried again
// until ctx ends.
func EnsureSchema(ctx context.Context, cli *clientv3.Client, keys Keys, s *schema.Schema, timeout time.Duration) (*SchemaRecord, error) {
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	rec := newSchemaRecord(s)
	data, err := encodeSchemaRecord(rec)
	if err != nil {
		return nil, err
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		stored, err := ensureSchemaOnce(ctx, cli, keys, rec, data, timeout)
		if err == nil || !etcderr.Transient(err) || ctx.Err() != nil {
			return stored, err
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
		Then(clientv3.OpPut(k, string(data))).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return nil, fmt.Errorf("shardmeta: record the schema of table %s: %w", keys.Table, err)
	}
	if resp.Succeeded {
		return rec, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("shardmeta: the schema of table %s: expected one record at %s", keys.Table, k)
	}
	stored, err := decodeSchemaRecord(kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("shardmeta: the schema record of table %s at %s: %w", keys.Table, k, err)
	}
	if stored.Fingerprint != rec.Fingerprint {
		return nil, fmt.Errorf("%w: table %s has schema version %d, and %s", ErrSchemaMismatch, keys.Table, stored.Version,
			SchemaDifference(stored.Columns, rec.Columns))
	}
	return stored, nil
}

// CheckSchemaRecord reports whether s fits a schema record, so that a
// configuration check refuses what a writer's start would.
func CheckSchemaRecord(s *schema.Schema) error {
	_, err := encodeSchemaRecord(newSchemaRecord(s))
	return err
}

// newSchemaRecord is the first record of a table of schema s.
func newSchemaRecord(s *schema.Schema) *SchemaRecord {
	return &SchemaRecord{Version: 1, Fingerprint: s.Fingerprint(), Columns: s.Columns}
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

// LoadSchema reads the table's schema record; nil when it has none.
func LoadSchema(ctx context.Context, cli *clientv3.Client, keys Keys) (*SchemaRecord, error) {
	resp, err := cli.Get(ctx, keys.Schema())
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return decodeSchemaRecord(resp.Kvs[0].Value)
}

func decodeSchemaRecord(data []byte) (*SchemaRecord, error) {
	var r SchemaRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	s, err := schema.New(r.Columns)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	case r.Version < 1:
		return nil, fmt.Errorf("%w: version %d", ErrInvalidManifest, r.Version)
	case s.Fingerprint() != r.Fingerprint:
		return nil, fmt.Errorf("%w: fingerprint %s, the columns have %s", ErrInvalidManifest, r.Fingerprint, s.Fingerprint())
	}
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
