package engine

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/internal/testproc"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// TestObjectWALOnS3Faults: the WAL in a real versitygw bucket through
// its faults. Answers slowed past the attempt timeout after each PUT
// applied (lost answers) still acknowledge, resolved by reading back; a
// stopped server refuses appends with ErrStoreDown (or, for an append
// already waiting, ErrUnknownOutcome) naming the create and the object,
// says so in Status, and fails flushes without stopping the shard; once
// the server is back appends and flushes resume by themselves, and a
// later owner finds every acknowledged row exactly once.
func TestObjectWALOnS3Faults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	ctx := context.Background()
	srv := s3test.Start(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	slow := &s3test.SlowAnswers{Next: tr}
	storeLog := &testproc.OutputBuffer{Max: 1 << 20}
	st, err := objstore.Open(ctx, "s3://"+srv.Bucket(t)+"/tables", objstore.Options{
		Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true,
		AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(),
		HTTPClient: &http.Client{Transport: slow}, Backoff: 5 * time.Millisecond, MaxAttempts: 3,
		AttemptTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(storeLog, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.WALBackend, opts.Store = WALObject, st
	acked := map[string]bool{}
	ack := func(s *Shard, prefix string, n int) error {
		batch := rows(prefix, 0, n)
		if _, err := s.Append(ctx, batch, Source{}); err != nil {
			return err
		}
		for _, r := range batch {
			acked[r["id"].(string)] = true
		}
		return nil
	}
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	if err := ack(s, "before", 20); err != nil {
		t.Fatal(err)
	}

	// Slow answers: each PUT lands, its answer comes after the attempt
	// gave up; the retry meets the object and reads it back.
	slow.Delay(3 * time.Second)
	if err := ack(s, "slow", 20); err != nil {
		t.Fatalf("append while PUT answers are lost: %v", err)
	}
	slow.Delay(0)
	if !strings.Contains(storeLog.Since(0), "a lost answer resolved by read-back: our own write") {
		t.Fatalf("no lost answer was resolved while answers were slowed; the store logged:\n%s", storeLog.Since(0))
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	err = ack(s, "down", 20)
	if !errors.Is(err, ErrStoreDown) && !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("append with the server stopped: %v; want ErrStoreDown or ErrUnknownOutcome", err)
	}
	if !strings.Contains(err.Error(), "create WAL object "+opts.Table+"/shards/s0/wal/") {
		t.Fatalf("the error does not name the create and the object: %v", err)
	}
	if d := s.Status().Degraded; !strings.Contains(d, "object store down") {
		t.Fatalf("Status.Degraded with the server stopped: %q", d)
	}
	if _, err := s.Flush(ctx); err == nil {
		t.Fatal("a flush succeeded with the server stopped")
	}
	if s.err() != nil {
		t.Fatalf("the shard stopped for a store that is down: %v", s.err())
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ack(s, "back", 20)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrStoreDown) && !errors.Is(err, ErrUnknownOutcome) || time.Now().After(deadline) {
			t.Fatalf("append after the server came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded: the WAL retries on its own clock
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after the server came back: %v", err)
	}
	if err := ack(s, "after", 20); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	h2 := openHost(t, opts)
	defer h2.Close(ctx)
	s2 := mustOpen(t, h2, "s0")
	inGen, _ := committed(t, opts.FS, opts, "s0")
	inMem := memtableIDs(s2)
	wantOnce(t, acked, inGen, inMem)
	t.Logf("%d acknowledged ids, each once; %d committed, %d replayed", len(acked), len(inGen), len(inMem))
}

// TestWALBackendSwitch: a shard moves between the local and the object
// WAL without losing a row. While the WAL it leaves holds rows above the
// replay cursor the open is refused, naming that WAL and what to do; once
// a flush committed them the other backend takes over with positions
// after the cursor, and its tail replays.
func TestWALBackendSwitch(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Store, opts.NoFlushOnClose = memStore(t), true
	want := map[string]bool{}
	life := func(backend WALBackend, prefix string, flush bool) error {
		o := opts
		o.WALBackend = backend
		h := openHost(t, o)
		defer h.Close(ctx)
		s, err := h.Open(ctx, "s0")
		if err != nil {
			return err
		}
		batch := rows(prefix, 0, 10)
		mustAppend(t, s, batch)
		for _, r := range batch {
			want[r["id"].(string)] = true
		}
		if flush {
			if _, err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	}
	steps := []struct {
		backend WALBackend
		prefix  string
		flush   bool
		refused string // "" if the open must succeed
	}{
		{WALLocal, "local-tail", false, ""},
		{WALObject, "", false, "the local WAL"},
		{WALLocal, "local-flushed", true, ""},
		{WALObject, "object-tail", false, ""},
		{WALObject, "object-more", false, ""},
		{WALLocal, "", false, "the object WAL"},
		{WALObject, "object-flushed", true, ""},
		{WALLocal, "local-again", false, ""},
		{WALLocal, "local-last", false, ""},
	}
	for i, st := range steps {
		err := life(st.backend, st.prefix, st.flush)
		switch {
		case st.refused == "" && err != nil:
			t.Fatalf("step %d (%s): %v", i, st.backend, err)
		case st.refused != "" && (!errors.Is(err, ErrReplay) || !strings.Contains(err.Error(), st.refused) ||
			!strings.Contains(err.Error(), "flush it before changing the WAL backend")):
			t.Fatalf("step %d (%s over an unflushed tail): %v; want a refusal naming %s", i, st.backend, err, st.refused)
		}
	}
	o := opts
	o.WALBackend = WALLocal
	h := openHost(t, o)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	inGen, _ := committed(t, opts.FS, opts, "s0")
	inMem := memtableIDs(s)
	wantOnce(t, want, inGen, inMem)
	if n := len(inGen) + len(inMem); n != len(want) {
		t.Fatalf("%d ids stored, want %d", n, len(want))
	}
}

// TestObjectWALFailoverKeepsSessions: with the WAL and the generations in
// the store, a writer on another data directory (another machine) takes
// the shard over with its producer sessions — the committed state is in
// the store too, and the tail's marks replay from the WAL — so retries of
// batches the dead writer acknowledged, flushed or not, are recognised
// and stored nothing.
func TestObjectWALFailoverKeepsSessions(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Store, opts.WALBackend, opts.NoFlushOnClose = memStore(t), WALObject, true
	a := opts
	a.DataDir = "/machine-a"
	ha := openHost(t, a)
	sa := mustOpen(t, ha, "s0")
	mustAppendWith(t, sa, "p", 0, 10, session("prod", 0), 10)
	if _, err := sa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustAppendWith(t, sa, "p", 10, 10, session("prod", 10), 10) // in the WAL alone
	if err := ha.Close(ctx); err != nil {
		t.Fatal(err)
	}

	b := opts
	b.DataDir = "/machine-b"
	hb := openHost(t, b)
	defer hb.Close(ctx)
	sb := mustOpen(t, hb, "s0")
	mustAppendWith(t, sb, "p", 0, 10, session("prod", 0), 0)   // flushed before: a duplicate
	mustAppendWith(t, sb, "p", 10, 10, session("prod", 10), 0) // replayed: a duplicate
	mustAppendWith(t, sb, "p", 20, 5, session("prod", 20), 5)
	if _, err := sb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The producer state of A's commit was deleted from the store when
	// B's replaced it: one object, the committed one.
	if infos, err := b.Store.List(ctx, sb.producerObjectKey("")+"/"); err != nil || len(infos) != 1 {
		t.Fatalf("producer state objects after B's commit: %v, %v; want the committed one alone", infos, err)
	}
	inGen, _ := committed(t, b.FS, b, "s0")
	if len(inGen) != 25 {
		t.Fatalf("%d ids committed, want 25", len(inGen))
	}
	for id, n := range inGen {
		if n != 1 {
			t.Fatalf("id %s committed %d times", id, n)
		}
	}
}

// wantOnce fails unless every id of want is stored once (committed or in
// a memtable) and no id twice.
func wantOnce(t *testing.T, want map[string]bool, inGen, inMem map[string]int) {
	t.Helper()
	for id := range want {
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("id %s: %d committed, %d in the memtable; want once", id, inGen[id], inMem[id])
		}
	}
	for id, n := range inGen {
		if n+inMem[id] > 1 {
			t.Fatalf("id %s stored %d times", id, n+inMem[id])
		}
	}
}
