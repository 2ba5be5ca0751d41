package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

type generateOptions struct {
	dataDir     string
	table       string
	shards      int
	rows        int
	batch       int
	producers   int
	seed        uint64
	flushBytes  int64
	compression string
	output      string
	verbose     bool
	schema      string // rollout or rl
	etcd        etcdclient.Config
}

func newGenerate() *cobra.Command {
	o := generateOptions{}
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Append generated rollouts on the embedded defaults, flush, and report what was written",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "./data", "data directory (WAL, generations, embedded etcd)")
	f.StringVar(&o.table, "table", "rollouts", "table name")
	f.IntVar(&o.shards, "shards", 2, "number of shards (named s0, s1, …)")
	f.IntVar(&o.rows, "rows", 100000, "rows to append in all")
	f.IntVar(&o.batch, "batch", 256, "rows per append")
	f.IntVar(&o.producers, "producers", 4, "concurrent producers per shard")
	f.Uint64Var(&o.seed, "seed", 1, "generator seed")
	f.Int64Var(&o.flushBytes, "flush-bytes", 32<<20, "seal a memtable at this many bytes")
	f.StringVar(&o.compression, "wal-compression", "none", "WAL compression: none (the default, as serve's wal.compression), s2 or zstd")
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log progress")
	f.StringVar(&o.schema, "schema", "rollout", "rows to generate: rollout (the default schema: prompt and completion text) or rl (token ids, log-probabilities, chat messages)")
	addEtcdFlags(f, &o.etcd)
	return cmd
}

func (o *generateOptions) validate() error {
	switch {
	case o.shards < 1:
		return fmt.Errorf("--shards %d: need at least 1", o.shards)
	case o.rows < 0:
		return fmt.Errorf("--rows %d: must not be negative", o.rows)
	case o.batch < 1:
		return fmt.Errorf("--batch %d: need at least 1", o.batch)
	case o.producers < 1:
		return fmt.Errorf("--producers %d: need at least 1", o.producers)
	case o.output != "table" && o.output != "json":
		return fmt.Errorf("--output %q: want table or json", o.output)
	case o.schema != "rollout" && o.schema != "rl":
		return fmt.Errorf("--schema %q: want rollout or rl", o.schema)
	}
	return nil
}

type report struct {
	Rows       int64           `json:"rows"`
	Duplicates int64           `json:"duplicates"`
	Seconds    float64         `json:"seconds"`
	RowsPerSec float64         `json:"rows_per_sec"`
	Shards     []engine.Status `json:"shards"`
}

func (o *generateOptions) run(ctx context.Context, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	comp, err := wal.ParseCompression(o.compression)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := newLogger(level)
	meta, err := openMetadata(ctx, o.dataDir, o.etcd, dirUse{command: "generate", writes: true}, log)
	if err != nil {
		return err
	}
	defer meta.Close()
	snaps, _, err := openSnapshots(ctx, SnapshotsConfig{Backend: backendEtcd}, meta, log)
	if err != nil {
		return err
	}
	host, err := engine.NewHost(engine.Options{
		DataDir: o.dataDir, Table: o.table, Etcd: meta.client, Logger: log, RequestTimeout: meta.requestTimeout,
		Snapshots:  snaps,
		FlushBytes: o.flushBytes, WALCompression: comp, BudgetWait: 30 * time.Second, Schema: o.tableSchema(),
	})
	if err != nil {
		return err
	}
	start := time.Now()
	rep, err := o.append(ctx, host)
	interrupted := ctx.Err() != nil
	if interrupted {
		err = nil // the producers' context errors: the signal is the news
	}
	// Close flushes and commits what was appended, a signal or not.
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep.Shards = statuses(host)
	err = errors.Join(err, host.Close(closeCtx))
	if err != nil {
		return err
	}
	rep.Shards = finalStatuses(rep.Shards, meta.client, o)
	rep.Seconds = time.Since(start).Seconds()
	rep.RowsPerSec = float64(rep.Rows) / rep.Seconds
	if err := o.print(out, rep); err != nil {
		return err
	}
	if interrupted {
		return fmt.Errorf("interrupted: appended %d of %d rows, flushed and committed; run again to append more", rep.Rows, o.rows)
	}
	return nil
}

