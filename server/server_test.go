package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/vfs"
)

type fixture struct {
	host *engine.Host
	srv  *Server
	ts   *httptest.Server
	reg  *prometheus.Registry
}

// newFixture serves shard "s0" of a fresh table on an in-memory filesystem.
func newFixture(t *testing.T, maxBody int64) *fixture {
	t.Helper()
	return newFixtureWith(t, maxBody, nil)
}

// newFixtureWith is newFixture with the engine's options changed by edit.
func newFixtureWith(t *testing.T, maxBody int64, edit func(*engine.Options)) *fixture {
	t.Helper()
	return newServerFixture(t, edit, func(o *Options) { o.MaxBodyBytes = maxBody })
}

// newServerFixture is newFixture with the engine's and the server's
// options changed by edit and editServer (either may be nil).
func newServerFixture(t *testing.T, edit func(*engine.Options), editServer func(*Options)) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := engine.Options{
		DataDir: "/data", FS: vfs.NewStrictMem(), Table: etcdtest.Name(t, "", 100),
		Etcd: etcdClient, WALSegmentSize: 64 << 10, FlushBytes: 1 << 20, FlushAge: -1, MemoryBudget: 64 << 20,
		MaxBatchRows: 1000, Registerer: reg,
	}
	if edit != nil {
		edit(&opts)
	}
	host, err := engine.NewHost(opts)
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
	if _, err := host.Open(context.Background(), "s0"); err != nil {
		t.Fatal(err)
	}
	srvOpts := Options{Host: host, Shards: []string{"s0"}, Registry: reg}
	if editServer != nil {
		editServer(&srvOpts)
	}
	srv := New(srvOpts)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &fixture{host: host, srv: srv, ts: ts, reg: reg}
}

func (f *fixture) do(t *testing.T, method, path, contentType, body string) (int, http.Header, []byte) {
	t.Helper()
	return f.doToken(t, method, path, contentType, body, "")
}

// doToken is do with a bearer token, unless token is "".
func (f *fixture) doToken(t *testing.T, method, path, contentType, body, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func (f *fixture) post(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	code, _, b := f.do(t, http.MethodPost, path, ContentTypeNDJSON, body)
	return code, b
}

func ndjson(ids ...string) string {
	var sb strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&sb, `{"id":%q,"prompt":"p %s","completion":"c","reward":0.5,"metadata":{"k":1}}`+"\n", id, id)
	}
	return sb.String()
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer is not the JSON expected: %v\n%s", err, b)
	}
	return v
}

func (f *fixture) walTail(t *testing.T) uint64 {
	t.Helper()
	sh, ok := f.host.Shard("s0")
	if !ok {
		t.Fatal("shard s0 is not open")
	}
	return sh.Status().WALTail
}

func TestIngestAcksAndDuplicates(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	code, b := f.post(t, "/v1/shards/s0/rows?source=topic-a&offset=3", ndjson("a", "b", "c"))
	if code != http.StatusOK {
		t.Fatalf("POST rows: %d %s", code, b)
	}
	res := decode[AppendResponse](t, b)
	if res.Acked != 3 || res.Stored != 3 || res.Duplicates != 0 || res.LastSeq-res.FirstSeq != 2 {
		t.Fatalf("first POST answered %+v, want 3 acked and stored over 3 positions", res)
	}
	// b and c again, with d new and d repeated inside the batch.
	code, b = f.post(t, "/v1/shards/s0/rows", ndjson("b", "c", "d", "d"))
	if code != http.StatusOK {
		t.Fatalf("POST rows: %d %s", code, b)
	}
	res = decode[AppendResponse](t, b)
	if res.Acked != 4 || res.Stored != 1 || res.Duplicates != 3 {
		t.Fatalf("second POST answered %+v, want 4 acked: 1 stored, 3 duplicates", res)
	}
	if st := decode[engine.Status](t, f.get(t, "/v1/shards/s0")); st.MemtableRows != 4 {
		t.Fatalf("status holds %d memtable rows, want 4", st.MemtableRows)
	}
}

