package catalog

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/schema"
)

func mustRollout() *schema.Schema { return schema.Rollout() }

// TestPreparedOpsInCallerTxn: the prepared compare and put go into the
// caller's own transaction with another key's put: both change, or (when
// the caller's compare on its own key fails) neither does.
func TestPreparedOpsInCallerTxn(t *testing.T) {
	e := newEnv(t)
	other := "/" + e.cat.opts.Prefix + "-caller/watermarks" // a key of the caller's own
	before := e.location()
	p, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{e.baseFile("s0", 1, 1, "a", 4, 1)}, nil)
	fatalIf(t, err, "prepare")

	// The caller's guard fails: nothing changes.
	resp, err := e.cli.Txn(e.ctx).
		If(append(p.Cmps, clientv3.Compare(clientv3.Version(other), "=", 7))...).
		Then(append(p.Ops, clientv3.OpPut(other, "w=1"))...).Commit()
	fatalIf(t, err, "txn")
	if resp.Succeeded || e.location() != before || e.value(other) != "" {
		t.Fatalf("failed guard: succeeded=%v, table at %s (was %s), other=%q", resp.Succeeded, e.location(), before, e.value(other))
	}
	if out, err := e.cat.ReadBack(e.ctx, p); err != nil || out != NotApplied {
		t.Fatalf("read back after a failed guard: %v %v", out, err)
	}

	// Both guards hold: both change.
	resp, err = e.cli.Txn(e.ctx).
		If(append(p.Cmps, clientv3.Compare(clientv3.Version(other), "=", 0))...).
		Then(append(p.Ops, clientv3.OpPut(other, "w=1"))...).Commit()
	fatalIf(t, err, "txn")
	if !resp.Succeeded || e.location() != p.Location || e.value(other) != "w=1" {
		t.Fatalf("holding guard: succeeded=%v, table at %s (want %s), other=%q", resp.Succeeded, e.location(), p.Location, e.value(other))
	}
	e.scan(p.Table())
}

func (e *env) value(key string) string {
	e.t.Helper()
	resp, err := e.cli.Get(e.ctx, key)
	fatalIf(e.t, err, "get %s", key)
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestUnknownOutcomeReadBack: a commit whose answer is lost is found
// committed by reading back; one that never reached etcd is ErrNotApplied
// and applies on a second try; a prepared commit that another commit
// overtook is superseded, one that a later commit built on is committed.
func TestUnknownOutcomeReadBack(t *testing.T) {
	e := newEnv(t)
	lost := func(phase string, err error) error {
		if phase == "after" {
			return context.DeadlineExceeded // applied, answer lost
		}
		return err
	}
	dropped := func(phase string, err error) error {
		if phase == "before" {
			return context.DeadlineExceeded // never sent
		}
		return err
	}

	p1, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{e.baseFile("s0", 1, 1, "a", 2, 1)}, nil)
	fatalIf(t, err, "prepare")
	e.cat.afterTxn = lost
	if _, err := e.cat.Apply(e.ctx, p1); err != nil {
		t.Fatalf("lost answer: %v, want committed", err)
	}
	if e.location() != p1.Location {
		t.Fatalf("table at %s, want %s", e.location(), p1.Location)
	}

	p2, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{e.baseFile("s0", 2, 1, "b", 2, 3)}, nil)
	fatalIf(t, err, "prepare")
	e.cat.afterTxn = dropped
	if _, err := e.cat.Apply(e.ctx, p2); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("dropped request: %v, want ErrNotApplied", err)
	}
	e.cat.afterTxn = nil
	if _, err := e.cat.Apply(e.ctx, p2); err != nil {
		t.Fatalf("second try of the same prepared commit: %v", err)
	}

	overtaken, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{e.baseFile("s0", 9, 1, "z", 1, 99)}, nil)
	fatalIf(t, err, "prepare")
	delete(e.rows, "z-0")
	p3, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{e.baseFile("s0", 3, 1, "c", 2, 5)}, nil)
	fatalIf(t, err, "prepare")
	e.appendFilesPrepared(p3)
	e.appendFiles(nil, e.baseFile("s0", 4, 1, "d", 2, 7))
	e.appendFiles(nil, e.baseFile("s0", 5, 1, "f", 2, 9))
	for _, c := range []struct {
		name string
		p    *PreparedCommit
		want Outcome
	}{{"overtaken", overtaken, Superseded}, {"two commits later (metadata log)", p3, Committed}, {"p2 (metadata log)", p2, Committed}} {
		if out, err := e.cat.ReadBack(e.ctx, c.p); err != nil || out != c.want {
			t.Fatalf("read back %s: %v %v, want %v", c.name, out, err, c.want)
		}
	}
	e.cat.afterTxn = lost
	if _, err := e.cat.Apply(e.ctx, overtaken); !errors.Is(err, ErrConflict) {
		t.Fatalf("overtaken commit with a lost answer: %v, want ErrConflict", err)
	}
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	e.scan(tbl)
}

func (e *env) appendFilesPrepared(p *PreparedCommit) {
	e.t.Helper()
	if _, err := e.cat.Apply(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
}
