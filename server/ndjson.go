package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
)

// NDJSON lines decode with encoding/json, which never fails on text it
// can only decode by changing it: invalid UTF-8 and lone surrogate escapes
// become U+FFFD (two distinct ids become one, and the second row is
// acknowledged as a duplicate of the first), a repeated key keeps its last
// value, and a json column decoded to Go values and marshalled again comes
// back with sorted keys and <, > and & as six-byte escapes. So the raw
// bytes of a line are checked for invalid UTF-8 and lone surrogates, keys
// for duplicates at every depth, nothing may follow the object, and a json
// column keeps the bytes that were sent. A list or struct column is the
// exception: its value decodes to []any and map[string]any with numbers as
// json.Number, which schema validation checks exactly (int32 range,
// float32), under the same checks of the raw bytes. decodeLineStrict does it by
// walking the line key by key (json.Decoder tokens), which names the
// column and byte of a refusal; decodeLineFast, the whole-line decode of
// before and three scans of the raw bytes, takes the plainly good lines at
// less cost (BenchmarkDecodeNDJSON); FuzzNDJSONLine holds the two to the
// same answers.
//
// Both make a schema.Row, which Build then converts into a batch's
// columns: a map, an interface per value and two copies of every string,
// five times the cost of the values themselves. So the server first tries
// typedDecoder (ndjsontyped.go), which takes a line whose values its
// columns plainly take straight into the batch, reading it with jsontext,
// which refuses what the strict walk refuses; any other line goes the way
// above, and Batch.Append validates its row as Build would. FuzzNDJSONLine
// holds the typed decoder to the strict walk as well, and checkBatchAgrees
// whole bodies to decodeNDJSON and Build (same batch, same refusal).

// errDecodedTooLarge marks a request whose rows decode to more bytes than
// one WAL record may hold: the answer is 413.
var errDecodedTooLarge = errs.New(errs.TooLarge, "request too large for one WAL record")

// lineError locates a refusal inside one line: the key (column) it is
// under, "" for none, the path inside its value (messages[3].role), "" for
// none, and the byte offset in the line, -1 when unknown.
type lineError struct {
	column string
	path   string
	offset int
	err    error
}

func (e *lineError) Error() string {
	where := ""
	if e.column != "" {
		where = fmt.Sprintf("column %q", e.column)
	}
	where += at(e.path)
	if e.offset >= 0 {
		if where != "" {
			where += ", "
		}
		where += fmt.Sprintf("byte %d", e.offset)
	}
	if where == "" {
		return e.err.Error()
	}
	return where + ": " + e.err.Error()
}

func (e *lineError) Unwrap() error { return e.err }

// ndjsonBatch is a body decoded into a batch of sc, or with invalid, the
// *schema.RowError of its first row that does not build, as schema.Build
// refuses it. The rows after that one are still decoded (not built): a
// refusal of the whole body comes first.
type ndjsonBatch struct {
	batch   *schema.Batch
	lines   []int
	invalid error
}

// decodeNDJSONBatch reads one JSON object per line, at most maxRows of
// them and at most maxBytes of decoded values (estimated as the WAL stores
// them), into a batch of sc; blank lines are skipped. lines[i] is the
// 1-based line of row i. A line goes straight into the batch's vectors
// when typedDecoder takes it, and through decodeLine and Batch.Append
// otherwise.
func decodeNDJSONBatch(body io.Reader, sc *schema.Schema, maxRows int, maxBytes int64) (*ndjsonBatch, *parseError) {
	out := &ndjsonBatch{batch: sc.NewBatch(64)}
	td := newTypedDecoder(sc)
	lines, perr := readNDJSON(body, maxRows, maxBytes, func(t []byte, sh shape) (int64, *lineError) {
		if out.invalid == nil {
			if n, ok := td.decode(t, out.batch); ok {
				return n, nil
			}
		}
		row, n, lerr := decodeLine(t, sh, sc)
		if lerr == nil && out.invalid == nil {
			out.invalid = out.batch.Append(row)
		}
		return n, lerr
	})
	if perr != nil {
		return nil, perr
	}
	out.lines = lines
	return out, nil
}

