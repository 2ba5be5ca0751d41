package engine

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are shared by the shards of a host, labelled by shard.
type metrics struct {
	rows          *prometheus.CounterVec
	duplicates    *prometheus.CounterVec
	appendErrors  *prometheus.CounterVec
	generations   *prometheus.CounterVec
	genBytes      *prometheus.CounterVec
	flushSeconds  *prometheus.HistogramVec
	flushFailures *prometheus.CounterVec
	replayRows    *prometheus.CounterVec
	replaySeconds *prometheus.GaugeVec
	memtableBytes *prometheus.GaugeVec
	fenced        *prometheus.GaugeVec
	epoch         *prometheus.GaugeVec
	pressureSeals *prometheus.CounterVec

	snapshotPersists *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	shard := []string{"shard"}
	return &metrics{
		rows:          f.NewCounterVec(prometheus.CounterOpts{Name: "writer_rows_appended_total", Help: "Rows acknowledged and stored."}, shard),
		duplicates:    f.NewCounterVec(prometheus.CounterOpts{Name: "writer_rows_duplicate_total", Help: "Rows acknowledged as duplicates of rows in the memtables."}, shard),
		appendErrors:  f.NewCounterVec(prometheus.CounterOpts{Name: "writer_append_errors_total", Help: "Appends that failed."}, shard),
		generations:   f.NewCounterVec(prometheus.CounterOpts{Name: "writer_generations_committed_total", Help: "Generations committed to the shard manifest."}, shard),
		genBytes:      f.NewCounterVec(prometheus.CounterOpts{Name: "writer_generation_bytes_total", Help: "Bytes of committed generation files."}, shard),
		flushSeconds:  f.NewHistogramVec(prometheus.HistogramOpts{Name: "writer_flush_duration_seconds", Help: "Time to write and commit one generation.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, shard),
		flushFailures: f.NewCounterVec(prometheus.CounterOpts{Name: "writer_flush_failures_total", Help: "Flush attempts that failed and will be retried."}, shard),
		replayRows:    f.NewCounterVec(prometheus.CounterOpts{Name: "writer_replay_rows_total", Help: "Rows replayed from the WAL at open."}, shard),
		replaySeconds: f.NewGaugeVec(prometheus.GaugeOpts{Name: "writer_replay_duration_seconds", Help: "Duration of the last replay."}, shard),
		memtableBytes: f.NewGaugeVec(prometheus.GaugeOpts{Name: "writer_memtable_bytes", Help: "Bytes held by the shard's memtables."}, shard),
		fenced:        f.NewGaugeVec(prometheus.GaugeOpts{Name: "writer_fenced", Help: "1 when the shard is fenced or stopped."}, shard),
		epoch:         f.NewGaugeVec(prometheus.GaugeOpts{Name: "writer_epoch", Help: "The writer epoch claimed for the shard."}, shard),
		pressureSeals: f.NewCounterVec(prometheus.CounterOpts{Name: "writer_memory_pressure_seals_total", Help: "Active memtables sealed before FlushBytes because the host's memory budget ran low."}, shard),
		snapshotPersists: f.NewCounterVec(prometheus.CounterOpts{Name: "writer_snapshot_persists_total", Help: "Snapshot offset persists after commits, by result (ok, conflict, error)."},
			[]string{"shard", "result"}),
	}
}
