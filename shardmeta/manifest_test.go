package shardmeta

import (
	"errors"
	"strings"
	"testing"
)

// validManifest tells a coherent story: epoch 1 flushed generations 1 and 2
// (positions 1..100, since drained); epoch 2 claimed at WAL tail 120 and
// replayed into generation 3; epoch 3 claimed at tail 260, replayed into
// generation 4 and flushed generation 5; generation 6 is active.
func validManifest() *Manifest {
	return &Manifest{
		Version: ManifestVersion, WriterEpoch: 3, CurrentGeneration: 6, ReplayCursor: 400,
		Flushed: []Generation{
			{Number: 3, File: "gen/000003-e2.parquet", Rows: 100, Bytes: 4096, SeqFirst: 101, SeqLast: 200, Epoch: 2},
			{Number: 4, File: "gen/000004-e3.parquet", Rows: 100, Bytes: 4096, SeqFirst: 201, SeqLast: 300, Epoch: 3},
			{Number: 5, File: "gen/000005-e3.parquet", Rows: 90, Bytes: 4000, SeqFirst: 305, SeqLast: 400, Epoch: 3},
		},
		Epochs: []EpochRecord{
			{Epoch: 1, StartGeneration: 1, StartPosition: 0},
			{Epoch: 2, StartGeneration: 3, StartPosition: 120, ReplayEndGeneration: 3},
			{Epoch: 3, StartGeneration: 4, StartPosition: 260, ReplayEndGeneration: 4},
		},
		SourceOffsets: map[string]int64{"kafka/rollouts/0": 1200, "kafka/rollouts/1": 980},
	}
}

