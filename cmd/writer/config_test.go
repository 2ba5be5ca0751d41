package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
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
	got, err := expandYAML(t, "x: ${A}-${EMPTY}-$A\n  # ${UNSET} in a comment\ny: '${A}'\nz: ['${A}', \"${A}\"] # ${UNSET}\nw:\n  - ${A}\n", lookup)
	if err != nil || got["x"] != "alpha--$A" || got["y"] != "alpha" || fmt.Sprint(got["z"]) != "[alpha alpha]" || fmt.Sprint(got["w"]) != "[alpha]" || len(got) != 4 {
		t.Fatalf("expanded %v, %v", got, err)
	}
	_, err = expandYAML(t, "a: 1\nb: ${UNSET}\nc: ${1BAD}\n", lookup)
	if err == nil || !strings.Contains(err.Error(), "line 2: environment variable UNSET is not set") ||
		!strings.Contains(err.Error(), "line 3: ${1BAD} is not a variable reference") {
		t.Fatalf("errors: %v; want both the unset and the malformed reference, with lines", err)
	}
}

// expandYAML parses text, expands it and decodes it into a map.
func expandYAML(t *testing.T, text string, lookup func(string) (string, bool)) (map[string]any, error) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	if err := expandEnv(&doc, lookup); err != nil {
		return nil, err
	}
	var m map[string]any
	if err := doc.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

