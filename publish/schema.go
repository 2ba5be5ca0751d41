package publish

import (
	"context"
	"fmt"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// The schema of a pass. A table's schema has versions (shardmeta records
// them; writers switch versions while serving), so a shard's generations,
// and the base's files, are written in different versions. Every pass —
// Plan, and Compact — reads the table's current schema record when it
// begins and publishes in that version only: each file is read with the
// schema in its own footer and its rows converted by field id
// (schema.Convert: a column the file lacks is null, a narrower type is
// widened, a dropped column goes), and the base files it writes are in the
// pass's version. The commit that publishes them makes that version the
// Iceberg table's current schema (catalog.BaseCommit.Schema). A file of a
// version newer than the pass's is never converted backwards: the pass
// fails with ErrSchemaMoved and the next one, which reads the newer
// record, publishes it.

// ErrSchemaMoved: a file to publish is in a newer schema version than the
// pass's (the record moved on during the pass). Nothing was committed;
// replan (RunOnce does, a few times).
var ErrSchemaMoved = errs.New(errs.Conflict, "publish: schema moved on during the pass; replan")

// passSchema is the schema version a pass publishes in.
type passSchema struct {
	version int
	schema  *schema.Schema
	// nextFieldID is above every field id of the version: a file with an
	// id at or above it was written in a newer one.
	nextFieldID int
}

func (p passSchema) catalogVersion() *catalog.SchemaVersion {
	return &catalog.SchemaVersion{Version: p.version, Schema: p.schema}
}

// loadPassSchema reads the table's current schema record.
func (c *Coordinator) loadPassSchema(ctx context.Context) (passSchema, error) {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	rec, err := shardmeta.LoadSchema(rctx, c.cli, c.keys)
	if err != nil {
		return passSchema{}, fmt.Errorf("publish: read the schema of table %s: %w", c.opts.Table, err)
	}
	if rec == nil {
		return passSchema{}, fmt.Errorf("%w: table %s has no schema record (%s)", ErrInvalidState, c.opts.Table, c.keys.Schema())
	}
	s := rec.Schema()
	if s == nil {
		return passSchema{}, fmt.Errorf("%w: table %s: schema version %d does not validate", ErrInvalidState, c.opts.Table, rec.Version)
	}
	return passSchema{version: rec.Version, schema: s, nextFieldID: rec.NextFieldID}, nil
}

// generationVersion is the schema version a manifest entry records (0 is
// version 1: files written before versions).
func generationVersion(g shardmeta.Generation) int { return max(g.SchemaVersion, 1) }

// readInto reads the file at path with the schema in its footer and
// converts its rows to the pass's schema. version is the version the
// file's record says it was written in (0 when it records none, as for
// base files). A file of a newer version than the pass's is ErrSchemaMoved.
func (p passSchema) readInto(c *Coordinator, path string, version int) (generation.Meta, generation.Data, error) {
	return p.convertRead(path, version, func() (generation.Meta, generation.Data, error) {
		return generation.ReadStored(c.opts.FS, path)
	})
}

// convertRead is readInto of a file that read reads, wherever it is held;
// name stands for it in errors.
func (p passSchema) convertRead(name string, version int, read func() (generation.Meta, generation.Data, error)) (generation.Meta, generation.Data, error) {
	if version > p.version {
		return generation.Meta{}, generation.Data{}, fmt.Errorf("%w: %s is in schema version %d, the pass in version %d", ErrSchemaMoved, name, version, p.version)
	}
	meta, d, err := read()
	if err != nil {
		return meta, d, err
	}
	if id := maxFieldID(d.Rows.Schema.Columns); p.nextFieldID > 0 && id >= p.nextFieldID {
		return meta, d, fmt.Errorf("%w: %s has field id %d, schema version %d ends below %d (the file is in a newer version)",
			ErrSchemaMoved, name, id, p.version, p.nextFieldID)
	}
	rows, err := schema.Convert(d.Rows, p.schema)
	if err != nil {
		return meta, d, fmt.Errorf("%s: to schema version %d: %w", name, p.version, err)
	}
	d.Rows = rows
	return meta, d, nil
}

// maxFieldID is the highest field id of cols, nested parts included.
func maxFieldID(cols []schema.Column) int {
	m := 0
	for i := range cols {
		c := &cols[i]
		m = max(m, c.ID, maxFieldID(c.Fields))
		if c.Element != nil {
			m = max(m, maxFieldID([]schema.Column{*c.Element}))
		}
	}
	return m
}
