package generation

import (
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
)

// readData decodes every row group of a validated file into one Batch.
func (g *openFile) readData() (Data, error) {
	var d Data
	if err := safely(func() (err error) { d, err = g.decode(); return err }); err != nil {
		return Data{}, g.r.classify(g.path, "decoding rows", err)
	}
	return d, nil
}

func (g *openFile) decode() (Data, error) {
	n := int(g.meta.Rows)
	d := Data{Rows: g.schema.NewBatch(n), Seq: make([]uint64, 0, n), Epoch: make([]uint64, 0, n)}
	sinks := g.sinks(&d)
	buf := make([]parquet.Value, maxChunkValues)
	for r, rg := range g.pf.RowGroups() {
		chunks := rg.ColumnChunks()
		if len(chunks) != len(sinks) {
			return Data{}, fmt.Errorf("row group %d has %d columns, want %d", r, len(chunks), len(sinks))
		}
		for c, chunk := range chunks {
			got, err := readChunk(chunk, sinks[c], buf)
			if err != nil {
				return Data{}, fmt.Errorf("row group %d, column %d: %w", r, c, err)
			}
			if got != rg.NumRows() {
				return Data{}, fmt.Errorf("row group %d, column %d: %d values for %d rows", r, c, got, rg.NumRows())
			}
		}
	}
	if d.Rows.Len() != n {
		return Data{}, fmt.Errorf("%d rows decoded, footer says %d", d.Rows.Len(), n)
	}
	return d, g.checkRows(d)
}

// checkRows holds the rows to what the footer promises, and every vector
// to the schema (list lengths, nulls where allowed).
func (g *openFile) checkRows(d Data) error {
	for i, c := range g.schema.Columns {
		if err := d.Rows.Cols[i].Check(c, d.Rows.Len()); err != nil {
			return fmt.Errorf("column %q: %w", c.Name, err)
		}
	}
	return g.checkSystemColumns(d)
}

// checkSystemColumns holds ids, positions and epochs to what the footer
// promises.
func (g *openFile) checkSystemColumns(d Data) error {
	m := &g.meta
	for i, id := range d.Rows.IDs {
		if id == "" || len(id) > schema.MaxIDBytes {
			return fmt.Errorf("row %d: id of %d bytes", i, len(id))
		}
		if q := d.Seq[i]; q < m.SeqFirst || q > m.SeqLast {
			return fmt.Errorf("row %d: _seq %d outside the footer's range [%d, %d]", i, q, m.SeqFirst, m.SeqLast)
		}
		if e := d.Epoch[i]; e > m.Epoch {
			return fmt.Errorf("row %d: _epoch %d above the file's epoch %d", i, e, m.Epoch)
		}
	}
	return nil
}

// sink receives one column's values in row order.
type sink func(v parquet.Value) error

var errNullInRequired = errors.New("null in a required column")

// sinks returns, for every leaf column in file order, where its values go.
func (g *openFile) sinks(d *Data) []sink {
	b := d.Rows
	sinks := []sink{func(v parquet.Value) error {
		if v.IsNull() {
			return errNullInRequired
		}
		b.IDs = append(b.IDs, string(v.ByteArray()))
		return nil
	}}
	for i := range b.Cols {
		if leaves := g.lay.nested[i]; leaves != nil {
			sinks = append(sinks, nestedSinks(leaves, &b.Cols[i])...)
			continue
		}
		sinks = append(sinks, vectorSink(&b.Cols[i], int(g.meta.Rows)))
	}
	uints := func(dst *[]uint64) sink {
		return func(v parquet.Value) error {
			if v.IsNull() {
				return errNullInRequired
			}
			*dst = append(*dst, v.Uint64())
			return nil
		}
	}
	return append(sinks, uints(&d.Seq), uints(&d.Epoch))
}

// vectorSink appends to a Vector, keeping Nulls nil until the first null
// (the schema package's convention). The layout check already proved that
// only nullable columns can hold nulls.
func vectorSink(v *schema.Vector, rows int) sink {
	row := 0
	return func(val parquet.Value) error {
		null := val.IsNull()
		if null && v.Nulls == nil {
			v.Nulls = make([]bool, row, rows)
		}
		if v.Nulls != nil {
			v.Nulls = append(v.Nulls, null)
		}
		row++
		switch v.Type {
		case schema.String, schema.JSON, schema.Binary:
			s := ""
			if !null {
				s = string(val.ByteArray())
			}
			v.Str = append(v.Str, s)
		case schema.Int64, schema.Timestamp:
			v.I64 = append(v.I64, val.Int64())
		case schema.Float64:
			v.F64 = append(v.F64, val.Double())
		case schema.Bool:
			v.Bool = append(v.Bool, val.Boolean())
		case schema.Int32:
			v.I32 = append(v.I32, val.Int32())
		case schema.Float32:
			v.F32 = append(v.F32, val.Float())
		}
		return nil
	}
}

// readChunk feeds every value of a column chunk to s and returns how many
// rows it held: values at repetition level 0 (every value of a leaf that
// does not repeat).
func readChunk(chunk parquet.ColumnChunk, s sink, buf []parquet.Value) (int64, error) {
	pages := chunk.Pages()
	defer pages.Close()
	var rows int64
	for {
		page, err := pages.ReadPage()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
		n, err := readPage(page, s, buf)
		parquet.Release(page)
		rows += n
		if err != nil {
			return rows, err
		}
	}
}

func readPage(page parquet.Page, s sink, buf []parquet.Value) (int64, error) {
	values := page.Values()
	var rows int64
	for {
		n, err := values.ReadValues(buf)
		for _, v := range buf[:n] {
			if v.RepetitionLevel() == 0 {
				rows++
			} else if rows == 0 {
				// Write never splits a row across pages (a v2 page must
				// not; parquet-go checks those itself), so neither across
				// row groups: a leaf's rows stay aligned with the others'.
				return rows, errors.New("a page begins inside a row")
			}
			if err := s(v); err != nil {
				return rows, err
			}
		}
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
	}
}
