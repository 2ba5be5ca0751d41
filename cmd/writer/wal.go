package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/dirlock"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
	"github.com/rollwal/rollwal/wal"
)

type walOptions struct {
	storeOptions
	shard    string
	output   string
	logLevel string
	rows     bool // dump: print the decoded rows
	yes      bool // repair: do it

	ctx     context.Context
	errOut  io.Writer   // where dump -o json puts its note
	schemas *walSchemas // the schema versions records are decoded with
}

// newWAL groups the commands over one shard's WAL directory. They read its
// files (repair is the one that writes) and decode every record with its
// schema version, read from the etcd of a serve running on the data dir
// or --etcd-endpoints; they never start the embedded etcd. Without one,
// records of a version after 1 are checked by their CRC only (see
// walschemas.go).
func newWAL() *cobra.Command {
	o := &walOptions{}
	cmd := &cobra.Command{
		Use:   "wal",
		Short: "Verify, dump or repair a shard's write-ahead log (stop the shard's writer first; schema versions from a running serve's etcd or --etcd-endpoints)",
	}
	pf := cmd.PersistentFlags()
	addStoreFlags(pf, &o.storeOptions)
	pf.StringVar(&o.shard, "shard", "", "shard whose WAL to read (required)")
	pf.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	pf.StringVar(&o.logLevel, "log-level", defaultConfig().LogLevel, "log level of the progress lines on stderr")
	verify := o.command("verify", "Check every segment; exit non-zero at the first damage, naming its segment and offset", o.verify)
	dump := o.command("dump", "Print every record (position, epoch, rows, bytes); -o json prints one object a line", o.dump)
	dump.Flags().BoolVar(&o.rows, "rows", false, "print each record's rows, decoded with its schema version (offline: version 1 only)")
	repair := o.command("repair", "Truncate a torn tail at the end of an epoch's last segment (shows what it cuts; needs --yes)", o.repair)
	repair.Flags().BoolVar(&o.yes, "yes", false, "truncate; without it repair only shows what it would cut")
	cmd.AddCommand(verify, dump, repair)
	return cmd
}

func (o *walOptions) command(use, short string, fn func(out io.Writer, log *slog.Logger) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.prepare(cmd); err != nil {
				return err
			}
			var level slog.Level
			_ = level.UnmarshalText([]byte(o.logLevel)) // resolve validated it
			log := newLogger(level)
			o.ctx, o.errOut = cmd.Context(), cmd.ErrOrStderr()
			s, err := o.openWALSchemas(o.ctx, "wal "+use, log)
			if err != nil {
				return err
			}
			o.schemas = s
			return errors.Join(fn(cmd.OutOrStdout(), log), s.Close())
		}}
}

func (o *walOptions) prepare(cmd *cobra.Command) error {
	if err := checkOutput(o.output, "table", "json"); err != nil {
		return err
	}
	if o.shard == "" {
		return errors.New("--shard: required")
	}
	if err := shardmeta.ValidateShard(o.shard); err != nil {
		return fmt.Errorf("--shard: %w", err)
	}
	cfg, err := resolveConfig(cmd.Flags(), o.configFile, Config{DataDir: o.dataDir, Table: o.table, LogLevel: o.logLevel, Etcd: o.etcd})
	if err != nil {
		return err
	}
	o.etcd = cfg.Etcd
	t, err := cfg.chosenTable(cmd.Flags())
	if err != nil {
		return err
	}
	o.dataDir, o.logLevel, o.table, o.schema = cfg.DataDir, cfg.LogLevel, t.Name, mustSchema(t.Columns)
	if engine.WALBackend(cfg.WAL.Backend) == engine.WALObject {
		// Not yet: these tools read segment files.
		return fmt.Errorf("shard %s: the configuration puts the WAL in the object store (wal.backend: object, objects under %s); writer wal reads a local WAL's segments only",
			o.shard, strings.TrimSuffix(cfg.storageFor(t).URL, "/")+"/"+layout.WALPrefix(t.Name, o.shard))
	}
	if _, err := vfs.Default.Stat(o.dir()); err != nil {
		return fmt.Errorf("shard %s has no WAL: %w", o.shard, err)
	}
	return nil
}

