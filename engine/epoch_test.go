package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// TestEpochNeverRegresses: epochs strictly increase across claims, the loss
// of the epoch counter and manifest reloads; a counter below the manifest's
// epoch, an unparsable counter or an unparsable manifest fail closed with an
// error naming the shard, and change nothing.
func TestEpochNeverRegresses(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	keys := shardmeta.Keys{Prefix: "rollwal", Table: opts.Table}
	var last uint64
	claim := func(wantErr string) {
		t.Helper()
		h := openHost(t, opts)
		defer h.Close(ctx)
		s, err := h.Open(ctx, "s0")
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "s0") {
				t.Fatalf("open: %v; want an error naming shard s0 and containing %q", err, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.Epoch() <= last {
			t.Fatalf("epoch %d after epoch %d", s.Epoch(), last)
		}
		last = s.Epoch()
		if _, err := s.Append(ctx, rows("e", int(last)*10, 3), Source{}); err != nil {
			t.Fatal(err)
		}
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := etcdClient.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		claim("")
	}
	if _, err := etcdClient.Delete(ctx, keys.Epoch("s0")); err != nil {
		t.Fatal(err)
	}
	claim("") // reseeded from the manifest's writer_epoch
	if last != 4 {
		t.Fatalf("epoch after counter loss = %d, want 4", last)
	}
	put(keys.Epoch("s0"), "2")
	claim("epoch")
	put(keys.Epoch("s0"), "abc")
	claim("epoch")
	put(keys.Epoch("s0"), "4")
	m, _ := etcdClient.Get(ctx, keys.Manifest("s0"))
	put(keys.Manifest("s0"), `{"version":1,`)
	claim("manifest")
	put(keys.Manifest("s0"), string(m.Kvs[0].Value))
	claim("")
	if last != 5 {
		t.Fatalf("epoch after repairs = %d, want 5", last)
	}
	if _, err := LoadManifest(ctx, etcdClient, "", opts.Table, "s0"); err != nil {
		t.Fatal(err)
	}
}
