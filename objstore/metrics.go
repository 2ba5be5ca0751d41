package objstore

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics count requests, one per S3 request (every attempt of a retried
// request counts) or per file:// operation:
//
//	writer_objstore_requests_total{backend, op, outcome}
//	writer_objstore_bytes_total{backend, op}            bytes written (create, PutObject, UploadPart) or read (read, GetObject)
//	writer_objstore_request_duration_seconds{backend, op}
//
// op is the S3 API name (PutObject, GetObject, HeadObject, ListObjectsV2,
// DeleteObject, CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload, AbortMultipartUpload) or the file:// operation
// (create, open, read, stat, list, delete). outcome is one of the outcome*
// constants.
type metrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

const (
	outcomeOK        = "ok"
	outcomeExists    = "exists"    // precondition failed: the name is taken
	outcomeNotFound  = "not_found" // no such key (or upload)
	outcomeThrottled = "throttled" // 429, 503 SlowDown, 409 conflicting conditional write
	outcomeServer    = "server_error"
	outcomeNetwork   = "network_error" // no answer: connection refused or reset, timeout
	outcomeClient    = "client_error"  // any other refusal
	outcomeCanceled  = "canceled"      // the caller's context ended
)

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writer_objstore_requests_total",
			Help: "Object store requests (each S3 attempt counts), by backend, operation and outcome.",
		}, []string{"backend", "op", "outcome"})),
		bytes: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writer_objstore_bytes_total",
			Help: "Object bytes written or read by successful requests, by backend and operation.",
		}, []string{"backend", "op"})),
		latency: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "writer_objstore_request_duration_seconds",
			Help:    "Object store request latency, by backend and operation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9), // 1ms .. 65s
		}, []string{"backend", "op"})),
	}
}

// observe records one request that began at start.
func (m *metrics) observe(backend, op, outcome string, start time.Time, bytes int64) {
	m.requests.WithLabelValues(backend, op, outcome).Inc()
	m.latency.WithLabelValues(backend, op).Observe(time.Since(start).Seconds())
	if bytes > 0 {
		m.bytes.WithLabelValues(backend, op).Add(float64(bytes))
	}
}

// register registers c, or returns the collector already registered under
// its name, so stores sharing a Registerer share the metrics.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}
