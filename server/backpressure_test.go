package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/vfs"
)

// TestMergesBehindBackpressure: a shard whose manifest holds its limit of
// generations that no merge has drained answers appends with 429, code
// merges_behind, a message naming the cause, and Retry-After, and stores
// nothing; once a merge publishes the generations (and the writer drains
// them), appends are accepted again. The manifest, one etcd value, never
// grows past the bound.
func TestMergesBehindBackpressure(t *testing.T) {
	mem := vfs.NewStrictMem()
	var table string
	f := newFixtureWith(t, 0, func(o *engine.Options) {
		o.FS, o.MaxUnmergedGenerations = mem, 3
		table = o.Table
	})
	f.srv.SetReady(true)
	for i := range 3 {
		if code, b := f.post(t, "/v1/shards/s0/rows", ndjson(fmt.Sprintf("g%d", i))); code != http.StatusOK {
			t.Fatalf("append %d: %d %s", i, code, b)
		}
		f.flush(t)
	}
	code, h, b := f.do(t, http.MethodPost, "/v1/shards/s0/rows", ContentTypeNDJSON, ndjson("late"))
	e := decode[apiError](t, b)
	if code != http.StatusTooManyRequests || e.Code != codeMergesBehind || !strings.Contains(e.Error, "merges are behind") || h.Get("Retry-After") == "" {
		t.Fatalf("append past the limit: %d %s (Retry-After %q); want 429 merges_behind with Retry-After", code, b, h.Get("Retry-After"))
	}

	ctx := context.Background()
	c, err := publish.New(ctx, publish.Options{Etcd: etcdClient, Table: table, DataDir: "/data", FS: mem, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RunOnce(ctx); err != nil {
		t.Fatalf("merge: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second) // the writer drains on its next tick
	for {
		code, b = f.post(t, "/v1/shards/s0/rows", ndjson("late"))
		if code == http.StatusOK {
			break
		}
		if code != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("append after the merge: %d %s", code, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var st engine.Status
	if err := json.Unmarshal(f.get(t, "/v1/shards/s0"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Flushed) != 0 {
		t.Fatalf("after the merge and the drain the manifest still holds %d generations", len(st.Flushed))
	}
}