// readNDJSON calls each with every line that is not blank, trimmed, and
// its shape, within the limits of decodeNDJSONBatch; each returns the
// bytes the line's values take in a WAL record or why the line is
// refused. It returns the line of every row.
func readNDJSON(body io.Reader, maxRows int, maxBytes int64, each func(t []byte, sh shape) (int64, *lineError)) ([]int, *parseError) {
	br := bufio.NewReaderSize(body, 64<<10)
	var lines []int
	var size, heap int64
	for line := 1; ; line++ {
		b, err := readLine(br)
		if err != nil && err != io.EOF {
			return nil, &parseError{err: err}
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			if len(lines) >= maxRows {
				return nil, &parseError{line: line, err: fmt.Errorf("%w: more than %d rows in the request", errTooManyRows, maxRows)}
			}
			// Before decoding: a line of millions of tiny values ("{}",
			// "0") decodes, generically, to tens of bytes of heap a value.
			sh := shapeOf(t)
			if heap += int64(sh.values) * valueHeapBytes; heap > decodedPerWAL*maxBytes {
				return nil, &parseError{line: line, err: fmt.Errorf("%w: the rows up to this line hold more than %d JSON values; send fewer or smaller rows",
					errDecodedTooLarge, decodedPerWAL*maxBytes/valueHeapBytes)}
			}
			n, lerr := each(t, sh)
			if lerr != nil {
				if lerr.offset >= 0 {
					lerr.offset += bytes.Index(b, t) // the line as sent, before trimming
				}
				return nil, &parseError{line: line, err: lerr}
			}
			if size += n; size > maxBytes {
				return nil, &parseError{line: line, err: fmt.Errorf("%w: the rows up to this line hold more than %d bytes; send fewer or smaller rows",
					errDecodedTooLarge, maxBytes)}
			}
			lines = append(lines, line)
		}
		if err == io.EOF {
			return lines, nil
		}
	}
}

// valueHeapBytes is what one JSON value may cost on the heap once
// decoded into Go values: its slot in a []any or map, the boxed number or
// string, and the growth of the slice holding it. Measured, a line of "{}"
// or "0" values decoded to 50–60 bytes a value (TestNDJSONValueBombIs413).
const valueHeapBytes = 64

// shape is what one scan of a line's JSON text counts outside strings:
// the colons, one per key of every object, and an upper bound of its
// values (every value but the first follows a '[', ',' or ':').
type shape struct{ keys, values int }

func shapeOf(b []byte) shape {
	sh := shape{values: 1}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i+1)
		case ':':
			sh.keys++
			sh.values++
		case '[', ',':
			sh.values++
		}
	}
	return sh
}

// stringEnd returns the index of the quote that ends the string whose text
// starts at b[start], or len(b). Most of a line is string text: it is
// skipped a quote at a time, and a quote after an odd run of backslashes
// is escaped.
func stringEnd(b []byte, start int) int {
	for i := start; ; i++ {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		run := 0
		for run < i-start && b[i-1-run] == '\\' {
			run++
		}
		if run%2 == 0 {
			return i
		}
	}
}

// readLine returns the next line. One that fits in br's buffer is not
// copied: the slice points into the buffer and is valid until the next
// read, which decodeLine allows, since no row it returns refers to the
// line's bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	long := bytes.Clone(line)
	rest, err := br.ReadBytes('\n')
	return append(long, rest...), err
}

// decodeLine decodes one trimmed, non-empty line into a row and the bytes
// its values take in a WAL record. decodeLineFast takes the lines that are
// plainly fine; any other line is walked by decodeLineStrict, which
// defines what is accepted and locates what is not.
func decodeLine(b []byte, sh shape, sc *schema.Schema) (schema.Row, int64, *lineError) {
	if row, ok := decodeLineFast(b, sh, sc); ok {
		return row, rowSize(row), nil
	}
	row, lerr := decodeLineStrict(b, sc)
	if lerr != nil {
		return nil, 0, lerr
	}
	return row, rowSize(row), nil
}

