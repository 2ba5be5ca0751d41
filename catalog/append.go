package catalog

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// File is an existing Parquet base file to register.
type File struct {
	// Path is the file's absolute location.
	Path string
	// Rows and Bytes are its record count and size; both positive.
	Rows, Bytes int64
	// SeqFirst and SeqLast, when not both zero, are the range of the
	// file's _seq values; they become its _seq lower and upper bounds, so
	// a reader (and the ID check) can skip the file by WAL position from
	// the manifest alone.
	SeqFirst, SeqLast uint64
}

// Provenance is what one snapshot published from one shard: generations
// First..Last, written by the writer epochs Epochs.
type Provenance struct {
	Shard       string
	First, Last uint64
	Epochs      []uint64
}

// Summary properties of a base snapshot, one pair per shard:
//
//	rollwal.shard.<shard>.generations = "<first>-<last>"
//	rollwal.shard.<shard>.epochs      = "<e1>,<e2>,..."   (ascending)
const (
	summaryPrefix      = "rollwal.shard."
	summaryGenerations = ".generations"
	summaryEpochs      = ".epochs"
)

// Summary returns the snapshot summary properties of parts.
func Summary(parts []Provenance) iceberg.Properties {
	props := iceberg.Properties{}
	for _, p := range parts {
		props[summaryPrefix+p.Shard+summaryGenerations] = fmt.Sprintf("%d-%d", p.First, p.Last)
		epochs := slices.Sorted(slices.Values(p.Epochs))
		strs := make([]string, len(epochs))
		for i, e := range epochs {
			strs[i] = strconv.FormatUint(e, 10)
		}
		props[summaryPrefix+p.Shard+summaryEpochs] = strings.Join(strs, ",")
	}
	return props
}

// ParseSummary reads back the provenance of a snapshot summary, ordered
// by shard.
func ParseSummary(props map[string]string) ([]Provenance, error) {
	var out []Provenance
	for k, v := range props {
		rest, ok1 := strings.CutPrefix(k, summaryPrefix)
		shard, ok2 := strings.CutSuffix(rest, summaryGenerations)
		if !ok1 || !ok2 {
			continue
		}
		p := Provenance{Shard: shard}
		if _, err := fmt.Sscanf(v, "%d-%d", &p.First, &p.Last); err != nil || p.First > p.Last {
			return nil, fmt.Errorf("%w: summary %s=%q", ErrCorrupt, k, v)
		}
		for _, s := range strings.Split(props[summaryPrefix+shard+summaryEpochs], ",") {
			e, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: summary %s%s%s: %v", ErrCorrupt, summaryPrefix, shard, summaryEpochs, err)
			}
			p.Epochs = append(p.Epochs, e)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Provenance) int { return strings.Compare(a.Shard, b.Shard) })
	return out, nil
}

// PrepareAppend prepares an append snapshot that registers existing files
// (their content is not read): it writes a manifest, a manifest list and
// the next metadata file, and returns the catalog swap still to be done.
// summary becomes the snapshot's summary properties (see Summary).
func (c *Etcd) PrepareAppend(ctx context.Context, ident table.Identifier, files []File, summary iceberg.Properties) (*PreparedCommit, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("catalog: table %v: no files to append", ident)
	}
	return c.PrepareBaseCommit(ctx, ident, files, summary, nil)
}

// PrepareBaseCommit prepares one commit of a base table: the table
// properties props are set and, when there are files, an append snapshot
// registers them with summary. Iceberg has no empty append, so a commit
// without files (every row it would have published was a duplicate)
// changes only the properties; that keeps one table commit per base
// commit.
func (c *Etcd) PrepareBaseCommit(ctx context.Context, ident table.Identifier, files []File, summary, props iceberg.Properties) (*PreparedCommit, error) {
	cur, err := c.load(ctx, ident)
	if err != nil {
		return nil, err
	}
	txn := cur.tbl.NewTransaction()
	if len(props) > 0 {
		if err := txn.SetProperties(props); err != nil {
			return nil, fmt.Errorf("catalog: table %s: properties: %w", cur.name, err)
		}
	}
	if len(files) > 0 {
		dfs, err := dataFiles(cur.tbl.Metadata(), files)
		if err != nil {
			return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
		}
		// No duplicate check: it reads every manifest of the table, and the
		// merge's own guard (watermarks, attempt-unique names) already makes
		// registering a file twice impossible.
		if err := txn.AddDataFiles(ctx, dfs, summary, table.WithoutDuplicateCheck()); err != nil {
			return nil, fmt.Errorf("catalog: table %s: append: %w", cur.name, err)
		}
	}
	tc, err := txn.TableCommit()
	if err != nil {
		return nil, err
	}
	return c.prepare(cur, tc.Requirements, tc.Updates)
}

func dataFiles(meta table.Metadata, files []File) ([]iceberg.DataFile, error) {
	spec := meta.PartitionSpec()
	out := make([]iceberg.DataFile, 0, len(files))
	for _, f := range files {
		if !filepath.IsAbs(f.Path) || f.Rows < 1 || f.Bytes < 1 {
			return nil, fmt.Errorf("file %q: want an absolute path and positive rows (%d) and bytes (%d)", f.Path, f.Rows, f.Bytes)
		}
		b, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, f.Path, iceberg.ParquetFile, nil, nil, nil, f.Rows, f.Bytes)
		if err != nil {
			return nil, err
		}
		if lo, hi, ok := seqBounds(f); ok {
			b.LowerBoundValues(map[int][]byte{SeqFieldID: lo}).UpperBoundValues(map[int][]byte{SeqFieldID: hi})
		}
		out = append(out, b.Build())
	}
	return out, nil
}

// seqBounds encodes a file's _seq range as Iceberg long bounds (8 bytes,
// little endian).
func seqBounds(f File) (lo, hi []byte, ok bool) {
	if f.SeqFirst == 0 && f.SeqLast == 0 || f.SeqFirst > f.SeqLast || f.SeqLast > math.MaxInt64 {
		return nil, nil, false
	}
	return binary.LittleEndian.AppendUint64(nil, f.SeqFirst), binary.LittleEndian.AppendUint64(nil, f.SeqLast), true
}