func (f *fixture) get(t *testing.T, path string) []byte {
	t.Helper()
	code, _, b := f.do(t, http.MethodGet, path, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	return b
}

func TestBadJSONNamesTheLineAndWritesNothing(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	before := f.walTail(t)
	body := ndjson("a", "b") + `{"id":"c","prompt":` + "\n" + ndjson("d")
	code, b := f.post(t, "/v1/shards/s0/rows", body)
	if code != http.StatusBadRequest {
		t.Fatalf("bad JSON answered %d %s, want 400", code, b)
	}
	e := decode[apiError](t, b)
	if e.Line != 3 || !strings.Contains(e.Error, "line 3") {
		t.Fatalf("bad JSON answered %+v, want it to name line 3", e)
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("WAL tail moved from %d to %d after a rejected batch", before, after)
	}
	// Not an object, and two values on one line.
	for _, body := range []string{ndjson("a") + "[1,2]\n", ndjson("a") + "\n" + `{"id":"x"} {"id":"y"}`} {
		code, b = f.post(t, "/v1/shards/s0/rows", body)
		if e := decode[apiError](t, b); code != http.StatusBadRequest || e.Line < 2 {
			t.Fatalf("body %q answered %d %s, want 400 naming its line", body, code, b)
		}
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("WAL tail moved from %d to %d after rejected batches", before, after)
	}
}

func TestSchemaViolationNamesLineAndColumn(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	before := f.walTail(t)
	// Line 2 is blank: line numbers count it, row indexes do not.
	body := ndjson("a") + "\n" + ndjson("b") + `{"id":"c","prompt":"p","completion":"c","reward":"high"}` + "\n"
	code, b := f.post(t, "/v1/shards/s0/rows", body)
	if code != http.StatusBadRequest {
		t.Fatalf("schema violation answered %d %s, want 400", code, b)
	}
	e := decode[apiError](t, b)
	if e.Line != 4 || e.Column != "reward" || !strings.Contains(e.Error, "line 4") {
		t.Fatalf("schema violation answered %+v, want line 4, column reward", e)
	}
	code, b = f.post(t, "/v1/shards/s0/rows", ndjson("a")+`{"id":"z","prompt":"p","completion":"c","colour":"red"}`)
	if e := decode[apiError](t, b); code != http.StatusBadRequest || e.Line != 2 || e.Column != "colour" {
		t.Fatalf("unknown column answered %d %+v, want 400 at line 2, column colour", code, e)
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("WAL tail moved from %d to %d after rejected batches", before, after)
	}
}

func TestErrorStatuses(t *testing.T) {
	f := newFixture(t, 4096)
	f.srv.SetReady(true)
	for _, tc := range []struct {
		name, path, contentType, body string
		want                          int
	}{
		{"unknown shard", "/v1/shards/nope/rows", ContentTypeNDJSON, ndjson("a"), http.StatusNotFound},
		{"unknown shard flush", "/v1/shards/nope/flush", "", "", http.StatusNotFound},
		{"wrong content type", "/v1/shards/s0/rows", "application/json", ndjson("a"), http.StatusUnsupportedMediaType},
		{"no content type", "/v1/shards/s0/rows", "", ndjson("a"), http.StatusUnsupportedMediaType},
		{"arrow garbage", "/v1/shards/s0/rows", ContentTypeArrow, "x", http.StatusBadRequest},
		{"body too large", "/v1/shards/s0/rows", ContentTypeNDJSON, strings.Repeat(ndjson("a"), 100), http.StatusRequestEntityTooLarge},
		{"empty body", "/v1/shards/s0/rows", ContentTypeNDJSON, "\n\n", http.StatusBadRequest},
		{"offset without source", "/v1/shards/s0/rows?offset=3", ContentTypeNDJSON, ndjson("a"), http.StatusBadRequest},
		{"bad offset", "/v1/shards/s0/rows?source=s&offset=x", ContentTypeNDJSON, ndjson("a"), http.StatusBadRequest},
	} {
		code, _, b := f.do(t, http.MethodPost, tc.path, tc.contentType, tc.body)
		if code != tc.want {
			t.Errorf("%s: answered %d %s, want %d", tc.name, code, b, tc.want)
			continue
		}
		if e := decode[apiError](t, b); e.Error == "" {
			t.Errorf("%s: error body without a message: %s", tc.name, b)
		}
	}
	code, _, b := f.do(t, http.MethodGet, "/v1/shards/nope", "", "")
	if code != http.StatusNotFound {
		t.Errorf("GET unknown shard: %d %s, want 404", code, b)
	}
}

func TestTooManyRowsIs413(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	ids := make([]string, 1001) // MaxBatchRows is 1000
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	code, b := f.post(t, "/v1/shards/s0/rows", ndjson(ids...))
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("1001 rows answered %d %s, want 413", code, b)
	}
}