// append runs the producers of every shard and flushes each shard.
func (o *generateOptions) append(ctx context.Context, host *engine.Host) (report, error) {
	var (
		mu   sync.Mutex
		rep  report
		errs []error
		wg   sync.WaitGroup
	)
	perShard := o.rows / o.shards
	for i := 0; i < o.shards; i++ {
		sh, err := host.Open(ctx, fmt.Sprintf("s%d", i))
		if err != nil {
			return rep, err
		}
		rows := perShard
		if i == 0 {
			rows += o.rows % o.shards
		}
		for p := 0; p < o.producers; p++ {
			n := rows / o.producers
			if p == 0 {
				n += rows % o.producers
			}
			gen := rolloutgen.New(o.seed+uint64(i*1000+p), fmt.Sprintf("%d-%s-p%d", o.seed, sh.Name(), p))
			source := fmt.Sprintf("generator-%d-p%d", o.seed, p)
			wg.Add(1)
			go func() {
				defer wg.Done()
				stored, dups, err := o.produce(ctx, sh, gen, source, n)
				mu.Lock()
				defer mu.Unlock()
				rep.Rows += stored
				rep.Duplicates += dups
				if err != nil {
					errs = append(errs, err)
				}
			}()
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return rep, context.Cause(ctx) // interrupted: Close flushes
	}
	for _, sh := range host.Shards() {
		if _, err := sh.Flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// produce appends n rows; each append carries its source's offset (the
// count of rows it covers), which the writer persists as a snapshot once a
// committed generation covers it.
func (o *generateOptions) produce(ctx context.Context, sh *engine.Shard, gen *rolloutgen.Generator, source string, n int) (stored, dups int64, err error) {
	for done := 0; done < n; {
		if ctx.Err() != nil { // a signal: Append itself does not look at ctx
			return stored, dups, context.Cause(ctx)
		}
		k := min(o.batch, n-done)
		rows := gen.Rows
		if o.schema == "rl" {
			rows = gen.RLRows
		}
		res, err := sh.Append(ctx, rows(k), engine.Source{Name: source, Offset: int64(done + k)})
		if err != nil {
			return stored, dups, err
		}
		stored += int64(res.Stored)
		dups += int64(res.Duplicates)
		done += k
	}
	return stored, dups, nil
}

// tableSchema is the schema of the rows --schema generates.
func (o *generateOptions) tableSchema() *schema.Schema {
	if o.schema == "rl" {
		return rolloutgen.RLSchema()
	}
	return schema.Rollout()
}

func statuses(h *engine.Host) []engine.Status {
	var out []engine.Status
	for _, sh := range h.Shards() {
		out = append(out, sh.Status())
	}
	return out
}

// finalStatuses re-reads the committed manifests after close, which may
// have flushed a last generation.
func finalStatuses(st []engine.Status, cli *clientv3.Client, o *generateOptions) []engine.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range st {
		m, err := engine.LoadManifest(ctx, cli, "", o.table, st[i].Shard)
		if err != nil {
			continue
		}
		st[i].CurrentGeneration, st[i].ReplayCursor, st[i].Flushed = m.CurrentGeneration, m.ReplayCursor, m.Flushed
		st[i].MemtableRows, st[i].MemtableBytes = 0, 0
	}
	return st
}

func (o *generateOptions) print(out io.Writer, rep report) error {
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(out, "appended %d rows (%d duplicates) in %.2fs: %.0f rows/s\n", rep.Rows, rep.Duplicates, rep.Seconds, rep.RowsPerSec)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tEPOCH\tGENERATION\tFILE\tROWS\tBYTES\tSEQ")
	for _, s := range rep.Shards {
		for _, g := range s.Flushed {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d-%d\n", s.Shard, g.Epoch, g.Number,
				filepath.Join(layout.GenDir(o.dataDir, o.table, s.Shard), g.File), g.Rows, g.Bytes, g.SeqFirst, g.SeqLast)
		}
	}
	return tw.Flush()
}
