package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// revision is the VCS revision when the toolchain embeds none (a build
// with -buildvcs=false, or from a source tree without .git):
//
//	go build -buildvcs=false -ldflags "-X main.revision=$(git rev-parse HEAD)" ./cmd/writer
var revision string

// versionInfo is what `writer version` reports, from the build information
// the Go toolchain embeds: no version string to forget to bump.
type versionInfo struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Go       string `json:"go"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

func newVersion() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the writer's module version, Go version and VCS revision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			return printVersion(cmd.OutOrStdout(), output, readVersion())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output: table or json")
	return cmd
}

func readVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return versionInfo{Version: "unknown (no build information)"}
	}
	v := versionInfo{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Revision == "" {
		v.Revision = revision
	}
	return v
}

// buildInfo is the writer_build_info gauge: 1, labelled with what
// `writer version` reports, so that dashboards tell which build serves.
func buildInfo(v versionInfo) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "writer_build_info",
		Help: "The writer's build: module version, VCS revision and Go version (always 1).",
	}, []string{"version", "revision", "go_version"})
	g.WithLabelValues(v.Version, v.Revision, v.Go).Set(1)
	return g
}

func printVersion(out io.Writer, format string, v versionInfo) error {
	if format == "json" {
		return json.NewEncoder(out).Encode(v)
	}
	line := fmt.Sprintf("writer %s %s (%s)", v.Module, v.Version, v.Go)
	if v.Revision != "" {
		line += " revision " + v.Revision
		if v.Modified {
			line += " (modified)"
		}
	}
	_, err := fmt.Fprintln(out, line)
	return err
}