func TestValidateAccepts(t *testing.T) {
	drained := validManifest()
	drained.Flushed = nil // all merged and drained: the cursor stays
	claimedNothingFlushed := NewManifest()
	claimedNothingFlushed.WriterEpoch = 1
	claimedNothingFlushed.Epochs = []EpochRecord{{Epoch: 1, StartGeneration: 1}}
	for name, m := range map[string]*Manifest{
		"new":     NewManifest(),
		"claimed": claimedNothingFlushed,
		"rich":    validManifest(),
		"drained": drained,
	} {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

// Every fail-closed rule has a case here that must be refused.
func TestValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(m *Manifest)
		want   string
	}{
		{"unknown version", func(m *Manifest) { m.Version = 2 }, "version 2 is not supported"},
		{"version zero", func(m *Manifest) { m.Version = 0 }, "version 0 is not supported"},
		{"current generation zero", func(m *Manifest) { m.CurrentGeneration = 0 }, "current_generation is 0"},
		{"generation number zero", func(m *Manifest) { m.Flushed[0].Number = 0 }, "flushed[0].number is 0"},
		{"generations repeat", func(m *Manifest) { m.Flushed[1].Number = 3 }, "flushed[1].number 3 is not above flushed[0].number 3"},
		{"generations descend", func(m *Manifest) { m.Flushed[0].Number, m.Flushed[1].Number = 4, 3 }, "flushed[1].number 3 is not above"},
		{"generation at current", func(m *Manifest) { m.Flushed[2].Number = 6 }, "flushed[2].number 6 is not below current_generation 6"},
		{"generation above current", func(m *Manifest) { m.CurrentGeneration = 5 }, "flushed[2].number 5 is not below current_generation 5"},
		{"seq range empty", func(m *Manifest) { m.Flushed[0].SeqFirst = 0 }, "seq_first is 0"},
		{"seq range inverted", func(m *Manifest) { m.Flushed[1].SeqFirst = 301 }, "seq range 301..300 is inverted"},
		{"seq ranges overlap", func(m *Manifest) { m.Flushed[1].SeqFirst = 200 }, "seq_first 200 is not above seq_last 200 of generation 3"},
		{"seq ranges descend", func(m *Manifest) {
			m.Flushed[1].SeqFirst, m.Flushed[1].SeqLast = 50, 60
		}, "seq_first 50 is not above seq_last 200"},
		{"generation epoch above writer", func(m *Manifest) { m.Flushed[2].Epoch = 4 }, "epoch 4 > writer_epoch 3"},
		{"generation epoch zero", func(m *Manifest) { m.Flushed[0].Epoch = 0 }, "(generation 3): epoch is 0"},
		{"generation epochs decrease", func(m *Manifest) { m.Flushed[2].Epoch = 2 }, "epoch 2 is below epoch 3 of generation 4"},
		{"replay cursor below a seq_last", func(m *Manifest) { m.ReplayCursor = 250 }, "replay_cursor 250 < seq_last 400"},
		{"epochs repeat", func(m *Manifest) {
			m.Epochs[2].Epoch = 2
			m.WriterEpoch = 2
			m.Flushed[1].Epoch, m.Flushed[2].Epoch = 2, 2
		}, "epochs[2].epoch 2 is not above epochs[1].epoch 2"},
		{"epochs descend", func(m *Manifest) { m.Epochs[0].Epoch = 5 }, "epochs[1].epoch 2 is not above epochs[0].epoch 5"},
		{"last epoch is not writer epoch", func(m *Manifest) { m.WriterEpoch = 4 }, "epochs[2].epoch 3 (the last) != writer_epoch 4"},
		{"writer epoch without records", func(m *Manifest) { m.Epochs = nil }, "writer_epoch is 3 but epochs is empty"},
		{"records without writer epoch", func(m *Manifest) {
			*m = *NewManifest()
			m.Epochs = []EpochRecord{{Epoch: 1, StartGeneration: 1}}
		}, "epochs has 1 records but writer_epoch is 0"},
		{"record epoch zero", func(m *Manifest) { m.Epochs[0].Epoch = 0 }, "epochs[0].epoch is 0"},
		{"start generation zero", func(m *Manifest) { m.Epochs[0].StartGeneration = 0 }, "start_generation 0 outside [1, current_generation 6]"},
		{"start generation above current", func(m *Manifest) { m.Epochs[2].StartGeneration = 7 }, "start_generation 7 outside"},
		{"start generations decrease", func(m *Manifest) { m.Epochs[1].StartGeneration = 5; m.Epochs[1].ReplayEndGeneration = 0 }, "start_generation 4 is below 5 of epoch 2"},
		{"start positions decrease", func(m *Manifest) { m.Epochs[2].StartPosition = 100 }, "start_position 100 is below 120 of epoch 2"},
		{"replay end below start", func(m *Manifest) { m.Epochs[2].ReplayEndGeneration = 3 }, "replay_end_generation 3 outside [start_generation 4, current_generation 6)"},
		{"replay end not committed", func(m *Manifest) { m.Epochs[2].ReplayEndGeneration = 6 }, "replay_end_generation 6 outside"},
		{"replay end past next start", func(m *Manifest) { m.Epochs[1].ReplayEndGeneration = 4 }, "replay_end_generation 4 is not below start_generation 4 of epoch 3"},
		{"file empty", func(m *Manifest) { m.Flushed[1].File = "" }, `file "" is empty`},
		{"file absolute", func(m *Manifest) { m.Flushed[1].File = "/etc/passwd" }, "not a clean relative path"},
		{"file escapes", func(m *Manifest) { m.Flushed[1].File = "../other/g.parquet" }, "not a clean relative path"},
		{"file unclean", func(m *Manifest) { m.Flushed[1].File = "gen//g.parquet" }, "not a clean relative path"},
		{"file dot", func(m *Manifest) { m.Flushed[1].File = "." }, "not a clean relative path"},
		{"file backslash", func(m *Manifest) { m.Flushed[1].File = `gen\g.parquet` }, "NUL or a backslash"},
		{"file repeated", func(m *Manifest) { m.Flushed[2].File = m.Flushed[0].File }, "flushed[2].file \"gen/000003-e2.parquet\" is also flushed[0].file"},
		{"rows negative", func(m *Manifest) { m.Flushed[0].Rows = -1 }, "rows -1 < 0"},
		{"bytes negative", func(m *Manifest) { m.Flushed[0].Bytes = -1 }, "bytes -1 < 0"},
		{"offset negative", func(m *Manifest) { m.SourceOffsets["kafka/rollouts/1"] = -5 }, `source_offsets["kafka/rollouts/1"] is -5 < 0`},
		{"source name empty", func(m *Manifest) { m.SourceOffsets[""] = 1 }, "empty source name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := validManifest()
			tc.mutate(m)
			err := m.Validate()
			if err == nil {
				t.Fatalf("Validate accepted %+v", m)
			}
			if !errors.Is(err, ErrInvalidManifest) {
				t.Errorf("error %v does not wrap ErrInvalidManifest", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if _, err := m.Encode(); !errors.Is(err, ErrInvalidManifest) {
				t.Errorf("Encode: %v, want ErrInvalidManifest", err)
			}
		})
	}
	var nilManifest *Manifest
	if err := nilManifest.Validate(); !errors.Is(err, ErrInvalidManifest) {
		t.Errorf("nil manifest: %v", err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	m := validManifest()
	c := m.Clone()
	c.Flushed[0].Rows = 7
	c.Epochs[0].StartPosition = 7
	c.SourceOffsets["kafka/rollouts/0"] = 7
	if !m.Equal(validManifest()) {
		t.Fatalf("mutating the clone changed the original: %+v", m)
	}
	if m.Equal(c) {
		t.Fatal("Equal ignores differences")
	}
	var zero Manifest
	if got := zero.Clone(); got.Flushed == nil || got.Epochs == nil || got.SourceOffsets == nil {
		t.Fatalf("Clone of nil collections: %+v, want empty ones", got)
	}
}

func TestCheckTransition(t *testing.T) {
	flush := func(m *Manifest) {
		m.Flushed = append(m.Flushed, Generation{Number: 6, File: "gen/000006-e3.parquet", Rows: 10, Bytes: 99, SeqFirst: 401, SeqLast: 410, Epoch: 3})
		m.CurrentGeneration, m.ReplayCursor = 7, 410
		m.SourceOffsets["kafka/rollouts/0"] = 1300
	}
	for _, tc := range []struct {
		name   string
		mutate func(m *Manifest)
		want   string // "" = accepted
	}{
		{"identity", func(*Manifest) {}, ""},
		{"flush", flush, ""},
		{"drain a prefix", func(m *Manifest) { m.Flushed = m.Flushed[2:] }, ""},
		{"drain all", func(m *Manifest) { m.Flushed = nil }, ""},
		{"drain and flush", func(m *Manifest) { flush(m); m.Flushed = m.Flushed[1:] }, ""},
		{"claim", func(m *Manifest) {
			m.WriterEpoch = 4
			m.Epochs = append(m.Epochs, EpochRecord{Epoch: 4, StartGeneration: 6, StartPosition: 420})
		}, ""},
		{"new source", func(m *Manifest) { m.SourceOffsets["kafka/rollouts/2"] = 1 }, ""},
		{"writer epoch decreases", func(m *Manifest) {
			m.WriterEpoch = 2
			m.Epochs = m.Epochs[:2]
			m.Flushed = m.Flushed[:1]
			m.ReplayCursor = 200
		}, "writer_epoch decreases from 3 to 2"},
		{"current generation decreases", func(m *Manifest) {
			m.CurrentGeneration = 5
			m.Flushed = m.Flushed[:2]
			m.ReplayCursor = 300
		}, "current_generation decreases from 6 to 5"},
		{"replay cursor decreases", func(m *Manifest) {
			m.Flushed[2].SeqLast, m.ReplayCursor = 399, 399
		}, "replay_cursor decreases from 400 to 399"},
		{"offset decreases", func(m *Manifest) { m.SourceOffsets["kafka/rollouts/1"] = 979 }, `source_offsets["kafka/rollouts/1"] decreases from 980 to 979`},
		{"source disappears", func(m *Manifest) { delete(m.SourceOffsets, "kafka/rollouts/1") }, `source_offsets["kafka/rollouts/1"] (980) disappears`},
		{"committed generation changes", func(m *Manifest) { m.Flushed[1].Rows = 99 }, "committed generation 4 changes"},
		{"drain from the middle", func(m *Manifest) {
			m.Flushed = []Generation{m.Flushed[0], m.Flushed[2]}
		}, "committed generation 3 changes or reappears"},
		{"drained generation reappears", func(m *Manifest) {
			m.Flushed = append([]Generation{{Number: 2, File: "gen/2", Rows: 1, Bytes: 1, SeqFirst: 51, SeqLast: 100, Epoch: 1}}, m.Flushed...)
		}, "cannot be added"},
		{"added generation of another epoch", func(m *Manifest) {
			flush(m)
			m.Flushed = m.Flushed[3:]
			m.Flushed[0].Epoch = 2
		}, "added generation 6 has epoch 2, want writer_epoch 3"},
		{"added generation covers committed positions", func(m *Manifest) {
			m.Flushed = nil
			m.Flushed = append(m.Flushed, Generation{Number: 6, File: "gen/6", Rows: 1, Bytes: 1, SeqFirst: 390, SeqLast: 410, Epoch: 3})
			m.CurrentGeneration, m.ReplayCursor = 7, 410
		}, "added generation 6 starts at seq 390, not above old replay_cursor 400"},
		{"epoch record dropped", func(m *Manifest) {
			m.Epochs = m.Epochs[1:]
		}, "the record of epoch 1 is dropped, but it is one of the newest 16 epochs"},
		{"epoch record changes", func(m *Manifest) { m.Epochs[1].StartPosition = 121 }, "the record of epoch 2 changes"},
		{"replay end changes after it was set", func(m *Manifest) { flush(m); m.Epochs[2].ReplayEndGeneration = 5 }, "the record of epoch 3 changes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, next := validManifest(), validManifest()
			tc.mutate(next)
			if err := next.Validate(); err != nil {
				t.Fatalf("test case builds an invalid manifest: %v", err)
			}
			err := CheckTransition(old, next)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckTransition: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("CheckTransition accepted %+v", next)
			case !errors.Is(err, ErrInvalidTransition) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("CheckTransition: %v, want ErrInvalidTransition containing %q", err, tc.want)
			}
		})
	}
}

// Setting replay_end_generation once (from 0) is allowed.
func TestCheckTransitionSetsReplayEndOnce(t *testing.T) {
	old := NewManifest()
	old.WriterEpoch = 1
	old.Epochs = []EpochRecord{{Epoch: 1, StartGeneration: 1}}
	next := old.Clone()
	next.Flushed = []Generation{{Number: 1, File: "g1", Rows: 1, Bytes: 1, SeqFirst: 1, SeqLast: 5, Epoch: 1}}
	next.CurrentGeneration, next.ReplayCursor = 2, 5
	next.Epochs[0].ReplayEndGeneration = 1
	if err := CheckTransition(old, next); err != nil {
		t.Fatal(err)
	}
	if err := CheckTransition(nil, next); !errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("nil old: %v", err)
	}
}