// decodeLineFast decodes a line as decodeLineStrict would, or reports
// false. It decodes the line whole, as the server always did, and checks
// that nothing was rewritten: the line is UTF-8 without lone surrogate
// escapes, ends with the object, and holds as many keys (colons outside
// strings) as the decoded objects do, so no key repeated at any depth.
// Objects and arrays of columns that keep JSON text are then taken byte
// for byte from a second decode into raw messages, only for lines that
// hold any; those of list and struct columns stay decoded.
func decodeLineFast(b []byte, sh shape, sc *schema.Schema) (schema.Row, bool) {
	if b[0] != '{' || !utf8.Valid(b) {
		return nil, false
	}
	if off, _ := badText(b); off >= 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var row map[string]any
	if err := dec.Decode(&row); err != nil || dec.InputOffset() != int64(len(b)) {
		return nil, false
	}
	keys, text := len(row), false
	for k, v := range row {
		n, isNested := decodedKeys(v)
		keys, text = keys+n, text || (isNested && !takesValues(sc, k))
	}
	if keys != sh.keys {
		return nil, false
	}
	if text {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, false
		}
		for k, v := range row {
			if _, isNested := decodedKeys(v); isNested && !takesValues(sc, k) {
				row[k] = raw[k]
			}
		}
	}
	return schema.Row(row), true
}

// takesValues reports whether column name is a list or struct column,
// whose value schema validation takes decoded; every other column keeps
// an object or array as the JSON text sent (a json column stores it, any
// other refuses it by its kind).
func takesValues(sc *schema.Schema, name string) bool {
	i := sc.Index(name)
	return i >= 0 && !sc.Columns[i].Type.IsPrimitive()
}

// decodedKeys counts the keys of the objects inside a decoded value and
// reports whether it is an object or array.
func decodedKeys(v any) (int, bool) {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		n = len(x)
		for _, e := range x {
			k, _ := decodedKeys(e)
			n += k
		}
	case []any:
		for _, e := range x {
			k, _ := decodedKeys(e)
			n += k
		}
	default:
		return 0, false
	}
	return n, true
}

// rowSize estimates the bytes a row's values take in a WAL record: a
// string or JSON text its length and a length prefix, a number 8, a list
// or struct its parts.
func rowSize(row schema.Row) int64 {
	var n int64
	for _, v := range row {
		n += valueSize(v)
	}
	return n
}

func valueSize(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x)) + 1
	case json.RawMessage:
		return int64(len(x)) + 1
	case json.Number:
		return 8
	case []any:
		n := int64(1)
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	case map[string]any:
		n := int64(1)
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	}
	return 1
}

// decodeLineStrict walks a line key by key with json.Decoder tokens,
// checking the raw bytes of every key and value before decoding them.
func decodeLineStrict(b []byte, sc *schema.Schema) (schema.Row, *lineError) {
	if b[0] != '{' {
		return nil, &lineError{offset: 0, err: errors.New("not a JSON object")}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, syntaxError(b, "", err)
	}
	row := schema.Row{}
	for dec.More() {
		start := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(b, "", err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(b, key, err)
		}
		end := int(dec.InputOffset())
		if off, why := badText(b[start:end]); off >= 0 {
			return nil, &lineError{column: key, offset: start + off, err: errors.New(why)}
		}
		if _, dup := row[key]; dup {
			return nil, &lineError{column: key, offset: start + bytes.IndexByte(b[start:end], '"'), err: fmt.Errorf("key %q appears twice in the object", key)}
		}
		v, lerr := rawValue(raw, takesValues(sc, key))
		if lerr != nil {
			lerr.column, lerr.offset = key, end-len(raw)+lerr.offset
			if lerr.path != "" {
				lerr.path = key + lerr.path
			}
			return nil, lerr
		}
		row[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntaxError(b, "", err)
	}
	if off := int(dec.InputOffset()); off < len(b) {
		off += len(b[off:]) - len(bytes.TrimLeft(b[off:], " \t\r"))
		return nil, &lineError{offset: off, err: errors.New("bytes after the JSON object; send one object per line")}
	}
	return row, nil
}

// syntaxError locates an error of encoding/json in line b.
func syntaxError(b []byte, key string, err error) *lineError {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &lineError{column: key, offset: int(se.Offset), err: fmt.Errorf("bad JSON: %v", err)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &lineError{column: key, offset: len(b), err: errors.New("bad JSON: the line ends inside the object")}
	}
	return &lineError{column: key, offset: -1, err: fmt.Errorf("bad JSON: %v", err)}
}

// rawValue turns the raw bytes of a value that passed badText into the Go
// value schema validation takes: a string unescaped, a number as
// json.Number, an object or array decoded when values is set (a list or
// struct column) and otherwise as json.RawMessage (the json column keeps
// it byte for byte).
func rawValue(raw json.RawMessage, values bool) (any, *lineError) {
	switch raw[0] {
	case '"':
		if bytes.IndexByte(raw, '\\') < 0 {
			return string(raw[1 : len(raw)-1]), nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, &lineError{offset: 0, err: fmt.Errorf("bad JSON string: %v", err)}
		}
		return s, nil
	case '{', '[':
		if off, key, path := duplicateKey(raw); off >= 0 {
			return nil, &lineError{path: path, offset: off, err: fmt.Errorf("key %q appears twice in an object of the value", key)}
		}
		if values {
			return decodeValue(raw)
		}
		return raw, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case 'n':
		return nil, nil
	}
	return json.Number(raw), nil
}

// decodeValue decodes an object or array that passed the checks of raw
// bytes, numbers as json.Number.
func decodeValue(raw json.RawMessage) (any, *lineError) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &lineError{offset: 0, err: fmt.Errorf("bad JSON: %v", err)}
	}
	return v, nil
}

