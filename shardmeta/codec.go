package shardmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// Decode parses a stored manifest strictly and validates it. Beyond JSON
// syntax it refuses, with ErrInvalidManifest: invalid UTF-8; data after the
// manifest; unknown, missing, null or duplicate fields; field names that
// differ from the wire names only in case (encoding/json would accept them);
// values of the wrong type; and anything Validate refuses.
func Decode(data []byte) (*Manifest, error) {
	if !utf8.Valid(data) {
		return nil, invalidf("not valid UTF-8")
	}
	if err := checkStructure(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, invalidf("%v", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Encode validates m and returns its canonical encoding: compact JSON with
// fields in declaration order, map keys sorted and empty collections as []
// and {}. Equal manifests encode to equal bytes, which is what Store relies
// on to recognise its own write when reading back after a timeout.
//
// Strings are not HTML-escaped: <, > and & are one byte each, not six, so
// that a valid UTF-8 string without control characters (what
// engine.ValidateSource allows in a source name) encodes in at most two
// bytes a byte (\" and \\, and the six bytes \u2028 and \u2029 for
// three). Manifests written with the escapes decode as before; nothing
// compares the bytes of one encoder with another's.
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m.Clone()); err != nil {
		return nil, fmt.Errorf("shardmeta: encode manifest: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// shape describes the JSON structure of the manifest for checkStructure.
type shape struct {
	kind   shapeKind
	fields map[string]*shape // kindStruct: every field, all required but those in optional
	elem   *shape            // kindArray, kindMap
	// optional fields of a kindStruct may be absent (never null).
	optional map[string]bool
}

type shapeKind int

const (
	kindScalar shapeKind = iota // a number, string or bool; type-checked by encoding/json
	kindStruct
	kindArray
	kindMap
)

var (
	scalar        = &shape{kind: kindScalar}
	manifestShape = &shape{kind: kindStruct, fields: map[string]*shape{
		"version": scalar, "writer_epoch": scalar, "current_generation": scalar,
		"replay_cursor": scalar,
		"flushed": {kind: kindArray, elem: &shape{kind: kindStruct, fields: map[string]*shape{
			"number": scalar, "file": scalar, "rows": scalar, "bytes": scalar,
			"seq_first": scalar, "seq_last": scalar, "epoch": scalar, "schema_version": scalar,
		}, optional: map[string]bool{"schema_version": true}}},
		"epochs": {kind: kindArray, elem: &shape{kind: kindStruct, fields: map[string]*shape{
			"epoch": scalar, "start_generation": scalar, "start_position": scalar,
			"replay_end_generation": scalar,
		}}},
		"source_offsets": {kind: kindMap, elem: scalar},
		"producer_state": {kind: kindStruct, fields: map[string]*shape{
			"file": scalar, "size": scalar, "crc32c": scalar, "producers": scalar,
		}},
	}, optional: map[string]bool{"producer_state": true}}
)

// checkStructure walks the JSON tokens of data against manifestShape.
func checkStructure(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walk(dec, manifestShape, "manifest"); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidf("data after the manifest object")
	}
	return nil
}

func walk(dec *json.Decoder, sh *shape, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(path, err)
	}
	switch sh.kind {
	case kindArray:
		return walkArray(dec, tok, sh, path)
	case kindStruct, kindMap:
		return walkObject(dec, tok, sh, path)
	}
	if tok == nil {
		return invalidf("%s is null", path)
	}
	if _, ok := tok.(json.Delim); ok {
		return invalidf("%s: want a number or string, got %v", path, tok)
	}
	return nil
}

func walkArray(dec *json.Decoder, tok json.Token, sh *shape, path string) error {
	if tok != json.Delim('[') {
		return invalidf("%s: want an array, got %s", path, describe(tok))
	}
	for i := 0; dec.More(); i++ {
		if err := walk(dec, sh.elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err := dec.Token() // ']'
	return syntaxError(path, err)
}

func walkObject(dec *json.Decoder, tok json.Token, sh *shape, path string) error {
	if tok != json.Delim('{') {
		return invalidf("%s: want an object, got %s", path, describe(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return syntaxError(path, err)
		}
		key := kt.(string) // the decoder guarantees a string key here
		if seen[key] {
			return invalidf("%s: duplicate field %q", path, key)
		}
		seen[key] = true
		child := sh.elem
		if sh.kind == kindStruct {
			if child = sh.fields[key]; child == nil {
				return invalidf("%s: unknown field %q", path, key)
			}
		}
		if err := walk(dec, child, path+"."+key); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return syntaxError(path, err)
	}
	return missingFields(sh, seen, path)
}

func missingFields(sh *shape, seen map[string]bool, path string) error {
	if sh.kind != kindStruct {
		return nil
	}
	var missing []string
	for name := range sh.fields {
		if !seen[name] && !sh.optional[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return invalidf("%s: missing fields %q", path, missing)
}

func syntaxError(path string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return invalidf("%s: malformed JSON: %v", path, err)
}

func describe(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return string(t)
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
