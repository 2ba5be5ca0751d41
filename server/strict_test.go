package server

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/arrowtest"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
	"github.com/rollwal/rollwal/wal"
)

// strictAnswer is the part of an error answer the strictness tests read.
type strictAnswer struct {
	Error      string `json:"error"`
	Code       string `json:"code"`
	Line       int    `json:"line"`
	Column     string `json:"column"`
	ByteOffset *int   `json:"byte_offset"`
}

// held is what a shard holds: rows in its memtables and its WAL tail.
func (f *fixture) held(t *testing.T) (rows int, tail uint64) {
	t.Helper()
	st := decode[engine.Status](t, f.get(t, "/v1/shards/s0"))
	return st.MemtableRows, st.WALTail
}

// TestNDJSONNeverRewritesValues: a line that encoding/json would decode
// only by changing it (invalid UTF-8 and lone surrogates become U+FFFD, a
// duplicate key keeps its last value) or that holds more than one object is
// a 400 naming its line and column, and the request stores nothing. Two ids
// that differ only in invalid bytes were one row, acknowledged twice.
func TestNDJSONNeverRewritesValues(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	row := func(id, rest string) string { return `{"id":"` + id + `","prompt":"p","completion":"c"` + rest + `}` }
	good := row("g1", "") + "\n"
	for _, tc := range []struct {
		name        string
		before, bad string // lines before the bad one, and the bad line
		at          string // what the byte offset points at: its first occurrence in bad
		column      string
	}{
		{"invalid UTF-8 in ids", "", row("u\xff1", "") + "\n" + row("u\xfe1", ""), "\xff", "id"},
		{"invalid UTF-8 in a string column", good, `{"id":"a","prompt":"p` + "\xc3(" + `","completion":"c"}`, "\xc3", "prompt"},
		{"invalid UTF-8 in a json column", good, row("a", `,"metadata":{"k":"`+"\xed\xa0\x80"+`"}`), "\xed", "metadata"},
		{"invalid UTF-8 in a key", good, `{"id":"a","pr` + "\xff" + `ompt":"p","completion":"c"}`, "\xff", "pr\uFFFDompt"},
		{"invalid UTF-8 in a nested key", good, row("a", `,"metadata":{"k`+"\xff"+`":1}`), "\xff", "metadata"},
		{"lone high surrogate in ids", "", row(`u\ud8001`, "") + "\n" + row(`u\udbff1`, ""), `\ud800`, "id"},
		{"lone low surrogate in a string column", good, `{"id":"a","prompt":"x\udc00","completion":"c"}`, `\udc00`, "prompt"},
		{"surrogates in the wrong order", good, `{"id":"a","prompt":"\udc00\ud800","completion":"c"}`, `\udc00`, "prompt"},
		{"lone surrogate in a json column", good, row("a", `,"metadata":{"k":"\ud83d"}`), `\ud83d`, "metadata"},
		{"lone surrogate in a key", good, row("a", `,"x\ud800":1`), `\ud800`, "x\uFFFD"},
		{"trailing bracket", good, row("a", "") + "]", "]", ""},
		{"trailing text", good, row("a", "") + "  x", "x", ""},
		{"two objects on a line", good, row("a", "") + row("b", ""), `{"id":"b"`, ""},
		{"duplicate id", good, `{"id":"a","id":"b","prompt":"p","completion":"c"}`, `"id":"b"`, "id"},
		{"duplicate column", good, row("a", `,"prompt":"q"`), `"prompt":"q"`, "prompt"},
		{"duplicate key in a json column", good, row("a", `,"metadata":{"k":1,"k":2}`), `"k":2`, "metadata"},
	} {
		line := strings.Count(tc.before, "\n") + 1
		offset := strings.Index(tc.bad, tc.at)
		rows, tail := f.held(t)
		code, b := f.post(t, "/v1/shards/s0/rows", tc.before+tc.bad+"\n")
		if code != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 400", tc.name, code, b)
			continue
		}
		e := decode[strictAnswer](t, b)
		if e.Line != line || e.Column != tc.column || !strings.Contains(e.Error, fmt.Sprintf("line %d", line)) {
			t.Errorf("%s: answered %s, want line %d and column %q named", tc.name, b, line, tc.column)
		}
		if e.ByteOffset == nil || *e.ByteOffset != offset {
			t.Errorf("%s: answered %s, want byte_offset %d", tc.name, b, offset)
		}
		if r, w := f.held(t); r != rows || w != tail {
			t.Errorf("%s: the shard went from %d rows at WAL tail %d to %d at %d; want nothing written", tc.name, rows, tail, r, w)
		}
	}
	// What is valid is taken as sent: a surrogate pair, escapes, and JSON
	// text in its own spacing, key order and escapes.
	code, b := f.post(t, "/v1/shards/s0/rows", row(`\ud83d\ude00`, `,"metadata":{"z":"<&>","a":[1.50, 2e0]}`)+"\n")
	if code != http.StatusOK {
		t.Fatalf("a valid row answered %d %s", code, b)
	}
}

