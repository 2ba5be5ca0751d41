package server

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
)

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
