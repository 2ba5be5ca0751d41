package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	icerest "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/schema"
)

// client is iceberg-go's own REST client against the test server.
func (e *env) client(opts ...icerest.Option) *icerest.Catalog {
	e.t.Helper()
	c, err := icerest.NewCatalog(e.ctx, "rollwal", e.srv.URL, opts...)
	if err != nil {
		e.t.Fatalf("iceberg-go REST catalog: %v", err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// TestRESTLoadsTableWithIcebergGo: iceberg-go's REST client finds the
// namespace and the table, checks they exist (HEAD, advertised), loads the
// table at the metadata location the etcd record names, and scans exactly
// the rows appended.
func TestRESTLoadsTableWithIcebergGo(t *testing.T) {
	e := newEnv(t, Options{})
	e.fill()
	c := e.client()

	nss, err := c.ListNamespaces(e.ctx, nil)
	if err != nil || len(nss) != 1 || !slices.Equal(nss[0], table.Identifier{catalog.BaseNamespace}) {
		t.Fatalf("namespaces %v, %v; want [[rollwal]]", nss, err)
	}
	var tables []table.Identifier
	for id, err := range c.ListTables(e.ctx, table.Identifier{catalog.BaseNamespace}) {
		if err != nil {
			t.Fatalf("list tables: %v", err)
		}
		tables = append(tables, id)
	}
	if len(tables) != 1 || !slices.Equal(tables[0], e.ident) {
		t.Fatalf("tables %v; want [%v]", tables, e.ident)
	}
	if ok, err := c.CheckNamespaceExists(e.ctx, table.Identifier{catalog.BaseNamespace}); !ok || err != nil {
		t.Fatalf("namespace exists: %v, %v", ok, err)
	}
	if ok, err := c.CheckTableExists(e.ctx, e.ident); !ok || err != nil {
		t.Fatalf("table exists: %v, %v", ok, err)
	}
	props, err := c.LoadNamespaceProperties(e.ctx, table.Identifier{catalog.BaseNamespace})
	if err != nil || len(props) != 0 {
		t.Fatalf("namespace properties %v, %v", props, err)
	}

	tbl, err := c.LoadTable(e.ctx, e.ident)
	if err != nil {
		t.Fatalf("load table: %v", err)
	}
	if got, want := tbl.MetadataLocation(), e.location(); got != want {
		t.Fatalf("metadata location %s, want the record's %s", got, want)
	}
	if n := len(tbl.Metadata().Snapshots()); n != 2 {
		t.Fatalf("%d snapshots, want 2 (one per append)", n)
	}
	e.checkScan(tbl)

	// The client refuses writes itself: they are not advertised.
	if err := c.CreateNamespace(e.ctx, table.Identifier{"x"}, nil); !errors.Is(err, icerest.ErrEndpointNotSupported) {
		t.Fatalf("create namespace through iceberg-go: %v, want ErrEndpointNotSupported", err)
	}
}

// TestRESTPrefix: with a prefix, /v1/config hands it to clients, which
// then load the table under it; the unprefixed routes are 404s that name
// the prefix.
func TestRESTPrefix(t *testing.T) {
	e := newEnv(t, Options{Prefix: "rollwal-t"})
	e.fill()
	var cfg catalogConfig
	if a := e.do(http.MethodGet, "/v1/config?warehouse=anything", ""); a.code != http.StatusOK || json.Unmarshal(a.body, &cfg) != nil {
		t.Fatalf("config: %d %s", a.code, a.body)
	}
	if cfg.Overrides["prefix"] != "rollwal-t" || len(cfg.Defaults) != 0 || !slices.Equal(cfg.Endpoints, endpoints) {
		t.Fatalf("config %+v", cfg)
	}
	tbl, err := e.client().LoadTable(e.ctx, e.ident)
	if err != nil {
		t.Fatalf("load table under the prefix: %v", err)
	}
	e.checkScan(tbl)
	if a := e.do(http.MethodGet, "/v1/rollwal-t/namespaces/rollwal/tables/t", ""); a.code != http.StatusOK {
		t.Fatalf("prefixed load: %d %s", a.code, a.body)
	}
	wantError(t, "unprefixed load", e.do(http.MethodGet, "/v1/namespaces/rollwal/tables/t", ""), 404, "NotFoundException", "/v1/rollwal-t/")
}

// TestRESTRefusesWrites: every write is refused with the ErrorModel and
// 403 (the spec's writes) or 405 (a method the spec does not define);
// planning is 406; nothing in etcd changes.
func TestRESTRefusesWrites(t *testing.T) {
	e := newEnv(t, Options{})
	e.fill()
	before := e.location()
	kvs := func() string {
		resp, err := e.cli.Get(e.ctx, "/"+e.prefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, kv := range resp.Kvs {
			fmt.Fprintf(&b, "%s=%s@%d\n", kv.Key, kv.Value, kv.ModRevision)
		}
		return b.String()
	}
	keysBefore := kvs()
	createTable := `{"name":"x","schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"string","required":true}]}}`
	commit := `{"requirements":[],"updates":[{"action":"set-properties","updates":{"k":"v"}}]}`
	for _, tc := range []struct {
		what, method, path, body string
		status                   int
		msg                      string
	}{
		{"create table", http.MethodPost, "/v1/namespaces/rollwal/tables", createTable, 403, "create table"},
		{"commit", http.MethodPost, "/v1/namespaces/rollwal/tables/t", commit, 403, "commit to table"},
		{"drop table", http.MethodDelete, "/v1/namespaces/rollwal/tables/t", "", 403, "drop table"},
		{"drop table with purge", http.MethodDelete, "/v1/namespaces/rollwal/tables/t?purgeRequested=true", "", 403, "drop table"},
		{"rename", http.MethodPost, "/v1/tables/rename", `{"source":{"namespace":["rollwal"],"name":"t"},"destination":{"namespace":["rollwal"],"name":"u"}}`, 403, "rename table"},
		{"create namespace", http.MethodPost, "/v1/namespaces", `{"namespace":["x"]}`, 403, "create namespace"},
		{"drop namespace", http.MethodDelete, "/v1/namespaces/rollwal", "", 403, "drop namespace"},
		{"namespace properties", http.MethodPost, "/v1/namespaces/rollwal/properties", `{"updates":{"k":"v"}}`, 403, "update namespace properties"},
		{"register", http.MethodPost, "/v1/namespaces/rollwal/register", `{"name":"x","metadata-location":"/tmp/x.json"}`, 403, "register table"},
		{"transaction", http.MethodPost, "/v1/transactions/commit", `{"table-changes":[]}`, 403, "commit transaction"},
		{"create view", http.MethodPost, "/v1/namespaces/rollwal/views", `{}`, 403, "create view"},
		{"drop view", http.MethodDelete, "/v1/namespaces/rollwal/views/v", "", 403, "drop view"},
		{"rename view", http.MethodPost, "/v1/views/rename", `{}`, 403, "rename view"},
		{"register view", http.MethodPost, "/v1/namespaces/rollwal/register-view", `{}`, 403, "register view"},
		{"a write to a missing table", http.MethodPost, "/v1/namespaces/nope/tables/nope", commit, 403, "read-only"},
		{"put", http.MethodPut, "/v1/namespaces/rollwal/tables/t", commit, 405, "allowed: GET, HEAD"},
		{"patch", http.MethodPatch, "/v1/namespaces", "{}", 405, "allowed: GET"},
		{"get a rename", http.MethodGet, "/v1/tables/rename", "", 405, "not a method"},
		{"plan", http.MethodPost, "/v1/namespaces/rollwal/tables/t/plan", `{}`, 406, "plan the scan in the client"},
		{"credentials", http.MethodGet, "/v1/namespaces/rollwal/tables/t/credentials", "", 406, "vends credentials"},
		{"unknown path", http.MethodPost, "/v1/namespaces/rollwal/tables/t/snapshots", "{}", 404, "no such endpoint"},
		{"unknown version", http.MethodGet, "/v2/config", "", 404, "no such endpoint"},
	} {
		a := e.do(tc.method, tc.path, tc.body, "Content-Type", "application/json")
		typ := map[int]string{403: "ForbiddenException", 404: "NotFoundException", 405: "MethodNotAllowedException", 406: "UnsupportedOperationException"}[tc.status]
		wantError(t, tc.what, a, tc.status, typ, tc.msg)
		if tc.status == 403 && !strings.Contains(errorOf(t, a).Message, "this catalog is read-only: tables are written by rollwal's merge") {
			t.Errorf("%s: message %q does not say why", tc.what, errorOf(t, a).Message)
		}
		if tc.status == 405 && a.header.Values("Allow") == nil {
			t.Errorf("%s: 405 without Allow", tc.what)
		}
	}
	if after := e.location(); after != before {
		t.Fatalf("metadata location moved from %s to %s", before, after)
	}
	if after := kvs(); after != keysBefore {
		t.Fatalf("the catalog's keys changed:\nbefore\n%s\nafter\n%s", keysBefore, after)
	}
	// Metrics reports are accepted and dropped: nothing changes either.
	if a := e.do(http.MethodPost, "/v1/namespaces/rollwal/tables/t/metrics", `{"report-type":"scan-report"}`); a.code != http.StatusNoContent {
		t.Fatalf("metrics: %d %s", a.code, a.body)
	}
	if after := kvs(); after != keysBefore {
		t.Fatal("a metrics report changed the catalog's keys")
	}
}

// TestRESTMissingAndBadNames: a missing namespace or table is 404 with the
// type naming which; a nested namespace cannot exist (404); a name the
// catalog refuses is 400; a catalog where no merge ran yet lists nothing
// and answers 404, not an error.
func TestRESTMissingAndBadNames(t *testing.T) {
	e := newEnv(t, Options{})
	for _, tc := range []struct {
		what, method, path string
		status             int
		typ, msg           string
	}{
		{"missing namespace", http.MethodGet, "/v1/namespaces/nope", 404, typeNoSuchNamespace, "namespace nope does not exist"},
		{"tables of a missing namespace", http.MethodGet, "/v1/namespaces/nope/tables", 404, typeNoSuchNamespace, "nope"},
		{"parent missing", http.MethodGet, "/v1/namespaces?parent=nope", 404, typeNoSuchNamespace, "nope"},
		{"missing table", http.MethodGet, "/v1/namespaces/rollwal/tables/nope", 404, typeNoSuchTable, "table rollwal.nope does not exist"},
		{"table of a missing namespace", http.MethodGet, "/v1/namespaces/nope/tables/t", 404, typeNoSuchTable, "nope.t"},
		{"nested namespace", http.MethodGet, "/v1/namespaces/rollwal%1Fsub", 404, typeNoSuchNamespace, "one namespace level"},
		{"table of a nested namespace", http.MethodGet, "/v1/namespaces/rollwal%1Fsub/tables/t", 404, typeNoSuchNamespace, "rollwal.sub"},
		{"nested parent", http.MethodGet, "/v1/namespaces?parent=rollwal%1Fsub", 404, typeNoSuchNamespace, "one namespace level"},
		{"views of a missing namespace", http.MethodGet, "/v1/namespaces/nope/views", 404, typeNoSuchNamespace, "nope"},
		{"a view", http.MethodGet, "/v1/namespaces/rollwal/views/v", 404, typeNoSuchView, "no views"},
		{"bad namespace name", http.MethodGet, "/v1/namespaces/bad%20name", 400, typeBadRequest, "invalid name"},
		{"bad namespace in tables", http.MethodGet, "/v1/namespaces/bad%21/tables", 400, typeBadRequest, "invalid name"},
		{"bad table name", http.MethodGet, "/v1/namespaces/rollwal/tables/bad%2Fname", 400, typeBadRequest, "invalid name"},
		{"empty table name", http.MethodGet, "/v1/namespaces/rollwal/tables/", 400, typeBadRequest, "empty"},
		{"empty namespace level", http.MethodGet, "/v1/namespaces/rollwal%1F", 400, typeBadRequest, "empty level"},
		{"bad snapshots", http.MethodGet, "/v1/namespaces/rollwal/tables/t?snapshots=some", 400, typeBadRequest, "want all or refs"},
		{"bad page size", http.MethodGet, "/v1/namespaces?pageSize=0", 400, typeBadRequest, "pageSize"},
		{"bad page token", http.MethodGet, "/v1/namespaces/rollwal/tables?pageToken=%21%21", 400, typeBadRequest, "pageToken"},
		{"long target", http.MethodGet, "/v1/namespaces/rollwal/tables/" + strings.Repeat("t", DefaultMaxTargetBytes), 414, typeBadRequest, "more than the 4096"},
	} {
		wantError(t, tc.what, e.do(tc.method, tc.path, ""), tc.status, tc.typ, tc.msg)
	}
	for _, path := range []string{"/v1/namespaces/nope", "/v1/namespaces/rollwal/tables/nope", "/v1/namespaces/rollwal%1Fsub"} {
		if a := e.do(http.MethodHead, path, ""); a.code != http.StatusNotFound || len(a.body) != 0 {
			t.Errorf("HEAD %s: %d %q, want 404 and no body", path, a.code, a.body)
		}
	}
	for _, path := range []string{"/v1/namespaces/rollwal", "/v1/namespaces/rollwal/tables/t"} {
		if a := e.do(http.MethodHead, path, ""); a.code != http.StatusNoContent {
			t.Errorf("HEAD %s: %d, want 204", path, a.code)
		}
	}
	if a := e.do(http.MethodGet, "/v1/namespaces?parent=rollwal", ""); a.code != 200 || string(a.body) != `{"namespaces":[],"next-page-token":null}`+"\n" {
		t.Errorf("namespaces under rollwal: %d %s", a.code, a.body)
	}
	if a := e.do(http.MethodGet, "/v1/namespaces/rollwal/views", ""); a.code != 200 || string(a.body) != `{"identifiers":[],"next-page-token":null}`+"\n" {
		t.Errorf("views: %d %s", a.code, a.body)
	}
	c := e.client()
	if _, err := c.LoadTable(e.ctx, catalog.BaseIdent("nope")); !errors.Is(err, icecat.ErrNoSuchTable) {
		t.Errorf("iceberg-go load of a missing table: %v, want ErrNoSuchTable", err)
	}
	if ok, err := c.CheckTableExists(e.ctx, catalog.BaseIdent("nope")); ok || err != nil {
		t.Errorf("iceberg-go: a missing table exists: %v, %v", ok, err)
	}

	// No merge ran: no namespace, no table, and no error either.
	bare := newBareEnv(t, Options{})
	if a := bare.do(http.MethodGet, "/v1/namespaces", ""); a.code != 200 || string(a.body) != `{"namespaces":[],"next-page-token":null}`+"\n" {
		t.Errorf("namespaces before any merge: %d %s", a.code, a.body)
	}
	wantError(t, "tables before any merge", bare.do(http.MethodGet, "/v1/namespaces/rollwal/tables", ""), 404, typeNoSuchNamespace, "rollwal")
	wantError(t, "table before any merge", bare.do(http.MethodGet, "/v1/namespaces/rollwal/tables/t", ""), 404, typeNoSuchTable, "rollwal.t")
}

// TestRESTPages: without pageToken a list comes whole; with it, pages of
// pageSize follow one another through next-page-token, which is null on
// the last; a table created between pages is listed once at most.
func TestRESTPages(t *testing.T) {
	e := newEnv(t, Options{MaxPageSize: 3})
	for _, name := range []string{"u", "a", "m", "z", "b"} {
		if _, err := e.cat.CreateBaseTable(e.ctx, catalog.BaseIdent(name), e.dir+"/"+name, schema.Rollout()); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"n1", "n2"} {
		if err := e.cat.CreateNamespace(e.ctx, table.Identifier{ns}, iceberg.Properties{"k": ns}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(path string) ([]string, *string) {
		t.Helper()
		a := e.do(http.MethodGet, path, "")
		var r listTablesResponse
		if a.code != 200 || json.Unmarshal(a.body, &r) != nil {
			t.Fatalf("GET %s: %d %s", path, a.code, a.body)
		}
		var names []string
		for _, id := range r.Identifiers {
			names = append(names, strings.Join(append(slices.Clone(id.Namespace), id.Name), "."))
		}
		return names, r.NextPageToken
	}
	all := []string{"rollwal.a", "rollwal.b", "rollwal.m", "rollwal.t", "rollwal.u", "rollwal.z"}
	if got, next := list("/v1/namespaces/rollwal/tables?pageSize=2"); !slices.Equal(got, all) || next != nil {
		t.Fatalf("unpaged: %v, next %v; want all of %v (pageSize alone does not page)", got, next, all)
	}
	var got []string
	path := "/v1/namespaces/rollwal/tables?pageToken=&pageSize=2"
	for pages := 0; ; pages++ {
		names, next := list(path)
		if len(names) > 2 || pages > 5 {
			t.Fatalf("page %d: %v", pages, names)
		}
		got = append(got, names...)
		if next == nil {
			break
		}
		if pages == 0 { // created between pages, before the token: not listed
			if _, err := e.cat.CreateBaseTable(e.ctx, catalog.BaseIdent("0"), e.dir+"/0", schema.Rollout()); err != nil {
				t.Fatal(err)
			}
		}
		path = "/v1/namespaces/rollwal/tables?pageSize=2&pageToken=" + *next
	}
	if !slices.Equal(got, all) {
		t.Fatalf("paged: %v, want %v", got, all)
	}
	// No pageSize: MaxPageSize a page.
	if names, next := list("/v1/namespaces/rollwal/tables?pageToken="); len(names) != 3 || next == nil {
		t.Fatalf("first page at the default size: %v, %v", names, next)
	}

	a := e.do(http.MethodGet, "/v1/namespaces?pageToken=&pageSize=2", "")
	var nr listNamespacesResponse
	if a.code != 200 || json.Unmarshal(a.body, &nr) != nil || len(nr.Namespaces) != 2 || nr.NextPageToken == nil {
		t.Fatalf("first page of namespaces: %d %s", a.code, a.body)
	}
	a = e.do(http.MethodGet, "/v1/namespaces?pageSize=2&pageToken="+*nr.NextPageToken, "")
	var nr2 listNamespacesResponse
	if a.code != 200 || json.Unmarshal(a.body, &nr2) != nil || len(nr2.Namespaces) != 1 || nr2.NextPageToken != nil ||
		!slices.Equal(nr2.Namespaces[0], table.Identifier{"rollwal"}) {
		t.Fatalf("last page of namespaces: %d %s", a.code, a.body)
	}
	// iceberg-go sends pageSize alone: it gets every table in one answer.
	c := e.client()
	n := 0
	for _, err := range c.ListTables(c.SetPageSize(e.ctx, 2), table.Identifier{"rollwal"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(all)+1 {
		t.Fatalf("iceberg-go listed %d tables, want %d", n, len(all)+1)
	}
}

// TestRESTAuth: with tokens, every request needs one, /v1/config
// included: none or a wrong one is 401 with WWW-Authenticate; iceberg-go
// with the token loads the table.
func TestRESTAuth(t *testing.T) {
	const tok, old = "admin-token-0123456789", "older-token-0123456789"
	e := newEnv(t, Options{Tokens: []string{old, tok}})
	e.fill()
	for _, path := range []string{"/v1/config", "/v1/namespaces", "/v1/namespaces/rollwal/tables/t", "/v1/nowhere"} {
		a := e.do(http.MethodGet, path, "")
		wantError(t, path+" without a token", a, 401, "NotAuthorizedException", "Authorization: Bearer")
		if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", path, a.header.Get("WWW-Authenticate"))
		}
		wantError(t, path+" with a wrong token", e.do(http.MethodGet, path, "", "Authorization", "Bearer "+tok+"x"), 401, "NotAuthorizedException", "not one")
	}
	if a := e.do(http.MethodGet, "/v1/config", "", "Authorization", "bearer "+old); a.code != 200 {
		t.Fatalf("config with the older token: %d %s", a.code, a.body)
	}
	if _, err := icerest.NewCatalog(e.ctx, "x", e.srv.URL); !errors.Is(err, icerest.ErrUnauthorized) {
		t.Fatalf("iceberg-go without a token: %v, want ErrUnauthorized", err)
	}
	tbl, err := e.client(icerest.WithOAuthToken(tok)).LoadTable(e.ctx, e.ident)
	if err != nil {
		t.Fatalf("iceberg-go with the token: %v", err)
	}
	e.checkScan(tbl)
	a := e.do(http.MethodPost, "/v1/oauth/tokens", "grant_type=client_credentials", "Authorization", "Bearer "+tok)
	if a.code != 400 || !strings.Contains(string(a.body), `"error":"unsupported_grant_type"`) {
		t.Fatalf("oauth tokens: %d %s", a.code, a.body)
	}
}

// TestRESTInternalErrorsDoNotLeak: a record the catalog cannot read is a
// 500 whose message is only a reference, and the log line with that
// reference has the error.
func TestRESTInternalErrorsDoNotLeak(t *testing.T) {
	var logs bytes.Buffer
	e := newEnv(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	key := "/" + e.prefix + "/tables/rollwal/t" // wire format: docs/format/iceberg.md
	if _, err := e.cli.Put(e.ctx, key, "{not json"); err != nil {
		t.Fatal(err)
	}
	a := e.do(http.MethodGet, "/v1/namespaces/rollwal/tables/t", "")
	wantError(t, "corrupt record", a, 500, typeInternal, "internal error (ref 1")
	if m := errorOf(t, a).Message; strings.Contains(m, e.prefix) || strings.Contains(m, "corrupt") || strings.Contains(m, "json") {
		t.Fatalf("a 500 leaks its cause: %q", m)
	}
	var rec map[string]any
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
		t.Fatalf("log %s: %v", logs.Bytes(), err)
	}
	if rec["level"] != "ERROR" || rec["ref"] != float64(1) || !strings.Contains(rec["err"].(string), "corrupt record") {
		t.Fatalf("log line %v: want the error with ref 1", rec)
	}
}

// TestOptionsValidate: bad options are refused, and NewHandler panics on
// them rather than serve a catalog other than the one configured.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Prefix: "a/b"}, {Prefix: ".."}, {Prefix: strings.Repeat("p", 129)}, {Tokens: []string{""}},
		{Tokens: []string{"a b"}}, {MaxTargetBytes: 10}, {MaxPageSize: -1}, {RequestTimeout: -1}} {
		o.EnsureDefaults()
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validates", o)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("NewHandler took a bad prefix")
		}
	}()
	NewHandler(nil, Options{Prefix: "a b"})
}
