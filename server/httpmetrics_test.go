package server

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHTTPMetrics: every answer counts under its route and status, every
// refusal under its answer code; a request no route matches is
// "unmatched".
func TestHTTPMetrics(t *testing.T) {
	f := newFixture(t, 1<<20)
	f.srv.SetReady(true)
	if code, b := f.post(t, "/v1/shards/s0/rows", `{"id":"a","prompt":"p","completion":"c","reward":1}`+"\n"); code != http.StatusOK {
		t.Fatalf("append: %d %s", code, b)
	}
	if code, _ := f.post(t, "/v1/shards/s0/rows", `{"id":"b","reward":"high"}`+"\n"); code != http.StatusBadRequest {
		t.Fatalf("bad row: %d", code)
	}
	if code, _, _ := f.do(t, http.MethodGet, "/v1/shards/nope", "", ""); code != http.StatusNotFound {
		t.Fatalf("unknown shard: %d", code)
	}
	f.do(t, http.MethodGet, "/nowhere", "", "")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"writer_http_requests_total", map[string]string{"route": "POST /v1/shards/{shard}/rows", "code": "200"}, 1},
		{"writer_http_requests_total", map[string]string{"route": "POST /v1/shards/{shard}/rows", "code": "400"}, 1},
		{"writer_http_requests_total", map[string]string{"route": "GET /v1/shards/{shard}", "code": "404"}, 1},
		{"writer_http_requests_total", map[string]string{"route": "unmatched", "code": "404"}, 1},
		{"writer_http_refused_total", map[string]string{"reason": "none", "status": "400"}, 1},
		{"writer_http_request_duration_seconds", map[string]string{"route": "POST /v1/shards/{shard}/rows"}, 2},
	} {
		if got := gathered(t, f.reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// gathered is the value of the series name{labels} in reg (a histogram's
// sample count), or -1 if reg has no such series.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}
