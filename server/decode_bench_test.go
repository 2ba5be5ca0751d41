package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
)

// BenchmarkDecodeNDJSON decodes a 1000-row body of 1 KiB-class rollouts
// (the rows of BenchmarkHTTPIngest) without the network and the engine:
// metadata as JSON text in a string (as the HTTP benchmark sends it), and
// as a nested object.
func BenchmarkDecodeNDJSON(b *testing.B) {
	for _, tc := range []struct {
		name   string
		nested bool
	}{{"metadata=string", false}, {"metadata=object", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var body bytes.Buffer
			enc := json.NewEncoder(&body)
			for _, r := range rolloutgen.New(1, "b").Rows(1000) {
				if tc.nested {
					r["metadata"] = json.RawMessage(r["metadata"].(string))
				}
				if err := enc.Encode(r); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(body.Len()))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := decodeNDJSON(bytes.NewReader(body.Bytes()), schema.Rollout(), 100000, 1<<30); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
