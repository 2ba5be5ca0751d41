package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// TestLimitsKeepManifestBounded: Options.Validate refuses limits whose
// worst-case manifest passes MaxManifestBytes, naming the limits and the
// size, and accepts the defaults and the largest generation count that
// fits beside them.
func TestLimitsKeepManifestBounded(t *testing.T) {
	validate := func(gens, sources int) error {
		o := testOptions(vfs.NewStrictMem(), "t")
		o.MaxUnmergedGenerations, o.MaxSources = gens, sources
		o.EnsureDefaults()
		return o.Validate()
	}
	if err := validate(0, 0); err != nil {
		t.Fatalf("default limits: %v", err)
	}
	for _, c := range [][2]int{{5000, DefaultMaxSources}, {DefaultMaxUnmergedGenerations, 4096}, {5000, 4096}} {
		err := validate(c[0], c[1])
		b := shardmeta.ManifestBound(c[0], c[1], MaxSourceBytes)
		want := fmt.Sprintf("max unmerged generations %d and max sources %d allow a shard manifest of %d bytes", c[0], c[1], b)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("limits %v: %v, want an error saying %q", c, err, want)
		}
	}
	most := 1
	for shardmeta.ManifestBound(most+1, DefaultMaxSources, MaxSourceBytes) <= MaxManifestBytes {
		most++
	}
	if err := validate(most, DefaultMaxSources); err != nil {
		t.Errorf("%d generations with %d sources: %v", most, DefaultMaxSources, err)
	}
	if err := validate(most+1, DefaultMaxSources); err == nil {
		t.Errorf("%d generations with %d sources accepted: the manifest could pass %d bytes", most+1, DefaultMaxSources, MaxManifestBytes)
	}
	if err := validate(1<<62, 1<<62); err == nil {
		t.Error("limits of 2^62 accepted")
	}
	t.Logf("with %d sources, at most %d unmerged generations", DefaultMaxSources, most)
}

// TestOwnerFieldsBounded: the writer id and address, recorded in every
// shard's owner key, are bounded printable strings.
func TestOwnerFieldsBounded(t *testing.T) {
	for _, c := range []struct {
		writer, address string
		want            string // "" when valid
	}{
		{"host-1234", "http://[fe80::1%eth0]:7070", ""},
		{strings.Repeat("w", MaxWriterIDBytes), strings.Repeat("a", MaxAddressBytes), ""},
		{"hôte <1>", "", ""},
		{strings.Repeat("w", MaxWriterIDBytes+1), "", "writer id of 257 bytes, the limit is 256"},
		{"w", strings.Repeat("a", MaxAddressBytes+1), "address of 257 bytes, the limit is 256"},
		{"host\n1", "", `writer id "host\n1": unprintable U+000A at byte 4`},
		{"host\xff", "", `writer id "host\xff": byte 4 is not valid UTF-8`},
		{"w", "http://x\u200b", `address "http://x\u200b": unprintable U+200B at byte 8`},
	} {
		o := testOptions(vfs.NewStrictMem(), "t")
		o.WriterID, o.Address = c.writer, c.address
		o.EnsureDefaults()
		err := o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("writer %q, address %q: %v", c.writer, c.address, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("writer %q, address %q: %v, want an error saying %q", c.writer, c.address, err, c.want)
		}
	}
}
