package engine

import (
	"time"

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
	owned         *prometheus.GaugeVec
	claims        *prometheus.CounterVec

	snapshotPersists *prometheus.CounterVec

	// The host's lease: one per host, no shard label.
	leaseKeepaliveFailures prometheus.Counter
	leaseLost              *prometheus.CounterVec
}

// Results of writer_claims_total: a fixed set.
const (
	claimClaimed = "claimed" // the claim transaction committed
	claimAdopted = "adopted" // an ambiguous claim of ours found applied
	claimFailed  = "failed"  // the claim ended without the shard
)

// Reasons of writer_lease_lost_total: a fixed set.
const (
	leaseExpired  = "expired"  // etcd no longer has the lease
	leaseDeadline = "deadline" // keepalives unanswered until the local deadline passed
)

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
		owned:         f.NewGaugeVec(prometheus.GaugeOpts{Name: "writer_shard_owned", Help: "1 while this process owns the shard: from its claim until it closes or is fenced."}, shard),
		claims: f.NewCounterVec(prometheus.CounterOpts{Name: "writer_claims_total", Help: "Claims of the shard, by result (claimed, adopted, failed)."},
			[]string{"shard", "result"}),
		snapshotPersists: f.NewCounterVec(prometheus.CounterOpts{Name: "writer_snapshot_persists_total", Help: "Snapshot offset persists after commits, by result (ok, conflict, error)."},
			[]string{"shard", "result"}),
		leaseKeepaliveFailures: f.NewCounter(prometheus.CounterOpts{Name: "writer_lease_keepalive_failures_total", Help: "Keepalives of the writer's etcd lease that got no answer (retried)."}),
		leaseLost: f.NewCounterVec(prometheus.CounterOpts{Name: "writer_lease_lost_total", Help: "Etcd leases of the writer lost, fencing their shards, by reason (expired, deadline)."},
			[]string{"reason"}),
	}
}

// claimed records a committed claim of shard at epoch: it owns the shard.
func (m *metrics) claimed(shard string, epoch uint64, adopted bool) {
	result := claimClaimed
	if adopted {
		result = claimAdopted
	}
	m.claims.WithLabelValues(shard, result).Inc()
	m.epoch.WithLabelValues(shard).Set(float64(epoch))
	m.owned.WithLabelValues(shard).Set(1)
}

// registerLeaseValid registers writer_lease_valid_seconds, read from the
// host's current lease at each scrape: no etcd request.
func registerLeaseValid(reg prometheus.Registerer, valid func() time.Duration) {
	promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{Name: "writer_lease_valid_seconds",
		Help: "How long the writer's lease stays known valid (acknowledgements safe) without another keepalive answer; 0 without a live lease."},
		func() float64 { return valid().Seconds() })
}