func TestKeys(t *testing.T) {
	k := Keys{Prefix: "rollwal/prod", Table: "rollouts"}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		k.Epoch("s-0"):    "/rollwal/prod/rollouts/shards/s-0/epoch",
		k.Owner("s-0"):    "/rollwal/prod/rollouts/shards/s-0/owner",
		k.Manifest("s-0"): "/rollwal/prod/rollouts/shards/s-0/manifest",
		k.Root():          "/rollwal/prod/rollouts/",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	for _, bad := range []Keys{
		{Prefix: "", Table: "t"},
		{Prefix: "/rollwal", Table: "t"},
		{Prefix: "rollwal/", Table: "t"},
		{Prefix: "a//b", Table: "t"},
		{Prefix: "p", Table: ""},
		{Prefix: "p", Table: "a/b"},
		{Prefix: "p", Table: ".."},
		{Prefix: "p", Table: "tab le"},
		{Prefix: "p", Table: strings.Repeat("t", 129)},
		// The data directory's own entries: the table's directory would be
		// the lock file, the embedded etcd's directory or its endpoint file.
		{Prefix: "p", Table: "LOCK"},
		{Prefix: "p", Table: "lock"}, // the same file on a case-insensitive filesystem
		{Prefix: "p", Table: "etcd"},
		{Prefix: "p", Table: "etcd.endpoint"},
		{Prefix: "p", Table: "etcd.endpoint.tmp"},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%+v: Validate = %v, want ErrInvalidName", bad, err)
		}
	}
	if err := ValidateShard(strings.Repeat("s", 128)); err != nil {
		t.Errorf("128-byte shard name: %v", err)
	}
	for _, bad := range []string{"", "a/b", "é", ".", strings.Repeat("s", 129)} {
		if err := ValidateShard(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("shard %q: %v, want ErrInvalidName", bad, err)
		}
	}
}
