package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

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
	cmd.AddCommand(newSnapshotCreateSchema())
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
	f.StringSliceVar(&o.hosts, "hosts", nil, "Cassandra contact points, host:port")
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
