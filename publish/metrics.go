package publish

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	plans       prometheus.Counter
	generations *prometheus.CounterVec // path: lookup_free | id_check
	copied      prometheus.Counter
	rowsIn      prometheus.Counter
	rowsOut     prometheus.Counter
	dropped     *prometheus.CounterVec // reason: in_base | in_pass
	baseOpens   prometheus.Counter
	commits     *prometheus.CounterVec // result: ok | noop | stale | moved | lock_lost | not_applied | unknown
	transitions *prometheus.CounterVec // kind: conservative | precise
	compactions prometheus.Counter
	orphans     *prometheus.CounterVec // kind: data | metadata | readers_manifest
}

func newMetrics(reg prometheus.Registerer, table string) (*metrics, error) {
	cl := prometheus.Labels{"table": table}
	m := &metrics{
		plans: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollwal_publish_plans_total",
			Help: "Merge plans made.", ConstLabels: cl}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollwal_publish_generations_staged_total",
			Help: "Generations staged, by path (lookup_free or id_check).", ConstLabels: cl}, []string{"path"}),
		copied: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollwal_publish_generations_copied_total",
			Help: "Generations placed as base files as they are (lookup-free, or ID-check ones with none of their ids in the base), their column chunks copied, not re-encoded.", ConstLabels: cl}),
		rowsIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollwal_publish_rows_read_total",
			Help: "Rows read from planned generations.", ConstLabels: cl}),
		rowsOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollwal_publish_rows_staged_total",
			Help: "Rows written to staged base files.", ConstLabels: cl}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollwal_publish_rows_dropped_total",
			Help: "Duplicate rows dropped, by reason (in_base or in_pass).", ConstLabels: cl}, []string{"reason"}),
		baseOpens: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollwal_publish_base_file_opens_total",
			Help: "Base files opened for ID checks.", ConstLabels: cl}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollwal_publish_commits_total",
			Help: "Base commits, by result.", ConstLabels: cl}, []string{"result"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollwal_publish_epoch_transitions_total",
			Help: "Observed writer-epoch changes, by kind (conservative or precise).", ConstLabels: cl}, []string{"kind"}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollwal_publish_compacted_files_total",
			Help: "Base files written by compaction.", ConstLabels: cl}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollwal_publish_orphans_removed_total",
			Help: "Unreferenced files removed under the base, by kind (data, metadata, readers_manifest).", ConstLabels: cl}, []string{"kind"}),
	}
	if reg == nil {
		return m, nil
	}
	register := func(c prometheus.Collector) (prometheus.Collector, error) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector, nil
			}
			return nil, err
		}
		return c, nil
	}
	var err error
	reuse := func(dst any, c prometheus.Collector) {
		if err != nil {
			return
		}
		var got prometheus.Collector
		if got, err = register(c); err != nil {
			return
		}
		switch d := dst.(type) {
		case *prometheus.Counter:
			*d = got.(prometheus.Counter)
		case **prometheus.CounterVec:
			*d = got.(*prometheus.CounterVec)
		}
	}
	reuse(&m.plans, m.plans)
	reuse(&m.generations, m.generations)
	reuse(&m.copied, m.copied)
	reuse(&m.rowsIn, m.rowsIn)
	reuse(&m.rowsOut, m.rowsOut)
	reuse(&m.dropped, m.dropped)
	reuse(&m.baseOpens, m.baseOpens)
	reuse(&m.commits, m.commits)
	reuse(&m.transitions, m.transitions)
	reuse(&m.compactions, m.compactions)
	reuse(&m.orphans, m.orphans)
	return m, err
}
