package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// metaPrefix is the root of rollwal's keys in etcd (engine.Options.Prefix's
// default; the writer never sets another).
const metaPrefix = "rollwal"

type inspectOptions struct {
	storeOptions
	output string
}

func newInspect() *cobra.Command {
	o := &inspectOptions{}
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Show the table's shards, manifests, generations and base table (read-only)",
	}
	pf := cmd.PersistentFlags()
	addStoreFlags(pf, &o.storeOptions)
	pf.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	cmd.AddCommand(
		o.command("shards", "Every shard of the table: owner, epoch, generations, replay cursor", cobra.NoArgs, (*inspector).shards),
		o.command("shard SHARD", "A shard's manifest and owner", cobra.ExactArgs(1), (*inspector).shard),
		o.command("generations SHARD", "A shard's committed generations, each read from its file's footer", cobra.ExactArgs(1), (*inspector).generations),
		o.command("base", "The base table: version, files, rows, and each shard's merge state", cobra.NoArgs, (*inspector).base),
		o.command("etcd", "Each etcd member's database size, in-use size, quota, revision and alarms", cobra.NoArgs, (*inspector).etcd),
	)
	return cmd
}

// inspector reads one table's metadata and files.
type inspector struct {
	o       *inspectOptions
	cli     *clientv3.Client
	timeout time.Duration
	store   *shardmeta.Store
	keys    shardmeta.Keys
	out     io.Writer
}

func (o *inspectOptions) command(use, short string, args cobra.PositionalArgs,
	fn func(*inspector, context.Context, []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := o.prepare(cmd.Flags()); err != nil {
				return err
			}
			log := newLogger(slog.LevelWarn)
			meta, err := o.openMeta(cmd.Context(), "inspect", log)
			if err != nil {
				return err
			}
			defer meta.Close()
			keys := shardmeta.Keys{Prefix: metaPrefix, Table: o.table}
			in := &inspector{o: o, cli: meta.client, timeout: meta.requestTimeout, keys: keys, out: cmd.OutOrStdout(),
				store: shardmeta.NewStore(meta.client, keys, shardmeta.StoreOptions{RequestTimeout: meta.requestTimeout, Logger: log})}
			return fn(in, cmd.Context(), a)
		}}
}

func (o *inspectOptions) prepare(f *pflag.FlagSet) error {
	if err := checkOutput(o.output, "table", "json"); err != nil {
		return err
	}
	return o.resolve(f)
}

func checkOutput(got string, want ...string) error {
	if !slices.Contains(want, got) {
		return fmt.Errorf("--output %q: want %s", got, strings.Join(want, " or "))
	}
	return nil
}

// openMeta opens, for a reading command, the configured etcd cluster, else
// the etcd that a serve on the data dir recorded (once it proves to be the
// data dir's), else the embedded one under the data dir's lock. Without a
// cluster the data dir must exist: a reading command would otherwise start
// an empty etcd there and report nothing.
func (o *storeOptions) openMeta(ctx context.Context, command string, log *slog.Logger) (*metadata, error) {
	if len(o.etcd.Endpoints) == 0 {
		if _, err := vfs.Default.Stat(o.dataDir); err != nil {
			return nil, fmt.Errorf("data dir %s: %w", o.dataDir, err)
		}
	}
	return openMetadata(ctx, o.dataDir, o.etcd, dirUse{command: command}, log)
}

