package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/engine"
)

func rowsPath(q url.Values) string { return "/v1/shards/s0/rows?" + q.Encode() }

func session(p string, seq uint64) url.Values {
	return url.Values{"producer": {p}, "seq": {fmt.Sprint(seq)}}
}

func (f *fixture) flush(t *testing.T) {
	t.Helper()
	if code, b := f.post(t, "/v1/shards/s0/flush", ""); code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, b)
	}
}

// TestSessionRetryAfterFlushStoresNothing: a retry of an acknowledged
// batch (same producer and seq) after its generation was flushed answers
// 200 with every row a duplicate, for NDJSON and Arrow bodies alike, and
// stores nothing; the id-only dedupe of requests without a session would
// have stored it again.
func TestSessionRetryAfterFlushStoresNothing(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	ndBody := ndjson("a", "b", "c")
	arrowBody := arrowStream(t, rollouts("d", "e"))
	postArrow := func(q url.Values) (int, []byte) {
		code, _, b := f.do(t, http.MethodPost, rowsPath(q), ContentTypeArrow, string(arrowBody))
		return code, b
	}
	want := func(what string, code int, b []byte, stored, dups int) {
		t.Helper()
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", what, code, b)
		}
		if res := decode[AppendResponse](t, b); res.Stored != stored || res.Duplicates != dups || res.Acked != stored+dups {
			t.Fatalf("%s answered %+v, want %d stored and %d duplicates", what, res, stored, dups)
		}
	}
	code, b := f.post(t, rowsPath(session("p1", 0)), ndBody)
	want("NDJSON at seq 0", code, b, 3, 0)
	code, b = postArrow(session("p1", 3))
	want("Arrow at seq 3", code, b, 2, 0)
	f.flush(t)
	tail := f.walTail(t)
	code, b = f.post(t, rowsPath(session("p1", 0)), ndBody)
	want("NDJSON retried after the flush", code, b, 0, 3)
	code, b = postArrow(session("p1", 3))
	want("Arrow retried after the flush", code, b, 0, 2)
	if after := f.walTail(t); after != tail {
		t.Fatalf("WAL tail moved from %d to %d for retries that store nothing", tail, after)
	}
	if st := decode[engine.Status](t, f.get(t, "/v1/shards/s0")); st.MemtableRows != 0 {
		t.Fatalf("the memtable holds %d rows after the retries, want 0", st.MemtableRows)
	}
	// The session goes on where it was; without a session the same rows
	// are stored again once flushed (the memtable window only).
	code, b = f.post(t, rowsPath(session("p1", 5)), ndjson("f"))
	want("NDJSON at seq 5", code, b, 1, 0)
	code, b = f.post(t, "/v1/shards/s0/rows", ndBody)
	want("the same rows without a session", code, b, 3, 0)
}

// TestSessionGapAndOverlapAre409 refuses batches that are not at the
// producer's next expected sequence, naming it, and writes nothing.
func TestSessionGapAndOverlapAre409(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	if code, b := f.post(t, rowsPath(session("p1", 0)), ndjson("a", "b", "c")); code != http.StatusOK {
		t.Fatalf("seq 0: %d %s", code, b)
	}
	tail := f.walTail(t)
	for _, tc := range []struct {
		name     string
		p        string
		seq      uint64
		rows     int
		expected uint64
		unknown  bool
	}{
		{"gap", "p1", 5, 1, 3, false},
		{"straddle", "p1", 2, 3, 3, false},
		{"unknown producer past 0", "p2", 7, 2, 0, true},
	} {
		ids := make([]string, tc.rows)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", tc.name, i)
		}
		code, b := f.post(t, rowsPath(session(tc.p, tc.seq)), ndjson(ids...))
		if code != http.StatusConflict {
			t.Fatalf("%s: answered %d %s, want 409", tc.name, code, b)
		}
		e := decode[apiError](t, b)
		if e.Code != codeSequence || e.Producer != tc.p || e.Seq == nil || *e.Seq != tc.seq || e.Count == nil || *e.Count != tc.rows ||
			e.ExpectedSeq == nil || *e.ExpectedSeq != tc.expected || e.UnknownProducer == nil || *e.UnknownProducer != tc.unknown || e.Error == "" {
			t.Fatalf("%s: answered %s, want code sequence, producer %s, seq %d, count %d, expected_seq %d, unknown_producer %v",
				tc.name, b, tc.p, tc.seq, tc.rows, tc.expected, tc.unknown)
		}
	}
	if after := f.walTail(t); after != tail {
		t.Fatalf("WAL tail moved from %d to %d after refused batches", tail, after)
	}
	// The gap closes when the missing batch comes.
	if code, b := f.post(t, rowsPath(session("p1", 3)), ndjson("d", "e")); code != http.StatusOK {
		t.Fatalf("seq 3: %d %s", code, b)
	}
	if code, b := f.post(t, rowsPath(session("p1", 5)), ndjson("f")); code != http.StatusOK {
		t.Fatalf("seq 5 after seq 3: %d %s", code, b)
	}
}

