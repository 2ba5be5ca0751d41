package main

import (
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/wal"
)

// WALConfig is the wal: section: where every table's WAL lives.
type WALConfig struct {
	// Backend is "local" (the default: segment files in data_dir, fsynced)
	// or "object": one object per group commit in the table's storage:,
	// which a writer on another machine replays after a failover.
	Backend string `yaml:"backend,omitempty"`
	// ObjectSize bounds one WAL object (bytes); 0: 4 MiB.
	ObjectSize int `yaml:"object_size,omitempty"`
	// Compression of WAL record payloads: none (the default), s2 or zstd.
	// The default is the benchmark's choice (docs/benchmarks.md,
	// WALCompression): s2 stores about half the bytes but takes a fifth
	// of the rows per second, so it pays only where the disk, or the
	// object store's bytes, are what is short.
	Compression string `yaml:"compression,omitempty"`
}

// validateWAL checks the wal: section against every table's storage.
func (c *Config) validateWAL() error {
	switch engine.WALBackend(c.WAL.Backend) {
	case "", engine.WALLocal:
	case engine.WALObject:
		for _, t := range c.tables() {
			if c.storageFor(t).URL == "" {
				return badValue("wal.backend", c.WAL.Backend, "needs an object store: set %s.url", c.storageKey(t))
			}
		}
	default:
		return badValue("wal.backend", c.WAL.Backend, "want %q or %q", engine.WALLocal, engine.WALObject)
	}
	if _, err := wal.ParseCompression(c.walCompression()); err != nil {
		return badValue("wal.compression", c.WAL.Compression, "want none, s2 or zstd")
	}
	if s := c.WAL.ObjectSize; s != 0 && (s < 64<<10 || s > wal.MaxPayloadSize) {
		return badValue("wal.object_size", s, "must be from 64 KiB (%d) to %d", 64<<10, wal.MaxPayloadSize)
	}
	return nil
}

// applyWAL sets the engine's WAL options from the wal: section.
func (c Config) applyWAL(o *engine.Options) {
	o.WALBackend = engine.WALBackend(c.WAL.Backend)
	o.WALObjectSize = c.WAL.ObjectSize
	o.WALCompression, _ = wal.ParseCompression(c.walCompression()) // validateWAL checked it
}

// walCompression is the configured WAL compression, "none" when unset.
func (c Config) walCompression() string {
	if c.WAL.Compression == "" {
		return "none"
	}
	return c.WAL.Compression
}
