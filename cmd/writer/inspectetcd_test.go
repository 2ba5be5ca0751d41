package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/etcdembed"
)

// TestInspectEtcd: `inspect etcd` shows the embedded etcd's database size,
// in-use size and quota, as a table and as JSON.
func TestInspectEtcd(t *testing.T) {
	dir := t.TempDir()
	if out, err := run(t, "generate", "--data-dir", dir, "--rows", "20"); err != nil {
		t.Fatalf("generate: %v\n%s", err, out)
	}
	out, err := run(t, "inspect", "etcd", "--data-dir", dir, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var ms []etcdMember
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(ms) != 1 || ms[0].DBBytes <= 0 || ms[0].DBInUseBytes <= 0 || ms[0].QuotaBytes != etcdembed.DefaultQuotaBytes ||
		ms[0].Revision <= 1 || len(ms[0].Alarms) != 0 {
		t.Fatalf("inspect etcd: %+v", ms)
	}
	out, err = run(t, "inspect", "etcd", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "QUOTA_BYTES") || !strings.Contains(out, "2147483648") {
		t.Fatalf("inspect etcd: %v\n%s", err, out)
	}
}
