package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestConfigPrecedence: defaults ← file ← flags set on the command line. A
// flag left at its default does not override the file.
func TestConfigPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "writer.yaml")
	writeTestFile(t, path, "data_dir: /from/file\ntable: filetable\nflush_age: 1m\nshards: [a, b]\netcd:\n  request_timeout: 2s\n")
	var o serveOptions
	f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	def := defaultConfig()
	f.StringVar(&o.dataDir, "data-dir", def.DataDir, "")
	f.StringVar(&o.table, "table", def.Table, "")
	f.StringSliceVar(&o.shards, "shards", def.Shards, "")
	f.DurationVar(&o.flushAge, "flush-age", def.FlushAge, "")
	addEtcdFlags(f, &o.etcd)
	if err := f.Parse([]string{"--table", "flagtable", "--shards", "default", "--etcd-dial-timeout", "7s"}); err != nil {
		t.Fatal(err)
	}
	got, err := resolveConfig(f, path, Config{DataDir: o.dataDir, Table: o.table, Shards: o.shards,
		FlushAge: o.flushAge, Etcd: o.etcd})
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.DataDir, want.FlushAge = "/from/file", time.Minute    // file over defaults
	want.Table, want.Shards = "flagtable", []string{"default"} // flags over the file
	want.Etcd.RequestTimeout, want.Etcd.DialTimeout = 2*time.Second, 7*time.Second
	if got.DataDir != want.DataDir || got.Table != want.Table || got.FlushAge != want.FlushAge ||
		!slices.Equal(got.Shards, want.Shards) || got.Etcd.String() != want.Etcd.String() ||
		got.Listen != want.Listen || got.LeaseTTL != want.LeaseTTL {
		t.Fatalf("resolved\n%+v\nwant\n%+v", got, want)
	}
}

// TestSettingsHaveServeFlags: every key that a flag overrides names a flag
// serve has; a renamed flag would otherwise silently stop overriding.
func TestSettingsHaveServeFlags(t *testing.T) {
	f := newServe().Flags()
	for _, s := range settings {
		if f.Lookup(s.flag) == nil {
			t.Errorf("serve has no flag --%s for key %s", s.flag, s.key)
		}
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "alpha", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	got, err := expandEnv([]byte("x: ${A}-${EMPTY}-$A\n  # ${UNSET} in a comment\ny: '${A}'"), lookup)
	if err != nil || string(got) != "x: alpha--$A\n  # ${UNSET} in a comment\ny: 'alpha'" {
		t.Fatalf("expanded %q, %v", got, err)
	}
	_, err = expandEnv([]byte("a: 1\nb: ${UNSET}\nc: ${1BAD}\n"), lookup)
	if err == nil || !strings.Contains(err.Error(), "line 2: environment variable UNSET is not set") ||
		!strings.Contains(err.Error(), "line 3: ${1BAD} is not a variable reference") {
		t.Fatalf("errors: %v; want both the unset and the malformed reference, with lines", err)
	}
}

// TestConfigErrorsNameTheirSource: the same bad value is named by the flag
// when it came from the command line and by the file's key otherwise.
func TestConfigErrorsNameTheirSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	writeTestFile(t, path, "max_body_bytes: -1\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--config", path}, "config " + path + ": max_body_bytes -1: must be positive"},
		{[]string{"serve", "--max-body-bytes", "-5"}, "--max-body-bytes -5: must be positive"},
		{[]string{"serve", "--config", path, "--max-body-bytes", "-5"}, "--max-body-bytes -5: must be positive"},
	} {
		_, err := run(t, tc.args...)
		var ce *configError
		if err == nil || err.Error() != tc.want || !errors.As(err, &ce) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
