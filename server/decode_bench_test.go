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
// as a nested object. to=rows is the decode to schema.Row alone; to=batch
// is what the server does, the decode into a batch; to=rows+build is how
// the server got its batch before, decoding rows and building them.
func BenchmarkDecodeNDJSON(b *testing.B) {
	sc := schema.Rollout()
	for _, tc := range []struct {
		name   string
		nested bool
	}{{"metadata=string", false}, {"metadata=object", true}} {
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
		b.Run(tc.name+"/to=rows", func(b *testing.B) {
			b.SetBytes(int64(body.Len()))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := decodeNDJSON(bytes.NewReader(body.Bytes()), sc, 100000, 1<<30); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/to=rows+build", func(b *testing.B) {
			b.SetBytes(int64(body.Len()))
			b.ReportAllocs()
			for b.Loop() {
				rows, _, err := decodeNDJSON(bytes.NewReader(body.Bytes()), sc, 100000, 1<<30)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sc.Build(rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/to=batch", func(b *testing.B) {
			b.SetBytes(int64(body.Len()))
			b.ReportAllocs()
			for b.Loop() {
				nb, err := decodeNDJSONBatch(bytes.NewReader(body.Bytes()), sc, 100000, 1<<30)
				if err != nil || nb.invalid != nil {
					b.Fatal(err, nb.invalid)
				}
			}
		})
	}
}
