package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/publish"
)

type mergeOptions struct {
	storeOptions
	every  time.Duration
	output string
}

func newMerge() *cobra.Command {
	o := mergeOptions{}
	cmd := &cobra.Command{
		Use:   "merge",
		Short: "Publish committed generations into the base table (one pass, or --every DURATION)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd.Flags()); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	addStoreFlags(f, &o.storeOptions)
	f.DurationVar(&o.every, "every", 0, "merge again at this interval until interrupted (0: one pass)")
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	return cmd
}

// mergeReport is what one pass did and what readers now see.
type mergeReport struct {
	Generations int                    `json:"generations"`
	RowsRead    int64                  `json:"rows_read"`
	RowsStaged  int64                  `json:"rows_staged"`
	Dropped     int64                  `json:"rows_dropped"`
	Base        publish.ReaderManifest `json:"base"`
}

func (o *mergeOptions) run(ctx context.Context, out io.Writer) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output %q: want table or json", o.output)
	}
	if o.every < 0 {
		return fmt.Errorf("--every %v: must not be negative", o.every)
	}
	log := newLogger(slog.LevelWarn)
	meta, err := openMetadata(ctx, o.dataDir, o.etcd, dirUse{command: "merge"}, log)
	if err != nil {
		return err
	}
	defer meta.Close()
	c, err := publish.New(ctx, publish.Options{Etcd: meta.client, Table: o.table, DataDir: o.dataDir,
		FS: vfs.Default, RequestTimeout: meta.requestTimeout, Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		if err := o.pass(ctx, c, out); err != nil {
			return err
		}
		if o.every == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.every):
		}
	}
}

func (o *mergeOptions) pass(ctx context.Context, c *publish.Coordinator, out io.Writer) error {
	res, err := c.RunOnce(ctx)
	if err != nil {
		return err
	}
	rep := mergeReport{Generations: res.Generations, RowsRead: res.RowsRead, RowsStaged: res.RowsStaged, Dropped: res.Dropped}
	if m, ok, err := publish.LatestReaderManifest(vfs.Default, c.BaseDir()); err != nil {
		return err
	} else if ok {
		rep.Base = m
	}
	if o.output == "json" {
		return json.NewEncoder(out).Encode(rep)
	}
	_, err = fmt.Fprintf(out, "merged %d generations (%d rows read, %d staged, %d dropped as already published); base version %d: %d rows in %d files under %s\n",
		res.Generations, res.RowsRead, res.RowsStaged, res.Dropped, rep.Base.Version, rep.Base.Rows, len(rep.Base.Files), filepath.Join(o.dataDir, o.table, "base"))
	return err
}
