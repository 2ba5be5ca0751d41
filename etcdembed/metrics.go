package etcdembed

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the embedded etcd's gauges and counters, refreshed by every
// maintenance pass. They exist whether or not anything registered them.
type metrics struct {
	dbBytes, inUseBytes, quotaBytes prometheus.Gauge
	revision, compactRevision       prometheus.Gauge
	compactions, defrags, errors    prometheus.Counter
	compactionsSeen, defragsSeen    uint64
}

func newMetrics() *metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &metrics{
		dbBytes:         g("writer_etcd_db_bytes", "Size of the embedded etcd's backend database file (what its quota measures)."),
		inUseBytes:      g("writer_etcd_db_in_use_bytes", "Logically used part of the embedded etcd's database; the rest is free space a defragment returns."),
		quotaBytes:      g("writer_etcd_quota_bytes", "Backend quota of the embedded etcd: past it every write fails with 'database space exceeded'."),
		revision:        g("writer_etcd_revision", "Head revision of the embedded etcd."),
		compactRevision: g("writer_etcd_compact_revision", "Revision the embedded etcd was last compacted to by its maintenance loop."),
		compactions:     c("writer_etcd_compactions_total", "Compactions made by the embedded etcd's maintenance loop."),
		defrags:         c("writer_etcd_defrags_total", "Defragmentations made by the embedded etcd's maintenance loop."),
		errors:          c("writer_etcd_maintenance_errors_total", "Maintenance passes of the embedded etcd that failed."),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.dbBytes, m.inUseBytes, m.quotaBytes, m.revision, m.compactRevision,
		m.compactions, m.defrags, m.errors}
}

// update sets the metrics from a pass's stats (called under the pass lock).
func (m *metrics) update(st Stats) {
	m.dbBytes.Set(float64(st.DBBytes))
	m.inUseBytes.Set(float64(st.DBInUseBytes))
	m.quotaBytes.Set(float64(st.QuotaBytes))
	m.revision.Set(float64(st.Revision))
	m.compactRevision.Set(float64(st.CompactRevision))
	m.compactions.Add(float64(st.Compactions - m.compactionsSeen))
	m.defrags.Add(float64(st.Defrags - m.defragsSeen))
	m.compactionsSeen, m.defragsSeen = st.Compactions, st.Defrags
}

// RegisterMetrics registers the writer_etcd_* metrics on reg (for a
// registry made after Start; Options.Registerer does it at Start). On an
// error nothing stays registered.
func (s *Server) RegisterMetrics(reg prometheus.Registerer) error {
	var done []prometheus.Collector
	for _, c := range s.metrics.collectors() {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return fmt.Errorf("etcdembed: register metrics: %w", err)
		}
		done = append(done, c)
	}
	return nil
}
