package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// A table's schema has versions (shardmeta.SchemaRecord). A host serves
// the current one: appends are converted to it, and it follows a change
// while serving (schemas.watch). WAL records name the version they were
// written with, so that a replay decodes each with its own and converts
// it to the current one.

// schemaVersion is one version of the table's schema.
type schemaVersion struct {
	version int
	schema  *schema.Schema
}

// schemas are the versions of the table's schema a host has seen.
type schemas struct {
	cli     *clientv3.Client
	keys    shardmeta.Keys
	timeout time.Duration
	log     *slog.Logger

	cur       atomic.Pointer[schemaVersion]
	mu        sync.Mutex // guards byVersion and seen
	byVersion map[int]*schema.Schema
	// seen caches versionOf for the schemas batches were built from (a
	// producer's own, without ids); bounded, since a caller may make a
	// schema per batch.
	seen map[*schema.Schema]int
}

const maxSeenSchemas = 64

func newSchemas(o *Options) *schemas {
	return &schemas{cli: o.Etcd, keys: shardmeta.Keys{Prefix: o.Prefix, Table: o.Table}, timeout: o.RequestTimeout,
		log: o.Logger, byVersion: map[int]*schema.Schema{}, seen: map[*schema.Schema]int{}}
}

// current is the newest version the host knows; nil before the first
// record was read.
func (t *schemas) current() *schemaVersion { return t.cur.Load() }

// adopt makes rec known and, when it is newer, current.
func (t *schemas) adopt(rec *shardmeta.SchemaRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byVersion[rec.Version]; !ok {
		t.byVersion[rec.Version] = rec.Schema()
	}
	if cur := t.cur.Load(); cur == nil || rec.Version > cur.version {
		t.cur.Store(&schemaVersion{version: rec.Version, schema: t.byVersion[rec.Version]})
		if cur != nil {
			t.log.Info("serving a new schema version", "version", rec.Version, "changes", rec.Changes)
		}
	}
}

// version returns version v, reading it from etcd the first time.
func (t *schemas) version(ctx context.Context, v int) (*schema.Schema, error) {
	t.mu.Lock()
	s, ok := t.byVersion[v]
	t.mu.Unlock()
	if ok {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	rec, err := shardmeta.LoadSchemaVersion(ctx, t.cli, t.keys, v)
	if err != nil {
		return nil, fmt.Errorf("engine: schema version %d of table %s: %w", v, t.keys.Table, err)
	}
	t.adopt(rec)
	return rec.Schema(), nil
}

// versionOf is the version s is: the same schema, or one with the same
// columns and field ids. Newest first, so a batch built from an earlier
// version's columns that are also a later one's counts as the later.
func (t *schemas) versionOf(s *schema.Schema) (int, bool) {
	if cur := t.current(); cur != nil && cur.schema == s {
		return cur.version, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.seen[s]; ok {
		return v, true
	}
	best := 0
	for v, known := range t.byVersion {
		if v > best && (known == s || sameColumns(known, s)) {
			best = v
		}
	}
	if best > 0 && len(t.seen) < maxSeenSchemas {
		t.seen[s] = best
	}
	return best, best > 0
}

// sameColumns reports whether a and b store rows alike: same fingerprint
// and, where b has them, the same field ids.
func sameColumns(a, b *schema.Schema) bool {
	if a.Fingerprint() != b.Fingerprint() {
		return false
	}
	ids, _ := schema.WithFieldIDs(b.Columns)
	for i := range a.Columns {
		if b.Columns[i].ID != 0 && ids[i].ID != a.Columns[i].ID {
			return false
		}
	}
	return true
}

// refresh reads the current record and adopts it.
func (t *schemas) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	rec, err := shardmeta.LoadSchema(ctx, t.cli, t.keys)
	if err != nil {
		return err
	}
	if rec != nil {
		t.adopt(rec)
	}
	return nil
}

// watch follows the record until ctx ends: each change is read again
// (not taken from the event, so a compacted or restarted watch loses
// nothing), and a failed watch starts over after a pause.
func (t *schemas) watch(ctx context.Context) {
	for wait := 100 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := t.cli.Watch(wctx, t.keys.Schema())
		if err := t.refresh(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("reading the table's schema record", "err", err)
		}
		for resp := range ch {
			if resp.Err() != nil {
				break
			}
			if err := t.refresh(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("reading the table's schema record", "err", err)
			}
			wait = 100 * time.Millisecond
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// convert returns b in the current version, and that version. A batch of
// an earlier version is converted (columns added since are null); one of
// a version the table does not have is refused.
func (t *schemas) convert(b *schema.Batch) (*schema.Batch, *schemaVersion, error) {
	cur := t.current()
	if b.Schema == cur.schema {
		return b, cur, nil
	}
	v, ok := t.versionOf(b.Schema)
	if ok && v == cur.version {
		return b, cur, nil // the current columns, in a schema of the producer's own
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: the batch was built for columns that are no version of table %s's schema (build it from Host.Schema)",
			ErrInvalidAppend, t.keys.Table)
	}
	out, err := schema.Convert(b, cur.schema)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidAppend, err)
	}
	return out, cur, nil
}

// schemaVersionOf is the version of m's rows, as a manifest records it (0
// for version 1).
func (s *Shard) schemaVersionOf(m *memtable.Memtable) int {
	if v, ok := s.schemas.versionOf(m.Schema()); ok && v > 1 {
		return v
	}
	return 0
}
