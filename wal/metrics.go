package wal

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the WAL's Prometheus collectors. They exist even without a
// Registerer, so the code never checks for nil.
type metrics struct {
	fsyncDuration prometheus.Histogram
	bytesWritten  prometheus.Counter
	records       prometheus.Counter
	syncs         prometheus.Counter
	noSpace       prometheus.Counter
	spares        prometheus.Counter
	recycled      prometheus.Counter
	// rounds by who ran them: the syncer, or a caller of SyncTo that
	// found none running (see lead.go).
	syncerRounds prometheus.Counter
	callerRounds prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	rounds := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "writer_wal_rounds_total",
		Help: "Rounds that wrote and synced WAL records, by who ran them: the syncer goroutine, or a SyncTo caller that found no round running while the WAL had a lone writer.",
	}, []string{"runner"}))
	return &metrics{
		syncerRounds: rounds.WithLabelValues("syncer"),
		callerRounds: rounds.WithLabelValues("caller"),
		fsyncDuration: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "writer_wal_fsync_duration_seconds",
			Help: "Duration of WAL segment fsyncs.",
			// 50µs to ~1.6s: from a PLP SSD to a struggling network disk.
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		})),
		bytesWritten: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writer_wal_written_bytes_total",
			Help: "Bytes of records written to WAL segments, headers included; not the zeros reserving space.",
		})),
		records: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writer_wal_records_total",
			Help: "Records appended to the WAL.",
		})),
		syncs: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writer_wal_syncs_total",
			Help: "fsyncs of WAL segments; each may cover many SyncTo calls.",
		})),
		noSpace: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writer_wal_out_of_space_total",
			Help: "Times the WAL ran out of disk space and began waiting for space.",
		})),
		spares: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writer_wal_spares_total",
			Help: "Drained WAL segments kept as spares instead of deleted.",
		})),
		recycled: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writer_wal_segments_recycled_total",
			Help: "WAL segments started by renaming a spare: no zeros written ahead of their appends.",
		})),
	}
}

// register registers c, or returns the collector already registered under
// its name, so that WALs sharing a Registerer (a host of many shards, or a
// shard reopened for a new epoch) share the metrics instead of failing.
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