// dir is the shard's WAL directory, as the engine lays it out.
func (o *walOptions) dir() string {
	return layout.WALDir(o.dataDir, o.table, o.shard)
}

// walRecord is a record of the scan: decoded, unless its schema version
// is unknown offline (batch and schema nil).
type walRecord struct {
	wal.Record
	meta   engine.RecordMeta
	batch  *schema.Batch
	schema *schema.Schema // of the record's version
}

// version is the record's schema version (kind 0 says none: 1).
func (r walRecord) version() int { return max(r.meta.SchemaVersion, 1) }

// scan reads the whole WAL, decoding every payload with its schema
// version: bytes that pass their CRC but do not decode would fail the
// engine's replay, so they are corruption too. A record whose version is
// unknown offline passed its CRC and frame: it is counted, not damage.
func (o *walOptions) scan(log *slog.Logger, each func(walRecord) error) (wal.ScanReport, error) {
	return wal.Scan(o.scanOptions(log, each))
}

// scanOptions are scan's: every payload decoded with its schema version,
// each record handed to each (if set).
func (o *walOptions) scanOptions(log *slog.Logger, each func(walRecord) error) wal.ScanOptions {
	lookup := o.schemas.lookup(o.ctx)
	return wal.ScanOptions{Dir: o.dir(), Payloads: true, Segment: scanProgress(log, o.dir()),
		Record: func(r wal.Record) error {
			rec := walRecord{Record: r}
			var err error
			rec.meta, rec.batch, err = engine.DecodeRecord(func(v int) (*schema.Schema, error) {
				var err error
				rec.schema, err = lookup(v)
				return rec.schema, err
			}, r.Header, r.Payload)
			switch {
			case o.schemas.failed != nil:
				return o.schemas.failed
			case errors.Is(err, errNotDecoded):
				o.schemas.skipped[rec.version()]++
				rec.schema = nil
			case err != nil:
				hint := ""
				if rec.schema != nil { // the rows, not the meta, failed
					hint = o.schemas.hint(rec.version())
				}
				return &wal.CorruptionError{Segment: r.Segment, Offset: r.Offset,
					Err: fmt.Errorf("payload is not a batch of the table's schema version %d: %w%s", rec.version(), err, hint)}
			}
			if each == nil {
				return nil
			}
			return each(rec)
		}}
}

// printNote prints the note on records not decoded, if any: on out, or
// beside JSON lines on errOut.
func (o *walOptions) printNote(out io.Writer) error {
	note := o.schemas.note()
	if note == "" {
		return nil
	}
	if o.output == "json" {
		out = o.errOut
	}
	_, err := fmt.Fprintf(out, "note: %s\n", note)
	return err
}

// scanProgress reports a scan segment by segment: a log line each, and a
// bar over the bytes when stderr is a terminal.
func scanProgress(log *slog.Logger, dir string) func(n, total int, s wal.SegmentInfo) {
	var bar *progressbar.ProgressBar
	if term.IsTerminal(int(os.Stderr.Fd())) {
		bar = progressbar.NewOptions64(dirBytes(dir), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionShowBytes(true), progressbar.OptionSetDescription("wal"), progressbar.OptionClearOnFinish())
	}
	return func(n, total int, s wal.SegmentInfo) {
		log.Info("wal: segment read", "progress", fmt.Sprintf("%d/%d", n, total), "segment", s.Name,
			"bytes", s.Size, "records", s.Records)
		if bar != nil {
			_ = bar.Add64(s.Size)
		}
	}
}

// dirBytes sums the sizes of a directory's files, the bar's total.
func dirBytes(dir string) int64 {
	names, _ := vfs.Default.List(dir)
	var n int64
	for _, name := range names {
		if st, err := vfs.Default.Stat(filepath.Join(dir, name)); err == nil {
			n += st.Size()
		}
	}
	return n
}

