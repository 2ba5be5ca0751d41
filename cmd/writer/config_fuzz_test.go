package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// FuzzConfigLoad: no configuration file makes the loader or Validate panic;
// an error names the file; loading is deterministic. The seed corpus in
// testdata/fuzz/FuzzConfigLoad runs with every go test.
func FuzzConfigLoad(f *testing.F) {
	for _, s := range []string{
		"",
		"data_dir: /var/lib/rollwal\nlisten: 127.0.0.1:0\nshards: [a, b]\nflush_age: 30s\n",
		"etcd:\n  endpoints: [http://127.0.0.1:2379]\n  tls:\n    ca_file: /ca.pem\n",
		"flush_bytes: -1\n",
		"flush_age: 30\n",
		"unknown: 1\n",
		"shards: [a]\n---\nshards: [b]\n",
		"password: ${NOT_SET_ANYWHERE}\n",
		"lease_ttl: [1, 2]\n",
		"etcd: {tls: {insecure_skip_verify: yes}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewStrictMem()
		const path = "/w.yaml"
		file, err := fs.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := file.Write(data); err != nil {
			t.Fatal(err)
		}
		file.Close()
		load := func() (Config, error) {
			cfg := defaultConfig()
			if err := loadConfigFile(fs, path, &cfg); err != nil {
				return cfg, err
			}
			return cfg, cfg.Validate()
		}
		a, errA := load()
		b, errB := load()
		if (errA == nil) != (errB == nil) || (errA == nil && !reflect.DeepEqual(a, b)) {
			t.Fatalf("loading twice differs: %v / %v", errA, errB)
		}
		if errA != nil && strings.TrimSpace(errA.Error()) == "" {
			t.Fatal("empty error message")
		}
	})
}
