package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/rollwal/rollwal/schema"
)

// typedDecoder takes a line straight into a batch's vectors, when every
// value is one a column plainly takes, and reports false for any other
// line, which the generic decode (decodeLine, then Batch.Append) then
// accepts or refuses with its own answer. Decoding a line to a schema.Row
// and building it cost five times what the values themselves do: a map, an
// interface per value, and the strings copied twice.
//
// The jsontext decoder refuses, as the strict walk does, invalid UTF-8,
// lone surrogate escapes and a name repeated at any depth (it compares
// names unescaped, as the strict walk does); a line it takes, the strict
// walk takes as the same row, of the same size (FuzzNDJSONLine,
// FuzzNDJSONTyped).
type typedDecoder struct {
	sc   *schema.Schema
	cols map[string]int
	off  bool // takes no line of sc
	dec  jsontext.Decoder
	in   bytes.Buffer
	id   typedValue
	vals []typedValue // one per column of sc
	// text holds the line's strings (unescaped), JSON text and binary
	// values end to end: one string of it a line makes the batch's.
	text []byte
}

// typedValue is a column's value in the line being decoded.
type typedValue struct {
	set        bool
	null       bool
	start, end int // in text: a string's, json's or binary's bytes
	i64        int64
	f64        float64
	i32        int32
	f32        float32
	bool       bool
}

func newTypedDecoder(sc *schema.Schema) *typedDecoder {
	td := &typedDecoder{sc: sc, cols: make(map[string]int, len(sc.Columns)), vals: make([]typedValue, len(sc.Columns))}
	for i, c := range sc.Columns {
		td.cols[c.Name] = i
		// Every row of such a table holds a list or struct value, which
		// the typed decoder leaves to the generic decode.
		td.off = td.off || (!c.Type.IsPrimitive() && !c.Nullable)
	}
	return td
}

// decode appends line, trimmed and not empty, as a row of b and returns the
// bytes its values take in a WAL record, as rowSize counts them; false, b
// unchanged, for a line it leaves to the generic decode.
func (td *typedDecoder) decode(line []byte, b *schema.Batch) (int64, bool) {
	if td.off {
		return 0, false
	}
	td.text, td.id = td.text[:0], typedValue{}
	clear(td.vals)
	// jsontext reads a bytes.Buffer in place, without copying the line.
	td.in = *bytes.NewBuffer(line)
	td.dec.Reset(&td.in)
	if tok, err := td.dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return 0, false
	}
	var size int64
	for td.dec.PeekKind() == '"' {
		n, ok := td.member()
		if !ok {
			return 0, false
		}
		size += n
	}
	if tok, err := td.dec.ReadToken(); err != nil || tok.Kind() != '}' || td.dec.InputOffset() != int64(len(line)) {
		return 0, false
	}
	return size, td.commit(b)
}

// member reads one name and value into its column's typedValue.
func (td *typedDecoder) member() (int64, bool) {
	name, err := td.dec.ReadValue()
	if err != nil || bytes.IndexByte(name, '\\') >= 0 {
		return 0, false
	}
	key := name[1 : len(name)-1]
	if string(key) == schema.IDColumn {
		return td.takeID()
	}
	c, ok := td.cols[string(key)]
	// A list or struct value is the generic decode's: leave the line
	// before reading the value.
	if !ok || td.vals[c].set || (!td.sc.Columns[c].Type.IsPrimitive() && td.dec.PeekKind() != 'n') {
		return 0, false
	}
	v, err := td.dec.ReadValue()
	if err != nil {
		return 0, false
	}
	return td.take(&td.vals[c], &td.sc.Columns[c], v)
}

func (td *typedDecoder) takeID() (int64, bool) {
	v, err := td.dec.ReadValue()
	if err != nil || td.id.set || v.Kind() != '"' {
		return 0, false
	}
	td.id.set = true
	n, ok := td.takeString(&td.id, v)
	return n, ok && td.id.end > td.id.start && td.id.end-td.id.start <= schema.MaxIDBytes
}

// take converts v as schema.Build converts what the generic decode makes
// of it, or reports false for a value it refuses or takes otherwise.
func (td *typedDecoder) take(tv *typedValue, col *schema.Column, v jsontext.Value) (int64, bool) {
	tv.set = true
	switch k := v.Kind(); {
	case k == 'n':
		tv.null = true
		return 1, col.Nullable
	case !col.Type.IsPrimitive():
		return 0, false
	case k == '"':
		return td.takeText(tv, col.Type, v)
	case k == '0':
		return 8, takeNumber(tv, col.Type, v)
	case (k == 't' || k == 'f') && col.Type == schema.Bool:
		tv.bool = k == 't'
		return 1, true
	case (k == '{' || k == '[') && col.Type == schema.JSON:
		tv.start = len(td.text)
		td.text = append(td.text, v...)
		tv.end = len(td.text)
		return int64(len(v)) + 1, len(v) <= schema.MaxValueBytes
	}
	return 0, false
}