// verifyReport is `wal verify -o json`.
type verifyReport struct {
	Dir        string          `json:"dir"`
	OK         bool            `json:"ok"`
	Records    int             `json:"records"`
	Bytes      int64           `json:"bytes"`
	Segments   []segmentReport `json:"segments"`
	Tails      []tailReport    `json:"tails"`
	Corruption *damageReport   `json:"corruption,omitempty"`
	// Undecoded are the records checked by CRC only, by schema version:
	// their version is unknown without etcd.
	Undecoded []undecodedReport `json:"undecoded,omitempty"`
}

type segmentReport struct {
	Name     string `json:"name"`
	Epoch    uint64 `json:"epoch"`
	Records  int    `json:"records"`
	FirstPos uint64 `json:"first_pos"`
	LastPos  uint64 `json:"last_pos"`
	Bytes    int64  `json:"bytes"`
}

type tailReport struct {
	Segment string `json:"segment"`
	Offset  int64  `json:"offset"`
	Bytes   int64  `json:"bytes"`
	Hole    bool   `json:"hole"`
	Reason  string `json:"reason"`
}

type damageReport struct {
	Segment string `json:"segment"`
	Offset  int64  `json:"offset"`
	Error   string `json:"error"`
}

func (o *walOptions) verify(out io.Writer, log *slog.Logger) error {
	o.warnIfWriting(log)
	rep, scanErr := o.scan(log, nil)
	var ce *wal.CorruptionError
	if scanErr != nil && !errors.As(scanErr, &ce) {
		return scanErr
	}
	vr := verifyReport{Dir: o.dir(), Records: rep.Records, Bytes: rep.Bytes, Segments: []segmentReport{}, Tails: []tailReport{}}
	for _, s := range rep.Segments {
		vr.Segments = append(vr.Segments, segmentReport{s.Name, s.Epoch, s.Records, s.FirstPos, s.LastPos, s.End})
	}
	for _, t := range rep.Tails {
		vr.Tails = append(vr.Tails, tailReport{t.Segment, t.Offset, t.Bytes, t.Hole, t.Reason.Error()})
	}
	if ce != nil {
		vr.Corruption = &damageReport{ce.Segment, ce.Offset, ce.Error()}
	}
	vr.OK = ce == nil && len(rep.Tails) == 0
	vr.Undecoded = o.schemas.undecoded()
	var err error
	if o.output == "json" {
		err = json.NewEncoder(out).Encode(vr)
	} else {
		err = errors.Join(printVerify(out, vr), o.printNote(out))
	}
	return errors.Join(err, o.verdict(rep, ce))
}

// verdict is verify's error: the first damage, and what repair can do.
func (o *walOptions) verdict(rep wal.ScanReport, ce *wal.CorruptionError) error {
	if ce != nil {
		return fmt.Errorf("shard %s: %w (damage before the end of an epoch's last segment: `wal repair` will not cut it)", o.shard, ce)
	}
	if len(rep.Tails) == 0 {
		return nil
	}
	t := rep.Tails[0]
	return fmt.Errorf("shard %s: %s at offset %d of segment %s (%d bytes after the last whole record: %v); %d damaged tail(s) in all: `writer wal repair --shard %s --yes` cuts them",
		o.shard, tailKind(t), t.Offset, t.Segment, t.Bytes, t.Reason, len(rep.Tails), o.shard)
}

func tailKind(t wal.Tail) string {
	if t.Hole {
		return "a hole of zeros with records after it"
	}
	return "a torn tail"
}

