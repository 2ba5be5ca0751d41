package generation

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The versioned spec must list exactly the footer keys the code writes, and
// the version the code writes.
func TestFormatDocMatchesCode(t *testing.T) {
	doc, err := os.ReadFile("../docs/format/generation.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(rollwal\\.[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	var written []string
	for _, f := range metaFields {
		written = append(written, f.key)
	}
	written = append(written, keySchema, keyChecksum)
	if !slices.Equal(documented, written) {
		t.Fatalf("docs/format/generation.md lists footer keys\n%v\nthe code writes, in order,\n%v", documented, written)
	}
	if !strings.Contains(string(doc), "# Generation file format — version 1\n") || FormatVersion != 1 {
		t.Fatalf("the spec's title version and FormatVersion (%d) disagree", FormatVersion)
	}
}
