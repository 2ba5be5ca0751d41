package catalog

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strconv"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcderr"
)

// CreateTable writes the table's first metadata file (version 0) and its
// record, in a transaction that requires the record to be absent and the
// namespace unchanged (and rewrites the namespace key, so a concurrent
// DropNamespace fails). A location is required (catalog.WithLocation).
//
// Unlike catalogs that assign fresh ids, this one keeps the schema's field
// ids as given: rollwal's ids are wire format (see BaseSchema).
func (c *Etcd) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...icecat.CreateTableOpt) (*table.Table, error) {
	ns, name, err := splitTable(ident)
	if err != nil {
		return nil, err
	}
	cfg := icecat.NewCreateTableCfg()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Location == "" {
		return nil, fmt.Errorf("catalog: table %s.%s: no location (pass catalog.WithLocation)", ns, name)
	}
	props, nsRev, err := c.namespaceProps(ctx, ns)
	if err != nil {
		return nil, err
	}
	meta, err := newMetadata(sc, cfg.PartitionSpec, cfg.SortOrder, cfg.Location, cfg.Properties)
	if err != nil {
		return nil, fmt.Errorf("catalog: table %s.%s: %w", ns, name, err)
	}
	loc := metadataLocation(cfg.Location, 0)
	if err := c.writeMetadata(meta, loc, nil); err != nil {
		return nil, err
	}
	key, nsKey := c.keys.table(ns, name), c.keys.namespace(ns)
	value := record{Format: recordFormat, MetadataLocation: loc}.encode()
	err = c.put(ctx, key, value, []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.ModRevision(nsKey), "=", nsRev),
	}, clientv3.OpPut(key, string(value)), clientv3.OpPut(nsKey, encodeProps(props)))
	if err != nil {
		return nil, fmt.Errorf("catalog: create table %s.%s: %w", ns, name, c.whyNotCreated(ctx, key, err))
	}
	return table.New(table.Identifier{ns, name}, meta, loc, c.fsF, c), nil
}

// whyNotCreated turns a false create guard into ErrTableAlreadyExists when
// the record exists.
func (c *Etcd) whyNotCreated(ctx context.Context, key string, err error) error {
	if resp, gerr := c.get(ctx, key); gerr == nil && len(resp.Kvs) > 0 {
		return fmt.Errorf("%w: %w", icecat.ErrTableAlreadyExists, err)
	}
	return err
}

// put runs a guarded transaction that writes value under key. A false
// guard is ErrConflict; an ambiguous failure is decided by reading key
// back (value there byte for byte: applied).
func (c *Etcd) put(ctx context.Context, key string, value []byte, cmps []clientv3.Cmp, ops ...clientv3.Op) error {
	ok, err := c.txn(ctx, cmps, ops...)
	switch {
	case err == nil && ok:
		return nil
	case err == nil:
		return conflict(key + " or its namespace changed")
	case etcderr.Definitive(err):
		return err
	}
	resp, rerr := c.get(context.WithoutCancel(ctx), key)
	switch {
	case rerr != nil:
		return fmt.Errorf("%w: %s: %w (read back: %w)", ErrUnknownOutcome, key, err, rerr)
	case len(resp.Kvs) > 0 && bytes.Equal(resp.Kvs[0].Value, value):
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrNotApplied, key, err)
}

// newMetadata builds format-v2 (or props' format-version) metadata that
// keeps sc's field ids.
func newMetadata(sc *iceberg.Schema, spec *iceberg.PartitionSpec, order table.SortOrder, loc string, props iceberg.Properties) (table.Metadata, error) {
	props = maps.Clone(props)
	version := table.DefaultFormatVersion
	if v, ok := props[table.PropertyFormatVersion]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", iceberg.ErrInvalidFormatVersion, v)
		}
		version = n
		delete(props, table.PropertyFormatVersion)
	}
	if spec == nil {
		spec = iceberg.UnpartitionedSpec
	}
	b, err := table.NewMetadataBuilder(version)
	if err != nil {
		return nil, err
	}
	steps := []func() error{
		func() error { return b.SetUUID(uuid.New()) },
		func() error { return b.AddSchema(sc) },
		func() error { return b.SetCurrentSchemaID(-1) },
		func() error { return b.AddSortOrder(&order) },
		func() error { return b.SetDefaultSortOrderID(-1) },
		func() error { return b.AddPartitionSpec(spec, true) },
		func() error { return b.SetDefaultSpecID(-1) },
		func() error { return b.SetLoc(loc) },
		func() error { return b.SetProperties(props) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return b.Build()
}

// DropTable removes the table's record; its files stay (no purge).
func (c *Etcd) DropTable(ctx context.Context, ident table.Identifier) error {
	ns, name, err := splitTable(ident)
	if err != nil {
		return err
	}
	key := c.keys.table(ns, name)
	resp, err := c.get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return noSuchTable(ns + "." + name)
	}
	ok, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)}, clientv3.OpDelete(key))
	if err == nil && !ok {
		err = conflict("table " + ns + "." + name + " changed while it was dropped")
	}
	return err
}

// RenameTable moves a table's record to a new identifier in one
// transaction; its files stay where they are.
func (c *Etcd) RenameTable(ctx context.Context, from, to table.Identifier) (*table.Table, error) {
	cur, err := c.load(ctx, from)
	if err != nil {
		return nil, err
	}
	ns, name, err := splitTable(to)
	if err != nil {
		return nil, err
	}
	props, nsRev, err := c.namespaceProps(ctx, ns)
	if err != nil {
		return nil, err
	}
	key, nsKey := c.keys.table(ns, name), c.keys.namespace(ns)
	value := cur.rec.encode()
	err = c.put(ctx, key, value, []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(cur.key), "=", cur.rev),
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.ModRevision(nsKey), "=", nsRev),
	}, clientv3.OpDelete(cur.key), clientv3.OpPut(key, string(value)), clientv3.OpPut(nsKey, encodeProps(props)))
	if err != nil {
		return nil, fmt.Errorf("catalog: rename %v to %v: %w", from, to, c.whyNotCreated(ctx, key, err))
	}
	return c.LoadTable(ctx, to)
}
