package generation

import (
	"math"
	"slices"
	"unsafe"

	"github.com/parquet-go/parquet-go"
)

// A list row of thousands of tokens becomes thousands of parquet.Values
// that differ only in their payload: the same kind, column and levels. The
// exported way to make each, a constructor and Value.Level, took nearly
// half of Write's time on BenchmarkFlushRL (about 20 ns a value: Level is
// not inlined, and it writes the levels as single bytes into a copy that
// is then read back 16 bytes at a time, which the CPU cannot forward from
// its store buffer). So a run copies one template Value, levels set once,
// and writes each payload's 64 bits in place, where the constructors of
// the fixed-size kinds put them.
//
// That place is parquet-go's layout, not its API: checkPayloadInPlace
// compares it at start-up with the constructors themselves, for every kind
// and some payloads, and runs fall back to Level when they differ, so a
// parquet-go whose Value changed costs speed, never a wrong value
// (TestPayloadInPlace then fails, to say so).

// payloadOffset is the byte offset of a Value's 64-bit payload.
const payloadOffset = 8

var payloadInPlace = checkPayloadInPlace()

// fixedKind is how one Go type of vector values becomes parquet.Values.
type fixedKind[T any] struct {
	value func(T) parquet.Value
	bits  func(T) uint64 // the payload value(x) holds
}

var (
	boolKind    = fixedKind[bool]{parquet.BooleanValue, func(x bool) uint64 { return uint64(boolBit(x)) }}
	int32Kind   = fixedKind[int32]{parquet.Int32Value, func(x int32) uint64 { return uint64(x) }}
	int64Kind   = fixedKind[int64]{parquet.Int64Value, func(x int64) uint64 { return uint64(x) }}
	float32Kind = fixedKind[float32]{parquet.FloatValue, func(x float32) uint64 { return uint64(math.Float32bits(x)) }}
	float64Kind = fixedKind[float64]{parquet.DoubleValue, math.Float64bits}
	// uint64Kind is _seq and _epoch: INT64 holding the bits of a uint64.
	uint64Kind = fixedKind[uint64]{func(x uint64) parquet.Value { return parquet.Int64Value(int64(x)) },
		func(x uint64) uint64 { return x }}
)

func boolBit(x bool) byte {
	if x {
		return 1
	}
	return 0
}

// leveler makes values of one kind at one set of levels.
type leveler[T any] struct {
	kind          fixedKind[T]
	tmpl          parquet.Value // the kind's zero at the levels
	rep, def, col int
}

func newLeveler[T any](k fixedKind[T], rep, def, col int) leveler[T] {
	var zero T
	return leveler[T]{kind: k, tmpl: k.value(zero).Level(rep, def, col), rep: rep, def: def, col: col}
}

// put sets *dst to x at l's levels. It writes in place: a Value built on
// the stack and copied out would stall as Level does.
func (l *leveler[T]) put(dst *parquet.Value, x T) {
	if !payloadInPlace {
		*dst = l.kind.value(x).Level(l.rep, l.def, l.col)
		return
	}
	*dst = l.tmpl
	setPayload(dst, l.kind.bits(x))
}

// appendRun appends vals, at least one, as the values of one list row of
// leaf col, none null: all at definition level def, the first at
// repetition level 0 and the others at 1.
func appendRun[T any](buf []parquet.Value, k fixedKind[T], vals []T, col, def int) []parquet.Value {
	n := len(buf)
	buf = slices.Grow(buf, len(vals))[:n+len(vals)]
	first, rest := newLeveler(k, 0, def, col), newLeveler(k, 1, def, col)
	first.put(&buf[n], vals[0])
	rest.putAll(buf[n+1:], vals[1:])
	return buf
}

// putAll sets dst[i] to vals[i] at l's levels. Token ids and
// log-probabilities, the long lists, have loops of their own that compute
// the payload inline instead of calling kind.bits: 5% of Write on
// BenchmarkFlushRL.
func (l *leveler[T]) putAll(dst []parquet.Value, vals []T) {
	if payloadInPlace {
		switch vals := any(vals).(type) {
		case []int32:
			for i, x := range vals {
				dst[i] = l.tmpl
				setPayload(&dst[i], uint64(x))
			}
			return
		case []float32:
			for i, x := range vals {
				dst[i] = l.tmpl
				setPayload(&dst[i], uint64(math.Float32bits(x)))
			}
			return
		}
	}
	for i, x := range vals {
		l.put(&dst[i], x)
	}
}

func setPayload(v *parquet.Value, bits uint64) {
	*(*uint64)(unsafe.Add(unsafe.Pointer(v), payloadOffset)) = bits
}

// checkPayloadInPlace reports whether setPayload on a template makes the
// same Value as the constructor, for every fixed-size kind.
func checkPayloadInPlace() bool {
	if unsafe.Sizeof(parquet.Value{}) < payloadOffset+8 {
		return false
	}
	return samePayloads(boolKind, []bool{false, true}) &&
		samePayloads(int32Kind, []int32{0, 1, -1, math.MinInt32, math.MaxInt32}) &&
		samePayloads(int64Kind, []int64{0, 1, -1, math.MinInt64, math.MaxInt64}) &&
		samePayloads(uint64Kind, []uint64{0, 1, math.MaxUint64}) &&
		samePayloads(float32Kind, []float32{0, -1.5, float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32}) &&
		samePayloads(float64Kind, []float64{0, -1.5, math.Inf(1), math.NaN(), math.SmallestNonzeroFloat64})
}

func samePayloads[T any](k fixedKind[T], samples []T) bool {
	const rep, def, col = 1, 3, 5
	var zero T
	tmpl := k.value(zero).Level(rep, def, col)
	for _, x := range samples {
		got := tmpl
		setPayload(&got, k.bits(x))
		if got != k.value(x).Level(rep, def, col) {
			return false
		}
	}
	return true
}
