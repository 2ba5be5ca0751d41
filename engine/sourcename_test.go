package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/vfs"
)

// TestSourceNamesRefused: a source name that is not valid UTF-8 or holds a
// control character (C0, DEL, C1) is refused, naming the problem and the
// byte, and nothing is written. Invalid UTF-8 would be rewritten to U+FFFD
// in the manifest, where "a\xff" and "a\xfe" become one key and the next
// open refuses the manifest; a control character would be stored in the
// manifest but refused by the snapshot store for good.
func TestSourceNamesRefused(t *testing.T) {
	for name, want := range map[string]string{
		"a\xff":          "byte 1 is not valid UTF-8",
		"a\xfe":          "byte 1 is not valid UTF-8",
		"ab\xed\xa0\x80": "byte 2 is not valid UTF-8", // a UTF-8-encoded surrogate
		"\x00":           "control character U+0000 at byte 0",
		"topic\n0":       "control character U+000A at byte 5",
		"a\x7f":          "control character U+007F at byte 1",
		"é\u0085":        "control character U+0085 at byte 2",
		"\u009f":         "control character U+009F at byte 0",
	} {
		err := ValidateSource(Source{Name: name, Offset: 1})
		if !errors.Is(err, ErrInvalidAppend) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateSource(%q) = %v, want ErrInvalidAppend saying %q", name, err, want)
		}
	}
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(context.Background())
	s := mustOpen(t, h, "s0")
	for _, name := range []string{"a\xff", "a\xfe"} {
		if _, err := s.Append(context.Background(), rows("n", 0, 1), Source{Name: name, Offset: 1}); !errors.Is(err, ErrInvalidAppend) {
			t.Fatalf("append with source %q: %v, want ErrInvalidAppend", name, err)
		}
	}
	if len(memtableIDs(s)) != 0 {
		t.Fatal("a refused append stored rows")
	}
}

// acceptedNames are source names the engine takes: printable or not,
// escaped by JSON or not.
var acceptedNames = []string{
	"kafka/rollouts/0", "<a&b>", `quote" and \backslash`, "line\u2028para\u2029", "no\u00a0break",
	"zero\u200bwidth", "\ufeffbom", "日本語/トピック", "\U0001F600", "private\ue000use", "unassigned\U000E0080",
	"\ufffd", "tab-free spaces  ", strings.Repeat("é", MaxSourceBytes/2),
}

// TestSnapshotStoreTakesEverySourceName: every name ValidateSource accepts
// is a key part the snapshot store accepts, so its offset can always be
// persisted; names drawn at random check the same.
func TestSnapshotStoreTakesEverySourceName(t *testing.T) {
	check := func(name string) {
		t.Helper()
		if ValidateSource(Source{Name: name}) != nil || name == "" {
			return
		}
		if err := (snapshot.Key{Table: "rollouts", Shard: "s0", Source: name}).Validate(); err != nil {
			t.Errorf("the engine accepts source %q but the snapshot store refuses it: %v", name, err)
		}
	}
	for _, name := range acceptedNames {
		if err := ValidateSource(Source{Name: name}); err != nil {
			t.Errorf("ValidateSource(%q): %v", name, err)
		}
		check(name)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		var b strings.Builder
		for range 1 + rng.IntN(8) {
			r := rune(rng.IntN(utf8.MaxRune + 1))
			if rng.IntN(4) == 0 {
				r = rune(rng.IntN(0x3000))
			}
			b.WriteRune(r)
		}
		check(b.String())
	}
}
