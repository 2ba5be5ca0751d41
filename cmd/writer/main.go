// Command writer runs rollwal and operates on its data.
//
//	writer serve                      claim shards and serve HTTP ingest until SIGTERM
//	writer generate                   append generated rollouts on the embedded defaults
//	writer merge                      publish committed generations into the base table (--every: again and again,
//	                                  through the running serve's etcd, surviving its restarts)
//	writer inspect shards             every shard: owner, epoch, generations, replay cursor
//	writer inspect shard S            a shard's manifest and owner
//	writer inspect generations S      a shard's generations, read from their footers
//	writer inspect base               the base table: version, files, rows, merge state
//	writer wal verify --shard S       check a shard's WAL; non-zero exit at damage
//	writer wal dump --shard S         print its records (--rows: their rows)
//	writer wal repair --shard S       cut a torn tail (shows what it cuts; needs --yes)
//	writer snapshot get SHARD/SOURCE  a stored snapshot offset
//	writer snapshot create-schema     the Cassandra table of snapshot offsets
//	writer config check               validate the configuration and print it
//	writer schema apply --config F    move each table with columns: to them as a new schema version (--dry-run)
//	writer schema show                a table's schema version: changes, columns, field ids (--version N)
//	writer version                    module version, Go version, VCS revision
//
// Settings come from defaults, then the YAML file of --config (strict:
// unknown keys are errors; ${VAR} expands from the environment), then the
// flags set on the command line. One process at a time writes a data dir:
// serve and generate hold <data-dir>/LOCK, and a second one fails at once
// naming the holder. Commands that read metadata use the configured etcd
// cluster, else the etcd a running serve recorded in <data-dir>/etcd.endpoint
// once it proves to be this data dir's (cluster id and identity), else take
// the lock and start the embedded etcd under the data dir (datadir.go);
// merge --every never does the latter (merge.go).
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
	root.AddCommand(newGenerate(), newServe(), newMerge(), newInspect(), newWAL(), newSnapshot(),
		newConfig(), newSchema(), newVersion())
	return root
}

// newLogger logs text on a terminal and JSON otherwise.
func newLogger(level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

// durationText logs every duration in one form, Go's ("1.5s", "250ms"),
// in JSON as in text: the JSON handler would print nanoseconds otherwise.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
