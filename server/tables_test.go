package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// tokensSchema is a table unlike the rollouts: a list and an int.
func tokensSchema(t *testing.T) *schema.Schema {
	t.Helper()
	tokens, err := schema.ParseColumnType("list<int32>")
	if err != nil {
		t.Fatal(err)
	}
	tokens.Name = "tokens"
	sc, err := schema.New([]schema.Column{tokens, {Name: "step", Type: schema.Int32, Nullable: true}})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func tokensNDJSON(ids ...string) string {
	var sb strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&sb, `{"id":%q,"tokens":[1,-2,%d],"step":%d}`+"\n", id, i, i)
	}
	return sb.String()
}

// openHost opens shards of a fresh table of sc on fs, its metrics on reg
// labelled with the table, as a writer serving several tables registers
// them: the engine's metrics are labelled by shard alone.
func openHost(t *testing.T, fs vfs.FS, reg *prometheus.Registry, sc *schema.Schema, suffix string, shards ...string) (*engine.Host, string) {
	t.Helper()
	name := etcdtest.Name(t, suffix, 100)
	host, err := engine.NewHost(engine.Options{
		DataDir: "/data", FS: fs, Table: name, Schema: sc,
		Etcd: etcdClient, WALSegmentSize: 64 << 10, FlushBytes: 1 << 20, FlushAge: -1, MemoryBudget: 64 << 20,
		MaxBatchRows: 1000, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"table": name}, reg),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := host.Close(ctx); err != nil {
			t.Errorf("close host: %v", err)
		}
	})
	for _, s := range shards {
		if _, err := host.Open(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	return host, name
}

func memtableRows(t *testing.T, h *engine.Host, shard string) int {
	t.Helper()
	sh, ok := h.Shard(shard)
	if !ok {
		t.Fatalf("shard %s is not open", shard)
	}
	return sh.Status().MemtableRows
}

// TestTwoTablesRoute serves a rollout table (shard s0) and a tokens table
// (shards s0 and s1) from one server: each table's routes reach its own
// host and decode with its own schema; the shorthand reaches the first.
func TestTwoTablesRoute(t *testing.T) {
	fs, reg := vfs.NewStrictMem(), prometheus.NewRegistry()
	hostA, a := openHost(t, fs, reg, schema.Rollout(), "-a", "s0")
	hostB, b := openHost(t, fs, reg, tokensSchema(t), "-b", "s0", "s1")
	srv := New(Options{Registry: reg, Tables: []Table{
		{Name: a, Host: hostA, Schema: schema.Rollout(), Shards: []string{"s0"}},
		{Name: b, Host: hostB, Schema: tokensSchema(t), Shards: []string{"s0", "s1"}},
	}})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	f := &fixture{host: hostA, srv: srv, ts: ts, reg: reg}
	srv.SetReady(true)
	routeA, routeB := "/v1/tables/"+a+"/shards/s0", "/v1/tables/"+b+"/shards/s0"

	for _, c := range []struct {
		route, body string
		want        int
	}{
		{routeA + "/rows", ndjson("a1", "a2"), http.StatusOK},
		{routeB + "/rows", tokensNDJSON("b1", "b2", "b3"), http.StatusOK},
		{routeB + "/rows", ndjson("a3"), http.StatusBadRequest}, // a rollout is not a row of b
		{routeA + "/rows", tokensNDJSON("b4"), http.StatusBadRequest},
		{"/v1/shards/s0/rows", ndjson("a3"), http.StatusOK}, // the shorthand is a's
		{"/v1/shards/s0/rows", tokensNDJSON("b4"), http.StatusBadRequest},
	} {
		if code, body := f.post(t, c.route, c.body); code != c.want {
			t.Fatalf("POST %s %q: %d %s, want %d", c.route, c.body, code, body, c.want)
		}
	}
	if code, body := f.postArrowTo(t, routeB+"/rows", arrowStream(t, rollouts("a4"))); code != http.StatusBadRequest {
		t.Fatalf("an Arrow rollout on b: %d %s, want 400", code, body)
	}
	if code, body := f.postArrowTo(t, routeA+"/rows", arrowStream(t, rollouts("a4"))); code != http.StatusOK {
		t.Fatalf("an Arrow rollout on a: %d %s, want 200", code, body)
	}
	if ra, rb, rb1 := memtableRows(t, hostA, "s0"), memtableRows(t, hostB, "s0"), memtableRows(t, hostB, "s1"); ra != 4 || rb != 3 || rb1 != 0 {
		t.Fatalf("memtable rows: a/s0 %d, b/s0 %d, b/s1 %d; want 4, 3, 0", ra, rb, rb1)
	}
	if st := decode[engine.Status](t, f.get(t, "/v1/shards/s0")); st.MemtableRows != 4 {
		t.Fatalf("shorthand status holds %d rows, want a's 4", st.MemtableRows)
	}
	if code, _, body := f.do(t, http.MethodGet, "/v1/shards/s1", "", ""); code != http.StatusNotFound {
		t.Fatalf("shorthand GET of b's s1: %d %s, want 404", code, body)
	}

	checkTableReads(t, f, a, b)
	checkUnknownTable(t, f, a, b)
	checkTableMetrics(t, f, a, b)
	checkTablesReadiness(t, f, a, b, hostA, hostB)
}

func (f *fixture) postArrowTo(t *testing.T, path string, body []byte) (int, []byte) {
	t.Helper()
	code, _, b := f.do(t, http.MethodPost, path, ContentTypeArrow, string(body))
	return code, b
}

// checkTableReads reads the tables, lists, flushes and producers of each
// table by its routes.
func checkTableReads(t *testing.T, f *fixture, a, b string) {
	t.Helper()
	tables := decode[TablesResponse](t, f.get(t, "/v1/tables"))
	want := []TableInfo{{Name: a, Shards: []string{"s0"}}, {Name: b, Shards: []string{"s0", "s1"}}}
	if !reflect.DeepEqual(tables.Tables, want) {
		t.Fatalf("GET /v1/tables: %+v, want %+v", tables.Tables, want)
	}
	list := decode[ListResponse](t, f.get(t, "/v1/tables/"+b+"/shards"))
	if list.Table != b || len(list.Shards) != 2 || list.Shards[0].MemtableRows != 3 {
		t.Fatalf("b's shard list: %+v", list)
	}
	if list := decode[ListResponse](t, f.get(t, "/v1/shards")); list.Table != a || len(list.Shards) != 1 {
		t.Fatalf("shorthand shard list: %+v, want a's one shard", list)
	}
	if code, body := f.post(t, "/v1/tables/"+b+"/shards/s0/flush", ""); code != http.StatusOK {
		t.Fatalf("flush of b/s0: %d %s", code, body)
	}
	stA := decode[engine.Status](t, f.get(t, "/v1/tables/"+a+"/shards/s0"))
	stB := decode[engine.Status](t, f.get(t, "/v1/tables/"+b+"/shards/s0"))
	if len(stA.Flushed) != 0 || stA.MemtableRows != 4 || len(stB.Flushed) != 1 || stB.MemtableRows != 0 {
		t.Fatalf("after b's flush: a/s0 %+v, b/s0 %+v; want b's rows alone flushed", stA, stB)
	}
	p := decode[ProducerResponse](t, f.get(t, "/v1/tables/"+b+"/shards/s1/producers/p"))
	if p.Producer != "p" || p.Known {
		t.Fatalf("producer of b/s1: %+v, want unknown", p)
	}
}

// checkUnknownTable asks for a table the server does not serve.
func checkUnknownTable(t *testing.T, f *fixture, a, b string) {
	t.Helper()
	for _, c := range []struct{ method, path, contentType, body string }{
		{http.MethodPost, "/v1/tables/nope/shards/s0/rows", ContentTypeNDJSON, ndjson("x")},
		{http.MethodPost, "/v1/tables/nope/shards/s0/flush", "", ""},
		{http.MethodGet, "/v1/tables/nope/shards/s0", "", ""},
		{http.MethodGet, "/v1/tables/nope/shards", "", ""},
	} {
		code, _, body := f.do(t, c.method, c.path, c.contentType, c.body)
		e := decode[apiError](t, body)
		if code != http.StatusNotFound || e.Code != codeUnknownTable || !strings.Contains(e.Error, `"nope"`) ||
			!strings.Contains(e.Error, a) || !strings.Contains(e.Error, b) {
			t.Errorf("%s %s: %d %s, want 404 unknown_table naming nope and the tables served", c.method, c.path, code, body)
		}
	}
	code, _, body := f.do(t, http.MethodGet, "/v1/tables/"+a+"/shards/s1", "", "")
	if e := decode[apiError](t, body); code != http.StatusNotFound || !strings.Contains(e.Error, a) {
		t.Errorf("GET a's s1 (b's only): %d %s, want 404 naming table a", code, body)
	}
}

// checkTableMetrics finds each table's appends in its own series.
func checkTableMetrics(t *testing.T, f *fixture, a, b string) {
	t.Helper()
	body := string(f.get(t, "/metrics"))
	for _, want := range []string{
		fmt.Sprintf(`writer_rows_appended_total{shard="s0",table=%q} 4`, a),
		fmt.Sprintf(`writer_rows_appended_total{shard="s0",table=%q} 3`, b),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// checkTablesReadiness stops a shard of each table in turn: either makes
// the server unready, naming the table.
func checkTablesReadiness(t *testing.T, f *fixture, a, b string, hostA, hostB *engine.Host) {
	t.Helper()
	if code, _, body := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusOK {
		t.Fatalf("readyz: %d %s, want 200", code, body)
	}
	for _, c := range []struct {
		host  *engine.Host
		shard string
		want  string
	}{
		{hostB, "s1", "shard s1 of table " + b + " is stopped"},
		{hostA, "s0", "shard s0 of table " + a + " is stopped"}, // a's shards come first
	} {
		sh, _ := c.host.Shard(c.shard)
		if err := sh.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		code, _, body := f.do(t, http.MethodGet, "/readyz", "", "")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), c.want) {
			t.Fatalf("readyz with %s closed: %d %s, want 503 saying %q", c.shard, code, body, c.want)
		}
	}
}

// TestTablesValidate refuses tables a server could not route.
func TestTablesValidate(t *testing.T) {
	h1, h2 := new(engine.Host), new(engine.Host) // never asked anything
	for _, c := range []struct {
		name string
		opts Options
		want string // "" valid
	}{
		{"one host", Options{Host: h1}, ""},
		{"one table unnamed", Options{Tables: []Table{{Host: h1}}}, ""},
		{"two tables", Options{Tables: []Table{{Name: "a", Host: h1}, {Name: "b", Host: h2}}}, ""},
		{"no host", Options{}, "no host"},
		{"a table without a host", Options{Tables: []Table{{Name: "a", Host: h1}, {Name: "b"}}}, "no host"},
		{"unnamed of two", Options{Tables: []Table{{Name: "a", Host: h1}, {Host: h2}}}, "no name"},
		{"twice", Options{Tables: []Table{{Name: "a", Host: h1}, {Name: "a", Host: h2}}}, "twice"},
		{"both", Options{Host: h1, Tables: []Table{{Name: "a", Host: h2}}}, "not both"},
	} {
		err := c.opts.Validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want %q", c.name, err, c.want)
		}
	}
}
