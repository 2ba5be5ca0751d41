package main

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
)

// engineOptions are the engine's options from the configuration: serve
// opens its host with them, adding what only a running serve has (the etcd
// client, its address, the snapshot store, the logger and the registry),
// and config check validates them. One function for both, so that config
// check refuses whatever serve's engine.NewHost would.
func (c Config) engineOptions() engine.Options {
	o := engine.Options{DataDir: c.DataDir, Table: c.Table, LeaseTTL: c.LeaseTTL, RequestTimeout: c.Etcd.RequestTimeout,
		FlushBytes: c.FlushBytes, FlushAge: c.FlushAge, MemoryBudget: c.memoryBudget(), Schema: c.schema()}
	c.Limits.apply(&o)
	return o
}

// validateEngine runs the engine's own Validate on those options, after
// the checks that name each key: it catches what they missed, should the
// engine's rules grow. Validate insists on an etcd client, which exists
// only once serve has connected; it only compares the client with nil, so
// an unconnected one stands in.
func (c *Config) validateEngine() error {
	o := c.engineOptions()
	o.Etcd = new(clientv3.Client)
	o.EnsureDefaults()
	return o.Validate()
}
