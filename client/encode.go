package client

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// encodeRow writes r as one NDJSON line: the bytes a json.Encoder with
// SetEscapeHTML(false) writes, keys sorted, but without its reflection
// over the map for the values rows are made of (strings, numbers, bools,
// nulls), which cost a producer more CPU than the writer spends decoding
// the line. Any other value, and any string or number the plain path is
// not sure to write as encoding/json would, is written by encoding/json
// itself (TestEncodeRowMatchesEncodingJSON).
func encodeRow(w *bytes.Buffer, r map[string]any) error {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	start := w.Len()
	w.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			w.WriteByte(',')
		}
		if err := encodeString(w, k); err != nil {
			w.Truncate(start)
			return err
		}
		w.WriteByte(':')
		if err := encodeValue(w, r[k]); err != nil {
			w.Truncate(start)
			return err
		}
	}
	w.WriteString("}\n")
	return nil
}

func encodeValue(w *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		w.WriteString("null")
	case string:
		return encodeString(w, v)
	case bool:
		w.WriteString(strconv.FormatBool(v))
	case int:
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(v), 10))
	case int64:
		w.Write(strconv.AppendInt(w.AvailableBuffer(), v, 10))
	case int32:
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(v), 10))
	case float64:
		// encoding/json switches to exponent form outside [1e-6, 1e21):
		// those, and NaN and infinities (an error), it writes itself.
		if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(v) || math.IsInf(v, 0) {
			return marshalInto(w, v)
		}
		w.Write(strconv.AppendFloat(w.AvailableBuffer(), v, 'f', -1, 64))
	default:
		return marshalInto(w, v)
	}
	return nil
}

// encodeString writes s quoted, escaping as encoding/json does: the quote,
// the backslash, \n, \r and \t by their short escapes, valid UTF-8 as it
// is. A string with anything it escapes otherwise (other control bytes,
// U+2028 and U+2029, invalid UTF-8, which it turns into U+FFFD) is left
// to encoding/json whole.
func encodeString(w *bytes.Buffer, s string) error {
	start := w.Len()
	w.WriteByte('"')
	done := 0 // s[:done] is written
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029' {
				w.Truncate(start)
				return marshalInto(w, s)
			}
			i += n
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		esc, ok := shortEscapes[c]
		if !ok {
			w.Truncate(start)
			return marshalInto(w, s)
		}
		w.WriteString(s[done:i])
		w.WriteString(esc)
		i++
		done = i
	}
	w.WriteString(s[done:])
	w.WriteByte('"')
	return nil
}

var shortEscapes = map[byte]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\r': `\r`, '\t': `\t`}

// marshalInto writes v as a json.Encoder without HTML escaping does.
func marshalInto(w *bytes.Buffer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return nil
}
