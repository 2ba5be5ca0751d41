package engine

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// TestSkipOnReplayGolden records the replay's decision, with its reason,
// for the records of testdata/skip_on_replay. Commands:
//
//	manifest cursor=<c>
//	epoch <e> start_position=<p> start_generation=<g>   (one line each)
//	    sets the manifest the records are judged by;
//	judge [exclusion=off]
//	<epoch> <first position> <generation>               (one record a line)
//	    prints "replay" or "skip: <why>" for each record.
//
// Rewrite the expectations with: go test ./engine -run SkipOnReplayGolden -rewrite
func TestSkipOnReplayGolden(t *testing.T) {
	var m *shardmeta.Manifest
	datadriven.RunTest(t, "testdata/skip_on_replay", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "manifest":
			m = shardmeta.NewManifest()
			var cursor uint64
			d.ScanArgs(t, "cursor", &cursor)
			m.ReplayCursor = cursor
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				var r shardmeta.EpochRecord
				if _, err := fmt.Sscanf(line, "epoch %d start_position=%d start_generation=%d", &r.Epoch, &r.StartPosition, &r.StartGeneration); err != nil {
					d.Fatalf(t, "epoch line %q: %v", line, err)
				}
				m.Epochs = append(m.Epochs, r)
			}
			return "ok"
		case "judge":
			exclusion := !d.HasArg("exclusion")
			var out strings.Builder
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				h := parseJudged(t, d, line)
				fmt.Fprintf(&out, "%s: ", line)
				if why := skipReason(m, h, exclusion); why != "" {
					fmt.Fprintf(&out, "skip: %s\n", why)
				} else {
					out.WriteString("replay\n")
				}
			}
			return out.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func parseJudged(t *testing.T, d *datadriven.TestData, line string) wal.Header {
	f := strings.Fields(line)
	if len(f) != 3 {
		d.Fatalf(t, "record line %q: want <epoch> <first> <generation>", line)
	}
	var n [3]uint64
	for i := range f {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			d.Fatalf(t, "record line %q: %v", line, err)
		}
		n[i] = v
	}
	return wal.Header{Epoch: n[0], FirstPos: n[1], Generation: n[2], Count: 1}
}
