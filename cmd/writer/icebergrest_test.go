package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/server"
)

// TestIcebergRESTConfig: iceberg.rest_listen reads from the file, is
// overridden by --iceberg-rest-listen, is off by default, and a bad
// address or one another listener has is refused naming both keys.
func TestIcebergRESTConfig(t *testing.T) {
	dir := t.TempDir()
	resolve := func(yaml string, args ...string) (Config, error) {
		path := filepath.Join(dir, "w.yaml")
		writeTestFile(t, path, yaml)
		var flagged Config
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addIcebergFlags(f, &flagged.Iceberg)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return resolveConfig(f, path, flagged)
	}
	if got, err := resolve(""); err != nil || got.Iceberg.RESTListen != "" {
		t.Fatalf("default: %q, %v; want off", got.Iceberg.RESTListen, err)
	}
	if got, err := resolve("iceberg:\n  rest_listen: 127.0.0.1:8181\n"); err != nil || got.Iceberg.RESTListen != "127.0.0.1:8181" {
		t.Fatalf("from the file: %q, %v", got.Iceberg.RESTListen, err)
	}
	if got, err := resolve("iceberg:\n  rest_listen: 127.0.0.1:8181\n", "--iceberg-rest-listen", "127.0.0.1:9191"); err != nil || got.Iceberg.RESTListen != "127.0.0.1:9191" {
		t.Fatalf("flag over the file: %q, %v", got.Iceberg.RESTListen, err)
	}
	// Port 0 picks a free port: never a clash, as for the other listeners.
	if _, err := resolve("listen: 127.0.0.1:0\niceberg:\n  rest_listen: 127.0.0.1:0\n"); err != nil {
		t.Fatalf("two port-0 listeners: %v", err)
	}
	for _, tc := range []struct {
		yaml string
		args []string
		want string
	}{
		{"iceberg:\n  rest_listen: nowhere\n", nil, `iceberg.rest_listen "nowhere": want host:port`},
		{"iceberg:\n  rest_listen: 127.0.0.1:99999\n", nil, `iceberg.rest_listen "127.0.0.1:99999": port "99999" is not a number in 0-65535`},
		{"", []string{"--iceberg-rest-listen", "127.0.0.1:8080"}, `--iceberg-rest-listen "127.0.0.1:8080": is also listen ("127.0.0.1:8080")`},
		{"iceberg:\n  rest_listen: 0.0.0.0:8080\n", nil, `iceberg.rest_listen "0.0.0.0:8080": is also listen ("127.0.0.1:8080")`},
		{"admin_listen: 127.0.0.1:6060\niceberg:\n  rest_listen: 127.0.0.1:6060\n", nil, `iceberg.rest_listen "127.0.0.1:6060": is also admin_listen`},
		{"http:\n  probe_listen: 127.0.0.1:9090\niceberg:\n  rest_listen: :9090\n", nil, `iceberg.rest_listen ":9090": is also http.probe_listen ("127.0.0.1:9090")`},
		{"iceberg:\n  rest_listn: 127.0.0.1:8181\n", nil, `unknown key "rest_listn" in section iceberg`},
	} {
		_, err := resolve(tc.yaml, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: %v, want an error containing %q", tc.yaml, tc.args, err, tc.want)
		}
	}
	if f := newServe().Flags().Lookup("iceberg-rest-listen"); f == nil || f.DefValue != "" {
		t.Fatalf("serve's --iceberg-rest-listen: %+v; want one, default off", f)
	}
}

