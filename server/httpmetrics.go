package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics count and time every request by its route (the pattern of
// the mux that served it, "unmatched" for none) and status, and count the
// refusals by their answer code, so that a dashboard tells 400s from 409s
// from 429s without parsing logs.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	refused  *prometheus.CounterVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writer_http_requests_total",
			Help: "HTTP requests answered, by route (the mux pattern) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "writer_http_request_duration_seconds",
			Help: "Time from a request's headers to the end of its answer, by route.",
			// 100µs to ~52s: a probe to an ingest waiting for memory.
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 20),
		}, []string{"route"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writer_http_refused_total",
			Help: "Requests answered with an error, by the answer's code (backpressure, outcome_unknown, too_large, ...; none for an error without one) and status.",
		}, []string{"reason", "status"}),
	}
	reg.MustRegister(m.requests, m.duration, m.refused)
	return m
}

// wrap counts and times the requests h serves.
func (m *httpMetrics) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		route := r.Pattern // set by the mux on this request
		if route == "" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// refusal counts an error answer.
func (m *httpMetrics) refusal(status int, code string) {
	if code == "" {
		code = "none"
	}
	m.refused.WithLabelValues(code, strconv.Itoa(status)).Inc()
}

// statusRecorder keeps the status a handler answered with. Unwrap lets
// http.ResponseController reach the connection (deadlines, flushes).
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
