package main

// writer schema apply and writer schema show: a table's schema versions in
// etcd (/<prefix>/<table>/schema, shardmeta.SchemaRecord). apply moves each
// table of the configuration that declares columns: to them, through the
// etcd of a running serve (or the configured cluster) only: like merge
// --every it never starts the embedded etcd, whose data dir lock would keep
// a serve from starting. Running writers pick the new version up
// themselves; this command only writes the record.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

func newSchema() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Apply the configured columns to a table's schema (a new version) and show its versions",
		Long: `A table's schema record in etcd has versions; every column has a stable Iceberg field id.
Allowed changes: add a nullable column (or a nullable struct field), widen int32 to int64 or
float32 to float64, make a column nullable, rename (renamed_from: OLD on the column), drop a
top-level column. Any other change is refused naming the column and the change.`,
	}
	cmd.AddCommand(newSchemaApply(), newSchemaShow())
	return cmd
}

// schemaApplyOptions are the flags of `writer schema apply`.
type schemaApplyOptions struct {
	storeOptions
	dryRun bool
	output string
}

func newSchemaApply() *cobra.Command {
	o := &schemaApplyOptions{}
	cmd := &cobra.Command{
		Use:   "apply --config FILE",
		Short: "Move each table of the configuration that declares columns: (or only --table) to them as a new schema version",
		Long: `apply reads the configuration's columns: (of each table of tables: that has them, or of
--table only) and moves the table's schema record to them: one new version per table, with the
changes it makes. It uses the etcd of the serve running on --data-dir (or --etcd-endpoints) and
never starts the embedded one. Every table is checked first: a refused change exits 1 naming the
column and the change, and nothing is written. --dry-run shows what it would do.

Running writers pick the new version up without a restart; a writer started later must be given
the new columns, or none (it then takes the table's).`,
		Example: `  writer schema apply --config writer.yaml --dry-run
  writer schema apply --config writer.yaml --table judgments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tables, err := o.prepare(cmd.Flags())
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), tables, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	addStoreFlags(f, &o.storeOptions)
	f.BoolVar(&o.dryRun, "dry-run", false, "show each table's version and changes; write nothing")
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	return cmd
}

// prepare resolves the configuration and returns the tables to apply:
// --table, or every table that declares columns.
func (o *schemaApplyOptions) prepare(f *pflag.FlagSet) ([]TableConfig, error) {
	if err := checkOutput(o.output, "table", "json"); err != nil {
		return nil, err
	}
	if o.configFile == "" {
		return nil, errors.New("--config FILE is required: the columns to apply are the configuration's columns:")
	}
	cfg, err := resolveConfig(f, o.configFile, Config{DataDir: o.dataDir, Table: o.table, Etcd: o.etcd})
	if err != nil {
		return nil, err
	}
	o.dataDir, o.etcd = cfg.DataDir, cfg.Etcd
	return columnTables(&cfg, f)
}

// columnTables are the tables of cfg whose columns apply sets: --table
// (which must declare columns), else every one that declares them.
func columnTables(cfg *Config, f *pflag.FlagSet) ([]TableConfig, error) {
	if f.Changed("table") {
		t, err := cfg.chosenTable(f)
		if err != nil {
			return nil, err
		}
		if t.Columns == nil {
			return nil, fmt.Errorf("--table %s: the configuration declares no columns: for it; nothing to apply", t.Name)
		}
		return []TableConfig{t}, nil
	}
	var out []TableConfig
	for _, t := range cfg.tables() {
		if t.Columns != nil {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the configuration declares no columns: (at the top level or in tables:); nothing to apply")
	}
	return out, nil
}

// schemaApplied is what apply did (or, dry, would do) to one table.
type schemaApplied struct {
	Table   string   `json:"table"`
	Before  int      `json:"version_before"` // 0: the table had no schema record
	After   int      `json:"version_after"`
	Changes []string `json:"changes"`
	DryRun  bool     `json:"dry_run"`
}

func (o *schemaApplyOptions) run(ctx context.Context, tables []TableConfig, out io.Writer) error {
	meta, err := openMetadata(ctx, o.dataDir, o.etcd, dirUse{command: "schema apply", follow: true}, newLogger(slog.LevelWarn))
	if err != nil {
		return fmt.Errorf("writer schema apply uses the etcd of a serve running on data dir %s (or --etcd-endpoints) and never starts the embedded one: %w",
			o.dataDir, err)
	}
	defer meta.Close()
	// Every table first dry: one refused change writes nothing anywhere.
	planned, err := applyTables(ctx, meta, tables, true)
	if err != nil || o.dryRun {
		return errors.Join(err, o.report(out, planned))
	}
	done, err := applyTables(ctx, meta, tables, false)
	return errors.Join(err, o.report(out, done))
}

// applyTables applies each table's columns; with dryRun it only computes.
// It stops at the first error unless dry, which checks every table.
func applyTables(ctx context.Context, meta *metadata, tables []TableConfig, dryRun bool) ([]schemaApplied, error) {
	var res []schemaApplied
	var errs []error
	for _, t := range tables {
		a, err := applyTable(ctx, meta, t, dryRun)
		if err != nil {
			errs = append(errs, err) // naming the table
			if !dryRun {
				break
			}
			continue
		}
		res = append(res, a)
	}
	if len(errs) > 0 && dryRun {
		errs = append(errs, errors.New("nothing was written"))
	}
	return res, errors.Join(errs...)
}

func applyTable(ctx context.Context, meta *metadata, t TableConfig, dryRun bool) (schemaApplied, error) {
	keys := shardmeta.Keys{Prefix: metaPrefix, Table: t.Name}
	lctx, cancel := context.WithTimeout(ctx, meta.requestTimeout)
	before, err := shardmeta.LoadSchema(lctx, meta.client, keys)
	cancel()
	if err != nil {
		return schemaApplied{}, fmt.Errorf("table %s: read its schema record: %w", t.Name, err)
	}
	rec, changes, err := shardmeta.ApplySchema(ctx, meta.client, keys, t.Columns, dryRun, meta.requestTimeout)
	if err != nil {
		return schemaApplied{}, err
	}
	a := schemaApplied{Table: t.Name, After: rec.Version, Changes: changes, DryRun: dryRun}
	switch {
	case before == nil:
		a.Before = 0
	case len(changes) > 0:
		a.Before = rec.Version - 1 // the record it replaced (compare-and-swap)
	default:
		a.Before = rec.Version
	}
	if a.Changes == nil {
		a.Changes = []string{}
	}
	return a, nil
}

func (o *schemaApplyOptions) report(out io.Writer, res []schemaApplied) error {
	if o.output == "json" {
		enc := json.NewEncoder(out)
		for _, a := range res {
			if err := enc.Encode(a); err != nil {
				return err
			}
		}
		return nil
	}
	var b strings.Builder
	for _, a := range res {
		b.WriteString(a.line())
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// line is how apply reports a table: its versions, then a change a line.
func (a schemaApplied) line() string {
	var b strings.Builder
	dry := ""
	if a.DryRun {
		dry = " (dry run: nothing written)"
	}
	switch {
	case a.Before == 0:
		fmt.Fprintf(&b, "table %s: no schema record → version %d%s\n", a.Table, a.After, dry)
	case len(a.Changes) == 0:
		fmt.Fprintf(&b, "table %s: schema version %d: no change%s\n", a.Table, a.After, dry)
	default:
		fmt.Fprintf(&b, "table %s: schema version %d → %d%s\n", a.Table, a.Before, a.After, dry)
	}
	for _, c := range a.Changes {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	return b.String()
}

// schemaShowOptions are the flags of `writer schema show`.
type schemaShowOptions struct {
	storeOptions
	version int
	output  string
}

func newSchemaShow() *cobra.Command {
	o := &schemaShowOptions{}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print a table's schema version: its number, changes and columns (with their field ids)",
		Long: `show prints the current schema version of the table (--table, or each table of the
configuration's tables:), or version --version N: its changes and columns as YAML, each column's
Iceberg field id as a comment (-o json: the whole record). Like inspect it reads the etcd of a
serve running on --data-dir, or --etcd-endpoints, else starts the data dir's embedded etcd.`,
		Example: `  writer schema show --data-dir ./data
  writer schema show --config writer.yaml --table judgments --version 1 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tables, err := o.prepare(cmd.Flags())
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), tables, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	addStoreFlags(f, &o.storeOptions)
	f.IntVar(&o.version, "version", 0, "the schema version to show (0: the current one)")
	f.StringVarP(&o.output, "output", "o", "yaml", "output: yaml or json")
	return cmd
}

func (o *schemaShowOptions) prepare(f *pflag.FlagSet) ([]string, error) {
	if err := checkOutput(o.output, "yaml", "json"); err != nil {
		return nil, err
	}
	if o.version < 0 {
		return nil, fmt.Errorf("--version %d: want a version number (1, 2, …), or 0 for the current one", o.version)
	}
	if err := o.resolve(f); err != nil {
		return nil, err
	}
	if len(o.tables) == 0 {
		return []string{o.table}, nil
	}
	if o.version != 0 {
		return nil, fmt.Errorf("--version %d: give --table too, the configuration has %d tables", o.version, len(o.tables))
	}
	names := make([]string, len(o.tables))
	for i, t := range o.tables {
		names[i] = t.Name
	}
	return names, nil
}

func (o *schemaShowOptions) run(ctx context.Context, tables []string, out io.Writer) error {
	meta, err := o.openMeta(ctx, "schema show", newLogger(slog.LevelWarn))
	if err != nil {
		return err
	}
	defer meta.Close()
	for i, table := range tables {
		rec, err := loadSchemaVersion(ctx, meta, table, o.version)
		if err != nil {
			return err
		}
		if o.output == "json" {
			err = json.NewEncoder(out).Encode(schemaShown{Table: table, SchemaRecord: rec})
		} else {
			if i > 0 {
				io.WriteString(out, "---\n")
			}
			err = writeSchemaYAML(out, table, rec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// loadSchemaVersion reads version (0: the current) of table's schema.
func loadSchemaVersion(ctx context.Context, meta *metadata, table string, version int) (*shardmeta.SchemaRecord, error) {
	keys := shardmeta.Keys{Prefix: metaPrefix, Table: table}
	ctx, cancel := context.WithTimeout(ctx, meta.requestTimeout)
	defer cancel()
	cur, err := shardmeta.LoadSchema(ctx, meta.client, keys)
	switch {
	case err != nil:
		return nil, fmt.Errorf("table %s: read its schema record: %w", table, err)
	case cur == nil:
		return nil, fmt.Errorf("table %s has no schema record yet: its first serve or merge records its columns (the rollout schema when it is given none)", table)
	case version == 0 || version == cur.Version:
		return cur, nil
	case version > cur.Version:
		return nil, fmt.Errorf("--version %d: table %s is at schema version %d", version, table, cur.Version)
	}
	rec, err := shardmeta.LoadSchemaVersion(ctx, meta.client, keys, version)
	switch {
	case err != nil:
		return nil, fmt.Errorf("table %s: schema version %d: %w", table, version, err)
	case rec == nil:
		return nil, fmt.Errorf("table %s: schema version %d is not kept (the current one is %d)", table, version, cur.Version)
	}
	return rec, nil
}

// schemaShown is the JSON of show: the record and its table.
type schemaShown struct {
	Table string `json:"table"`
	*shardmeta.SchemaRecord
}

// writeSchemaYAML prints a schema version as YAML: the columns as the
// configuration writes them, so that the block can be pasted as columns:,
// and each column's field ids as a comment beside its name.
func writeSchemaYAML(w io.Writer, table string, rec *shardmeta.SchemaRecord) error {
	changes := rec.Changes
	if changes == nil {
		changes = []string{}
	}
	var doc yaml.Node
	if err := doc.Encode(struct {
		Table       string          `yaml:"table"`
		Version     int             `yaml:"version"`
		Changes     []string        `yaml:"changes"`
		NextFieldID int             `yaml:"next_field_id"`
		Retired     []string        `yaml:"retired,omitempty"`
		Columns     []schema.Column `yaml:"columns"`
	}{table, rec.Version, changes, rec.NextFieldID, rec.Retired, rec.Columns}); err != nil {
		return err
	}
	if cols := mappingValue(&doc, "columns"); cols != nil && cols.Kind == yaml.SequenceNode {
		for i, n := range cols.Content {
			if i < len(rec.Columns) {
				commentIDs(n, &rec.Columns[i])
			}
		}
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	return errors.Join(enc.Encode(&doc), enc.Close())
}

// commentIDs puts the field ids of c (and of its nested parts, by path)
// as a comment beside the name of its mapping n.
func commentIDs(n *yaml.Node, c *schema.Column) {
	name := mappingValue(n, "name")
	if name == nil {
		return
	}
	var parts []string
	if c.ID != 0 {
		parts = append(parts, fmt.Sprintf("field id %d", c.ID))
	}
	var nested []string
	nestedIDs(c, c.Name, &nested)
	if len(nested) > 0 {
		parts = append(parts, strings.Join(nested, ", "))
	}
	if len(c.Aliases) > 0 {
		parts = append(parts, "formerly "+strings.Join(c.Aliases, ", "))
	}
	if len(parts) > 0 {
		name.LineComment = "# " + strings.Join(parts, "; ")
	}
}

// nestedIDs lists the ids of c's list element and struct fields as
// "path id", the element as path[].
func nestedIDs(c *schema.Column, path string, out *[]string) {
	if c.Element != nil {
		p := path + "[]"
		if c.Element.ID != 0 {
			*out = append(*out, fmt.Sprintf("%s %d", p, c.Element.ID))
		}
		nestedIDs(c.Element, p, out)
	}
	for i := range c.Fields {
		f := &c.Fields[i]
		p := path + "." + f.Name
		if f.ID != 0 {
			*out = append(*out, fmt.Sprintf("%s %d", p, f.ID))
		}
		nestedIDs(f, p, out)
	}
}

// mappingValue is the value of key in the mapping n (or in the document
// n holds), nil when it has none.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
