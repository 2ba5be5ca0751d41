package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStorageConfigErrors: every bad storage: setting is refused by config
// check (and so by serve and merge) with an error naming its key.
func TestStorageConfigErrors(t *testing.T) {
	dir := t.TempDir()
	access, secret, empty := filepath.Join(dir, "access"), filepath.Join(dir, "secret"), filepath.Join(dir, "empty")
	writeTestFile(t, access, "AKIDEXAMPLE\n")
	writeTestFile(t, secret, "s3cr3t\n")
	writeTestFile(t, empty, "\n")
	twoLines := filepath.Join(dir, "two")
	writeTestFile(t, twoLines, "a\nb\n")
	missing := filepath.Join(dir, "missing")
	keys := "access_key_file: " + access + ", secret_key_file: " + secret
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{"storage: {url: gs://b/p}", `storage.url "gs://b/p": scheme "gs"`},
		{"storage: {url: s3:///p}", `storage.url "s3:///p": no bucket`},
		{"storage: {url: s3://My_Bucket/p}", `storage.url "s3://My_Bucket/p": bucket "My_Bucket"`},
		{"storage: {url: s3://ab/p}", `storage.url "s3://ab/p": bucket "ab"`},
		{"storage: {url: s3://a..b/p}", `two dots`},
		{"storage: {url: s3://10.0.0.1/p}", `IP address`},
		{"storage: {url: 's3://b-1/p?x=1'}", `storage.url "s3://b-1/p?x=1": a store URL has no user, query or fragment`},
		{"storage: {url: 's3://b-1/a//b'}", `storage.url "s3://b-1/a//b": prefix`},
		{"storage: {url: file://host/dir}", `storage.url "file://host/dir": file URLs name a local absolute path`},
		{"storage: {url: 'file:rel/dir'}", `storage.url "file:rel/dir"`},
		{"storage: {endpoint: 'http://127.0.0.1:9000'}", `storage.endpoint "http://127.0.0.1:9000": is set but storage.url is empty`},
		{"storage: {url: file:///tmp/x, path_style: true}", `storage.path_style true: is an S3 setting, but storage.url "file:///tmp/x" is a file:// store`},
		{"storage: {url: s3://bkt/p, endpoint: '127.0.0.1:9000'}", `storage.endpoint "127.0.0.1:9000": want an http:// or https:// URL`},
		{"storage: {url: s3://bkt/p, endpoint: 'ftp://h'}", `storage.endpoint "ftp://h": want an http:// or https:// URL`},
		{"storage: {url: s3://bkt/p, endpoint: 'http://'}", `storage.endpoint "http://": no host`},
		{"storage: {url: s3://bkt/p, endpoint: 'http://h:99999'}", `storage.endpoint "http://h:99999"`},
		{"storage: {url: s3://bkt/p, region: 'eu west'}", `storage.region "eu west": must not hold spaces`},
		{"storage: {url: s3://bkt/p, max_attempts: -1}", `storage.max_attempts -1: must not be negative`},
		{"storage: {url: s3://bkt/p, max_attempts: 1000}", `storage.max_attempts 1000: must be at most 100`},
		{"storage: {url: s3://bkt/p, part_size: -5}", `storage.part_size -5: must not be negative`},
		{"storage: {url: s3://bkt/p, part_size: 1048576}", `storage.part_size 1048576: must be at least 5242880`},
		{"storage: {url: s3://bkt/p, part_size: 10000000000}", `storage.part_size 10000000000: must be at most`},
		{"storage: {url: s3://bkt/p, access_key_file: " + access + "}", `storage.access_key_file "` + access + `": is set without storage.secret_key_file`},
		{"storage: {url: s3://bkt/p, secret_key_file: " + secret + "}", `storage.secret_key_file "` + secret + `": is set without storage.access_key_file`},
		{"storage: {url: s3://bkt/p, access_key_file: " + missing + ", secret_key_file: " + secret + "}", `storage.access_key_file "` + missing + `": `},
		{"storage: {url: s3://bkt/p, access_key_file: " + access + ", secret_key_file: " + empty + "}", `storage.secret_key_file "` + empty + `": the file is empty`},
		{"storage: {url: s3://bkt/p, access_key_file: " + twoLines + ", secret_key_file: " + secret + "}", `storage.access_key_file "` + twoLines + `": the file holds more than one line`},
		{"storage: {url: s3://bkt/p, secret_key: x}", `unknown key "secret_key" in section storage`},
		{"storage: {url: s3://bkt/p, part_size: big}", "line 2: cannot unmarshal !!str `big` into int64"}, // type errors name the line, as elsewhere
		{"tables: [{name: a}, {name: b, storage: {url: 's3://B/p'}}]", `tables[1].storage.url "s3://B/p": bucket "B"`},
		{"tables: [{name: a, storage: {url: s3://bkt/p, max_attempts: -2, " + keys + "}}]", `tables[0].storage.max_attempts -2`},
		{"tables: [{name: a, storage: {region: x}}]", `tables[0].storage.region "x": is set but tables[0].storage.url is empty`},
	} {
		path := filepath.Join(dir, "w.yaml")
		writeTestFile(t, path, "data_dir: "+dir+"\n"+tc.yaml+"\n")
		out, err := run(t, "config", "check", "--config", path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: config check: %v\n%s\nwant an error holding %q", tc.yaml, err, out, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error shows the secret: %v", tc.yaml, err)
		}
	}
}

