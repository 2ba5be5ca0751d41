package soak

import (
	"strings"
	"testing"
)

// addBatch adds rows [from, to) of batch n of producer i.
func addBatch(t *tally, i, n, from, to int) {
	for j := from; j < to; j++ {
		t.add(rowID(i, n, j))
	}
}

// TestTallyFindsBrokenPromises feeds the end check bases that break each
// promise, and one that keeps them all.
func TestTallyFindsBrokenPromises(t *testing.T) {
	const rows = 4
	// Producer 0 sent batches 0–2, batch 2 in doubt; producer 1 sent 0–1, both acked.
	sent, acked := []int{3, 2}, []int{2, 2}
	good := func(tl *tally) {
		addBatch(tl, 0, 0, 0, rows)
		addBatch(tl, 0, 1, 0, rows)
		addBatch(tl, 1, 0, 0, rows)
		addBatch(tl, 1, 1, 0, rows)
	}
	cases := []struct {
		name  string
		base  func(*tally)
		wants string // a substring of the problems; "" means none
	}{
		{"every acknowledged row once", good, ""},
		{"the batch in doubt stored whole", func(tl *tally) { good(tl); addBatch(tl, 0, 2, 0, rows) }, ""},
		{"a duplicate", func(tl *tally) { good(tl); tl.add(rowID(1, 0, 2)) }, "more than once"},
		{"an id never sent", func(tl *tally) { good(tl); tl.add(rowID(1, 2, 0)) }, "never sent"},
		{"a foreign id", func(tl *tally) { good(tl); tl.add("x-1") }, "never sent"},
		{"a row beyond the batch", func(tl *tally) { good(tl); tl.add(rowID(0, 0, rows)) }, "never sent"},
		{"an acknowledged row missing", func(tl *tally) {
			addBatch(tl, 0, 0, 0, rows)
			addBatch(tl, 0, 1, 1, rows)
			addBatch(tl, 1, 0, 0, rows)
			addBatch(tl, 1, 1, 0, rows)
		}, "acknowledged batch 1 of producer soak-0: 3 of its 4"},
		{"half a batch in doubt", func(tl *tally) { good(tl); addBatch(tl, 0, 2, 0, 2) }, "in doubt: 2 of its 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally(sent, acked, rows)
			c.base(tl)
			problems := strings.Join(tl.finish(), "\n")
			switch {
			case c.wants == "" && problems != "":
				t.Fatalf("problems in a base that keeps every promise:\n%s", problems)
			case c.wants != "" && !strings.Contains(problems, c.wants):
				t.Fatalf("problems %q do not say %q", problems, c.wants)
			}
		})
	}
}

func TestParseIDRoundTrips(t *testing.T) {
	for _, id := range []string{"soak-0-0-0", "soak-7-123-199"} {
		i, n, j, ok := parseID(id)
		if !ok || rowID(i, n, j) != id {
			t.Errorf("parseID(%q) = %d, %d, %d, %v", id, i, n, j, ok)
		}
	}
	for _, id := range []string{"soak-1-2", "soak-01-2-3", "soak-1-2-3x", "soak--1-2-3", ""} {
		if _, _, _, ok := parseID(id); ok {
			t.Errorf("parseID(%q) accepted", id)
		}
	}
}
