package shardmeta

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func u64(v uint64) *uint64 { return &v }

func TestBaseStateRoundTrip(t *testing.T) {
	b := &BaseState{Version: 3,
		Files: []BaseFile{{Path: "data/s0/a.parquet", Rows: 10, Bytes: 100},
			{Path: "data/s0/b.parquet", Rows: 3, Bytes: 50, Shard: "s0", SeqFirst: 11, SeqLast: 13}},
		Shards: map[string]ShardMergeState{
			"s0": {Watermark: 4, ObservedEpoch: u64(2), Cutoff: u64(4)},
			"s1": {Watermark: 1, Cutoff: u64(1)}, // legacy
			"s2": {Watermark: 0},
		}}
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBaseState(data)
	if err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	again, _ := got.Encode()
	if string(again) != string(data) {
		t.Fatalf("not canonical:\n%s\n%s", data, again)
	}
	c := got.Clone()
	*c.Shards["s0"].ObservedEpoch = 99
	if *got.Shards["s0"].ObservedEpoch != 2 {
		t.Fatal("Clone shares the epoch pointer")
	}
	empty, err := DecodeBaseState([]byte(`{"version":0,"files":[],"shards":{}}`))
	if err != nil || empty.Files == nil || empty.Shards == nil {
		t.Fatalf("empty state: %v %+v", err, empty)
	}
	// Since the files live in the Iceberg table, a state without them is
	// encoded without the field (a legacy reader refuses it: fail closed).
	if enc, err := empty.Encode(); err != nil || string(enc) != `{"version":0,"shards":{}}` {
		t.Fatalf("empty state encodes as %s (%v)", enc, err)
	}
	if _, err := DecodeBaseState([]byte(`{"version":2,"shards":{}}`)); err != nil {
		t.Fatalf("a state without files: %v", err)
	}
}

