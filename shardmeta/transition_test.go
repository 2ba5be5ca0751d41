package shardmeta

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTransitionsGolden walks manifests through the shard lifecycle in
// testdata/transitions. Commands:
//
//	state    set the current manifest (validated)
//	next     validate and CheckTransition from the current manifest; on ok
//	         it becomes current
//	encode   print the current manifest's wire encoding
//
// A manifest is written as a header line of key=value (version,
// writer_epoch, current_generation, replay_cursor; version defaults to 1
// and current_generation to 1) followed by lines
//
//	gen <number> <file> rows=<n> bytes=<n> seq=<first>-<last> epoch=<e>
//	epoch <epoch> start_generation=<g> start_position=<p> [replay_end_generation=<g>]
//	source <name>=<offset>
//
// Rewrite the expectations with: go test ./shardmeta -run TransitionsGolden -rewrite
func TestTransitionsGolden(t *testing.T) {
	var cur *Manifest
	datadriven.RunTest(t, "testdata/transitions", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "state", "next":
			m, err := parseManifest(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			if err := m.Validate(); err != nil {
				return "error: " + err.Error()
			}
			if d.Cmd == "next" {
				if err := CheckTransition(cur, m); err != nil {
					return "error: " + err.Error()
				}
			}
			cur = m
			return "ok"
		case "encode":
			data, err := cur.Encode()
			if err != nil {
				return "error: " + err.Error()
			}
			return string(data)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func parseManifest(input string) (*Manifest, error) {
	m := NewManifest()
	lines := strings.Split(strings.TrimSpace(input), "\n")
	if err := parseHeader(m, lines[0]); err != nil {
		return nil, err
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		var err error
		switch {
		case len(f) == 0:
		case f[0] == "gen" && len(f) == 7:
			err = parseGen(m, f[1:])
		case f[0] == "epoch" && (len(f) == 4 || len(f) == 5):
			err = parseEpochRecord(m, f[1:])
		case f[0] == "source" && len(f) == 2:
			name, off, _ := strings.Cut(f[1], "=")
			m.SourceOffsets[name], err = strconv.ParseInt(off, 10, 64)
		default:
			err = fmt.Errorf("cannot parse %q", line)
		}
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// kv parses key=value fields into unsigned integers.
func kv(fields []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", f)
		}
		if k == "seq" {
			a, b, _ := strings.Cut(v, "-")
			first, err1 := strconv.ParseUint(a, 10, 64)
			last, err2 := strconv.ParseUint(b, 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("seq=%s: want first-last", v)
			}
			out["seq_first"], out["seq_last"] = first, last
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out[k] = n
	}
	return out, nil
}

func parseHeader(m *Manifest, line string) error {
	h, err := kv(strings.Fields(line))
	if err != nil {
		return err
	}
	if v, ok := h["version"]; ok {
		m.Version = int(v)
	}
	if v, ok := h["current_generation"]; ok {
		m.CurrentGeneration = v
	}
	m.WriterEpoch, m.ReplayCursor = h["writer_epoch"], h["replay_cursor"]
	return nil
}

func parseGen(m *Manifest, f []string) error {
	n, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return err
	}
	a, err := kv(f[2:])
	if err != nil {
		return err
	}
	m.Flushed = append(m.Flushed, Generation{
		Number: n, File: f[1], Rows: int64(a["rows"]), Bytes: int64(a["bytes"]),
		SeqFirst: a["seq_first"], SeqLast: a["seq_last"], Epoch: a["epoch"],
	})
	return nil
}

func parseEpochRecord(m *Manifest, f []string) error {
	e, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return err
	}
	a, err := kv(f[1:])
	if err != nil {
		return err
	}
	m.Epochs = append(m.Epochs, EpochRecord{
		Epoch: e, StartGeneration: a["start_generation"], StartPosition: a["start_position"],
		ReplayEndGeneration: a["replay_end_generation"],
	})
	return nil
}