func TestFlushAndStatus(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	if code, b := f.post(t, "/v1/shards/s0/rows?source=topic&offset=7", ndjson("a", "b")); code != http.StatusOK {
		t.Fatalf("POST rows: %d %s", code, b)
	}
	code, b := f.post(t, "/v1/shards/s0/flush", "")
	if code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, b)
	}
	fl := decode[FlushResponse](t, b)
	if fl.Generation == 0 {
		t.Fatalf("flush answered %s, want a committed generation", b)
	}
	st := decode[engine.Status](t, f.get(t, "/v1/shards/s0"))
	if st.Shard != "s0" || st.Epoch == 0 || len(st.Flushed) != 1 || st.Flushed[0].Number != fl.Generation ||
		st.Flushed[0].Rows != 2 || st.MemtableRows != 0 || st.SourceOffsets["topic"] != 7 {
		t.Fatalf("status after flush: %+v", st)
	}
	list := decode[ListResponse](t, f.get(t, "/v1/shards"))
	if len(list.Shards) != 1 || list.Shards[0].Shard != "s0" || len(list.Shards[0].Flushed) != 1 {
		t.Fatalf("shard list: %+v", list)
	}
}

func TestReadiness(t *testing.T) {
	f := newFixture(t, 0)
	if code, _, _ := f.do(t, http.MethodGet, "/livez", "", ""); code != http.StatusOK {
		t.Fatalf("livez: %d", code)
	}
	if code, _, b := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before SetReady: %d %s, want 503", code, b)
	}
	if code, b := f.post(t, "/v1/shards/s0/rows", ndjson("a")); code != http.StatusServiceUnavailable {
		t.Fatalf("ingest before SetReady: %d %s, want 503", code, b)
	}
	f.srv.SetReady(true)
	if code, _, b := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusOK {
		t.Fatalf("readyz after SetReady: %d %s, want 200", code, b)
	}
	f.srv.SetReady(false)
	if code, _, b := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz after SetReady(false): %d %s, want 503", code, b)
	}
	// A closed shard is stopped: unready, and ingest answers 503.
	f.srv.SetReady(true)
	sh, _ := f.host.Shard("s0")
	if err := sh.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, b := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusServiceUnavailable || !strings.Contains(string(b), "s0") {
		t.Fatalf("readyz with a stopped shard: %d %s, want 503 naming s0", code, b)
	}
	if code, b := f.post(t, "/v1/shards/s0/rows", ndjson("a")); code != http.StatusServiceUnavailable {
		t.Fatalf("ingest into a closed shard: %d %s, want 503", code, b)
	}
	if code, _, b := f.do(t, http.MethodGet, "/livez", "", ""); code != http.StatusOK {
		t.Fatalf("livez: %d %s", code, b)
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	if code, b := f.post(t, "/v1/shards/s0/rows", ndjson("a", "b", "c")); code != http.StatusOK {
		t.Fatalf("POST rows: %d %s", code, b)
	}
	body := string(f.get(t, "/metrics"))
	if !strings.Contains(body, `writer_rows_appended_total{shard="s0"} 3`) {
		t.Fatalf("metrics lack writer_rows_appended_total of 3 rows:\n%s", body)
	}
}

// TestFencedIs409 revokes the writer's lease under it: ingest then answers
// 409 and the server goes unready.
func TestFencedIs409(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	if code, b := f.post(t, "/v1/shards/s0/rows", ndjson("a")); code != http.StatusOK {
		t.Fatalf("POST rows: %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases, err := etcdClient.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases { // tests run one at a time: the only live lease is this host's
		if _, err := etcdClient.Revoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The loss is noticed by the lease's keepalive; poll, bounded.
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		code, b := f.post(t, "/v1/shards/s0/rows", ndjson(fmt.Sprintf("x%d", i)))
		if code == http.StatusConflict {
			if e := decode[apiError](t, b); !strings.Contains(e.Error, "not owned here") || e.Code != codeNotOwner {
				t.Fatalf("409 without saying why: %s", b)
			}
			break
		}
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("after the lease was revoked ingest answered %d %s, want 409 within 15s", code, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, b := f.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with a fenced shard: %d %s, want 503", code, b)
	}
}