// TestEnvCannotInjectKeys: a variable holding YAML syntax (a quote, a
// newline, "key: value") stays the one value it was put in: it adds no
// key, whether the reference is plain or quoted (each value below would
// close its quoting and add listen: if pasted into the text), and a plain
// reference to a number is still typed as a number.
func TestEnvCannotInjectKeys(t *testing.T) {
	t.Setenv("ROLLWAL_TEST_SIZE", "2097152")
	for _, tc := range []struct{ ref, value string }{
		{"${ROLLWAL_TEST_INJECT}", "x\nlisten: 0.0.0.0:1"},
		{`"${ROLLWAL_TEST_INJECT}"`, "x\"\nlisten: \"0.0.0.0:1"},
		{"'${ROLLWAL_TEST_INJECT}'", "x'\nlisten: '0.0.0.0:1"},
		{"${ROLLWAL_TEST_INJECT}", "x\n  dial_timeout: 1ms"},
	} {
		t.Setenv("ROLLWAL_TEST_INJECT", tc.value)
		path := filepath.Join(t.TempDir(), "w.yaml")
		writeTestFile(t, path, "etcd:\n  endpoints: [http://127.0.0.1:2379]\n  username: u\n  password: "+tc.ref+"\nflush_bytes: ${ROLLWAL_TEST_SIZE}\n")
		cfg, err := resolveConfig(pflag.NewFlagSet("x", pflag.ContinueOnError), path, Config{})
		if err != nil {
			t.Fatalf("%s = %q: %v", tc.ref, tc.value, err)
		}
		def := defaultConfig()
		if cfg.Etcd.Password != tc.value || cfg.FlushBytes != 2097152 || cfg.Listen != def.Listen || cfg.Etcd.DialTimeout != def.Etcd.DialTimeout {
			t.Fatalf("%s = %q: password %q, flush_bytes %d, listen %q, dial_timeout %v; want the variable as the password and nothing else changed",
				tc.ref, tc.value, cfg.Etcd.Password, cfg.FlushBytes, cfg.Listen, cfg.Etcd.DialTimeout)
		}
	}
	// A variable in place of a list stays a string: the type error names the line.
	t.Setenv("ROLLWAL_TEST_LIST", "[a, b]")
	path := filepath.Join(t.TempDir(), "w.yaml")
	writeTestFile(t, path, "table: t\nshards: ${ROLLWAL_TEST_LIST}\n")
	if _, err := resolveConfig(pflag.NewFlagSet("x", pflag.ContinueOnError), path, Config{}); err == nil ||
		!strings.Contains(err.Error(), "line 2: cannot unmarshal !!str `[a, b]`") {
		t.Fatalf("a list from a variable: %v; want a type error on line 2", err)
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

// TestSnapshotsConfig: the snapshots section is strict like the rest of the
// file, and every bad value is named by its key and value.
func TestSnapshotsConfig(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	writeTestFile(t, notPEM, "not a certificate\n")
	cass := func(extra string) string {
		return "snapshots:\n  backend: cassandra\n  cassandra:\n    hosts: [c1:9042, c2]\n" + extra
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown key", "snapshots:\n  backend: etcd\n  hosts: [c1]\n", `line 3: unknown key "hosts" in section snapshots`},
		{"unknown cassandra key", cass("    replicas: 3\n"), `line 5: unknown key "replicas" in section snapshots.cassandra`},
		{"unknown tls key", cass("    tls:\n      ca: x\n"), `line 6: unknown key "ca" in section snapshots.cassandra.tls`},
		{"bad backend", "snapshots:\n  backend: mysql\n", `snapshots.backend "mysql": want etcd or cassandra`},
		{"cassandra without hosts", "snapshots:\n  backend: cassandra\n", `snapshots.cassandra.hosts "[]": backend cassandra needs at least one contact point`},
		{"hosts beside etcd", "snapshots:\n  cassandra:\n    hosts: [c1]\n", `snapshots.cassandra.hosts [c1]: is set but snapshots.backend is etcd`},
		{"bad host", strings.Replace(cass(""), "c2", "c2:x", 1), `snapshots.cassandra.hosts [c1:9042 c2:x]: "c2:x": port "x" is not a number`},
		{"bad consistency", cass("    consistency: ONE\n"), `snapshots.cassandra.consistency "ONE": want QUORUM, LOCAL_QUORUM or ALL`},
		{"bad serial consistency", cass("    serial_consistency: QUORUM\n"), `snapshots.cassandra.serial_consistency "QUORUM": want SERIAL or LOCAL_SERIAL`},
		{"bad keyspace", cass("    keyspace: Rollwal\n"), `snapshots.cassandra.keyspace "Rollwal": want a lower-case CQL identifier`},
		{"bad table", cass("    table: snap-shots\n"), `snapshots.cassandra.table "snap-shots": want a lower-case CQL identifier`},
		{"negative ttl", cass("    ttl: -1s\n"), `snapshots.cassandra.ttl -1s: want 0`},
		{"zero timeout", cass("    timeout: 0s\n"), `snapshots.cassandra.timeout 0s: must be positive`},
		{"username without password", cass("    username: writer\n"), `snapshots.cassandra.username "writer": is set without a password: put it in $ROLLWAL_CASSANDRA_PASSWORD`},
		{"password without username", cass("    password: pw\n"), `snapshots.cassandra.password "REDACTED": is set without snapshots.cassandra.username`},
		{"ca file not PEM", cass("    tls:\n      ca_file: " + notPEM + "\n"), `snapshots.cassandra.tls.ca_file "` + notPEM + `": no PEM certificate`},
		{"cert without key", cass("    tls:\n      cert_file: c.pem\n"), `snapshots.cassandra.tls.cert_file "c.pem": is set without snapshots.cassandra.tls.key_file`},
		{"tls beside etcd", "snapshots:\n  cassandra:\n    tls:\n      server_name: c1\n", `snapshots.cassandra.tls.server_name "c1": is set but snapshots.backend is etcd`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.yaml")
			writeTestFile(t, path, tc.file)
			_, err := resolveConfig(pflag.NewFlagSet("x", pflag.ContinueOnError), path, Config{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "config "+path+": ") {
				t.Fatalf("%q: %v; want an error naming the file and %q", tc.file, err, tc.want)
			}
		})
	}
}

// TestSnapshotsConfigResolves: a good section becomes the store's options;
// the password comes from $ROLLWAL_CASSANDRA_PASSWORD and is redacted when
// printed; levels are spelled as Cassandra does.
func TestSnapshotsConfigResolves(t *testing.T) {
	t.Setenv(cassandraPasswordEnv, "s3cret")
	path := filepath.Join(t.TempDir(), "w.yaml")
	writeTestFile(t, path, "snapshots:\n  backend: cassandra\n  cassandra:\n    hosts: [c1:9042, c2]\n    keyspace: ks\n"+
		"    consistency: quorum\n    serial_consistency: serial\n    ttl: 720h\n    timeout: 3s\n    username: writer\n"+
		"    tls:\n      server_name: cassandra.internal\n    create_schema: true\n    datacenter: dc1\n")
	cfg, err := resolveConfig(pflag.NewFlagSet("x", pflag.ContinueOnError), path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	cs := cfg.Snapshots.Cassandra
	if cs.Password != "s3cret" || cfg.redacted().Snapshots.Cassandra.Password != "REDACTED" || cs.Consistency != "QUORUM" || cs.SerialConsistency != "SERIAL" {
		t.Fatalf("resolved %+v", cs)
	}
	opts, err := cs.options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opts.Hosts, []string{"c1:9042", "c2"}) || opts.Keyspace != "ks" || opts.Table != "snapshots" ||
		opts.Consistency.String() != "QUORUM" || opts.SerialConsistency.String() != "SERIAL" || opts.TTL != 720*time.Hour ||
		opts.Timeout != 3*time.Second || opts.Username != "writer" || opts.Password != "s3cret" || !opts.CreateSchema ||
		opts.Datacenter != "dc1" || opts.TLS == nil || opts.TLS.ServerName != "cassandra.internal" || opts.TLS.InsecureSkipVerify {
		t.Fatalf("options %+v", opts)
	}
	if def := defaultConfig(); def.Snapshots.Backend != "etcd" || def.Validate() != nil {
		t.Fatalf("default snapshots %+v: %v", def.Snapshots, def.Validate())
	}
}

// TestSnapshotFlagsOverrideTheFile: the snapshot flags (serve's and
// snapshot get's) override the section; --cassandra-hosts alone (snapshot
// get's flag of old) selects the Cassandra store; a flag's bad value is
// named by the flag.
func TestSnapshotFlagsOverrideTheFile(t *testing.T) {
	for _, f := range []*pflag.FlagSet{newServe().Flags(), newSnapshotGet().Flags()} {
		for _, s := range settings {
			if strings.HasPrefix(s.key, "snapshots.") && f.Lookup(s.flag) == nil {
				t.Errorf("a command lacks --%s for key %s", s.flag, s.key)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "w.yaml")
	writeTestFile(t, path, "snapshots:\n  cassandra:\n    keyspace: fromfile\n    table: t1\n")
	resolve := func(args ...string) (Config, error) {
		var flagged Config
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addSnapshotFlags(f, &flagged.Snapshots)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return resolveConfig(f, path, flagged)
	}
	got, err := resolve("--cassandra-hosts", "c9:9142", "--cassandra-table", "t2")
	if cs := got.Snapshots.Cassandra; err != nil || got.Snapshots.Backend != "cassandra" || cs.Keyspace != "fromfile" ||
		cs.Table != "t2" || !slices.Equal(cs.Hosts, []string{"c9:9142"}) {
		t.Fatalf("resolved %+v, %v", got.Snapshots, err)
	}
	if _, err := resolve("--snapshots-backend", "etcd", "--cassandra-hosts", "c9"); err == nil ||
		!strings.HasPrefix(err.Error(), `--cassandra-hosts [c9]: is set but snapshots.backend is etcd`) {
		t.Fatalf("--snapshots-backend etcd --cassandra-hosts: %v", err)
	}
	if _, err := resolve("--cassandra-hosts", "c9", "--cassandra-consistency", "ANY"); err == nil ||
		!strings.HasPrefix(err.Error(), `--cassandra-consistency "ANY": want QUORUM, LOCAL_QUORUM or ALL`) {
		t.Fatalf("--cassandra-consistency ANY: %v", err)
	}
	if _, err := run(t, "serve", "--data-dir", t.TempDir(), "--snapshots-backend", "cassandra"); err == nil ||
		err.Error() != `snapshots.cassandra.hosts "[]": backend cassandra needs at least one contact point (host or host:port)` {
		t.Fatalf("serve --snapshots-backend cassandra: %v", err)
	}
}
