package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/engine"
)

// TestSourceNamesBounded: source names are bounded in length and in number
// per shard. An oversized name and one source too many are each a 400 that
// names the limit and writes nothing; the shard is not wedged: appends of
// known sources go on, the next flush commits, and the manifest holds only
// the sources that were accepted.
func TestSourceNamesBounded(t *testing.T) {
	f := newFixtureWith(t, 0, func(o *engine.Options) { o.MaxSources = 4 })
	f.srv.SetReady(true)
	post := func(source string, offset int, id string) (int, []byte) {
		q := url.Values{"source": {source}, "offset": {fmt.Sprint(offset)}}
		return f.post(t, "/v1/shards/s0/rows?"+q.Encode(), ndjson(id))
	}
	tail := f.walTail(t)
	if code, b := post(strings.Repeat("s", engine.MaxSourceBytes+1), 1, "long"); code != http.StatusBadRequest || !strings.Contains(string(b), "source name of") {
		t.Fatalf("an oversized source name: %d %s, want 400 naming it", code, b)
	}
	for i := range 4 {
		if code, b := post(fmt.Sprintf("src-%d", i), 10+i, fmt.Sprintf("r%d", i)); code != http.StatusOK {
			t.Fatalf("source %d of 4: %d %s", i, code, b)
		}
	}
	mid := f.walTail(t)
	for i := range 50 { // a producer that mints a source per request
		if code, b := post(fmt.Sprintf("flood-%d", i), 1, fmt.Sprintf("f%d", i)); code != http.StatusBadRequest || !strings.Contains(string(b), "sources, the limit") {
			t.Fatalf("new source %d past the limit: %d %s, want 400 naming the limit", i, code, b)
		}
	}
	if f.walTail(t) != mid || mid <= tail {
		t.Fatalf("WAL tail %d → %d → %d: refused appends must write nothing", tail, mid, f.walTail(t))
	}
	if code, b := post("src-2", 99, "r-again"); code != http.StatusOK {
		t.Fatalf("a known source after the refusals: %d %s", code, b)
	}
	f.flush(t)
	var st engine.Status
	if err := json.Unmarshal(f.get(t, "/v1/shards/s0"), &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"src-0": 10, "src-1": 11, "src-2": 99, "src-3": 13}
	if fmt.Sprint(st.SourceOffsets) != fmt.Sprint(want) {
		t.Fatalf("committed offsets %v, want %v", st.SourceOffsets, want)
	}
}