// TestNDJSONKeepsJSONVerbatim: a json column holds the text the producer
// sent, not encoding/json's re-encoding of it (sorted keys, <>& escaped as
// \u003c…, six bytes for one).
func TestNDJSONKeepsJSONVerbatim(t *testing.T) {
	meta := `{"z": "<a & b>", "a": [1.50, 2e0, {"y": null}], "e": "\u00e9\n"}`
	body := `{"id":"\ud83d\ude00","prompt":"tab\there","completion":"\u00e9","metadata":` + meta + "}\n"
	rows, _, perr := decodeNDJSON(strings.NewReader(body), schema.Rollout(), 10, 1<<20)
	if perr != nil {
		t.Fatal(perr)
	}
	b, err := schema.Rollout().Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.IDs[0]; got != "😀" {
		t.Errorf("id %q, want the surrogate pair's 😀", got)
	}
	if got := b.Cols[0].Str[0]; got != "tab\there" {
		t.Errorf("prompt %q, want the escape decoded", got)
	}
	if got := b.Cols[3].Str[0]; got != meta {
		t.Errorf("metadata stored as %s, want it as sent: %s", got, meta)
	}
}

// TestPoisonBatchIs413: a request whose WAL record would pass
// wal.MaxPayloadSize, and Arrow streams whose zstd or lz4 buffers
// decompress past it, are 413 (a 5xx would make producers retry the same bytes forever),
// nothing is written, and decoding the bomb allocates a bounded amount.
func TestPoisonBatchIs413(t *testing.T) {
	f := newFixtureWith(t, 2*wal.MaxPayloadSize, func(o *engine.Options) { o.MemoryBudget = 1 << 30 })
	f.srv.SetReady(true)
	rows, tail := f.held(t)

	big := `{"id":"big","prompt":"` + strings.Repeat("a", wal.MaxPayloadSize) + `","completion":"c"}` + "\n"
	code, b := f.post(t, "/v1/shards/s0/rows", big)
	if e := decode[strictAnswer](t, b); code != http.StatusRequestEntityTooLarge || !strings.Contains(e.Error, fmt.Sprint(wal.MaxPayloadSize)) {
		t.Errorf("a row of %d bytes answered %d %s, want 413 naming the limit", wal.MaxPayloadSize, code, b)
	}

	for _, codec := range []struct {
		name string
		opt  ipc.Option
	}{{"zstd", ipc.WithZstd()}, {"lz4", ipc.WithLZ4()}} {
		bomb := arrowBomb(t, codec.opt, 40, 8<<20) // 320 MiB decompressed
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		code, b = f.postArrow(t, bomb)
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("a %d-byte %s stream of 320 MiB: %d %s; %d MiB allocated while answering", len(bomb), codec.name, code, b, allocated>>20)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("a %d-byte %s stream decompressing to 320 MiB answered %d %s, want 413", len(bomb), codec.name, code, b)
		}
		// On main before the bound, answering the zstd one allocated 2.6 GiB
		// (a 500 after decompressing all 320 MiB, cloning it into rows and
		// encoding it for the WAL).
		if limit := uint64(4 * wal.MaxPayloadSize); allocated > limit {
			t.Errorf("answering the %s bomb allocated %d MiB, want at most %d MiB", codec.name, allocated>>20, limit>>20)
		}
	}
	if r, w := f.held(t); r != rows || w != tail {
		t.Errorf("the shard went from %d rows at WAL tail %d to %d at %d; want nothing written", rows, tail, r, w)
	}
}