// TestIcebergRESTServe: `writer serve --iceberg-rest-listen` serves the
// table's base catalog, read-only and behind the admin token: before any
// merge the table is a 404; after `writer merge` the REST load names the
// metadata the table's etcd record names, and a scan of the metadata it
// served holds exactly the rows posted; writes are refused and change
// nothing; SIGTERM still ends in a clean stop.
func TestIcebergRESTServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const tok = "admin-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "admin.tokens")
	writeTestFile(t, tokens, tok+"\n")
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--iceberg-rest-listen", "127.0.0.1:0",
		"--admin-token-file", tokens, "--table", "rt", "--flush-age", "-1s")
	rec := p.find(msgIcebergREST)
	if rec == nil {
		t.Fatalf("no %q logged", msgIcebergREST)
	}
	rest := "http://" + rec["addr"].(string)
	call := func(method, url string, auth bool, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if body != "" {
			req.Header.Set("Content-Type", server.ContentTypeNDJSON)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	get := func(method, path string, auth bool) (int, map[string]any) {
		t.Helper()
		code, b := call(method, rest+path, auth, "")
		var body map[string]any
		json.Unmarshal(b, &body)
		return code, body
	}
	errType := func(body map[string]any) string {
		e, _ := body["error"].(map[string]any)
		s, _ := e["type"].(string)
		return s
	}
	if code, body := get(http.MethodGet, "/v1/config", false); code != 401 || errType(body) != "NotAuthorizedException" {
		t.Fatalf("config without the admin token: %d %v", code, body)
	}
	if code, body := get(http.MethodGet, "/v1/config", true); code != 200 || body["endpoints"] == nil {
		t.Fatalf("config: %d %v", code, body)
	}
	if code, body := get(http.MethodGet, "/v1/namespaces", true); code != 200 || len(body["namespaces"].([]any)) != 0 {
		t.Fatalf("namespaces before any merge: %d %v", code, body)
	}
	if code, body := get(http.MethodGet, "/v1/namespaces/rollwal/tables/rt", true); code != 404 || errType(body) != "NoSuchTableException" {
		t.Fatalf("table before any merge: %d %v", code, body)
	}

	ids := batchIDs("rest", 0, 25)
	if code, b := call(http.MethodPost, p.url("/v1/shards/default/rows"), false, ndjson(ids)); code != 200 {
		t.Fatalf("post: %d %s", code, b)
	}
	if code, b := call(http.MethodPost, p.url("/v1/shards/default/flush"), true, ""); code != 200 {
		t.Fatalf("flush: %d %s", code, b)
	}
	runProc(t, secondProcessBound, "merge", "--data-dir", dir, "--table", "rt").succeeded(t)

	code, b := call(http.MethodGet, rest+"/v1/namespaces/rollwal/tables/rt", true, "")
	var loaded struct {
		Location string          `json:"metadata-location"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if code != 200 || json.Unmarshal(b, &loaded) != nil {
		t.Fatalf("table after the merge: %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	meta, err := openFollowed(ctx, dir, defaultConfig().Etcd)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	cat, err := catalog.New(catalog.Options{Client: meta.client, Prefix: catalog.BasePrefix(metaPrefix, "rt")})
	if err != nil {
		t.Fatal(err)
	}
	record := func() string {
		t.Helper()
		tbl, err := cat.LoadTable(ctx, catalog.BaseIdent("rt"))
		if err != nil {
			t.Fatal(err)
		}
		return tbl.MetadataLocation()
	}
	if want := record(); loaded.Location != want {
		t.Fatalf("REST metadata-location %s; the record names %s", loaded.Location, want)
	}
	md, err := table.ParseMetadataBytes(loaded.Metadata)
	if err != nil {
		t.Fatalf("the metadata REST served: %v", err)
	}
	tbl := table.New(catalog.BaseIdent("rt"), md, loaded.Location, func(context.Context) (icebergio.IO, error) { return icebergio.LocalFS{}, nil }, nil)
	at, err := tbl.Scan(table.WithSelectedFields("id")).ToArrowTable(ctx)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	defer at.Release()
	var got []string
	for _, c := range at.Column(0).Data().Chunks() {
		s := c.(*array.String)
		for i := 0; i < s.Len(); i++ {
			got = append(got, s.Value(i))
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Fatalf("scanned %d ids %v; want the %d posted", len(got), got, len(want))
	}

	for _, w := range []struct{ method, path string }{
		{http.MethodPost, "/v1/namespaces/rollwal/tables/rt"}, {http.MethodDelete, "/v1/namespaces/rollwal/tables/rt"},
		{http.MethodPost, "/v1/namespaces"}, {http.MethodPost, "/v1/tables/rename"},
	} {
		if code, body := get(w.method, w.path, true); code != 403 || errType(body) != "ForbiddenException" {
			t.Errorf("%s %s: %d %v, want 403", w.method, w.path, code, body)
		}
	}
	if after := record(); after != loaded.Location {
		t.Fatalf("after the refused writes the record names %s, not %s", after, loaded.Location)
	}
	p.stop(t)
}