// takeText takes a JSON string for a string, json, binary or timestamp
// column.
func (td *typedDecoder) takeText(tv *typedValue, t schema.Type, v jsontext.Value) (int64, bool) {
	n, ok := td.takeString(tv, v)
	if !ok {
		return 0, false
	}
	s := td.text[tv.start:tv.end]
	switch t {
	case schema.String:
		return n, len(s) <= schema.MaxValueBytes
	case schema.JSON:
		return n, len(s) <= schema.MaxValueBytes && json.Valid(s)
	case schema.Binary:
		return n, td.decodeBase64(tv)
	case schema.Timestamp:
		return n, takeTimestamp(tv, string(s))
	}
	return 0, false
}

// takeString appends the string v unescaped to text.
func (td *typedDecoder) takeString(tv *typedValue, v jsontext.Value) (int64, bool) {
	tv.start = len(td.text)
	td.text = appendUnescaped(td.text, v)
	tv.end = len(td.text)
	return int64(tv.end-tv.start) + 1, true
}

// appendUnescaped appends the text of s, a JSON string that jsontext read
// (its escapes well formed, its surrogates paired), unescaped. The text
// between escapes is copied whole: jsontext.AppendUnquote, which checks
// the string again byte by byte, took a fifth of the decode.
func appendUnescaped(dst, s []byte) []byte {
	s = s[1 : len(s)-1]
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		if c := s[i+1]; c != 'u' {
			dst = append(dst, unescaped[c])
			s = s[i+2:]
			continue
		}
		r := hex4(s[i+2 : i+6])
		s = s[i+6:]
		if utf16.IsSurrogate(r) {
			r = utf16.DecodeRune(r, hex4(s[2:6]))
			s = s[6:]
		}
		dst = utf8.AppendRune(dst, r)
	}
}

// unescaped is the byte of each one-letter escape.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// decodeBase64 replaces the base64 text of tv with the bytes it says.
func (td *typedDecoder) decodeBase64(tv *typedValue) bool {
	enc := base64.StdEncoding.Strict()
	src := td.text[tv.start:tv.end]
	end := len(td.text)
	td.text = append(td.text, make([]byte, enc.DecodedLen(len(src)))...)
	n, err := enc.Decode(td.text[end:], td.text[tv.start:tv.end])
	if err != nil || n > schema.MaxValueBytes {
		return false
	}
	td.text = td.text[:end+n]
	tv.start, tv.end = end, end+n
	return true
}

func takeTimestamp(tv *typedValue, s string) bool {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Nanosecond()%1000 != 0 {
		return false
	}
	tv.i64 = t.UnixMicro()
	return true
}

// takeNumber parses a JSON number as schema.Build parses a json.Number.
func takeNumber(tv *typedValue, t schema.Type, v jsontext.Value) bool {
	switch t {
	case schema.Int64, schema.Int32:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || (t == schema.Int32 && (n < math.MinInt32 || n > math.MaxInt32)) {
			return false
		}
		tv.i64, tv.i32 = n, int32(n)
		return true
	case schema.Float64:
		f, err := strconv.ParseFloat(string(v), 64)
		tv.f64 = f
		return err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
	case schema.Float32:
		// Parsed at 32 bits, as schema's toFloat32 parses a json.Number.
		f, err := strconv.ParseFloat(string(v), 32)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return false
		}
		tv.f32 = float32(f)
		return !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) <= math.MaxFloat32
	}
	return false
}

// commit appends the line's values as the next row of b, or reports false
// when the row lacks its id or a value a column needs.
func (td *typedDecoder) commit(b *schema.Batch) bool {
	if !td.id.set {
		return false
	}
	for c := range td.vals {
		if (!td.vals[c].set || td.vals[c].null) && !td.sc.Columns[c].Nullable {
			return false
		}
	}
	text := string(td.text)
	b.IDs = append(b.IDs, text[td.id.start:td.id.end])
	for c := range td.vals {
		pushValue(&b.Cols[c], &td.vals[c], text)
	}
	return true
}

func pushValue(vec *schema.Vector, tv *typedValue, text string) {
	if !tv.set || tv.null {
		vec.PushNull()
		return
	}
	switch vec.Type {
	case schema.String, schema.JSON, schema.Binary:
		vec.PushString(text[tv.start:tv.end])
	case schema.Int64, schema.Timestamp:
		vec.PushInt64(tv.i64)
	case schema.Float64:
		vec.PushFloat64(tv.f64)
	case schema.Int32:
		vec.PushInt32(tv.i32)
	case schema.Float32:
		vec.PushFloat32(tv.f32)
	case schema.Bool:
		vec.PushBool(tv.bool)
	}
}
