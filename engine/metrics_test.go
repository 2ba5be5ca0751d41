package engine

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/vfs"
)

// TestMetricsOnInjectedRegistry: the host registers its metrics on the
// registerer it is given, and they count what happened.
func TestMetricsOnInjectedRegistry(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Registerer = reg
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("m", 0, 7), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rows("m", 5, 4), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"writer_rows_appended_total":         9,
		"writer_rows_duplicate_total":        2,
		"writer_generations_committed_total": 1,
		"writer_epoch":                       1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
