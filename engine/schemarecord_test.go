package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// TestConfiguredSchemaMustBeTheTables: a writer configured with columns
// other than those the table's first writer recorded fails closed at its
// first claim, naming the difference, and claims nothing.
func TestConfiguredSchemaMustBeTheTables(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	mustOpen(t, h, "s0")
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := schema.New([]schema.Column{{Name: "prompt", Type: schema.String}, {Name: "completion", Type: schema.Binary}})
	if err != nil {
		t.Fatal(err)
	}
	opts.Schema = other
	h2 := openHost(t, opts)
	defer h2.Close(ctx)
	_, err = h2.Open(ctx, "s1")
	if !errors.Is(err, shardmeta.ErrSchemaMismatch) || !strings.Contains(err.Error(), `column "completion" is string in the table and binary in the configuration`) {
		t.Fatalf("open with other columns: %v", err)
	}
	if m, err := LoadManifest(ctx, opts.Etcd, opts.Prefix, opts.Table, "s1"); err != nil || m.WriterEpoch != 0 {
		t.Fatalf("shard s1 was claimed: %+v, %v", m, err)
	}
}
