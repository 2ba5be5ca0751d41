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
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

type mergeOptions struct {
	storeOptions
	every       time.Duration
	output      string
	maintenance maintenanceOptions
	objstores   *stores // one Store per distinct storage: section, shared by the tables' merges
}

// maintenanceOptions are the base table's upkeep, done by every merge.
type maintenanceOptions struct {
	keepSnapshots    int
	keepSnapshotsFor time.Duration
	compactTarget    int64
	compactMinFiles  int
	noCompact        bool
	orphanGrace      time.Duration
}

func addMaintenanceFlags(f *pflag.FlagSet, m *maintenanceOptions) {
	d := publish.DefaultSnapshotRetention
	f.IntVar(&m.keepSnapshots, "keep-snapshots", d.MaxSnapshots, "Iceberg snapshots kept for time travel, at most (older ones expire at each commit)")
	f.DurationVar(&m.keepSnapshotsFor, "keep-snapshots-for", d.MaxAge, "expire Iceberg snapshots older than this")
	f.Int64Var(&m.compactTarget, "compact-target-bytes", publish.DefaultCompactionTarget, "size compacted base files grow to; files below half of it are small")
	f.IntVar(&m.compactMinFiles, "compact-min-files", publish.DefaultCompactionMinFiles, "compact a shard's small base files once it has this many")
	f.BoolVar(&m.noCompact, "no-compact", false, "do not compact small base files after merging")
	f.DurationVar(&m.orphanGrace, "orphan-grace", publish.DefaultOrphanGrace, "delete unreferenced files under the base only once they are this old")
}

func (m maintenanceOptions) validate() error {
	switch {
	case m.keepSnapshots < 1:
		return fmt.Errorf("--keep-snapshots %d: want at least 1", m.keepSnapshots)
	case m.keepSnapshotsFor <= 0:
		return fmt.Errorf("--keep-snapshots-for %v: want a positive duration", m.keepSnapshotsFor)
	case m.compactTarget < 1<<20:
		return fmt.Errorf("--compact-target-bytes %d: want at least 1 MiB", m.compactTarget)
	case m.compactMinFiles < 2:
		return fmt.Errorf("--compact-min-files %d: want at least 2", m.compactMinFiles)
	case m.orphanGrace < time.Minute:
		return fmt.Errorf("--orphan-grace %v: want at least 1m (a commit whose answer was lost may still apply within its request timeout)", m.orphanGrace)
	}
	return nil
}

// apply sets the maintenance options of a coordinator.
func (m maintenanceOptions) apply(o *publish.Options) {
	o.SnapshotRetention = catalog.Retention{MaxSnapshots: m.keepSnapshots, MaxAge: m.keepSnapshotsFor}
	o.Compaction = publish.Compaction{TargetBytes: m.compactTarget, MinFiles: m.compactMinFiles, Disabled: m.noCompact}
	o.OrphanGrace = m.orphanGrace
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
	f.DurationVar(&o.every, "every", 0, "merge again at this interval until interrupted (0: one pass); a failed pass is logged and tried again, "+
		"through the etcd of the running serve only (it never starts the embedded etcd), and only damage ends it")
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	addMaintenanceFlags(f, &o.maintenance)
	return cmd
}

// mergeReport is what one pass did and what readers now see.
type mergeReport struct {
	Table       string                 `json:"table"`
	Generations int                    `json:"generations"`
	RowsRead    int64                  `json:"rows_read"`
	RowsStaged  int64                  `json:"rows_staged"`
	Dropped     int64                  `json:"rows_dropped"`
	Compacted   int                    `json:"files_compacted"`
	Base        publish.ReaderManifest `json:"base"`
}

func (o *mergeOptions) run(ctx context.Context, out io.Writer) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output %q: want table or json", o.output)
	}
	if o.every < 0 {
		return fmt.Errorf("--every %v: must not be negative", o.every)
	}
	if err := o.maintenance.validate(); err != nil {
		return err
	}
	if o.objstores == nil {
		o.objstores = newStores(nil, newLogger(slog.LevelWarn))
	}
	if len(o.tables) > 1 {
		return o.runTables(ctx, out)
	}
	log := newLogger(slog.LevelWarn).With("table", o.table)
	if o.every > 0 {
		return o.repeat(ctx, out, log)
	}
	s, err := o.open(ctx, dirUse{command: "merge"}, log)
	if err != nil {
		return err
	}
	defer s.close()
	return o.pass(ctx, s.c, out)
}

// runTables merges every table of the configuration, each with its own
// coordinator and lock: one pass of each in turn, or, with --every, each
// table's passes side by side until ctx ends. Reports are written whole,
// one at a time.
func (o *mergeOptions) runTables(ctx context.Context, out io.Writer) error {
	lw := &lockedWriter{w: out}
	errs := make([]error, len(o.tables))
	var wg sync.WaitGroup
	for i, t := range o.tables {
		one := *o
		one.tables, one.table, one.schema = nil, t.Name, mustSchema(t.Columns)
		one.storageKey, one.storage = o.storages[t.Name].key, o.storages[t.Name].cfg
		if o.every == 0 {
			errs[i] = one.run(ctx, lw)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = one.run(ctx, lw)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("table %s: %w", o.tables[i].Name, err)
		}
	}
	return errors.Join(errs...)
}