// arrowBomb is an Arrow stream of n record batches, each one row whose
// prompt is size bytes of 'a', compressed: a few KiB a batch.
func arrowBomb(t *testing.T, compression ipc.Option, n, size int) []byte {
	t.Helper()
	cols := with(rollouts("bomb"), col{name: "prompt", typ: arrow.BinaryTypes.LargeString, vals: []any{strings.Repeat("a", size)}})
	var fields []arrow.Field
	for _, c := range cols {
		fields = append(fields, arrow.Field{Name: c.name, Type: c.typ, Nullable: true})
	}
	sc := arrow.NewSchema(fields, nil)
	rec := record(t, sc, cols)
	defer rec.Release()
	one := arrowtest.Stream(t, sc, []arrow.RecordBatch{rec}, compression)
	schemaEnd := 8 + int(binary.LittleEndian.Uint32(one[4:8]))
	batch := one[schemaEnd : len(one)-8] // the record batch message, before the end-of-stream marker
	out := append([]byte(nil), one[:schemaEnd]...)
	for range n {
		out = append(out, batch...)
	}
	return append(out, one[len(one)-8:]...)
}

// TestOffsetRangeIs400: a source offset outside 0 ≤ offset < 2^62 is a 400
// naming it, not a negative stored as 0 or a maximum that no later offset
// passes; the bounds themselves are taken.
func TestOffsetRangeIs400(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	for _, off := range []string{"-5", "-1", fmt.Sprint(int64(math.MaxInt64)), fmt.Sprint(int64(1) << 62)} {
		rows, tail := f.held(t)
		code, b := f.post(t, rowsPath(url.Values{"source": {"topic"}, "offset": {off}}), ndjson("o"+off))
		if code != http.StatusBadRequest {
			t.Errorf("offset %s: answered %d %s, want 400", off, code, b)
			continue
		}
		if e := decode[apiError](t, b); e.Parameter != "offset" || e.Code != codeBadParameter {
			t.Errorf("offset %s: answered %s, want it to name parameter offset", off, b)
		}
		if r, w := f.held(t); r != rows || w != tail {
			t.Errorf("offset %s: the shard went from %d rows at WAL tail %d to %d at %d", off, rows, tail, r, w)
		}
	}
	for _, off := range []string{"0", fmt.Sprint(int64(1)<<62 - 1)} {
		if code, b := f.post(t, rowsPath(url.Values{"source": {"topic"}, "offset": {off}}), ndjson("ok"+off)); code != http.StatusOK {
			t.Errorf("offset %s: answered %d %s, want 200", off, code, b)
		}
	}
}

// TestWALRecordLimitIs413 maps the WAL's own refusal of a record over
// wal.MaxPayloadSize, as the engine wraps it, to 413: a batch the decoder's
// estimate let through (a body limit above the WAL limit, an Arrow column
// narrower than the WAL stores it) is still the producer's to split.
func TestWALRecordLimitIs413(t *testing.T) {
	w, err := wal.Open(wal.Options{FS: vfs.NewStrictMem(), Dir: "/wal", Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, perr := w.Prepare(make([]byte, wal.MaxPayloadSize+1))
	if perr == nil {
		t.Fatal("wal.Prepare took a payload over MaxPayloadSize")
	}
	s := errorServer()
	code, e := s.appendError(fmt.Errorf("engine: shard s0: %w", perr), nil)
	if code != http.StatusRequestEntityTooLarge || e.Code != codeTooLarge || !strings.Contains(e.Error, perr.Error()) {
		t.Fatalf("%v answered %d %+v, want 413 too_large naming it", perr, code, e)
	}
}
