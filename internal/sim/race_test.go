package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/shardmeta"
)

// raceMode is how a claim race begins.
type raceMode int

const (
	// raceFree: the shard's writer (if any) is closed first; every
	// claimant finds the shard free at once and reads the WAL together.
	raceFree raceMode = iota
	// raceKill: the claimants wait for a serving writer, which is killed
	// (its process dies, its lease is revoked): they all wake at once.
	raceKill
	// raceClose: the same, but the writer closes gracefully.
	raceClose
	numRaceModes
)

var raceModeNames = [numRaceModes]string{"free", "owner killed", "owner closed"}

func (m raceMode) String() string { return raceModeNames[m] }

type claimResult struct {
	h     *host
	s     *engine.Shard
	err   error
	start time.Time
}

// race is two or more writer processes claiming one shard on the one
// directory at the same time (a shared-storage failover, a restart loop),
// while producer sessions append to whichever of them owns it. Each
// claimant wins in turn: the winner serves for a while (a flush may run
// meanwhile), then is closed or killed and the next one takes over;
// the last one stays. One claimant may stall at one of its filesystem
// calls (inside its claim, while another wins and acknowledges), and a
// merge may run all along. A claimant that loses must never cut or create
// a file of the winner's epoch: the acknowledged rows must survive every
// turn.
func (w *world) race(d draw) {
	shard := w.shards[d.a%len(w.shards)]
	mode := raceMode(d.d % int(numRaceModes))
	w.st.races++
	if bg := w.startBackground(shard, 2, 0); bg != nil {
		defer w.stopBackground(func(b *background) bool { return b == bg })
	}
	var prev *owned
	if mode == raceFree {
		w.handoffClose(shard)
	} else if prev = w.ensureOwner(shard, d.b); prev == nil {
		return
	}
	if w.crashed() {
		return
	}
	claimants := w.raceClaimants(prev, d)
	defer w.closeTempHosts(claimants)
	names := make([]string, len(claimants))
	for i, h := range claimants {
		names[i] = h.String()
	}
	w.tracef("%s: RACE (%s) of %d claimants: %s", shard, mode, len(claimants), strings.Join(names, ", "))
	if (d.b>>6)%2 == 0 {
		h := claimants[(d.b>>7)%len(claimants)]
		n, pause := int64(1+(d.c>>6)%24), time.Duration(30+(d.d>>4)%300)*time.Millisecond
		h.fs.stall(n, pause)
		defer h.fs.stallAt.Store(0)
		w.tracef("%s: %s will stall %v at its filesystem call %d from now", shard, h, pause, n)
	}
	if (d.c>>9)%3 == 0 {
		if c := w.coordinator(d.c % len(w.coords)); c != nil {
			m := w.startMerges(c)
			defer w.stopMerges(m)
		}
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	results := make(chan claimResult, len(claimants))
	for _, h := range claimants {
		go func() {
			start := time.Now()
			s, err := h.h.Reclaim(ctx, shard)
			results <- claimResult{h: h, s: s, err: err, start: start}
		}()
	}
	if prev != nil {
		// Let the claimants find the owner and wait for its key to go.
		time.Sleep(time.Duration(10+(d.d>>3)%60) * time.Millisecond)
		if mode == raceKill {
			w.killHost(prev.host, "in a claim race")
		} else {
			w.closeWriter(shard, prev, "in a claim race")
		}
	}
	w.runRace(shard, claimants, results)
}

// runRace takes the claimants' results as they come: each winner serves,
// then makes room for the next (closed or killed), the last one stays.
func (w *world) runRace(shard string, claimants []*host, results chan claimResult) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	revoked := false
	for pending := len(claimants); pending > 0; {
		var r claimResult
		select {
		case r = <-results:
		case <-tick.C:
			if w.crashed() && !revoked {
				// The processes are dead: their leases go, so that the
				// claimants waiting for an owner key wake and fail.
				w.revokeOwnerLeases()
				revoked = true
			}
			continue
		}
		pending--
		if r.err != nil {
			w.claimFailed(shard, r.h, r.start, r.err)
			continue
		}
		w.st.raceClaims++
		w.noteClaim(shard, r.h, r.s, r.start)
		o := &owned{host: r.h, s: r.s}
		w.views[shard].cur.Store(r.s)
		if w.crashed() {
			continue
		}
		w.serve(shard, o)
		switch {
		case w.crashed():
		case pending > 0 && w.aux.IntN(3) == 0:
			w.killHost(r.h, "after winning a claim race")
		case pending > 0 || r.h.temp:
			w.closeWriter(shard, o, "to make room for the next claimant")
		default:
			w.setOwner(shard, o)
		}
	}
}

