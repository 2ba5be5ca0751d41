package server

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
)

// decodeNDJSON is decodeNDJSONBatch decoding every line to a schema.Row,
// as the server did before it built batches itself: the reference that
// decodeNDJSONBatch and schema.Build are held to, and what the tests read
// values from. lines[i] is the 1-based line of rows[i].
func decodeNDJSON(body io.Reader, sc *schema.Schema, maxRows int, maxBytes int64) (rows []schema.Row, lines []int, perr *parseError) {
	lines, perr = readNDJSON(body, maxRows, maxBytes, func(t []byte, sh shape) (int64, *lineError) {
		row, n, lerr := decodeLine(t, sh, sc)
		rows = append(rows, row)
		return n, lerr
	})
	if perr != nil {
		return nil, nil, perr
	}
	return rows, lines, nil
}

// TestNDJSONRowsOutliveTheReadBuffer: lines are decoded in place in the
// read buffer (readLine), so no row may keep its bytes. A body of many
// buffers' worth of lines, strings, numbers, nested JSON and escapes,
// decodes to the rows each line decodes to on its own; a line longer than
// the buffer too.
func TestNDJSONRowsOutliveTheReadBuffer(t *testing.T) {
	var body bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&body, `{"id":"r%d","prompt":"p\"%d","reward":%d.5,"metadata":{"k":[%d,"v%d"]}}`+"\n", i, i, i, i, i)
	}
	fmt.Fprintf(&body, `{"id":"long","prompt":"%s","metadata":{"x":"%s"}}`+"\n", strings.Repeat("a", 200<<10), strings.Repeat("b", 100<<10))
	rows, _, perr := decodeNDJSON(bytes.NewReader(body.Bytes()), schema.Rollout(), 10000, 1<<30)
	if perr != nil {
		t.Fatal(perr)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(body.Bytes()), []byte("\n")) {
		alone, _, perr := decodeNDJSON(bytes.NewReader(line), schema.Rollout(), 1, 1<<30)
		if perr != nil {
			t.Fatal(perr)
		}
		if !reflect.DeepEqual(rows[i], alone[0]) {
			t.Fatalf("row %d decoded as %v within the body, %v alone", i, rows[i], alone[0])
		}
	}
}

// TestNDJSONBatchOutlivesTheReadBuffer is the test above for the batch
// the server decodes: its rows, those the typed decoder takes and those
// it leaves to the generic decode, are the rows built on their own.
func TestNDJSONBatchOutlivesTheReadBuffer(t *testing.T) {
	var body bytes.Buffer
	for i := range 3000 {
		meta := fmt.Sprintf(`{"k":[%d,"v%d"]}`, i, i)
		if i%3 == 0 {
			meta = fmt.Sprint(i) // a number in a json column: the generic decode
		}
		fmt.Fprintf(&body, `{"id":"r%d","prompt":"p\"%d","completion":"c","reward":%d.5,"metadata":%s}`+"\n", i, i, i, meta)
	}
	fmt.Fprintf(&body, `{"id":"long","prompt":"%s","completion":"c","metadata":{"x":"%s"}}`+"\n", strings.Repeat("a", 200<<10), strings.Repeat("b", 100<<10))
	sc := schema.Rollout()
	got, perr := decodeNDJSONBatch(bytes.NewReader(body.Bytes()), sc, 10000, 1<<30)
	if perr != nil || got.invalid != nil {
		t.Fatal(perr, got.invalid)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(body.Bytes()), []byte("\n")) {
		rows, _, perr := decodeNDJSON(bytes.NewReader(line), sc, 1, 1<<30)
		if perr != nil {
			t.Fatal(perr)
		}
		alone, err := sc.Build(rows)
		if err != nil {
			t.Fatal(err)
		}
		one := sc.NewBatch(1)
		one.AppendRow(got.batch, i)
		if !bytes.Equal(one.Encode(nil), alone.Encode(nil)) {
			t.Fatalf("row %d decoded within the body as %v, alone as %v", i, one, alone)
		}
	}
}

// FuzzShapeOf holds shapeOf, which skips string text a quote at a time, to
// the count of a walk byte by byte.
func FuzzShapeOf(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,2],"b":"x:y,[z"}`, `{"a\"b:":"c\\","d":1}`, `"\\\":"`, `{"a":"\\\\\\"}:,"}`, `"unterminated\`, `\":`, `{"":""}`, `"a\\`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := shapeOf(b), shapeBytewise(b); got != want {
			t.Fatalf("%q: shapeOf %+v, byte by byte %+v", b, got, want)
		}
	})
}

func shapeBytewise(b []byte) shape {
	sh, inString := shape{values: 1}, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == ':':
			sh.keys++
			sh.values++
		case c == '[' || c == ',':
			sh.values++
		}
	}
	return sh
}
