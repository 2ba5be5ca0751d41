package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rollwal/rollwal/client"
)

// ledger is what producers sent and what was acknowledged. A producer
// sends its batches one after another, each after the one before was
// acknowledged, so per producer batches [0, acked) are acknowledged and
// batch acked, if below sent, is in doubt: it may be in the base, once.
// Counters instead of id sets keep an hour's run in little memory.
type ledger struct {
	mu    sync.Mutex
	sent  []int // per producer
	acked []int
}

func newLedger(producers int) *ledger {
	return &ledger{sent: make([]int, producers), acked: make([]int, producers)}
}

func (l *ledger) send(i, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[i] = n + 1
}

func (l *ledger) ack(i, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[i] = n + 1
}

func (l *ledger) counts() (sent, acked []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sent...), append([]int(nil), l.acked...)
}

// ackedBatches is the number of batches acknowledged over all producers.
func (l *ledger) ackedBatches() int {
	_, acked := l.counts()
	n := 0
	for _, a := range acked {
		n += a
	}
	return n
}

// batchWait bounds one batch's retries: a serve restart (lease expiry,
// replay) takes seconds, not minutes.
const batchWait = 3 * time.Minute

// produce is producer i: a session of its own (a fixed id, so that a
// second Client after a failure resumes it), appending batches of fresh
// ids to its shard until ctx ends. A batch that fails is sent again with
// the same rows, as a producer that must not lose them does.
func (r *run) produce(ctx context.Context, i int) {
	shard := r.cfg.Shards[i%len(r.cfg.Shards)]
	name := producerName(i)
	c, err := r.newClient(name)
	if err != nil {
		r.fail("producer %s: %v", name, err)
		return
	}
	for n := 0; ctx.Err() == nil; n++ {
		rows := r.batch(i, n)
		r.led.send(i, n)
		if err := r.appendUntilAcked(ctx, c, shard, rows); err != nil {
			if ctx.Err() == nil {
				r.fail("producer %s, batch %d: %v", name, n, err)
			}
			return
		}
		r.led.ack(i, n)
		r.pace(ctx)
	}
}

// appendUntilAcked sends rows until acknowledged or batchWait passes. The
// same rows go to the same Client, which sends them again at the same
// sequence: a batch of unknown outcome is stored once whatever happened
// to it. (A new Client resuming the id would number them anew: a
// producer's duplicate, which sessions do not promise to catch.)
func (r *run) appendUntilAcked(ctx context.Context, c *client.Client, shard string, rows []map[string]any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchWait)
	defer cancel()
	for {
		res, err := c.Append(ctx, shard, rows, nil)
		if err == nil {
			r.noteRetries(res.Attempts - 1) // the Client's own, across a restart
			return nil
		}
		var bad *client.BadRequestError
		if errors.As(err, &bad) || errors.Is(err, client.ErrSequence) || ctx.Err() != nil {
			return err
		}
		r.noteRetries(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("not acknowledged within %v: %w", batchWait, err)
		case <-time.After(200 * time.Millisecond): // a pause between a Client's own retries
		}
	}
}

func (r *run) noteRetries(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Retries += n
}

func (r *run) newClient(name string) (*client.Client, error) {
	return client.New("http://"+r.addr, client.Options{Producer: name, MaxRetries: 50,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
}

func producerName(i int) string { return fmt.Sprintf("soak-%d", i) }

// rowID is row j of batch n of producer i; parseID reverses it.
func rowID(i, n, j int) string { return fmt.Sprintf("soak-%d-%d-%d", i, n, j) }

func parseID(id string) (i, n, j int, ok bool) {
	_, err := fmt.Sscanf(id, "soak-%d-%d-%d", &i, &n, &j)
	return i, n, j, err == nil && min(i, n, j) >= 0 && rowID(i, n, j) == id
}

// batch n of producer i: values of a few hundred bytes that compress well,
// so that an hour's run does not fill the disk.
func (r *run) batch(i, n int) []map[string]any {
	rows := make([]map[string]any, r.cfg.BatchRows)
	for j := range rows {
		id := rowID(i, n, j)
		rows[j] = map[string]any{"id": id, "prompt": "prompt " + id + strings.Repeat("p", 200),
			"completion": strings.Repeat("c", 100+j%300), "reward": float64(j%7) / 7}
	}
	return rows
}

// pace keeps the producers' total near Config.Rate rows per second.
func (r *run) pace(ctx context.Context) {
	if r.cfg.Rate <= 0 {
		return
	}
	per := time.Duration(float64(time.Second) * float64(r.cfg.BatchRows*r.cfg.Producers) / float64(r.cfg.Rate))
	waitCtx(ctx, per)
}