// serve lets a race's winner take appends for a while, sometimes with a
// flush running meanwhile.
func (w *world) serve(shard string, o *owned) {
	pause := time.Duration(5+w.aux.IntN(60)) * time.Millisecond
	if w.aux.IntN(3) == 0 {
		w.flush(shard, o)
	}
	time.Sleep(pause)
}

// raceClaimants picks two or three processes (never the serving writer's),
// adding extra processes on the directory when the slots run short or the
// seed asks for one.
func (w *world) raceClaimants(prev *owned, d draw) []*host {
	want := 2 + (d.c>>2)%2
	var out []*host
	for i := range w.hosts {
		h := w.hosts[(d.b+i)%len(w.hosts)]
		if len(out) < want && (prev == nil || h != prev.host) {
			out = append(out, h)
		}
	}
	for len(out) < 2 || (d.c>>4)%3 == 0 && len(out) == want {
		out = append(out, w.newHost(-1))
	}
	return out
}

func (w *world) closeTempHosts(hs []*host) {
	var temps []*host
	for _, h := range hs {
		if h.temp && !h.fs.killed.Load() && !h.closed {
			temps = append(temps, h)
		}
	}
	w.closeHosts(temps)
}

// closeWriter closes a writer (the orderly way, flushing unless its host
// says not to) and keeps it as a zombie.
func (w *world) closeWriter(shard string, o *owned, why string) {
	ctx, cancel := w.opCtx()
	err := o.s.Close(ctx)
	cancel()
	w.tracef("%s: close by %s epoch %d %s: %v", shard, o.host, o.s.Epoch(), why, err)
	if cur := w.owner[shard]; cur == o || cur != nil && cur.s == o.s {
		w.setOwner(shard, nil)
	}
	w.views[shard].cur.CompareAndSwap(o.s, nil)
	w.writerErr(shard, "close", err)
	w.zombies = append(w.zombies, &zombie{shard: shard, s: o.s, host: o.host, epoch: o.s.Epoch(), why: "closed " + why})
	w.checkReleased(shard, o.host, "close")
}

// killHost kills a writer process (SIGKILL): its filesystem calls fail
// from now on, so it acknowledges nothing more, and its lease is revoked,
// as expiry would do a TTL later. Its shards become zombies; a new process
// takes its slot. The dead one is closed in the background.
func (w *world) killHost(h *host, why string) {
	h.fs.kill()
	if h.bucket != nil {
		h.bucket.kill()
	}
	w.st.kills++
	ctx, cancel := w.opCtx()
	defer cancel()
	for _, shard := range w.shards {
		resp, err := w.cli.Get(ctx, w.keys.Owner(shard))
		if err != nil {
			w.fatalf("read owner key: %v", err)
		}
		for _, kv := range resp.Kvs {
			var o shardmeta.Owner
			if json.Unmarshal(kv.Value, &o) == nil && o.Writer == h.name {
				if _, err := w.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !strings.Contains(err.Error(), "not found") {
					w.fatalf("revoke lease %x: %v", kv.Lease, err)
				}
			}
		}
	}
	for _, shard := range w.shards {
		if o := w.owner[shard]; o != nil && o.host == h {
			w.setOwner(shard, nil)
			w.zombies = append(w.zombies, &zombie{shard: shard, s: o.s, host: h, epoch: o.s.Epoch(), why: "killed"})
		}
		if s := w.views[shard].cur.Load(); s != nil {
			if hs, ok := h.h.Shard(shard); ok && hs == s {
				w.views[shard].cur.Store(nil)
			}
		}
	}
	if !h.temp {
		w.hosts[h.slot] = w.newHost(h.slot)
	}
	w.tracef("KILLED %s %s; its leases are revoked", h, why)
	w.closing.Add(1)
	go func() {
		defer w.closing.Done()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = h.h.Close(ctx)
		h.cli.Close()
	}()
}

// merges is a merge coordinator running passes on its own goroutine while
// a claim race goes on.
type merges struct {
	c    *coord
	done chan struct{}
	wg   sync.WaitGroup
	res  []mergeResult
}

type mergeResult struct {
	res publish.Result
	err error
}

func (w *world) startMerges(c *coord) *merges {
	m := &merges{c: c, done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			res, err := c.c.RunOnce(ctx)
			cancel()
			m.res = append(m.res, mergeResult{res, err})
			if err != nil {
				return
			}
		}
	}()
	w.tracef("coordinator %d merges in the background", c.slot)
	return m
}

func (w *world) stopMerges(m *merges) {
	close(m.done)
	m.wg.Wait()
	w.st.merges += len(m.res)
	idle := 0
	for i, r := range m.res {
		if r.err == nil && r.res.Passes == 0 {
			idle++
			continue
		}
		w.noteMerge(m.c, fmt.Sprintf("run-once %d during a claim race", i+1), r.res, r.err)
	}
	w.tracef("coordinator %d: %d background passes, %d found nothing to merge", m.c.slot, len(m.res), idle)
}
