package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestConfigRangesRefusedAsServe: every value out of range fails `config
// check` with a message naming the key and the value, and `serve` refuses
// the same file with the very same message, before it creates anything:
// both go through Config.Validate, which ends with the engine's own
// Validate of the options serve would open its host with.
func TestConfigRangesRefusedAsServe(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"flush_bytes: 0", "flush_bytes 0: must be positive"},
		{"flush_bytes: -1", "flush_bytes -1: must be positive"},
		{"flush_bytes: 4611686018427387904", "flush_bytes 4611686018427387904: must be at most 512 GiB"},
		{"flush_bytes: 1073741824\nmemory_budget: 1073741824", "memory_budget 1073741824: must be at least 2 × flush_bytes (2147483648)"},
		{"memory_budget: -5", "memory_budget -5: must be positive"},
		{"memory_budget: 100000000", "memory_budget 100000000: must be at least 2 × flush_bytes (134217728)"},
		{"memory_budget: 4611686018427387904", "memory_budget 4611686018427387904: must be at most 1 TiB"},
		{"flush_age: 0s", "flush_age 0s: use a positive age"},
		{"lease_ttl: 100ms", "lease_ttl 100ms: must be at least 1s and at most 10m0s"},
		{"lease_ttl: 1000h", "lease_ttl 1000h0m0s: must be at least 1s and at most 10m0s"},
		{"max_body_bytes: 0", "max_body_bytes 0: must be positive"},
		{"max_body_bytes: 1099511627776", "max_body_bytes 1099511627776: must be at most 1 GiB"},
		{"shutdown_timeout: 0s", "shutdown_timeout 0s: must be positive"},
		{"unready_delay: -1s", "unready_delay -1s: must not be negative"},
		{"log_level: loud", `log_level "loud": want debug, info, warn or error`},
		{"shards: [\"a\\nb\"]", `shards ["a\nb"]: shardmeta: invalid name: shard name "a\nb" has '\n' at byte 1`},
		{"shards: []", `shards "[]": need at least one shard`},
		{"limits:\n  producer_expiry: 0s", "limits.producer_expiry 0s: must be positive"},
		{"limits:\n  max_producers: 2000000", "limits.max_producers 2000000: must be in 1..1000000"},
		{"limits:\n  max_sources: 0", "limits.max_sources 0: must be in 1..4096"},
		{"limits:\n  max_unmerged_generations: 5001", "limits.max_unmerged_generations 5001: must be in 1..5000"},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "w.yaml")
		data := filepath.Join(dir, "data")
		writeTestFile(t, path, "data_dir: "+data+"\n"+tc.yaml+"\n")
		want := "config " + path + ": " + tc.want
		_, checkErr := run(t, "config", "check", "--config", path)
		if checkErr == nil || !strings.HasPrefix(checkErr.Error(), want) {
			t.Errorf("config check of %q: %v; want %q", tc.yaml, checkErr, want)
			continue
		}
		_, serveErr := run(t, "serve", "--config", path, "--listen", "127.0.0.1:0")
		if serveErr == nil || serveErr.Error() != checkErr.Error() {
			t.Errorf("serve of %q: %v; want what config check said: %v", tc.yaml, serveErr, checkErr)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("serve of %q created its data dir before refusing: %v", tc.yaml, err)
		}
	}
}

// TestConfigEngineValidateRuns: Validate's last check is the engine's own
// Validate of the options serve opens its host with, so a rule the keyed
// checks lack still fails config check. Shown by calling it on values the
// keyed checks would have refused first: the engine refuses them too.
func TestConfigEngineValidateRuns(t *testing.T) {
	def := defaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, bad := range []func(c *Config){
		func(c *Config) { c.MemoryBudget = c.FlushBytes / 2 },
		func(c *Config) { c.LeaseTTL = 500e6 },
		func(c *Config) { c.Limits.MaxUnmergedGenerations = 9000 },
	} {
		c := defaultConfig()
		bad(&c)
		if err := c.validateEngine(); err == nil || !strings.HasPrefix(err.Error(), "engine: ") {
			t.Errorf("the engine's Validate of %+v: %v; want the engine's refusal", c.engineOptions(), err)
		}
	}
}

// TestMemoryBudgetConfig: memory_budget defaults to 512 MiB, or twice
// flush_bytes when more, is printed as the value in effect, and is set by
// the file or --memory-budget; serve hands it to the engine.
func TestMemoryBudgetConfig(t *testing.T) {
	resolve := func(yaml string, args ...string) Config {
		t.Helper()
		path := filepath.Join(t.TempDir(), "w.yaml")
		writeTestFile(t, path, yaml)
		var o serveOptions
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		f.Int64Var(&o.flushBytes, "flush-bytes", 0, "")
		addMemoryFlag(f, &o.memoryBudget)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := resolveConfig(f, path, o.config())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		yaml string
		args []string
		want int64
	}{
		{"", nil, 512 << 20},
		{"flush_bytes: 1073741824\n", nil, 2 << 30},
		{"memory_budget: 268435456\nflush_bytes: 1048576\n", nil, 256 << 20},
		{"memory_budget: 268435456\n", []string{"--flush-bytes", "1048576", "--memory-budget", "134217728"}, 128 << 20},
		{"", []string{"--flush-bytes", "536870912"}, 1 << 30},
	} {
		c := resolve(tc.yaml, tc.args...)
		if c.MemoryBudget != tc.want || c.engineOptions().MemoryBudget != tc.want {
			t.Errorf("%q %v: memory_budget %d, engine %d; want %d", tc.yaml, tc.args, c.MemoryBudget, c.engineOptions().MemoryBudget, tc.want)
		}
	}
	out, err := run(t, "config", "check")
	if err != nil || !strings.Contains(out, "\nmemory_budget: 536870912\n") {
		t.Fatalf("config check prints no memory_budget in effect: %v\n%s", err, out)
	}
}

// TestMemoryCeiling: the formula serve sets the Go memory limit by, and
// the in-flight bytes it counts: the http section's when set, else the
// server's default for the budget.
func TestMemoryCeiling(t *testing.T) {
	const mib = 1 << 20
	if got := memoryCeiling(256*mib, 64*mib); got != (256+3*64+160)*mib {
		t.Fatalf("memoryCeiling(256 MiB, 64 MiB) = %d MiB; want 256 + 3×64 + 160 = 608 MiB", got/mib)
	}
	c := defaultConfig()
	if got := c.inflightBytes(); got != 64*mib { // max(512 MiB / 8, max_body_bytes 64 MiB)
		t.Fatalf("default in-flight bytes %d MiB; want 64", got/mib)
	}
	c.MemoryBudget, c.HTTP.MaxInflightBytes = 2048*mib, 0
	if got := c.inflightBytes(); got != 256*mib {
		t.Fatalf("in-flight bytes of a 2 GiB budget %d MiB; want 256", got/mib)
	}
	c.HTTP.MaxInflightBytes = 100 * mib
	if got := c.inflightBytes(); got != 100*mib {
		t.Fatalf("in-flight bytes with http.max_inflight_bytes 100 MiB: %d MiB", got/mib)
	}
}
