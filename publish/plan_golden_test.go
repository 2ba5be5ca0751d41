package publish

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/rollwal/rollwal/shardmeta"
)

// TestPlanShardGolden records the merge planner's decisions for one shard
// in testdata/plan_shard: which generations it plans, which of them get
// the ID check and why, and the merge state it persists. The command
//
//	plan watermark=<w> [observed_epoch=<e> cutoff=<k>] [cutoff=<k>] [replay_ranges=off]
//	manifest writer_epoch=<e> current_generation=<g>
//	gen <number> epoch=<e> seq=<first>-<last>
//	epoch <e> start_generation=<g> start_position=<p> [replay_end_generation=<g>]
//
// plans the manifest against that merge state (a cutoff without an
// observed epoch is a legacy state). Rewrite the expectations with:
// go test ./publish -run PlanShardGolden -rewrite
func TestPlanShardGolden(t *testing.T) {
	datadriven.RunTest(t, "testdata/plan_shard", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "plan" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var ms shardmeta.ShardMergeState
		d.ScanArgs(t, "watermark", &ms.Watermark)
		if d.HasArg("observed_epoch") {
			var e uint64
			d.ScanArgs(t, "observed_epoch", &e)
			ms.ObservedEpoch = &e
		}
		if d.HasArg("cutoff") {
			var k uint64
			d.ScanArgs(t, "cutoff", &k)
			ms.Cutoff = &k
		}
		m := parsePlannedManifest(t, d)
		metrics, err := newMetrics(nil, "t")
		if err != nil {
			t.Fatal(err)
		}
		c := &Coordinator{opts: Options{Table: "t", DisableReplayRanges: d.HasArg("replay_ranges")},
			log: slog.New(slog.DiscardHandler), metrics: metrics}
		sp, next, err := c.planShard("s0", m, ms, ms.Cutoff != nil || ms.ObservedEpoch != nil)
		if err != nil {
			return "error: " + err.Error()
		}
		return printShardPlan(sp, next)
	})
}

func parsePlannedManifest(t *testing.T, d *datadriven.TestData) *shardmeta.Manifest {
	m := shardmeta.NewManifest()
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		var err error
		switch f := strings.Fields(line); {
		case len(f) == 0:
		case f[0] == "manifest":
			_, err = fmt.Sscanf(line, "manifest writer_epoch=%d current_generation=%d", &m.WriterEpoch, &m.CurrentGeneration)
		case f[0] == "gen":
			var g shardmeta.Generation
			_, err = fmt.Sscanf(line, "gen %d epoch=%d seq=%d-%d", &g.Number, &g.Epoch, &g.SeqFirst, &g.SeqLast)
			g.File = fmt.Sprintf("g%d.parquet", g.Number)
			m.Flushed = append(m.Flushed, g)
		case f[0] == "epoch":
			var r shardmeta.EpochRecord
			if strings.Contains(line, "replay_end_generation") {
				_, err = fmt.Sscanf(line, "epoch %d start_generation=%d start_position=%d replay_end_generation=%d",
					&r.Epoch, &r.StartGeneration, &r.StartPosition, &r.ReplayEndGeneration)
			} else {
				_, err = fmt.Sscanf(line, "epoch %d start_generation=%d start_position=%d", &r.Epoch, &r.StartGeneration, &r.StartPosition)
			}
			m.Epochs = append(m.Epochs, r)
		default:
			err = fmt.Errorf("unknown line")
		}
		if err != nil {
			d.Fatalf(t, "%q: %v", line, err)
		}
	}
	return m
}

func printShardPlan(sp ShardPlan, next shardmeta.ShardMergeState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cutoff %d, precise %v\n", sp.Cutoff, sp.Precise)
	for _, g := range sp.Generations {
		if g.IDCheck {
			fmt.Fprintf(&b, "gen %d: ID check: %s\n", g.Number, g.Reason)
		} else {
			fmt.Fprintf(&b, "gen %d: lookup-free\n", g.Number)
		}
	}
	state := fmt.Sprintf("watermark=%d", next.Watermark)
	if next.ObservedEpoch != nil {
		state += fmt.Sprintf(" observed_epoch=%d", *next.ObservedEpoch)
	}
	if next.Cutoff != nil {
		state += fmt.Sprintf(" cutoff=%d", *next.Cutoff)
	}
	fmt.Fprintf(&b, "persist %s\n", state)
	return b.String()
}
