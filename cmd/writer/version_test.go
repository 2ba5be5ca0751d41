package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestVersionRevisionFromLdflags: a build without VCS stamping (go test
// builds without it) reports the revision set with -ldflags
// -X main.revision, and writer_build_info carries it.
func TestVersionRevisionFromLdflags(t *testing.T) {
	defer func(r string) { revision = r }(revision)
	revision = "0123abcd"
	v := readVersion()
	if v.Revision != "0123abcd" {
		t.Fatalf("revision %q, want the one set at link time", v.Revision)
	}
	var out bytes.Buffer
	if err := printVersion(&out, "table", v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "revision 0123abcd") {
		t.Fatalf("writer version: %q; want the revision", out.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo(v))
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "writer_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, %v; want writer_build_info alone", mfs, err)
	}
	m := mfs[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if m.GetGauge().GetValue() != 1 || labels["revision"] != "0123abcd" || labels["go_version"] != v.Go || labels["version"] != v.Version {
		t.Fatalf("writer_build_info %v = %v", labels, m.GetGauge().GetValue())
	}
}

// TestDurationsLogInOneForm: the writer's logs print a duration as Go
// does ("1.5s"), in JSON as in text, never as nanoseconds.
func TestDurationsLogInOneForm(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{ReplaceAttr: durationText}))
	log.Info("shard open", "took", 1500*time.Millisecond, slog.Group("replay", "duration", 250*time.Millisecond))
	if s := out.String(); !strings.Contains(s, `"took":"1.5s"`) || !strings.Contains(s, `"duration":"250ms"`) {
		t.Fatalf("logged %s; want durations as 1.5s and 250ms", s)
	}
}