// TestProducerResumeEndpoint: a producer learns where to resume, before
// and after a flush; an unknown one starts at 0.
func TestProducerResumeEndpoint(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	resume := func(p string) ProducerResponse {
		t.Helper()
		return decode[ProducerResponse](t, f.get(t, "/v1/shards/s0/producers/"+p))
	}
	if got := resume("go-1.a_b:c"); got != (ProducerResponse{Producer: "go-1.a_b:c"}) {
		t.Fatalf("an unknown producer resumes at %+v, want next_seq 0, known false", got)
	}
	if code, b := f.post(t, rowsPath(session("go-1.a_b:c", 0)), ndjson("a", "b", "c")); code != http.StatusOK {
		t.Fatalf("seq 0: %d %s", code, b)
	}
	want := ProducerResponse{Producer: "go-1.a_b:c", NextSeq: 3, Known: true}
	if got := resume("go-1.a_b:c"); got != want {
		t.Fatalf("after 3 rows the producer resumes at %+v, want %+v", got, want)
	}
	f.flush(t)
	if got := resume("go-1.a_b:c"); got != want {
		t.Fatalf("after a flush the producer resumes at %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/v1/shards/s0/producers/bad%20id", http.StatusBadRequest},
		{"/v1/shards/s0/producers/" + strings.Repeat("p", engine.MaxProducerIDBytes+1), http.StatusBadRequest},
		{"/v1/shards/nope/producers/p1", http.StatusNotFound},
	} {
		code, _, b := f.do(t, http.MethodGet, tc.path, "", "")
		if code != tc.want {
			t.Fatalf("GET %s: %d %s, want %d", tc.path, code, b, tc.want)
		}
		if e := decode[apiError](t, b); code == http.StatusBadRequest && (e.Parameter != "producer" || !strings.Contains(e.Error, "producer")) {
			t.Fatalf("GET %s: %s, want the answer to name the producer", tc.path, b)
		}
	}
	f.srv.SetReady(false)
	if code, _, b := f.do(t, http.MethodGet, "/v1/shards/s0/producers/p1", "", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("resume while not ready: %d %s, want 503", code, b)
	}
}