func TestDecodeBaseStateFailsClosed(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"not json":           {`{`, "malformed"},
		"trailing":           {`{"version":0,"files":[],"shards":{}} {}`, "data after"},
		"unknown field":      {`{"version":0,"files":[],"shards":{},"x":1}`, `unknown field "x"`},
		"missing shards":     {`{"version":0,"files":[]}`, `missing field "shards"`},
		"null version":       {`{"version":null,"files":[],"shards":{}}`, "null"},
		"duplicate":          {`{"version":0,"version":1,"files":[],"shards":{}}`, "duplicate"},
		"negative rows":      {`{"version":0,"files":[{"path":"data/a","rows":-1,"bytes":0}],"shards":{}}`, "non-negative"},
		"zero rows":          {`{"version":0,"files":[{"path":"data/a","rows":0,"bytes":0}],"shards":{}}`, "rows 0 < 1"},
		"dotdot path":        {`{"version":0,"files":[{"path":"data/../x","rows":1,"bytes":0}],"shards":{}}`, "not clean"},
		"absolute path":      {`{"version":0,"files":[{"path":"/data/x","rows":1,"bytes":0}],"shards":{}}`, "absolute"},
		"outside data":       {`{"version":0,"files":[{"path":"x.parquet","rows":1,"bytes":0}],"shards":{}}`, "not under data/"},
		"duplicate file":     {`{"version":0,"files":[{"path":"data/a","rows":1,"bytes":0},{"path":"data/a","rows":1,"bytes":0}],"shards":{}}`, "also files[0]"},
		"unknown file field": {`{"version":0,"files":[{"path":"data/a","rows":1,"bytes":0,"z":1}],"shards":{}}`, `unknown field "z"`},
		"seq without shard":  {`{"version":0,"files":[{"path":"data/a","rows":1,"bytes":0,"seq_first":1,"seq_last":2}],"shards":{}}`, "without a shard"},
		"shard not in path":  {`{"version":0,"files":[{"path":"data/s1/a","rows":1,"bytes":0,"shard":"s0","seq_first":1,"seq_last":2}],"shards":{}}`, "not under data/s0/"},
		"empty seq range":    {`{"version":0,"files":[{"path":"data/s0/a","rows":1,"bytes":0,"shard":"s0","seq_first":3,"seq_last":2}],"shards":{}}`, "seq range [3, 2] is empty"},
		"shard number":       {`{"version":0,"files":[{"path":"data/s0/a","rows":1,"bytes":0,"shard":7}],"shards":{}}`, "want a string"},
		"epoch no cutoff":    {`{"version":0,"files":[],"shards":{"s0":{"watermark":1,"observed_epoch":2}}}`, `shard "s0": observed_epoch 2 has no cutoff`},
		"epoch string":       {`{"version":0,"files":[],"shards":{"s0":{"watermark":1,"observed_epoch":"2","cutoff":1}}}`, "want a number"},
		"epoch null":         {`{"version":0,"files":[],"shards":{"s0":{"watermark":1,"observed_epoch":null,"cutoff":1}}}`, "null"},
		"epoch fraction":     {`{"version":0,"files":[],"shards":{"s0":{"watermark":1,"observed_epoch":1.5,"cutoff":1}}}`, "non-negative integer"},
		"bad shard name":     {`{"version":0,"files":[],"shards":{"a/b":{"watermark":1}}}`, "invalid name"},
		"missing watermark":  {`{"version":0,"files":[],"shards":{"s0":{}}}`, `missing field "watermark"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBaseState([]byte(tc.in))
			if err == nil {
				t.Fatalf("decoded %s", tc.in)
			}
			if !errors.Is(err, ErrInvalidBaseState) || !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("error %v does not wrap ErrInvalidBaseState and ErrInvalidManifest", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestBaseKeys(t *testing.T) {
	k := Keys{Prefix: "p/q", Table: "t"}
	if k.BaseState() != "/p/q/t/base/state" || k.BaseLock() != "/p/q/t/base/lock" {
		t.Fatalf("keys %s %s", k.BaseState(), k.BaseLock())
	}
}

func TestLoadBaseState(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	b, rev, err := s.LoadBaseState(ctx)
	if err != nil || rev != 0 || b.Version != 0 || len(b.Files) != 0 || b.Shards == nil {
		t.Fatalf("absent: %+v %d %v", b, rev, err)
	}
	want := &BaseState{Version: 1, Files: []BaseFile{{Path: "data/s0/f.parquet", Rows: 2, Bytes: 9}},
		Shards: map[string]ShardMergeState{"s0": {Watermark: 2, ObservedEpoch: u64(1), Cutoff: u64(2)}}}
	data, _ := want.Encode()
	cli := server(t).Client()
	if _, err := cli.Put(ctx, s.Keys().BaseState(), string(data)); err != nil {
		t.Fatal(err)
	}
	b, rev, err = s.LoadBaseState(ctx)
	if err != nil || rev == 0 || b.Version != 1 || b.Shards["s0"].Watermark != 2 {
		t.Fatalf("stored: %+v %d %v", b, rev, err)
	}
	if _, err := cli.Put(ctx, s.Keys().BaseState(), `{"version":1}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LoadBaseState(ctx); !errors.Is(err, ErrInvalidBaseState) {
		t.Fatalf("malformed stored state: %v", err)
	}
}

// FuzzBaseStateDecode: DecodeBaseState never panics; what it accepts is
// valid and re-encodes to bytes that decode to an equal state and encode
// the same. The seed corpus in testdata/fuzz/FuzzBaseStateDecode runs with
// every go test.
func FuzzBaseStateDecode(f *testing.F) {
	seeds := []string{
		`{"version":0,"files":[],"shards":{}}`,
		`{"version":3,"files":[{"path":"data/s0/a.parquet","rows":10,"bytes":100},` +
			`{"path":"data/s0/b.parquet","rows":3,"bytes":50,"shard":"s0","seq_first":11,"seq_last":13}],` +
			`"shards":{"s0":{"watermark":4,"observed_epoch":2,"cutoff":4},"s1":{"watermark":1,"cutoff":1}}}`,
		`{"version":1,"files":[{"path":"data/s0/a","rows":1,"bytes":0,"shard":"s1"}],"shards":{}}`,
		`{"version":1,"files":[],"shards":{"s0":{"watermark":1,"observed_epoch":null}}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBaseState(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidBaseState) {
				t.Fatalf("DecodeBaseState error %v does not wrap ErrInvalidBaseState", err)
			}
			return
		}
		enc, err := b.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded state: %v", err)
		}
		b2, err := DecodeBaseState(enc)
		if err != nil {
			t.Fatalf("DecodeBaseState of the re-encoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("re-decoding changed the state:\n%+v\n%+v", b, b2)
		}
		enc2, err := b2.Encode()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable (%v):\n%s\n%s", err, enc, enc2)
		}
	})
}