func printVerify(out io.Writer, vr verifyReport) error {
	status := map[string]string{}
	for _, t := range vr.Tails {
		status[t.Segment] = fmt.Sprintf("damaged tail at offset %d: %d bytes", t.Offset, t.Bytes)
	}
	if vr.Corruption != nil {
		status[vr.Corruption.Segment] = fmt.Sprintf("CORRUPT at offset %d", vr.Corruption.Offset)
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SEGMENT\tEPOCH\tRECORDS\tPOSITIONS\tBYTES\tSTATUS")
	for _, s := range vr.Segments {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\n", s.Name, s.Epoch, s.Records, positions(s.FirstPos, s.LastPos),
			s.Bytes, orDefault(status[s.Name], "ok"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "ok"
	if !vr.OK {
		verdict = "DAMAGED"
	}
	_, err := fmt.Fprintf(out, "%s: %d segments, %d records, %d bytes of records: %s\n",
		vr.Dir, len(vr.Segments), vr.Records, vr.Bytes, verdict)
	return err
}

func positions(first, last uint64) string {
	if first == 0 {
		return "-"
	}
	return fmt.Sprintf("%d-%d", first, last)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// dumpRecord is one line of `wal dump -o json`.
type dumpRecord struct {
	Segment     string `json:"segment"`
	Offset      int64  `json:"offset"`
	Epoch       uint64 `json:"epoch"`
	Generation  uint64 `json:"generation"`
	FirstPos    uint64 `json:"first_pos"`
	LastPos     uint64 `json:"last_pos"`
	Rows        uint32 `json:"rows"`
	Bytes       int64  `json:"bytes"`
	RawBytes    int64  `json:"raw_bytes"`
	Compression string `json:"compression"`
	// Producer, Seq and Count are the producer session a record carries;
	// Source and SourceOffset its snapshot source.
	Producer     string  `json:"producer,omitempty"`
	Seq          *uint64 `json:"seq,omitempty"`
	Count        *uint64 `json:"count,omitempty"`
	Source       string  `json:"source,omitempty"`
	SourceOffset *int64  `json:"source_offset,omitempty"`
	// SchemaVersion is the version the rows are in; NotDecoded says the
	// rows were not decoded (the version is unknown offline): Rows is
	// then the positions the header covers.
	SchemaVersion int              `json:"schema_version"`
	NotDecoded    bool             `json:"not_decoded,omitempty"`
	Data          []map[string]any `json:"data,omitempty"`
}

// withMeta adds what a record carries besides rows.
func (d *dumpRecord) withMeta(m engine.RecordMeta) {
	if m.Producer.ID != "" {
		d.Producer, d.Seq, d.Count = m.Producer.ID, &m.Producer.Seq, &m.Count
	}
	if m.Source.Name != "" {
		d.Source, d.SourceOffset = m.Source.Name, &m.Source.Offset
	}
}

// metaText is a record's meta for the table output; "-" when none.
func (d dumpRecord) metaText() string {
	var parts []string
	if d.Producer != "" {
		parts = append(parts, fmt.Sprintf("producer=%s seq=%d count=%d", d.Producer, *d.Seq, *d.Count))
	}
	if d.Source != "" {
		parts = append(parts, fmt.Sprintf("source=%s offset=%d", d.Source, *d.SourceOffset))
	}
	if d.SchemaVersion > 1 {
		parts = append(parts, fmt.Sprintf("schema=v%d", d.SchemaVersion))
	}
	if d.NotDecoded {
		parts = append(parts, "(not decoded: CRC checked only)")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func (o *walOptions) dump(out io.Writer, log *slog.Logger) error {
	o.warnIfWriting(log)
	var tw *tabwriter.Writer
	if o.output == "table" && !o.rows {
		tw = tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "SEGMENT\tOFFSET\tEPOCH\tGENERATION\tPOSITIONS\tROWS\tBYTES\tRAW_BYTES\tCODEC\tMETA")
	}
	rep, err := o.scan(log, func(r walRecord) error {
		d := dumpRecord{Segment: r.Segment, Offset: r.Offset, Epoch: r.Epoch, Generation: r.Generation,
			FirstPos: r.FirstPos, LastPos: r.FirstPos + uint64(r.Count) - 1, Rows: r.Count,
			Bytes: r.Size, RawBytes: r.RawSize, Compression: r.Compression.String(),
			SchemaVersion: r.version(), NotDecoded: r.batch == nil}
		d.withMeta(r.meta)
		if r.batch != nil {
			d.Rows = uint32(r.batch.Len())
		}
		if o.rows && r.batch != nil {
			d.Data = rowsOf(r.schema, r.batch, r.Record)
		}
		return o.printRecord(out, tw, d)
	})
	if tw != nil {
		err = errors.Join(err, tw.Flush())
	}
	if err == nil {
		err = o.printNote(out)
	}
	for _, t := range rep.Tails {
		log.Warn("wal: damaged tail not dumped", "segment", t.Segment, "offset", t.Offset, "bytes", t.Bytes, "reason", t.Reason)
	}
	if err != nil {
		return fmt.Errorf("shard %s: %w", o.shard, err)
	}
	return nil
}

func (o *walOptions) printRecord(out io.Writer, tw *tabwriter.Writer, d dumpRecord) error {
	switch {
	case o.output == "json":
		return json.NewEncoder(out).Encode(d)
	case tw != nil:
		_, err := fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", d.Segment, d.Offset, d.Epoch, d.Generation,
			positions(d.FirstPos, d.LastPos), d.Rows, d.Bytes, d.RawBytes, d.Compression, d.metaText())
		return err
	}
	fmt.Fprintf(out, "# %s offset %d: epoch %d, generation %d, positions %d-%d, %d rows, %d bytes (%s), %s\n",
		d.Segment, d.Offset, d.Epoch, d.Generation, d.FirstPos, d.LastPos, d.Rows, d.Bytes, d.Compression, d.metaText())
	enc := json.NewEncoder(out)
	for _, row := range d.Data {
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return nil
}

// rowsOf returns a record's rows with their system columns, as a
// generation file would hold them.
func rowsOf(sch *schema.Schema, b *schema.Batch, r wal.Record) []map[string]any {
	rows := make([]map[string]any, b.Len())
	for i := range rows {
		row := map[string]any{"id": b.IDs[i], "_seq": r.FirstPos + uint64(i), "_epoch": r.Epoch}
		for c, col := range sch.Columns {
			row[col.Name] = b.Value(c, i)
		}
		rows[i] = row
	}
	return rows
}

func (o *walOptions) repair(out io.Writer, log *slog.Logger) error {
	if o.yes {
		// Hold the data dir's lock from the scan to the cut: refused while
		// any writer holds it (embedded or external etcd alike), and no
		// writer can start and append meanwhile.
		lock, err := dirlock.Acquire(o.dataDir, "wal repair")
		if err != nil {
			return fmt.Errorf("refusing to repair shard %s: %w", o.shard, err)
		}
		defer lock.Release()
	} else {
		o.warnIfWriting(log)
	}
	rep, err := wal.Repair(o.scanOptions(log, nil), o.yes)
	switch {
	case errors.Is(err, wal.ErrRepairRefused):
		return fmt.Errorf("refusing to repair shard %s: %w", o.shard, err)
	case err != nil:
		return fmt.Errorf("repair shard %s: %w", o.shard, err)
	case len(rep.Tails) == 0:
		_, err := fmt.Fprintf(out, "nothing to repair: %d segments, %d records, no damaged tail\n", len(rep.Segments), rep.Records)
		return errors.Join(err, o.printNote(out))
	}
	for _, t := range rep.Tails {
		fmt.Fprintf(out, "cut %s at offset %d: %d bytes after the last whole record (%v)\n",
			filepath.Join(o.dir(), t.Segment), t.Offset, t.Bytes, t.Reason)
	}
	if !o.yes {
		return errors.Join(o.printNote(out), errors.New("nothing changed: run again with --yes to truncate"))
	}
	for _, t := range rep.Tails {
		log.Warn("wal: repair truncated a torn tail", "shard", o.shard, "segment", t.Segment, "offset", t.Offset,
			"dropped_bytes", t.Bytes, "reason", t.Reason)
		fmt.Fprintf(out, "truncated %s to %d bytes\n", t.Segment, t.Offset)
	}
	return o.printNote(out)
}

// warnIfWriting says so when a writer holds the data dir: verify and dump
// read regardless, but a tail being appended reads as torn meanwhile.
func (o *walOptions) warnIfWriting(log *slog.Logger) {
	if h, held, err := dirlock.Holding(o.dataDir); err == nil && held {
		log.Warn("wal: a writer holds the data directory; its shards may be appending while this reads (a tail being written reads as torn)",
			"holder", h.String(), "lock", dirlock.Path(o.dataDir))
	}
}