// TestSessionBadParametersAre400 refuses malformed producer, seq and
// source parameters, naming the parameter, and writes nothing.
func TestSessionBadParametersAre400(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	tail := f.walTail(t)
	long := strings.Repeat("x", engine.MaxSourceBytes+1)
	for _, tc := range []struct {
		name, query, param string
	}{
		{"producer without seq", "producer=p1", "seq"},
		{"seq without producer", "seq=0", "producer"},
		{"empty producer", "producer=&seq=0", "producer"},
		{"producer with a space", "producer=a%20b&seq=0", "producer"},
		{"producer with a slash", "producer=a%2Fb&seq=0", "producer"},
		{"producer too long", "producer=" + strings.Repeat("p", engine.MaxProducerIDBytes+1) + "&seq=0", "producer"},
		{"negative seq", "producer=p1&seq=-1", "seq"},
		{"seq not a number", "producer=p1&seq=x", "seq"},
		{"empty seq", "producer=p1&seq=", "seq"},
		{"seq past uint64", "producer=p1&seq=18446744073709551616", "seq"},
		{"rows past uint64", "producer=p1&seq=18446744073709551615", "seq"},
		{"producer twice", "producer=p1&producer=p2&seq=0", "producer"},
		{"source too long", "source=" + long + "&offset=1", "source"},
		{"offset without source", "offset=3", "source"},
	} {
		code, b := f.post(t, "/v1/shards/s0/rows?"+tc.query, ndjson("a", "b"))
		if code != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 400", tc.name, code, b)
			continue
		}
		if e := decode[apiError](t, b); e.Parameter != tc.param || !strings.Contains(e.Error, tc.param) {
			t.Errorf("%s: answered %s, want it to name parameter %s", tc.name, b, tc.param)
		}
	}
	if after := f.walTail(t); after != tail {
		t.Fatalf("WAL tail moved from %d to %d after refused requests", tail, after)
	}
}

// TestTooManyProducersIs429 refuses a new producer past the shard's limit
// with no Retry-After (a slot frees only when a session expires); the
// producers already known and requests without a session go on.
func TestTooManyProducersIs429(t *testing.T) {
	f := newFixtureWith(t, 0, func(o *engine.Options) { o.MaxProducers = 1 })
	f.srv.SetReady(true)
	if code, b := f.post(t, rowsPath(session("p1", 0)), ndjson("a")); code != http.StatusOK {
		t.Fatalf("p1: %d %s", code, b)
	}
	code, h, b := f.do(t, http.MethodPost, rowsPath(session("p2", 0)), ContentTypeNDJSON, ndjson("b"))
	if e := decode[apiError](t, b); code != http.StatusTooManyRequests || e.Code != codeTooManyProducers || h.Get("Retry-After") != "" {
		t.Fatalf("a second producer past a limit of 1: %d %s (Retry-After %q), want 429 too_many_producers without Retry-After",
			code, b, h.Get("Retry-After"))
	}
	if code, b := f.post(t, rowsPath(session("p1", 1)), ndjson("c")); code != http.StatusOK {
		t.Fatalf("p1 at seq 1: %d %s", code, b)
	}
	if code, b := f.post(t, "/v1/shards/s0/rows", ndjson("d")); code != http.StatusOK {
		t.Fatalf("no session: %d %s", code, b)
	}
}

// FuzzAppendOptions: any query string is read into append options that
// the engine accepts, or refused with a 400 body that names the parameter.
func FuzzAppendOptions(f *testing.F) {
	for _, seed := range []string{
		"", "producer=p&seq=0", "producer=p", "seq=1", "producer=&seq=0", "producer=a%20b&seq=1",
		"producer=p&seq=-1", "producer=p&seq=18446744073709551616", "producer=p&producer=q&seq=0",
		"source=s&offset=1&producer=go-0123456789abcdef&seq=42", "source=&offset=1", "%zz", "seq=1;producer=p",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := &http.Request{URL: &url.URL{Path: "/v1/shards/s0/rows", RawQuery: query}}
		o, perr := appendOptionsOf(r)
		if perr != nil {
			if perr.Parameter == "" || perr.Code != codeBadParameter || !strings.Contains(perr.Error, perr.Parameter) {
				t.Fatalf("query %q refused with %+v: want it to name the parameter", query, perr)
			}
			return
		}
		if o.Producer.ID != "" {
			if err := engine.ValidateProducerID(o.Producer.ID); err != nil {
				t.Fatalf("query %q gave producer %q that the engine refuses: %v", query, o.Producer.ID, err)
			}
		} else if o.Producer.Seq != 0 {
			t.Fatalf("query %q gave seq %d without a producer", query, o.Producer.Seq)
		}
		if err := engine.ValidateSource(o.Source); err != nil {
			t.Fatalf("query %q gave source %q that the engine refuses: %v", query, o.Source.Name, err)
		}
	})
}
