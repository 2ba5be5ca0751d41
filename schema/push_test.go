package schema

import (
	"bytes"
	"testing"
	"time"
)

// TestPushBuildsWhatBuildBuilds: rows pushed value by value, nulls first,
// later and never, make the batch Build makes of the same rows, and
// Append refuses a bad row as Build does.
func TestPushBuildsWhatBuildBuilds(t *testing.T) {
	s, err := New([]Column{
		{Name: "s", Type: String}, {Name: "i", Type: Int64, Nullable: true}, {Name: "f", Type: Float64, Nullable: true},
		{Name: "b", Type: Bool, Nullable: true}, {Name: "n", Type: Int32, Nullable: true}, {Name: "g", Type: Float32, Nullable: true},
		{Name: "at", Type: Timestamp, Nullable: true}, {Name: "tags", Type: List, Nullable: true, Element: &Column{Type: String}},
	})
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMicro(1714564800123456).UTC()
	rows := []Row{
		{"id": "a", "s": "x", "i": int64(1), "f": 1.5, "b": true, "n": int32(2), "g": float32(2.5), "at": at},
		{"id": "b", "s": "", "i": nil, "f": nil, "b": nil, "n": nil, "g": nil, "at": nil, "tags": nil},
		{"id": "c", "s": "z", "i": int64(-1), "f": -0.5, "b": false, "n": int32(-2), "g": float32(-1), "at": at},
	}
	want, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	got := s.NewBatch(0)
	for _, r := range rows {
		got.IDs = append(got.IDs, r["id"].(string))
		got.Cols[0].PushString(r["s"].(string))
		if r["i"] == nil {
			for c := 1; c < len(got.Cols); c++ {
				got.Cols[c].PushNull()
			}
			continue
		}
		got.Cols[1].PushInt64(r["i"].(int64))
		got.Cols[2].PushFloat64(r["f"].(float64))
		got.Cols[3].PushBool(r["b"].(bool))
		got.Cols[4].PushInt32(r["n"].(int32))
		got.Cols[5].PushFloat32(r["g"].(float32))
		got.Cols[6].PushInt64(at.UnixMicro())
		got.Cols[7].PushNull()
	}
	for c := range got.Cols {
		if err := got.Cols[c].Check(s.Columns[c], got.Len()); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Encode(nil), want.Encode(nil)) {
		t.Fatal("pushed values encode otherwise than the rows built")
	}
	bad := Row{"id": "d", "s": 1}
	_, buildErr := s.Build(append(rows, bad))
	if err := got.Append(bad); err == nil || err.Error() != buildErr.Error() {
		t.Fatalf("Append refused a bad row with %v, Build with %v", err, buildErr)
	}
}
