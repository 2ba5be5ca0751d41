package main

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/schema"
)

// engineOptions are the engine's options from the configuration: serve
// opens its host with them, adding what only a running serve has (the etcd
// client, its address, the snapshot store, the logger and the registry),
// and config check validates them. One function for both, so that config
// check refuses whatever serve's engine.NewHost would.
func (c Config) engineOptions() engine.Options {
	return c.tableOptions(c.tables()[0])
}

// tableOptions are the engine's options for one table of the
// configuration.
func (c Config) tableOptions(t TableConfig) engine.Options {
	sch := schema.Rollout() // what config check validates when no columns are set
	if t.Columns != nil {
		sch = mustSchema(t.Columns)
	}
	o := engine.Options{DataDir: c.DataDir, Table: t.Name, LeaseTTL: c.LeaseTTL, RequestTimeout: c.Etcd.RequestTimeout,
		FlushBytes: t.FlushBytes, FlushAge: t.FlushAge, MemoryBudget: t.MemoryBudget, Schema: sch}
	c.Limits.apply(&o)
	c.applyWAL(&o)
	return o
}

// validateEngine runs the engine's own Validate on each table's options,
// after the checks that name each key: it catches what they missed, should
// the engine's rules grow. Validate insists on an etcd client, which
// exists only once serve has connected; it only compares the client with
// nil, so an unconnected one stands in.
func (c *Config) validateEngine() error {
	var sum int64
	for _, t := range c.tables() {
		o := c.tableOptions(t)
		o.Etcd = new(clientv3.Client)
		if o.WALBackend == engine.WALObject {
			// validateWAL checked that the table has a store; it is
			// opened only by serve, and Validate compares it with nil.
			o.WALBackend = engine.WALLocal
		}
		o.EnsureDefaults()
		if err := o.Validate(); err != nil {
			if len(c.Tables) > 0 {
				return fmt.Errorf("table %s: %w", t.Name, err)
			}
			return err
		}
		sum += t.MemoryBudget
	}
	if len(c.Tables) > 0 && sum > c.memoryBudget() {
		return badValue("tables", len(c.Tables), "their memory_budget add up to %d bytes, more than memory_budget %d", sum, c.memoryBudget())
	}
	return nil
}
