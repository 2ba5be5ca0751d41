package main

// The memory serve may use: the memtables' budget (memory_budget), and the
// ceiling derived from it that the Go runtime is held to.
//
// The budget bounds the rows all memtables of the process hold. The
// process holds more: the requests in flight (bounded by the server's
// in-flight bytes, see server/inflight.go) and a constant rest. serve sets
// the Go soft memory limit (debug.SetMemoryLimit) to
//
//	ceiling = memory_budget + 3 × in-flight bytes + 160 MiB
//
// unless GOMEMLIMIT is set in the environment, which then rules. Without a
// limit the collector lets the heap grow to twice the live heap (GOGC=100),
// so a full budget could double the process (docs/benchmarks.md, "The
// memory bound"); with it the collector works harder as the heap nears the
// ceiling instead.

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/server"
)

const (
	// defaultMemoryBudget is the budget when memory_budget is 0, unless
	// 2 × flush_bytes is more.
	defaultMemoryBudget = 512 << 20
	// maxMemoryBudget catches a unit mistake (2^62 is no budget) and keeps
	// the ceiling's sum far from overflow.
	maxMemoryBudget = 1 << 40
	// inflightMemoryFactor is what a body byte admitted in flight costs:
	// its decoded rows (about 1.4 times the body for 1 KiB-class NDJSON
	// rows), the WAL record encoded from them (about the body again) and
	// the garbage of decoding, as server/inflight.go measures it.
	inflightMemoryFactor = 3
	// fixedMemoryAllowance is the rest: the Go runtime, the embedded etcd,
	// the WAL's buffers (at most 16 MiB), one flush's Parquet buffers and
	// the appends in flight; measured at 100–125 MiB (docs/benchmarks.md,
	// "The memory bound"), the same allowance BenchmarkSustainedIngest
	// uses.
	fixedMemoryAllowance = 160 << 20
)

func addMemoryFlag(f *pflag.FlagSet, budget *int64) {
	f.Int64Var(budget, "memory-budget", 0, "bytes all memtables may hold, at least 2 × --flush-bytes (0: 512 MiB, or 2 × --flush-bytes when more); "+
		"the Go memory limit is derived from it unless GOMEMLIMIT is set")
}

// memoryBudget is memory_budget, or its default when 0. A memtable is
// sealed by an append at 2 × flush_bytes at the latest, so a budget below
// that would refuse appends before their memtable could be sealed.
func (c *Config) memoryBudget() int64 {
	if c.MemoryBudget != 0 {
		return c.MemoryBudget
	}
	return max(defaultMemoryBudget, c.tablesFloor())
}

// tablesFloor is the least budget the tables need together: 2 ×
// flush_bytes each.
func (c *Config) tablesFloor() int64 {
	if len(c.Tables) == 0 {
		return 2 * min(c.FlushBytes, maxMemoryBudget)
	}
	var sum int64
	for _, t := range c.Tables {
		fb := t.FlushBytes
		if fb == 0 {
			fb = c.FlushBytes
		}
		sum += 2 * min(fb, maxMemoryBudget)
	}
	return sum
}

func (c *Config) validateMemory() error {
	b := c.memoryBudget()
	switch {
	case b < 0:
		return badValue("memory_budget", b, "must be positive (0: the default)")
	case b > maxMemoryBudget:
		return badValue("memory_budget", b, "must be at most 1 TiB (%d)", int64(maxMemoryBudget))
	case b < 2*c.FlushBytes:
		return badValue("memory_budget", b, "must be at least 2 × flush_bytes (%d): an append seals a memtable at twice flush_bytes", 2*c.FlushBytes)
	}
	return nil
}

// inflightBytes is the body bytes the server admits in flight: the
// http section's, or the server's default for the budget.
func (c *Config) inflightBytes() int64 {
	if c.HTTP.MaxInflightBytes > 0 {
		return c.HTTP.MaxInflightBytes
	}
	return server.InflightBytesFor(c.memoryBudget(), c.MaxBodyBytes)
}

// memoryCeiling is the Go memory limit serve sets for a memtable budget
// and the in-flight bytes the server admits (see the file's comment).
func memoryCeiling(budget, inflight int64) int64 {
	return budget + inflightMemoryFactor*inflight + fixedMemoryAllowance
}

// setMemoryLimit holds the process to the ceiling derived from c, unless
// GOMEMLIMIT is set: an operator's explicit limit wins.
func setMemoryLimit(log *slog.Logger, c Config) {
	budget, inflight := c.memoryBudget(), c.inflightBytes()
	ceiling := memoryCeiling(budget, inflight)
	attrs := []any{"memory_budget", budget, "inflight_bytes", inflight, "derived_limit", ceiling,
		"formula", "memory_budget + 3 × inflight_bytes + 160 MiB"}
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info(msgMemoryLimitEnv, append(attrs, "gomemlimit", env)...)
		return
	}
	debug.SetMemoryLimit(ceiling)
	log.Info(msgMemoryLimit, append(attrs, "limit", ceiling)...)
}

// The log lines of setMemoryLimit.
const (
	msgMemoryLimit    = "Go memory limit set from the memory budget"
	msgMemoryLimitEnv = "Go memory limit left to GOMEMLIMIT"
)

func init() {
	settings = append(settings, setting{"memory_budget", "memory-budget", func(d, s *Config) { d.MemoryBudget = s.MemoryBudget }})
}
