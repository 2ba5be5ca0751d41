package generation

import (
	"math"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// TestPayloadInPlace: this parquet-go keeps a Value's payload where runs
// write it. Failing means an upgrade moved it: runs still make the right
// values (through Level), at a fraction of the speed; payloadOffset needs
// updating.
func TestPayloadInPlace(t *testing.T) {
	if !payloadInPlace {
		t.Fatal("parquet.Value no longer holds its payload at payloadOffset; runs fall back to Value.Level")
	}
}

// TestRunsMatchLevel: a run makes, in place or not, the values the
// constructors and Level make.
func TestRunsMatchLevel(t *testing.T) {
	const col, def = 4, 2
	checkRun(t, boolKind, []bool{true, false, true}, col, def)
	checkRun(t, int32Kind, []int32{7, -1, math.MinInt32, math.MaxInt32}, col, def)
	checkRun(t, int64Kind, []int64{7, -1, math.MinInt64, math.MaxInt64}, col, def)
	checkRun(t, uint64Kind, []uint64{7, 0, math.MaxUint64}, col, def)
	checkRun(t, float32Kind, []float32{-0.5, float32(math.NaN()), float32(math.Inf(1))}, col, def)
	checkRun(t, float64Kind, []float64{-0.5, math.NaN(), math.Inf(-1), math.MaxFloat64}, col, def)
}

func checkRun[T any](t *testing.T, k fixedKind[T], vals []T, col, def int) {
	t.Helper()
	want := []parquet.Value{parquet.NullValue()} // a value before the run stays
	for i, x := range vals {
		want = append(want, k.value(x).Level(min(i, 1), def, col))
	}
	defer func(saved bool) { payloadInPlace = saved }(payloadInPlace)
	for _, inPlace := range []bool{true, false} {
		payloadInPlace = inPlace
		got := appendRun([]parquet.Value{parquet.NullValue()}, k, vals, col, def)
		if len(got) != len(want) {
			t.Fatalf("in place %v: %d values, want %d", inPlace, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("in place %v: value %d is %#v, want %#v", inPlace, i, got[i], want[i])
			}
		}
	}
}
