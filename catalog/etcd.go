package catalog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"time"

	icecat "github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// Type is the catalog type this package reports to iceberg-go.
const Type icecat.Type = "etcd"

// DefaultRequestTimeout bounds one etcd request.
const DefaultRequestTimeout = 5 * time.Second

// Options configure New.
type Options struct {
	// Client is the etcd client; required.
	Client *clientv3.Client
	// Prefix is where the catalog's keys live: names joined by "/", without
	// a leading or trailing "/" (for example "rollwal/t/iceberg").
	Prefix string
	// FS is the filesystem of the tables' metadata and data; nil means
	// vfs.Default.
	FS vfs.FS
	// Store, when set, holds the tables' metadata and data instead of FS:
	// table locations are then URLs in it (see StoreLocation and
	// objectIO). Nil keeps every file on FS.
	Store objstore.Store
	// RequestTimeout bounds each etcd request; 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives a line per commit; nil discards.
	Logger *slog.Logger
}

// EnsureDefaults fills in the zero fields.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks options after EnsureDefaults.
func (o *Options) Validate() error {
	if o.Client == nil {
		return errors.New("catalog: no etcd client")
	}
	if o.RequestTimeout < 0 {
		return fmt.Errorf("catalog: negative request timeout %v", o.RequestTimeout)
	}
	return validPrefix(o.Prefix)
}

// Etcd is an Iceberg catalog whose record of each table is one etcd key.
// It is safe for concurrent use.
type Etcd struct {
	opts    Options
	cli     *clientv3.Client
	keys    keys
	io      metaIO
	log     *slog.Logger
	cacheMu sync.Mutex
	cache   []cachedMetadata
	lists   listCache    // see appendSnapshot
	spare   spareWriters // see appendSnapshot
	// afterTxn, in tests, replaces the error of a commit transaction
	// after it ran (to lose an answer) or before (to drop the request).
	afterTxn func(op string, err error) error
}

var _ icecat.Catalog = (*Etcd)(nil)

// New returns the catalog over opts.Client.
func New(opts Options) (*Etcd, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var mio metaIO = newFileIO(opts.FS)
	if opts.Store != nil {
		mio = newObjectIO(opts.Store)
	}
	return &Etcd{opts: opts, cli: opts.Client, keys: keys{prefix: opts.Prefix}, io: mio, log: opts.Logger}, nil
}

// CatalogType reports "etcd".
func (c *Etcd) CatalogType() icecat.Type { return Type }

func (c *Etcd) rpc(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

func (c *Etcd) fsF(context.Context) (icebergio.IO, error) { return c.io, nil }

// metadata reads a table metadata file, or returns it from the cache of
// the last few read: metadata files are immutable, and one merge pass
// loads the same table several times.
func (c *Etcd) metadata(ctx context.Context, loc string) (table.Metadata, error) {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	for _, e := range c.cache {
		if e.loc == loc {
			return e.meta, nil
		}
	}
	tbl, err := table.NewFromLocation(ctx, nil, loc, c.fsF, c)
	if err != nil {
		return nil, err
	}
	c.remember(loc, tbl.Metadata())
	return tbl.Metadata(), nil
}

// remember caches metadata the catalog read or wrote; the caller holds
// cacheMu.
func (c *Etcd) remember(loc string, meta table.Metadata) {
	c.cache = append(c.cache, cachedMetadata{loc, meta})
	if len(c.cache) > metadataCacheSize {
		c.cache = c.cache[1:]
	}
}

const metadataCacheSize = 4

type cachedMetadata struct {
	loc  string
	meta table.Metadata
}

// current is a table as the catalog holds it: its record, the key's mod
// revision (the commit guard) and the metadata the record names.
type current struct {
	key  string
	rev  int64
	rec  record
	tbl  *table.Table
	name string
}

// get reads a key; a missing key is (nil, nil).
func (c *Etcd) get(ctx context.Context, key string) (*clientv3.GetResponse, error) {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	resp, err := c.cli.Get(rctx, key)
	if err != nil {
		return nil, fmt.Errorf("catalog: read %s: %w", key, err)
	}
	return resp, nil
}

// load reads the table's record and its metadata.
func (c *Etcd) load(ctx context.Context, ident table.Identifier) (*current, error) {
	ns, name, err := splitTable(ident)
	if err != nil {
		return nil, err
	}
	key := c.keys.table(ns, name)
	resp, err := c.get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, noSuchTable(ns + "." + name)
	}
	kv := resp.Kvs[0]
	rec, err := decodeRecord(key, kv.Value)
	if err != nil {
		return nil, err
	}
	meta, err := c.metadata(ctx, rec.MetadataLocation)
	if err != nil {
		return nil, fmt.Errorf("catalog: table %s.%s: metadata %s: %w", ns, name, rec.MetadataLocation, err)
	}
	tbl := table.New(table.Identifier{ns, name}, meta, rec.MetadataLocation, c.fsF, c)
	return &current{key: key, rev: kv.ModRevision, rec: rec, tbl: tbl, name: ns + "." + name}, nil
}

// LoadTable returns the table at the metadata its record names.
func (c *Etcd) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	cur, err := c.load(ctx, ident)
	if err != nil {
		return nil, err
	}
	return cur.tbl, nil
}

// CheckTableExists reports whether the table has a record.
func (c *Etcd) CheckTableExists(ctx context.Context, ident table.Identifier) (bool, error) {
	ns, name, err := splitTable(ident)
	if err != nil {
		return false, err
	}
	resp, err := c.get(ctx, c.keys.table(ns, name))
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0, nil
}

// ListTables lists the tables of a namespace, in name order.
func (c *Etcd) ListTables(ctx context.Context, namespace table.Identifier) iter.Seq2[table.Identifier, error] {
	return func(yield func(table.Identifier, error) bool) {
		names, err := c.listTables(ctx, namespace)
		if err != nil {
			yield(nil, err)
			return
		}
		for _, n := range names {
			if !yield(table.Identifier{namespace[0], n}, nil) {
				return
			}
		}
	}
}

func (c *Etcd) listTables(ctx context.Context, namespace table.Identifier) ([]string, error) {
	ns, err := splitNamespace(namespace)
	if err != nil {
		return nil, err
	}
	if _, _, err := c.namespaceProps(ctx, ns); err != nil {
		return nil, err
	}
	return c.listNames(ctx, c.keys.tables(ns))
}

// listNames returns the last path element of every key under prefix.
func (c *Etcd) listNames(ctx context.Context, prefix string) ([]string, error) {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	resp, err := c.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("catalog: list %s: %w", prefix, err)
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), prefix)
		if !strings.Contains(rest, "/") {
			names = append(names, rest)
		}
	}
	return names, nil
}
