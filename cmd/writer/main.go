// Command writer runs rollwal: `writer serve` claims shards and serves HTTP
// ingest; `writer generate` appends generated rollouts on the embedded
// defaults and prints what it wrote; `writer snapshot create-schema`
// prepares the Cassandra snapshot table. Merging and inspection come next.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "writer",
		Short:         "rollwal: a WAL-centric writer of rollouts into Parquet",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newGenerate(), newServe(), newMerge(), newSnapshot())
	return root
}

// newLogger logs text on a terminal and JSON otherwise.
func newLogger(level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}