// badText returns the offset in s of the first byte that is not UTF-8 or
// of the first \u escape of a lone surrogate, and what it is; -1 when
// there is none. s is JSON that encoding/json scanned, so a backslash
// starts a well-formed escape inside a string.
func badText(s []byte) (int, string) {
	if !utf8.Valid(s) {
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n <= 1 {
				return i, "not valid UTF-8"
			}
			i += n
		}
	}
	for i := 0; ; {
		j := bytes.IndexByte(s[i:], '\\')
		if j < 0 || i+j+1 >= len(s) {
			return -1, ""
		}
		i += j
		if s[i+1] != 'u' || i+6 > len(s) {
			i += 2
			continue
		}
		r := hex4(s[i+2 : i+6])
		switch {
		case !utf16.IsSurrogate(r):
			i += 6
		case r < 0xdc00 && i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' && isLowSurrogate(hex4(s[i+8:i+12])):
			i += 12
		default:
			return i, fmt.Sprintf(`\u%s is a lone UTF-16 surrogate, not a character`, s[i+2:i+6])
		}
	}
}

func isLowSurrogate(r rune) bool { return r >= 0xdc00 && r <= 0xdfff }

// hex4 reads four hex digits; anything else reads as -1.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// duplicateKey walks a JSON object or array and returns the offset, name
// and path below the value ([3].role) of the first key that repeats inside
// one object; -1 when none does. A value with fewer than two colons holds
// no two keys.
func duplicateKey(raw []byte) (int, string, string) {
	if bytes.Count(raw, []byte{':'}) < 2 {
		return -1, "", ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var stack []jsonFrame
	for {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return -1, "", "" // raw was scanned whole already: the end
		}
		top := len(stack) - 1
		if s, ok := tok.(string); ok && top >= 0 && stack[top].expectKey {
			if stack[top].seen[s] {
				return before + bytes.IndexByte(raw[before:], '"'), s, framesPath(stack[:top]) + "." + s
			}
			stack[top].seen[s], stack[top].key, stack[top].expectKey = true, s, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, jsonFrame{seen: map[string]bool{}, expectKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, jsonFrame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
			top--
		}
		if top >= 0 {
			stack[top].ended() // a value ended: a key or the next element comes next
		}
	}
}

// jsonFrame is an object or array that duplicateKey is inside.
type jsonFrame struct {
	seen      map[string]bool // nil for an array
	key       string          // an object's current key
	index     int             // an array's current element
	expectKey bool
}

func (f *jsonFrame) ended() {
	if f.seen != nil {
		f.expectKey = true
	} else {
		f.index++
	}
}

// framesPath is the path of the value that the innermost of stack holds
// now: .key for an object, [i] for an array.
func framesPath(stack []jsonFrame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.seen != nil {
			b.WriteString("." + f.key)
		} else {
			fmt.Fprintf(&b, "[%d]", f.index)
		}
	}
	return b.String()
}
