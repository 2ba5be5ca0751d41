package publish

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/schema"
)

// BenchmarkMergeCommit is a whole merge pass of one fresh 10,000-row
// generation into a base of baseRows rows (100k-row files): Plan, Stage
// and Commit — the commit being what the Iceberg base adds to (metadata
// files, the record in the transaction). lookup-free and id-check-fresh
// (marked ID-check, positions beyond every base file). The generation is
// appended and flushed outside the timer; plan-ms, stage-ms and commit-ms
// split the pass.
func BenchmarkMergeCommit(b *testing.B) {
	sizes := []int{1_000_000}
	if os.Getenv("ROLLWAL_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, baseRows := range sizes {
		b.Run(fmt.Sprintf("base=%d", baseRows), func(b *testing.B) {
			e := benchEnv(b, baseRows)
			if _, err := e.c.RunOnce(e.ctx); err != nil { // the benchEnv's pending generation
				b.Fatal(err)
			}
			h, err := engine.NewHost(e.opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = h.Close(e.ctx) })
			s, err := h.Open(e.ctx, "s0")
			if err != nil {
				b.Fatal(err)
			}
			op := 0
			for _, check := range []bool{false, true} {
				b.Run(map[bool]string{false: "lookup-free", true: "id-check-fresh"}[check], func(b *testing.B) {
					b.ReportAllocs()
					var phases [3]time.Duration // plan, stage, commit
					for b.Loop() {
						b.StopTimer()
						op++
						rows := make([]schema.Row, 10_000)
						for i := range rows {
							rows[i] = schema.Row{"id": "op" + strconv.Itoa(op) + "-" + strconv.Itoa(i), "prompt": "p", "completion": "c", "reward": 1.0}
						}
						if _, err := s.Append(e.ctx, rows, engine.Source{}); err != nil {
							b.Fatal(err)
						}
						if _, err := s.Flush(e.ctx); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						t0 := time.Now()
						p := e.plan(b, check)
						t1 := time.Now()
						staged, err := e.c.Stage(e.ctx, p)
						if err != nil {
							b.Fatal(err)
						}
						t2 := time.Now()
						if err := e.c.Commit(e.ctx, staged); err != nil {
							b.Fatal(err)
						}
						phases[0] += t1.Sub(t0)
						phases[1] += t2.Sub(t1)
						phases[2] += time.Since(t2)
					}
					for i, name := range []string{"plan-ms", "stage-ms", "commit-ms"} {
						b.ReportMetric(float64(phases[i].Microseconds())/1e3/float64(b.N), name)
					}
				})
			}
		})
	}
}
