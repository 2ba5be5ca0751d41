package shardmeta

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func mustEncode(t testing.TB, m *Manifest) []byte {
	t.Helper()
	data, err := m.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return data
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for name, m := range map[string]*Manifest{"new": NewManifest(), "rich": validManifest()} {
		data := mustEncode(t, m)
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: Decode(%s): %v", name, data, err)
		}
		if !got.Equal(m) {
			t.Fatalf("%s: round trip changed the manifest:\n got %+v\nwant %+v", name, got, m)
		}
		if again := mustEncode(t, got); !bytes.Equal(again, data) {
			t.Fatalf("%s: encoding is not canonical:\n%s\n%s", name, data, again)
		}
	}
	// Nil collections encode as empty ones, as NewManifest's do.
	m := NewManifest()
	m.Flushed, m.Epochs, m.SourceOffsets = nil, nil, nil
	if got, want := string(mustEncode(t, m)), string(mustEncode(t, NewManifest())); got != want {
		t.Fatalf("nil collections encode as %s, want %s", got, want)
	}
}

func TestNewManifestWireFormat(t *testing.T) {
	const want = `{"version":1,"writer_epoch":0,"current_generation":1,"replay_cursor":0,"flushed":[],"epochs":[],"source_offsets":{}}`
	if got := string(mustEncode(t, NewManifest())); got != want {
		t.Fatalf("NewManifest encodes as\n%s\nwant\n%s", got, want)
	}
}

// Decode refuses every structural deviation from the wire format, not only
// what encoding/json would refuse.
func TestDecodeStrict(t *testing.T) {
	valid := string(mustEncode(t, validManifest()))
	if _, err := Decode([]byte(valid)); err != nil {
		t.Fatalf("valid manifest refused: %v", err)
	}
	pretty := strings.NewReplacer(",", ",\n  ", "{", "{\n  ").Replace(valid) + "\n"
	if _, err := Decode([]byte(pretty)); err != nil {
		t.Fatalf("indented manifest refused: %v", err)
	}
	replace := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("test setup: %q not in %s", old, valid)
		}
		return strings.Replace(valid, old, new, 1)
	}
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "", "malformed JSON"},
		{"truncated", valid[:len(valid)-1], "malformed JSON"},
		{"not an object", "[]", "want an object, got ["},
		{"null", "null", "want an object, got null"},
		{"trailing object", valid + "{}", "data after the manifest"},
		{"trailing garbage", valid + "x", "data after the manifest"},
		{"unknown field", replace(`"version":1`, `"version":1,"extra":true`), `unknown field "extra"`},
		{"unknown nested field", replace(`"number":3`, `"number":3,"crc":7`), `manifest.flushed[0]: unknown field "crc"`},
		{"field in other case", replace(`"writer_epoch"`, `"Writer_Epoch"`), `unknown field "Writer_Epoch"`},
		{"duplicate field", replace(`"version":1`, `"version":1,"version":1`), `duplicate field "version"`},
		{"duplicate source", replace(`"kafka/rollouts/1":980`, `"kafka/rollouts/1":980,"kafka/rollouts/1":1`), `duplicate field "kafka/rollouts/1"`},
		{"missing field", replace(`"replay_cursor":400,`, ``), `missing fields ["replay_cursor"]`},
		{"missing nested field", replace(`"epoch":1,"start_generation":1,`, ``), `manifest.epochs[0]: missing fields ["epoch" "start_generation"]`},
		{"null scalar", replace(`"writer_epoch":3`, `"writer_epoch":null`), "manifest.writer_epoch is null"},
		{"null list", replace(`"epochs":[`, `"epochs":null,"x":[`), "manifest.epochs: want an array, got null"},
		{"object for scalar", replace(`"version":1`, `"version":{}`), "manifest.version: want a number or string"},
		{"list as object", replace(`"flushed":[`, `"flushed":{"a":[`), "want an array, got {"},
		{"string for number", replace(`"version":1`, `"version":"1"`), "cannot unmarshal string"},
		{"float", replace(`"writer_epoch":3`, `"writer_epoch":3.0`), "cannot unmarshal number 3.0"},
		{"exponent", replace(`"writer_epoch":3`, `"writer_epoch":3e0`), "cannot unmarshal number 3e0"},
		{"negative epoch", replace(`"writer_epoch":3`, `"writer_epoch":-3`), "cannot unmarshal number -3"},
		{"epoch overflow", replace(`"writer_epoch":3`, `"writer_epoch":18446744073709551616`), "cannot unmarshal number"},
		{"number for file", replace(`"file":"gen/000003-e2.parquet"`, `"file":3`), "cannot unmarshal number"},
		{"invalid UTF-8", replace(`gen/000003`, "gen/\xff00003"), "not valid UTF-8"},
		{"invalid after parse", replace(`"version":1`, `"version":2`), "version 2 is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode([]byte(tc.data))
			if err == nil {
				t.Fatalf("Decode accepted %s as %+v", tc.data, m)
			}
			if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode: %v, want ErrInvalidManifest containing %q", err, tc.want)
			}
		})
	}
}

// FuzzManifestDecode: Decode never panics; what it accepts is valid and
// re-encodes to bytes that decode to the same manifest and encode the same.
// The seed corpus in testdata/fuzz/FuzzManifestDecode runs with every go test.
func FuzzManifestDecode(f *testing.F) {
	f.Add(mustEncode(f, NewManifest()))
	f.Add(mustEncode(f, validManifest()))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("Decode error %v does not wrap ErrInvalidManifest", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode accepted a manifest Validate refuses: %v", err)
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded manifest: %v", err)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode of the re-encoding %s: %v", enc, err)
		}
		if !m2.Equal(m) {
			t.Fatalf("re-decoding changed the manifest:\n%+v\n%+v", m, m2)
		}
		if enc2 := mustEncode(t, m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		if err := CheckTransition(m, m2); err != nil {
			t.Fatalf("a manifest cannot transition to itself: %v", err)
		}
	})
}

// The checked-in seeds say by name whether Decode must accept them; this
// keeps the near-misses near misses.
func TestFuzzSeedsClassified(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzManifestDecode")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lit, ok := strings.CutPrefix(strings.TrimSpace(string(raw)), "go test fuzz v1\n[]byte(")
		lit, ok2 := strings.CutSuffix(lit, ")")
		data, err := strconv.Unquote(lit)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a []byte seed (%v)", e.Name(), err)
		}
		_, err = Decode([]byte(data))
		switch {
		case strings.HasPrefix(e.Name(), "valid-") && err != nil:
			t.Errorf("%s: refused: %v", e.Name(), err)
		case strings.HasPrefix(e.Name(), "invalid-") && err == nil:
			t.Errorf("%s: accepted", e.Name())
		}
	}
}

// TestEncodeKeepsHTMLCharacters: <, > and & in a source name are encoded as
// themselves, one byte each, not as Go's six-byte \u003c HTML escapes; a
// manifest written with the escapes (before this encoding) still decodes
// to the same manifest.
func TestEncodeKeepsHTMLCharacters(t *testing.T) {
	m := NewManifest()
	m.SourceOffsets["<a&b>"] = 7
	data := mustEncode(t, m)
	const want = `"source_offsets":{"<a&b>":7}`
	if !strings.Contains(string(data), want) {
		t.Fatalf("encoding %s, want it to hold %s", data, want)
	}
	old := strings.Replace(string(data), "<a&b>", `\u003ca\u0026b\u003e`, 1)
	got, err := Decode([]byte(old))
	if err != nil || !got.Equal(m) {
		t.Fatalf("Decode of the escaped encoding: %+v, %v", got, err)
	}
}