// TestStorageConfigCheck: valid storage sections pass, with the
// environment expanded into them; config check prints them, the key files
// by name and never the keys; a table's storage: replaces the process's
// whole, and `storage: {}` keeps a table's generations local.
func TestStorageConfigCheck(t *testing.T) {
	dir := t.TempDir()
	access, secret := filepath.Join(dir, "access"), filepath.Join(dir, "secret")
	writeTestFile(t, access, "AKIDEXAMPLE\n")
	writeTestFile(t, secret, "s3cr3t-value\n")
	t.Setenv("ROLLWAL_TEST_BUCKET", "lake-1")
	t.Setenv("ROLLWAL_TEST_SECRET_FILE", secret)
	path := filepath.Join(dir, "w.yaml")
	writeTestFile(t, path, `data_dir: `+dir+`
storage:
  url: s3://${ROLLWAL_TEST_BUCKET}/tables
  endpoint: http://127.0.0.1:7070
  region: eu-west-1
  path_style: true
  max_attempts: 3
  part_size: 8388608
  access_key_file: `+access+`
  secret_key_file: ${ROLLWAL_TEST_SECRET_FILE}
tables:
  - name: rollouts
  - name: local
    storage: {}
  - name: elsewhere
    storage: {url: file://`+filepath.Join(dir, "objects")+`}
`)
	out, err := run(t, "config", "check", "--config", path)
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	for _, want := range []string{"url: s3://lake-1/tables", "endpoint: http://127.0.0.1:7070", "path_style: true",
		"part_size: 8388608", "access_key_file: " + access, "secret_key_file: " + secret, "storage: {}", "url: file://" + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("config check does not print %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cr3t") || strings.Contains(out, "AKIDEXAMPLE") {
		t.Errorf("config check prints a credential:\n%s", out)
	}

	cfg, err := resolveConfig(newConfig().Flags(), path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]TableConfig{}
	for _, tc := range cfg.tables() {
		byName[tc.Name] = tc
	}
	if s := cfg.storageFor(byName["rollouts"]); s.URL != "s3://lake-1/tables" || cfg.storageKey(byName["rollouts"]) != "storage" {
		t.Errorf("rollouts: %+v (%s); want the process's storage", s, cfg.storageKey(byName["rollouts"]))
	}
	if s := cfg.storageFor(byName["local"]); s != (StorageConfig{}) || cfg.storageKey(byName["local"]) != "tables[1].storage" {
		t.Errorf("local: %+v; want none (storage: {})", s)
	}
	if s := cfg.storageFor(byName["elsewhere"]); s.URL != "file://"+filepath.Join(dir, "objects") || s.Endpoint != "" || s.AccessKeyFile != "" {
		t.Errorf("elsewhere: %+v; want its own section alone, nothing inherited", s)
	}
	o, err := cfg.storageFor(byName["rollouts"]).options("storage")
	if err != nil || o.AccessKey != "AKIDEXAMPLE" || o.SecretKey != "s3cr3t-value" || o.PartSize != 8<<20 || o.MaxAttempts != 3 || !o.PathStyle {
		t.Errorf("options: %+v, %v", o, err)
	}
}

// TestStoresAreShared: one Store per distinct storage section, whatever
// the number of tables using it; the metrics carry the store's URL.
func TestStoresAreShared(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	ss := newStores(reg, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	a := StorageConfig{URL: "file://" + filepath.Join(dir, "a")}
	b := StorageConfig{URL: "file://" + filepath.Join(dir, "b")}
	sa1, err1 := ss.open(ctx, "storage", a)
	sa2, err2 := ss.open(ctx, "tables[1].storage", a)
	sb, err3 := ss.open(ctx, "tables[2].storage", b)
	none, err4 := ss.open(ctx, "storage", StorageConfig{})
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		t.Fatal(err)
	}
	if sa1 != sa2 || sa1 == sb || none != nil {
		t.Fatalf("stores: %v %v %v %v; want the first two the same, the third another, the last nil", sa1, sa2, sb, none)
	}
	if err := sa1.Create(ctx, "x", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "writer_objstore_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "store" && l.GetValue() == a.URL {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("no writer_objstore_requests_total{store=%q}", a.URL)
	}
	// A key file gone between the check and the start is named by its key.
	_, err = ss.open(ctx, "tables[3].storage", StorageConfig{URL: "s3://bkt/p", AccessKeyFile: filepath.Join(dir, "gone"), SecretKeyFile: filepath.Join(dir, "gone")})
	if err == nil || !strings.Contains(err.Error(), "tables[3].storage.access_key_file") {
		t.Errorf("open with a missing key file: %v", err)
	}
}
