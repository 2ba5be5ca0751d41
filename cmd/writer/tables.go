package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// TableConfig is one table of a serve that hosts several (tables:). What
// it leaves unset is the top level's: shards, columns, flush_bytes,
// flush_age; its memory_budget defaults to what it needs (2 ×
// flush_bytes) and an equal share of what the top level's leaves beyond
// all tables' needs.
type TableConfig struct {
	Name         string          `yaml:"name"`
	Shards       []string        `yaml:"shards,omitempty"`
	Columns      []schema.Column `yaml:"columns,omitempty"`
	FlushBytes   int64           `yaml:"flush_bytes,omitempty"`
	FlushAge     time.Duration   `yaml:"flush_age,omitempty"`
	MemoryBudget int64           `yaml:"memory_budget,omitempty"`
	// Storage, when present, is the table's object store, replacing the
	// process's storage: whole (storage.go); `storage: {}` keeps the
	// table's generations in the data directory only.
	Storage *StorageConfig `yaml:"storage,omitempty"`
}

// maxTables bounds tables: per process: each has its own host, leases and
// shards.
const maxTables = 64

// tables returns the tables the configuration describes, every setting
// filled in: the one of the top level (table, shards, columns, …) when
// tables: is empty.
func (c *Config) tables() []TableConfig {
	if len(c.Tables) == 0 {
		return []TableConfig{{Name: c.Table, Shards: c.Shards, Columns: c.Columns, FlushBytes: c.FlushBytes,
			FlushAge: c.FlushAge, MemoryBudget: c.memoryBudget()}}
	}
	out := make([]TableConfig, len(c.Tables))
	spare := max(c.memoryBudget()-c.tablesFloor(), 0) / int64(len(c.Tables))
	for i, t := range c.Tables {
		if len(t.Shards) == 0 {
			t.Shards = c.Shards
		}
		if len(t.Columns) == 0 {
			t.Columns = c.Columns
		}
		if t.FlushBytes == 0 {
			t.FlushBytes = c.FlushBytes
		}
		if t.FlushAge == 0 {
			t.FlushAge = c.FlushAge
		}
		if t.MemoryBudget == 0 {
			t.MemoryBudget = 2*min(t.FlushBytes, maxMemoryBudget) + spare
		}
		out[i] = t
	}
	return out
}

// table returns the table named name, for the commands that work on one.
func (c *Config) table(name string) (TableConfig, bool) {
	for _, t := range c.tables() {
		if t.Name == name {
			return t, true
		}
	}
	return TableConfig{}, false
}

// validateTables checks tables: names, each table's shards and columns
// (those of the top level have checks of their own); the engine's checks
// of each follow in validateEngine.
func (c *Config) validateTables() error {
	switch {
	case len(c.Tables) == 0:
		return nil
	case len(c.Tables) > maxTables:
		return badValue("tables", len(c.Tables), "more than %d tables in one process", maxTables)
	}
	seen := map[string]bool{}
	for i, t := range c.tables() {
		key := fmt.Sprintf("tables[%d]", i)
		if err := (shardmeta.Keys{Prefix: "rollwal", Table: t.Name}).Validate(); err != nil {
			return badValue(key+".name", t.Name, "%v", err)
		}
		if seen[t.Name] {
			return badValue(key+".name", t.Name, "is the name of another table")
		}
		seen[t.Name] = true
		if err := checkColumns(t.Columns); err != nil {
			return badValue(key+".columns", len(t.Columns), "%v", err)
		}
		if err := checkShards(key+".shards", t.Shards); err != nil {
			return err
		}
	}
	return nil
}

// checkColumns checks configured columns as a writer's start would: a
// valid schema that fits the table's schema record. None is fine.
func checkColumns(cols []schema.Column) error {
	if cols == nil {
		return nil
	}
	s, err := schema.New(cols)
	if err != nil {
		return err
	}
	return shardmeta.CheckSchemaRecord(s)
}

// tableSchema is a table's schema: the configured columns, else those of
// the table's schema record, else (a new table) the rollout schema. So a
// merge or a restarted serve needs no columns: setting them is for the
// table's first writer, and a check (shardmeta.EnsureSchema) that they are
// still the table's.
func tableSchema(ctx context.Context, cli *clientv3.Client, table string, configured *schema.Schema) (*schema.Schema, error) {
	if configured != nil {
		return configured, nil
	}
	rec, err := shardmeta.LoadSchema(ctx, cli, shardmeta.Keys{Prefix: metaPrefix, Table: table})
	switch {
	case err != nil:
		return nil, fmt.Errorf("table %s: read its schema record: %w", table, err)
	case rec == nil:
		return schema.Rollout(), nil
	}
	return schema.New(rec.Columns)
}
