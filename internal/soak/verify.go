package soak

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// checkBase reads every file of the base's latest readers' manifest and
// holds the promise against the ledger.
func (r *run) checkBase() error {
	m, ok, err := publish.LatestReaderManifest(vfs.Default, r.baseDir())
	if err != nil {
		return fmt.Errorf("readers' manifest: %w", err)
	}
	sent, acked := r.led.counts()
	t := newTally(sent, acked, r.cfg.BatchRows)
	if ok {
		for _, f := range m.Files {
			_, d, err := generation.Read(vfs.Default, filepath.Join(r.baseDir(), filepath.FromSlash(f.Path)), schema.Rollout())
			if err != nil {
				return fmt.Errorf("base file %s: %w", f.Path, err)
			}
			if int64(d.Rows.Len()) != f.Rows {
				return fmt.Errorf("base file %s holds %d rows; the manifest says %d", f.Path, d.Rows.Len(), f.Rows)
			}
			for _, id := range d.Rows.IDs {
				t.add(id)
			}
		}
		r.rep.BaseFiles = len(m.Files)
	}
	r.rep.BaseRows = t.total
	r.rep.Batches = t.ackedBatches()
	r.rep.RowsAcked = r.rep.Batches * r.cfg.BatchRows
	r.rep.RowsDoubt = t.doubtRows()
	if problems := t.finish(); len(problems) > 0 {
		return fmt.Errorf("the base (%d rows) breaks the promise:\n%s", t.total, strings.Join(problems, "\n"))
	}
	return nil
}

// tally checks the ids of a base against what producers sent: each id at
// most once, none never sent, every acknowledged batch whole, and a batch
// in doubt whole or absent (a session's batch is stored atomically).
type tally struct {
	sent, acked []int
	rows        int
	seen        [][]uint64 // per producer, a bit per row sent
	total       int
	problems    []string
	more        int // problems beyond the first ones kept
}

func newTally(sent, acked []int, rows int) *tally {
	t := &tally{sent: sent, acked: acked, rows: rows, seen: make([][]uint64, len(sent))}
	for i, n := range sent {
		t.seen[i] = make([]uint64, (n*rows+63)/64)
	}
	return t
}

func (t *tally) problem(format string, args ...any) {
	if len(t.problems) < 20 {
		t.problems = append(t.problems, fmt.Sprintf(format, args...))
	} else {
		t.more++
	}
}

func (t *tally) add(id string) {
	t.total++
	i, n, j, ok := parseID(id)
	if !ok || i >= len(t.sent) || n >= t.sent[i] || j >= t.rows {
		t.problem("id %q is in the base but was never sent", id)
		return
	}
	bit := n*t.rows + j
	if t.seen[i][bit/64]&(1<<(bit%64)) != 0 {
		t.problem("id %q is in the base more than once", id)
		return
	}
	t.seen[i][bit/64] |= 1 << (bit % 64)
}

func (t *tally) has(i, n, j int) bool {
	bit := n*t.rows + j
	return t.seen[i][bit/64]&(1<<(bit%64)) != 0
}

// batchRows counts the rows of batch n of producer i in the base.
func (t *tally) batchRows(i, n int) int {
	c := 0
	for j := range t.rows {
		if t.has(i, n, j) {
			c++
		}
	}
	return c
}

func (t *tally) ackedBatches() int {
	n := 0
	for _, a := range t.acked {
		n += a
	}
	return n
}

func (t *tally) doubtRows() int {
	n := 0
	for i := range t.sent {
		n += (t.sent[i] - t.acked[i]) * t.rows
	}
	return n
}

// finish returns the broken promises found.
func (t *tally) finish() []string {
	for i := range t.sent {
		for n := range t.sent[i] {
			got := t.batchRows(i, n)
			switch {
			case n < t.acked[i] && got != t.rows:
				t.problem("acknowledged batch %d of producer %s: %d of its %d rows are in the base", n, producerName(i), got, t.rows)
			case n >= t.acked[i] && got != 0 && got != t.rows:
				t.problem("batch %d of producer %s, in doubt: %d of its %d rows are in the base (a batch is stored whole or not at all)", n, producerName(i), got, t.rows)
			}
		}
	}
	if t.more > 0 {
		t.problems = append(t.problems, fmt.Sprintf("… and %d more", t.more))
	}
	return t.problems
}
