package sim

import (
	"context"
	"errors"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// simChanges are the schema changes a run makes, in order: a new nullable
// column, the token list's elements widened, another new column. Rows go
// on being sent without the new columns: their producers are of the first
// version, and the writers convert them.
var simChanges = []func([]schema.Column) []schema.Column{
	func(c []schema.Column) []schema.Column {
		return append(c, schema.Column{Name: "judge", Type: schema.Float64, Nullable: true})
	},
	func(c []schema.Column) []schema.Column {
		for i := range c {
			if c[i].Name == "tokens" {
				e := *c[i].Element
				e.Type = schema.Int64
				c[i].Element = &e
			}
		}
		return c
	},
	func(c []schema.Column) []schema.Column {
		return append(c, schema.Column{Name: "verdict", Type: schema.String, Nullable: true})
	},
}

// changeSchema applies the run's next schema change while writers serve
// and coordinators merge: they must follow it, each generation in one
// version, every row still exactly once.
func (w *world) changeSchema() {
	if w.schemaChanges >= len(simChanges) {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	cur, err := shardmeta.LoadSchema(ctx, w.cli, w.keys)
	if err != nil || cur == nil {
		w.tracef("schema change: no record yet (%v)", err)
		return
	}
	cols := simChanges[w.schemaChanges](cloneColumns(cur.Columns))
	rec, changes, err := shardmeta.ApplySchema(ctx, w.cli, w.keys, cols, false, 5*time.Second)
	switch {
	case errors.Is(err, schema.ErrSchemaChange):
		w.violatef("schema change %d refused: %v", w.schemaChanges+1, err)
	case err != nil:
		w.tracef("schema change: %v", err)
	default:
		w.schemaChanges++
		w.st.schemaChanges++
		w.tracef("schema version %d: %v", rec.Version, changes)
	}
}

func cloneColumns(cols []schema.Column) []schema.Column {
	out := make([]schema.Column, len(cols))
	for i, c := range cols {
		out[i] = c
		if c.Element != nil {
			e := *c.Element
			out[i].Element = &e
		}
		out[i].Fields = append([]schema.Column(nil), c.Fields...)
	}
	return out
}

// tableSchema is what a process starting now is configured with: the
// table's current version (an operator who changed the schema configures
// the new columns), the first one before the table has a record.
func (w *world) tableSchema() *schema.Schema {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	rec, err := shardmeta.LoadSchema(ctx, w.cli, w.keys)
	if err != nil {
		w.fatalf("read the schema record: %v", err)
	}
	if rec == nil {
		return simSchema
	}
	return rec.Schema()
}

// checkObjects holds a seed with an object store to its rule: every
// generation a manifest names is in the store.
func (w *world) checkObjects(ctx context.Context, shard string, m *shardmeta.Manifest) {
	if w.store == nil {
		return
	}
	for _, g := range m.Flushed {
		key := generation.ObjectKey(w.table, shard, g.File)
		_, err := w.store.Stat(ctx, key)
		if err == nil {
			continue
		}
		// A drain may have committed and deleted it since m was read: an
		// object is deleted only once no manifest names it, so it is a
		// violation only if the manifest read after the miss names it.
		if now, _, lerr := w.meta.Load(ctx, shard); lerr != nil || !hasGeneration(now, g.Number) {
			continue
		}
		w.violatef("shard %s: committed generation %d is not in the object store (%s): %v", shard, g.Number, key, err)
	}
}
