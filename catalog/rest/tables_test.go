package rest

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	icecat "github.com/apache/iceberg-go/catalog"
	icerest "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/schema"
)

// TestRESTServesSeveralTables: over Tables, one REST catalog serves the
// base tables of several catalogs (a process's tables): one namespace,
// every table listed and loadable from its own catalog, an unknown one
// 404 — also while one table's catalog has no table yet.
func TestRESTServesSeveralTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := etcd.Server(t).Client()
	root := "rollwal-rest-test/" + etcdtest.Name(t, "", 80)
	dir := t.TempDir()
	cats := Tables{}
	for _, name := range []string{"a", "b", "c"} {
		cat, err := catalog.New(catalog.Options{Client: cli, Prefix: catalog.BasePrefix(root, name)})
		if err != nil {
			t.Fatal(err)
		}
		cats[name] = cat
		if name == "c" {
			continue // no merge has created c's table yet
		}
		if err := cat.CreateNamespace(ctx, table.Identifier{catalog.BaseNamespace}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.CreateBaseTable(ctx, catalog.BaseIdent(name), filepath.Join(dir, name, "base"), schema.Rollout()); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(NewHandler(cats, Options{}))
	defer srv.Close()
	c, err := icerest.NewCatalog(ctx, "rollwal", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nss, err := c.ListNamespaces(ctx, nil)
	if err != nil || len(nss) != 1 || !slices.Equal(nss[0], table.Identifier{catalog.BaseNamespace}) {
		t.Fatalf("namespaces %v, %v; want [[rollwal]]", nss, err)
	}
	var names []string
	for id, err := range c.ListTables(ctx, table.Identifier{catalog.BaseNamespace}) {
		if err != nil {
			t.Fatalf("list tables: %v", err)
		}
		names = append(names, id[len(id)-1])
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("tables %v; want [a b]", names)
	}
	locs := map[string]bool{}
	for _, name := range []string{"a", "b"} {
		tbl, err := c.LoadTable(ctx, catalog.BaseIdent(name))
		if err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		own, err := cats[name].LoadTable(ctx, catalog.BaseIdent(name))
		if err != nil || own.MetadataLocation() != tbl.MetadataLocation() {
			t.Fatalf("table %s loaded at %s; its own catalog has %v (%v)", name, tbl.MetadataLocation(), own, err)
		}
		locs[tbl.MetadataLocation()] = true
	}
	if len(locs) != 2 {
		t.Fatalf("tables a and b loaded from one metadata file: %v", locs)
	}
	for _, name := range []string{"c", "nope"} {
		if _, err := c.LoadTable(ctx, catalog.BaseIdent(name)); !errors.Is(err, icecat.ErrNoSuchTable) {
			t.Fatalf("load %s: %v, want ErrNoSuchTable", name, err)
		}
		if ok, err := c.CheckTableExists(ctx, catalog.BaseIdent(name)); ok || err != nil {
			t.Fatalf("%s exists: %v, %v", name, ok, err)
		}
	}
}
