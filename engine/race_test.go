package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// holdFS is a claimant's view of shared storage: it records every
// operation that creates, opens for writing or truncates a file, and holds
// the first Create in the WAL directory until released, so that a test can
// stop a claimant inside its open wherever it first writes the WAL.
type holdFS struct {
	vfs.FS
	walDir string

	mu      sync.Mutex
	writes  []string // base names of files created, opened for writing or truncated
	hold    *gate
	holding bool
}

// gate holds a claimant once: held is closed when it arrives, release lets
// it go on.
type gate struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{held: make(chan struct{}), release: make(chan struct{})} }

// wait blocks the first caller until release; later callers pass.
func (g *gate) wait() {
	first := false
	g.once.Do(func() { first = true; close(g.held) })
	if first {
		<-g.release
	}
}

func (f *holdFS) record(name string) {
	if filepath.Dir(name) != filepath.Clean(f.walDir) {
		return
	}
	f.mu.Lock()
	f.writes = append(f.writes, filepath.Base(name))
	f.mu.Unlock()
}

func (f *holdFS) Create(name string) (vfs.File, error) {
	f.record(name)
	if filepath.Dir(name) == filepath.Clean(f.walDir) {
		f.hold.wait()
	}
	return f.FS.Create(name)
}

func (f *holdFS) OpenReadWrite(name string) (vfs.File, error) {
	f.record(name)
	return f.FS.OpenReadWrite(name)
}

func (f *holdFS) touched(epoch uint64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix := fmt.Sprintf("%020d-", epoch)
	var out []string
	for _, n := range f.writes {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// TestRacingClaimantsLoseNothing: two writer processes on one data
// directory both find the shard without an owner. The loser is held inside
// its open — at its first WAL write, or, where it writes nothing before its
// claim, just before its claim transaction — while the winner claims,
// appends and acknowledges rows. Released, the loser must lose its claim
// without creating or cutting any file of the winner's epoch, wait for the
// winner to go, and then replay every row the winner acknowledged.
func TestRacingClaimantsLoseNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem := vfs.NewStrictMem()
	table := tableName(t, "")

	g := newGate()
	loserFS := &holdFS{FS: mem, walDir: "/data/" + table + "/shards/s0/wal", hold: g}
	lo := testOptions(loserFS, table)
	lo.WriterID = "loser"
	lo.testHookClaimPrepared = g.wait
	loser := openHost(t, lo)
	defer loser.Close(ctx)
	type opened struct {
		s   *Shard
		err error
	}
	loserDone := make(chan opened, 1)
	go func() {
		s, err := loser.Open(ctx, "s0")
		loserDone <- opened{s, err}
	}()
	select {
	case <-g.held:
	case r := <-loserDone:
		t.Fatalf("the loser opened before it was held: %v", r.err)
	case <-ctx.Done():
		t.Fatal("the loser never reached its claim")
	}

	wo := testOptions(mem, table)
	wo.WriterID, wo.NoFlushOnClose = "winner", true
	winner := openHost(t, wo)
	ws := mustOpen(t, winner, "s0")
	epoch := ws.Epoch()
	for i := range 4 {
		if _, err := ws.Append(ctx, rows("acked", 5*i, 5), Source{}); err != nil {
			t.Fatalf("winner append %d: %v", i, err)
		}
	}
	close(g.release)
	if err := winner.Close(ctx); err != nil {
		t.Fatalf("winner close: %v", err)
	}

	r := <-loserDone
	if r.err != nil {
		t.Fatalf("loser open: %v", r.err)
	}
	if r.s.Epoch() <= epoch {
		t.Fatalf("loser claimed epoch %d, not above the winner's %d", r.s.Epoch(), epoch)
	}
	if files := loserFS.touched(epoch); len(files) > 0 {
		t.Errorf("the loser created, opened for writing or truncated files of the winner's epoch %d: %v", epoch, files)
	}
	got := memtableIDs(r.s)
	for i := range 20 {
		if id := "acked-" + itoa(i); got[id] != 1 {
			t.Errorf("acknowledged row %s: %d copies after the loser's replay, want 1", id, got[id])
		}
	}
}