func (in *inspector) json(v any) error {
	enc := json.NewEncoder(in.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shardSummary is one line of `inspect shards`.
type shardSummary struct {
	Shard             string           `json:"shard"`
	Epoch             uint64           `json:"epoch"`
	Owner             *shardmeta.Owner `json:"owner"` // nil: no writer holds the shard
	CurrentGeneration uint64           `json:"current_generation"`
	ReplayCursor      uint64           `json:"replay_cursor"`
	Generations       int              `json:"generations"`
	// Watermark is the last generation merged into the base; Unmerged
	// counts the listed generations above it, DrainPending those at or
	// below it, merged and waiting for the owner to drain them.
	Watermark    uint64 `json:"watermark"`
	Unmerged     int    `json:"unmerged"`
	DrainPending int    `json:"drain_pending"`
	Rows         int64  `json:"rows"`
	Bytes        int64  `json:"bytes"`
}

func (in *inspector) shards(ctx context.Context, _ []string) error {
	names, err := in.listShards(ctx)
	if err != nil {
		return err
	}
	base, _, err := in.store.LoadBaseState(ctx)
	if err != nil {
		return err
	}
	sums := []shardSummary{}
	for _, name := range names {
		s, err := in.summary(ctx, name, base.Shards[name].Watermark)
		if err != nil {
			return err
		}
		sums = append(sums, s)
	}
	if in.o.output == "json" {
		return in.json(sums)
	}
	if len(sums) == 0 {
		_, err := fmt.Fprintf(in.out, "no shards in table %s\n", in.o.table)
		return err
	}
	tw := tabwriter.NewWriter(in.out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tEPOCH\tOWNER\tADDRESS\tGENERATIONS\tUNMERGED\tDRAIN_PENDING\tWATERMARK\tROWS\tBYTES\tCURRENT\tREPLAY_CURSOR")
	for _, s := range sums {
		owner, addr := "-", "-"
		if s.Owner != nil {
			owner, addr = s.Owner.Writer, s.Owner.Address
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Shard, s.Epoch, owner, addr,
			s.Generations, s.Unmerged, s.DrainPending, s.Watermark, s.Rows, s.Bytes, s.CurrentGeneration, s.ReplayCursor)
	}
	return tw.Flush()
}

// listShards returns the names of the shards with any key in etcd, sorted.
func (in *inspector) listShards(ctx context.Context) ([]string, error) {
	prefix := in.keys.Root() + "shards/"
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := in.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list the shards of table %s: %w", in.o.table, err)
	}
	var names []string
	for _, kv := range resp.Kvs {
		name, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func (in *inspector) summary(ctx context.Context, shard string, watermark uint64) (shardSummary, error) {
	m, _, err := in.store.Load(ctx, shard)
	if err != nil {
		return shardSummary{}, err
	}
	owner, err := in.owner(ctx, shard)
	if err != nil {
		return shardSummary{}, err
	}
	s := shardSummary{Shard: shard, Epoch: m.WriterEpoch, Owner: owner, CurrentGeneration: m.CurrentGeneration,
		ReplayCursor: m.ReplayCursor, Generations: len(m.Flushed), Watermark: watermark}
	for _, g := range m.Flushed {
		s.Rows += g.Rows
		s.Bytes += g.Bytes
		if g.Number <= watermark {
			s.DrainPending++
		} else {
			s.Unmerged++
		}
	}
	return s, nil
}

// owner reads the shard's owner key; nil when no writer holds the shard.
func (in *inspector) owner(ctx context.Context, shard string) (*shardmeta.Owner, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := in.cli.Get(rctx, in.keys.Owner(shard))
	if err != nil {
		return nil, fmt.Errorf("read the owner of shard %s: %w", shard, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var o shardmeta.Owner
	if err := json.Unmarshal(resp.Kvs[0].Value, &o); err != nil {
		return nil, fmt.Errorf("owner key of shard %s holds %q: %w", shard, resp.Kvs[0].Value, err)
	}
	return &o, nil
}

// manifest loads a shard's manifest; a shard never claimed is an error.
func (in *inspector) manifest(ctx context.Context, shard string) (*shardmeta.Manifest, int64, error) {
	if err := shardmeta.ValidateShard(shard); err != nil {
		return nil, 0, err
	}
	m, rev, err := in.store.Load(ctx, shard)
	if err == nil && rev == 0 {
		err = fmt.Errorf("shard %s: no manifest in table %s (never claimed; `writer inspect shards` lists the shards)", shard, in.o.table)
	}
	return m, rev, err
}

// shardDetail is the output of `inspect shard`.
type shardDetail struct {
	Shard    string              `json:"shard"`
	Owner    *shardmeta.Owner    `json:"owner"`
	Revision int64               `json:"revision"` // the manifest key's ModRevision
	Manifest *shardmeta.Manifest `json:"manifest"`
}

func (in *inspector) shard(ctx context.Context, args []string) error {
	m, rev, err := in.manifest(ctx, args[0])
	if err != nil {
		return err
	}
	owner, err := in.owner(ctx, args[0])
	if err != nil {
		return err
	}
	d := shardDetail{Shard: args[0], Owner: owner, Revision: rev, Manifest: m}
	if in.o.output == "json" {
		return in.json(d)
	}
	return in.printShard(d)
}

func (in *inspector) printShard(d shardDetail) error {
	m := d.Manifest
	tw := tabwriter.NewWriter(in.out, 2, 8, 2, ' ', 0)
	owner := "- (no writer holds the shard)"
	if d.Owner != nil {
		owner = fmt.Sprintf("%s, epoch %d, at %s", d.Owner.Writer, d.Owner.Epoch, d.Owner.Address)
	}
	fmt.Fprintf(tw, "shard\t%s\nowner\t%s\nwriter epoch\t%d\ncurrent generation\t%d\nreplay cursor\t%d\nmanifest revision\t%d\n",
		d.Shard, owner, m.WriterEpoch, m.CurrentGeneration, m.ReplayCursor, d.Revision)
	for _, src := range slices.Sorted(maps.Keys(m.SourceOffsets)) {
		fmt.Fprintf(tw, "source offset\t%s = %d\n", src, m.SourceOffsets[src])
	}
	fmt.Fprintln(tw, "\nGENERATION\tEPOCH\tROWS\tBYTES\tSEQ\tFILE")
	for _, g := range m.Flushed {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d-%d\t%s\n", g.Number, g.Epoch, g.Rows, g.Bytes, g.SeqFirst, g.SeqLast, g.File)
	}
	fmt.Fprintln(tw, "\nEPOCH\tSTART_GENERATION\tSTART_POSITION\tREPLAY_END_GENERATION")
	for _, e := range m.Epochs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\n", e.Epoch, e.StartGeneration, e.StartPosition, e.ReplayEndGeneration)
	}
	return tw.Flush()
}

// generationInfo is one generation as its file's footer describes it.
type generationInfo struct {
	Number   uint64 `json:"number"`
	Epoch    uint64 `json:"epoch"`
	Rows     int64  `json:"rows"`
	SeqFirst uint64 `json:"seq_first"`
	SeqLast  uint64 `json:"seq_last"`
	Bytes    int64  `json:"bytes"`
	Created  string `json:"created,omitempty"`
	File     string `json:"file"`
	// Problem says why the file is missing, unreadable or disagrees with
	// the manifest; empty when it is sound.
	Problem string `json:"problem,omitempty"`
}

func (in *inspector) generations(ctx context.Context, args []string) error {
	m, _, err := in.manifest(ctx, args[0])
	if err != nil {
		return err
	}
	infos, bad := []generationInfo{}, 0
	for _, g := range m.Flushed {
		info := in.readGeneration(args[0], g)
		if info.Problem != "" {
			bad++
		}
		infos = append(infos, info)
	}
	if in.o.output == "json" {
		err = in.json(infos)
	} else {
		err = in.printGenerations(infos)
	}
	if err == nil && bad > 0 {
		err = fmt.Errorf("%d of %d generation files of shard %s are missing, corrupt or disagree with the manifest", bad, len(infos), args[0])
	}
	return err
}

// readGeneration reads g's footer, falling back on the manifest's word for
// what the file should hold when the footer cannot be read.
func (in *inspector) readGeneration(shard string, g shardmeta.Generation) generationInfo {
	path := filepath.Join(layout.GenDir(in.o.dataDir, in.o.table, shard), g.File)
	info := generationInfo{Number: g.Number, Epoch: g.Epoch, Rows: g.Rows, SeqFirst: g.SeqFirst, SeqLast: g.SeqLast, Bytes: g.Bytes, File: path}
	st, err := vfs.Default.Stat(path)
	if err != nil {
		info.Problem = describeReadError(err)
		return info
	}
	info.Bytes = st.Size()
	meta, err := generation.ReadMeta(vfs.Default, path)
	if err != nil {
		info.Problem = describeReadError(err)
		return info
	}
	info.Number, info.Epoch, info.Rows, info.SeqFirst, info.SeqLast = meta.Generation, meta.Epoch, meta.Rows, meta.SeqFirst, meta.SeqLast
	info.Created = time.Unix(0, meta.CreatedUnixNano).UTC().Format(time.RFC3339)
	if meta.Generation != g.Number || meta.Epoch != g.Epoch || meta.Rows != g.Rows || meta.SeqFirst != g.SeqFirst || meta.SeqLast != g.SeqLast {
		info.Problem = fmt.Sprintf("the manifest says generation %d, epoch %d, %d rows, seq %d-%d",
			g.Number, g.Epoch, g.Rows, g.SeqFirst, g.SeqLast)
	}
	return info
}

func describeReadError(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "missing: " + err.Error()
	}
	return err.Error()
}

func (in *inspector) printGenerations(infos []generationInfo) error {
	tw := tabwriter.NewWriter(in.out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "GENERATION\tEPOCH\tROWS\tSEQ\tBYTES\tCREATED\tFILE\tSTATUS")
	for _, g := range infos {
		status := "ok"
		if g.Problem != "" {
			status = g.Problem
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d-%d\t%d\t%s\t%s\t%s\n", g.Number, g.Epoch, g.Rows, g.SeqFirst, g.SeqLast,
			g.Bytes, orDash(g.Created), g.File, status)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// baseReport is the output of `inspect base`.
type baseReport struct {
	Dir     string `json:"dir"`
	Version uint64 `json:"version"`
	// IcebergMetadata is the base's Iceberg table metadata file (the
	// current snapshot is this version); empty before the first merge.
	IcebergMetadata string                               `json:"iceberg_metadata,omitempty"`
	Rows            int64                                `json:"rows"`
	Files           []shardmeta.BaseFile                 `json:"files"`
	Shards          map[string]shardmeta.ShardMergeState `json:"shards"`
	// ReadersManifest is the latest readers' manifest file, which external
	// readers open; empty before the first merge.
	ReadersManifest string `json:"readers_manifest,omitempty"`
}

func (in *inspector) base(ctx context.Context, _ []string) error {
	sch, err := tableSchema(ctx, in.cli, in.o.table, in.o.schema)
	if err != nil {
		return err
	}
	// With storage: the base is in the store (its data, metadata and
	// readers' manifests), wherever this runs.
	store, err := newStores(nil, newLogger(slog.LevelWarn)).open(ctx, in.o.storageKey, in.o.storage)
	if err != nil {
		return err
	}
	st, err := publish.LoadBase(ctx, publish.Options{Etcd: in.cli, Prefix: in.keys.Prefix, Table: in.o.table, Schema: sch,
		DataDir: in.o.dataDir, RequestTimeout: in.timeout, Store: store})
	if err != nil {
		return err
	}
	dir := layout.BaseDir(in.o.dataDir, in.o.table)
	if store != nil {
		dir = store.String() + "/" + layout.BaseRoot(in.o.table)
	}
	rep := baseReport{Dir: dir, Version: st.Version, IcebergMetadata: st.MetadataLocation, Files: st.Files, Shards: st.Shards}
	if rep.Files == nil {
		rep.Files = []shardmeta.BaseFile{}
	}
	for _, f := range st.Files {
		rep.Rows += f.Rows
	}
	m, ok, err := in.readersManifest(ctx, store, dir)
	if err != nil {
		return err
	}
	if ok {
		rep.ReadersManifest = dir + "/" + layout.ReaderManifestRel + publish.ReaderManifestName(m.Version)
	}
	if in.o.output == "json" {
		return in.json(rep)
	}
	return in.printBase(rep)
}

// readersManifest is the base's latest readers' manifest, from the store
// when there is one.
func (in *inspector) readersManifest(ctx context.Context, store objstore.Store, dir string) (publish.ReaderManifest, bool, error) {
	if store != nil {
		return publish.LatestStoreReaderManifest(ctx, store, in.o.table)
	}
	return publish.LatestReaderManifest(vfs.Default, dir)
}

func (in *inspector) printBase(rep baseReport) error {
	tw := tabwriter.NewWriter(in.out, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "base version\t%d\nrows\t%d\nfiles\t%d\ndir\t%s\nreaders' manifest\t%s\niceberg metadata\t%s\n",
		rep.Version, rep.Rows, len(rep.Files), rep.Dir, orDash(rep.ReadersManifest), orDash(rep.IcebergMetadata))
	fmt.Fprintln(tw, "\nFILE\tROWS\tBYTES")
	for _, f := range rep.Files {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", f.Path, f.Rows, f.Bytes)
	}
	fmt.Fprintln(tw, "\nSHARD\tWATERMARK\tOBSERVED_EPOCH\tCUTOFF")
	for _, name := range slices.Sorted(maps.Keys(rep.Shards)) {
		s := rep.Shards[name]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, s.Watermark, optional(s.ObservedEpoch), optional(s.Cutoff))
	}
	return tw.Flush()
}

func optional(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// etcdMember is one line of `inspect etcd`.
type etcdMember struct {
	Endpoint     string   `json:"endpoint"`
	DBBytes      int64    `json:"db_bytes"`
	DBInUseBytes int64    `json:"db_in_use_bytes"`
	QuotaBytes   int64    `json:"quota_bytes"`
	Revision     int64    `json:"revision"`
	Alarms       []string `json:"alarms"` // the cluster's raised alarms, e.g. NOSPACE
}

func (in *inspector) etcd(ctx context.Context, _ []string) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	alarms, err := in.cli.AlarmList(rctx)
	if err != nil {
		return fmt.Errorf("list etcd alarms: %w", err)
	}
	raised := []string{}
	for _, a := range alarms.Alarms {
		raised = append(raised, fmt.Sprintf("%s (member %x)", a.Alarm, a.MemberID))
	}
	members := []etcdMember{}
	for _, ep := range in.cli.Endpoints() {
		st, err := in.cli.Status(rctx, ep)
		if err != nil {
			return fmt.Errorf("status of etcd %s: %w", ep, err)
		}
		members = append(members, etcdMember{Endpoint: ep, DBBytes: st.DbSize, DBInUseBytes: st.DbSizeInUse,
			QuotaBytes: st.DbSizeQuota, Revision: st.Header.Revision, Alarms: raised})
	}
	if in.o.output == "json" {
		return in.json(members)
	}
	tw := tabwriter.NewWriter(in.out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tDB_BYTES\tIN_USE_BYTES\tQUOTA_BYTES\tUSED_OF_QUOTA\tREVISION\tALARMS")
	for _, m := range members {
		used := "-"
		if m.QuotaBytes > 0 {
			used = fmt.Sprintf("%.1f%%", 100*float64(m.DBBytes)/float64(m.QuotaBytes))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%s\n", m.Endpoint, m.DBBytes, m.DBInUseBytes, m.QuotaBytes, used,
			m.Revision, orDash(strings.Join(m.Alarms, ", ")))
	}
	return tw.Flush()
}
