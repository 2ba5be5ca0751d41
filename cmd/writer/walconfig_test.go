package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestWALConfig: a bad wal: section is refused by config check with an
// error naming its key; the object backend needs every table's storage.
func TestWALConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		yaml string
		want string // "" for a valid configuration
	}{
		{"wal: {backend: s3}", `wal.backend "s3": want "local" or "object"`},
		{"wal: {backend: object}", `wal.backend "object": needs an object store: set storage.url`},
		{"storage: {url: file:///tmp/b}\nwal: {backend: object, object_size: 1000}", `wal.object_size 1000: must be from 64 KiB`},
		{"storage: {url: file:///tmp/b}\nwal: {backend: object, object_size: 1000000000}", `wal.object_size 1000000000`},
		{"storage: {url: file:///tmp/b}\ntables: [{name: a}, {name: b, storage: {}}]\nwal: {backend: object}",
			`wal.backend "object": needs an object store: set tables[1].storage.url`},
		{"wal: {backend: object, bogus: 1}", `bogus`},
		{"wal: {compression: lz4}", `wal.compression "lz4": want none, s2 or zstd`},
		{"wal: {compression: s2}", ""},
		{"wal: {backend: local}", ""},
		{"storage: {url: file:///tmp/b}\nwal: {backend: object, object_size: 1048576}", ""},
	} {
		path := filepath.Join(dir, "w.yaml")
		writeTestFile(t, path, "data_dir: "+dir+"\n"+tc.yaml+"\n")
		out, err := run(t, "config", "check", "--config", path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: config check: %v\n%s", tc.yaml, err, out)
		case tc.want == "" && !strings.Contains(out, "\nwal:\n  "):
			t.Errorf("%s: config check does not print the wal: section:\n%s", tc.yaml, out)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: config check: %v\n%s\nwant an error holding %q", tc.yaml, err, out, tc.want)
		}
	}
}

// TestWALToolsRefuseObjectWAL: writer wal reads segment files; on a
// configuration whose WAL is in the store it says so, naming where the
// objects are, instead of reporting an empty or missing WAL.
func TestWALToolsRefuseObjectWAL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.yaml")
	writeTestFile(t, path, "data_dir: "+dir+"\nstorage: {url: 'file://"+dir+"/bucket'}\nwal: {backend: object}\n")
	for _, sub := range []string{"dump", "verify"} {
		out, err := run(t, "wal", sub, "--config", path, "--shard", "default")
		if err == nil || !strings.Contains(err.Error(), "wal.backend: object, objects under file://"+dir+"/bucket/rollouts/shards/default/wal/") {
			t.Errorf("wal %s on an object WAL: %v\n%s", sub, err, out)
		}
	}
}
