package engine

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

var failoverSeed = flag.Uint64("failover-seed", 0, "seed of TestFailoverLosesNoAckedRow (0: random)")

// TestFailoverLosesNoAckedRow: writer processes append to one shard with
// concurrent producers and are SIGKILLed at random moments, several times
// in a row; each successor claims after the dead writer's lease expires,
// replays and goes on. At the end every acknowledged id is in exactly one
// committed generation or in the replayed memtable.
func TestFailoverLosesNoAckedRow(t *testing.T) {
	seed := *failoverSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -failover-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	cfg := childConfig{Dir: dir, Table: tableName(t, ""), Endpoints: etcdEndpoints}
	acked := map[string]bool{}
	var lastEpoch uint64
	for round := range 5 {
		cfg.Name = fmt.Sprintf("w%d", round)
		c := startChild(t, cfg)
		epoch := c.waitReady(t)
		if epoch <= lastEpoch {
			t.Fatalf("round %d claimed epoch %d after epoch %d", round, epoch, lastEpoch)
		}
		lastEpoch = epoch
		if !c.waitAcks(t, 20+rng.IntN(400)) {
			t.Logf("round %d: the writer lost its lease before the SIGKILL (a loaded machine) and stopped: a failover all the same", round)
		}
		c.kill()
		for _, id := range c.acked {
			acked[id] = true
		}
		t.Logf("round %d: epoch %d, %d ids acknowledged before SIGKILL", round, epoch, len(c.acked))
	}

	ctx := context.Background()
	opts := childOptions(dir, cfg.Table, "verifier", etcdClient)
	opts.FS = vfs.Default
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	inGen, m := committed(t, vfs.Default, opts, "s0")
	inMem := memtableIDs(s)
	for id, n := range inGen {
		if n+inMem[id] != 1 {
			t.Fatalf("id %s: %d committed copies, %d in the memtable", id, n, inMem[id])
		}
	}
	for id := range acked {
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("acknowledged id %s: %d committed copies, %d in the memtable", id, inGen[id], inMem[id])
		}
	}
	t.Logf("%d acknowledged ids; %d committed in %d generations, %d replayed; final epoch %d",
		len(acked), len(inGen), len(m.Flushed), len(inMem), s.Epoch())
}
