package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestLimitsConfig: the limits: section reads from the file, is overridden
// by its flags, and a value out of range is an error naming the key (or the
// flag) and the value, exactly as serve would refuse it.
func TestLimitsConfig(t *testing.T) {
	dir := t.TempDir()
	resolve := func(yaml string, args ...string) (Config, error) {
		path := filepath.Join(dir, "w.yaml")
		writeTestFile(t, path, yaml)
		var flagged Config
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addLimitFlags(f, &flagged.Limits)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return resolveConfig(f, path, flagged)
	}
	got, err := resolve("limits:\n  producer_expiry: 48h\n  max_producers: 50\n", "--max-sources", "7")
	if l := got.Limits; err != nil || l.ProducerExpiry != 48*time.Hour || l.MaxProducers != 50 || l.MaxSources != 7 || l.MaxUnmergedGenerations != 1000 {
		t.Fatalf("resolved %+v, %v", got.Limits, err)
	}
	for _, tc := range []struct {
		yaml string
		args []string
		want string
	}{
		{"limits:\n  max_producers: 0\n", nil, "limits.max_producers 0: must be in 1..1000000"},
		{"limits:\n  max_sources: 100000\n", nil, "limits.max_sources 100000"},
		{"limits:\n  producer_expiry: -1s\n", nil, "limits.producer_expiry -1s: must be positive"},
		{"", []string{"--max-unmerged-generations", "9000"}, "--max-unmerged-generations 9000"},
		{"limits:\n  max_produces: 3\n", nil, `unknown key "max_produces" in section limits`},
	} {
		_, err := resolve(tc.yaml, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: %v, want an error containing %q", tc.yaml, tc.args, err, tc.want)
		}
	}
}