// lockedWriter serialises the writes of several merges to one output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Log messages of merge --every.
const (
	msgMergeRetry = "merge pass failed; trying again at the next tick"
	msgMergeFatal = "merge pass failed for good; stopping"
)

// repeat runs a pass every --every until ctx ends. A pass that fails in a
// way time can mend (etcd unavailable, the serve restarting, its endpoint
// file stale or another directory's, the merge lock lost or not obtained)
// is logged, and the next tick starts over: the etcd resolved again, a new
// coordinator. Only damage (fatalMergeError) ends it with an error, since
// no later pass gets past it without an operator.
func (o *mergeOptions) repeat(ctx context.Context, out io.Writer, log *slog.Logger) error {
	var s *mergeSession
	defer func() { s.close() }()
	for {
		err := o.tick(ctx, &s, out, log)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && fatalMergeError(err):
			log.Error(msgMergeFatal, "err", err)
			return err
		case err != nil:
			log.Warn(msgMergeRetry, "err", err, "every", o.every.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.every):
		}
	}
}

// tick runs one pass in *s, opening it first when there is none, and drops
// it when the pass fails.
func (o *mergeOptions) tick(ctx context.Context, s **mergeSession, out io.Writer, log *slog.Logger) error {
	if *s == nil {
		// follow: the etcd of the running serve only, never the embedded
		// one under the lock that serve needs to start again.
		ns, err := o.open(ctx, dirUse{command: "merge", follow: true}, log)
		if err != nil {
			return err
		}
		*s = ns
	}
	err := o.pass(ctx, (*s).c, out)
	if err != nil {
		(*s).close()
		*s = nil
	}
	return err
}

// fatalMergeError reports damage that no later pass gets past: a corrupt
// generation or base file, or merge state and manifests the planner refuses
// (publish fails closed on them).
func fatalMergeError(err error) bool {
	for _, damage := range []error{generation.ErrCorrupt, publish.ErrInvalidState, shardmeta.ErrInvalidManifest} {
		if errors.Is(err, damage) {
			return true
		}
	}
	return false
}

// mergeSession is the etcd and the coordinator (holding the merge lock)
// that passes run in.
type mergeSession struct {
	meta *metadata
	c    *publish.Coordinator
}

func (o *mergeOptions) open(ctx context.Context, use dirUse, log *slog.Logger) (*mergeSession, error) {
	meta, err := openMetadata(ctx, o.dataDir, o.etcd, use, log)
	if err != nil {
		return nil, err
	}
	sch, err := tableSchema(ctx, meta.client, o.table, o.schema)
	if err != nil {
		return nil, errors.Join(err, meta.Close())
	}
	store, err := o.objstores.open(ctx, o.storageKey, o.storage) // nil without storage.url
	if err != nil {
		return nil, errors.Join(err, meta.Close())
	}
	po := publish.Options{Etcd: meta.client, Table: o.table, DataDir: o.dataDir, Schema: sch,
		FS: vfs.Default, RequestTimeout: meta.requestTimeout, Logger: log, Store: store}
	o.maintenance.apply(&po)
	c, err := publish.New(ctx, po)
	if err != nil {
		return nil, errors.Join(err, meta.Close())
	}
	return &mergeSession{meta: meta, c: c}, nil
}

// close releases the lock and the etcd; nil is closed already.
func (s *mergeSession) close() {
	if s == nil {
		return
	}
	s.c.Close()
	s.meta.Close()
}

func (o *mergeOptions) pass(ctx context.Context, c *publish.Coordinator, out io.Writer) error {
	res, err := c.RunOnce(ctx)
	if err != nil {
		return err
	}
	rep := mergeReport{Table: o.table, Generations: res.Generations, RowsRead: res.RowsRead, RowsStaged: res.RowsStaged, Dropped: res.Dropped, Compacted: res.Compacted}
	if m, ok, err := c.LatestReaderManifest(ctx); err != nil {
		return err
	} else if ok {
		rep.Base = m
	}
	if o.output == "json" {
		return json.NewEncoder(out).Encode(rep)
	}
	_, err = fmt.Fprintf(out, "merged %d generations (%d rows read, %d staged, %d dropped as already published, %d small files compacted); base version %d: %d rows in %d files under %s\n",
		res.Generations, res.RowsRead, res.RowsStaged, res.Dropped, res.Compacted, rep.Base.Version, rep.Base.Rows, len(rep.Base.Files), layout.BaseDir(o.dataDir, o.table))
	return err
}
