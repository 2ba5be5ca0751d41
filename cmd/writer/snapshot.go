package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/snapshot"
)

type snapshotSchemaOptions struct {
	hosts             []string
	keyspace, table   string
	replicationFactor int
	timeout           time.Duration
	print             bool
}

// newSnapshot groups the snapshot store's operator commands.
func newSnapshot() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Operate the snapshot-offset store"}
	cmd.AddCommand(newSnapshotCreateSchema(), newSnapshotGet())
	return cmd
}

func newSnapshotCreateSchema() *cobra.Command {
	o := snapshotSchemaOptions{}
	cmd := &cobra.Command{
		Use:   "create-schema",
		Short: "Create the Cassandra keyspace and table of snapshot offsets (or print the CQL with --print)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	listVar(f, &o.hosts, "hosts", nil, "Cassandra contact points, host:port")
	f.StringVar(&o.keyspace, "keyspace", "rollwal", "keyspace")
	f.StringVar(&o.table, "table", "snapshots", "table")
	f.IntVar(&o.replicationFactor, "replication-factor", 0, "create the keyspace with SimpleStrategy and this factor (0: the keyspace must exist)")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the schema to settle")
	f.BoolVar(&o.print, "print", false, "print the CREATE TABLE statement and do nothing")
	return cmd
}

func (o *snapshotSchemaOptions) run(ctx context.Context, out io.Writer) error {
	if o.print {
		_, err := fmt.Fprintln(out, snapshot.Schema(o.keyspace, o.table)+";")
		return err
	}
	if len(o.hosts) == 0 {
		return fmt.Errorf("--hosts: no Cassandra contact points given")
	}
	opts := snapshot.CassandraOptions{Hosts: o.hosts, Keyspace: o.keyspace, Table: o.table, Timeout: o.timeout}
	if o.replicationFactor > 0 {
		opts.Replication = map[string]string{"class": "SimpleStrategy", "replication_factor": fmt.Sprint(o.replicationFactor)}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := snapshot.CreateSchema(ctx, opts); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "created %s.%s\n", o.keyspace, o.table)
	return err
}

type snapshotGetOptions struct {
	storeOptions
	snapshots SnapshotsConfig
	timeout   time.Duration
	output    string
}

func newSnapshotGet() *cobra.Command {
	o := &snapshotGetOptions{}
	cmd := &cobra.Command{
		Use:   "get SHARD/SOURCE",
		Short: "Print the snapshot offset stored for a source of a shard, from the configured snapshot store",
		Long: "Print the snapshot stored under SHARD/SOURCE of the table: the highest offset of SOURCE that\n" +
			"the shard's committed generations cover. SOURCE may contain \"/\"; the shard name may not.\n" +
			"It reads the store of the configuration's snapshots section (--config), as serve writes it:\n" +
			"the writer's etcd by default, Cassandra with backend: cassandra or --cassandra-hosts.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, "table", "json"); err != nil {
				return err
			}
			if err := o.resolve(cmd.Flags()); err != nil {
				return err
			}
			return o.run(cmd.Context(), args[0], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	addStoreFlags(f, &o.storeOptions)
	addSnapshotFlags(f, &o.snapshots)
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound on the read")
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	return cmd
}

// parseSnapshotKey splits SHARD/SOURCE at the first "/": shard names never
// hold one, sources such as "topic/3" may.
func parseSnapshotKey(table, arg string) (snapshot.Key, error) {
	shard, source, ok := strings.Cut(arg, "/")
	if !ok || shard == "" || source == "" {
		return snapshot.Key{}, fmt.Errorf("key %q: want SHARD/SOURCE", arg)
	}
	k := snapshot.Key{Table: table, Shard: shard, Source: source}
	return k, k.Validate()
}

func (o *snapshotGetOptions) run(ctx context.Context, arg string, out io.Writer) error {
	key, err := parseSnapshotKey(o.table, arg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	store, closeStore, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	snap, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	return printSnapshot(out, o.output, key, snap)
}

// resolve applies the configuration file under the flags set: the data
// flags, etcd and the snapshots section.
func (o *snapshotGetOptions) resolve(f *pflag.FlagSet) error {
	cfg, err := resolveConfig(f, o.configFile, Config{DataDir: o.dataDir, Table: o.table, Etcd: o.etcd, Snapshots: o.snapshots})
	if err != nil {
		return err
	}
	o.dataDir, o.table, o.etcd, o.snapshots = cfg.DataDir, cfg.Table, cfg.Etcd, cfg.Snapshots
	return nil
}

// open opens the configured store to read and returns what closes it. The
// Cassandra store needs no etcd.
func (o *snapshotGetOptions) open(ctx context.Context) (snapshot.Store, func(), error) {
	log := newLogger(slog.LevelWarn)
	if o.snapshots.Backend == backendCassandra {
		c := o.snapshots.Cassandra
		c.CreateSchema = false // a reading command changes no schema
		return openCassandraSnapshots(ctx, c, log)
	}
	meta, err := o.openMeta(ctx, "snapshot get", log)
	if err != nil {
		return nil, nil, err
	}
	s, closeStore, err := openSnapshots(ctx, o.snapshots, meta, log)
	if err != nil {
		meta.Close()
		return nil, nil, err
	}
	return s, func() { closeStore(); meta.Close() }, nil
}

// snapshotOutput is `snapshot get -o json`; value is base64, as JSON
// carries bytes.
type snapshotOutput struct {
	Table    string            `json:"table"`
	Shard    string            `json:"shard"`
	Source   string            `json:"source"`
	Offset   int64             `json:"offset"`
	Value    []byte            `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

func printSnapshot(out io.Writer, format string, k snapshot.Key, s snapshot.Snapshot) error {
	if format == "json" {
		return json.NewEncoder(out).Encode(snapshotOutput{k.Table, k.Shard, k.Source, s.Offset, s.Value, s.Metadata})
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\nshard\t%s\nsource\t%s\noffset\t%d\nvalue\t%d bytes\n", k.Table, k.Shard, k.Source, s.Offset, len(s.Value))
	for _, name := range slices.Sorted(maps.Keys(s.Metadata)) {
		fmt.Fprintf(tw, "metadata\t%s = %s\n", name, s.Metadata[name])
	}
	return tw.Flush()
}
