package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/server"
)

// sessionBatch is one batch of a producer session: its rows are numbered
// from seq.
type sessionBatch struct {
	producer string
	seq      uint64
	ids      []string
}

func (b sessionBatch) path(shard string) string {
	return fmt.Sprintf("/v1/shards/%s/rows?producer=%s&seq=%d", shard, b.producer, b.seq)
}

// send posts the batch and returns the status and the body.
func (b sessionBatch) send(t *testing.T, p *serveProc, shard string) (int, []byte) {
	t.Helper()
	return httpDo(t, http.MethodPost, p.url(b.path(shard)), server.ContentTypeNDJSON, ndjson(b.ids))
}

// mustStore sends the batch and checks how many of its rows were stored:
// all on the first attempt, none on a retry.
func (b sessionBatch) mustStore(t *testing.T, p *serveProc, shard string, stored int, when string) {
	t.Helper()
	code, body := b.send(t, p, shard)
	res, err := appendResponse(body)
	if code != http.StatusOK || err != nil || res.Stored != stored || res.Acked != len(b.ids) || res.Stored+res.Duplicates != len(b.ids) {
		t.Fatalf("%s: batch of %s at seq %d answered %d %s; want 200 with %d of %d stored", when, b.producer, b.seq, code, body, stored, len(b.ids))
	}
}

// nextSeq asks the writer where a producer resumes.
func nextSeq(t *testing.T, p *serveProc, shard, producer string) uint64 {
	t.Helper()
	code, body := httpDo(t, http.MethodGet, p.url("/v1/shards/"+shard+"/producers/"+producer), "", "")
	var r struct {
		NextSeq uint64 `json:"next_seq"`
		Known   bool   `json:"known"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &r) != nil || !r.Known {
		t.Fatalf("GET producer %s: %d %s", producer, code, body)
	}
	return r.NextSeq
}

// TestRetryAtAnyPointStoresOnce: real writer processes. One batch of a
// producer session per case, each retried once the case's event happened:
// while still in the memtable, after a flush, after a merge, after SIGKILL
// and replay, after SIGTERM and a restart, and after a failover to a
// second process (the successor on the same data directory, which the LOCK
// file admits only once the owner is dead). Every retry, and a retry of
// every batch at the end, answers 200 with nothing stored; after a final
// merge each id is in the base exactly once (read in Go and with pyarrow
// through the latest readers' manifest).
func TestRetryAtAnyPointStoresOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const shard = "s0"
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--shards", shard,
		"--lease-ttl", "2s", "--flush-age", "-1s"}
	var batches []sessionBatch
	newBatch := func(name string) sessionBatch {
		b := sessionBatch{producer: "case-" + name, ids: batchIDs(name, 0, 5)}
		batches = append(batches, b)
		return b
	}
	retryAll := func(p *serveProc, when string) {
		t.Helper()
		for _, b := range batches {
			b.mustStore(t, p, shard, 0, when)
			if n := nextSeq(t, p, shard, b.producer); n != 5 {
				t.Fatalf("%s: producer %s resumes at %d, want 5", when, b.producer, n)
			}
		}
	}
	flush := func(p *serveProc) {
		t.Helper()
		if code, body := httpDo(t, http.MethodPost, p.url("/v1/shards/"+shard+"/flush"), "", ""); code != http.StatusOK {
			t.Fatalf("flush: %d %s", code, body)
		}
	}

	p := startServe(t, args...)
	if code, body := httpDo(t, http.MethodGet, p.url("/metrics"), "", ""); code != http.StatusOK || !strings.Contains(string(body), "writer_etcd_db_bytes") {
		t.Fatalf("/metrics: %d, without the embedded etcd's writer_etcd_db_bytes", code)
	}
	b := newBatch("memtable")
	b.mustStore(t, p, shard, 5, "first attempt")
	b.mustStore(t, p, shard, 0, "retry while in the memtable")

	b = newBatch("flush")
	b.mustStore(t, p, shard, 5, "first attempt")
	flush(p)
	b.mustStore(t, p, shard, 0, "retry after a flush")

	b = newBatch("merge")
	b.mustStore(t, p, shard, 5, "first attempt")
	flush(p)
	merge(t, "--data-dir", dir)
	b.mustStore(t, p, shard, 0, "retry after a merge")

	b = newBatch("sigkill")
	b.mustStore(t, p, shard, 5, "first attempt")
	p.kill(t)
	p = startServe(t, args...)
	b.mustStore(t, p, shard, 0, "retry after SIGKILL and replay")
	retryAll(p, "after SIGKILL and replay")

	b = newBatch("sigterm")
	b.mustStore(t, p, shard, 5, "first attempt")
	p.stop(t)
	p = startServe(t, args...)
	b.mustStore(t, p, shard, 0, "retry after SIGTERM and a restart")

	b = newBatch("failover")
	b.mustStore(t, p, shard, 5, "first attempt")
	p.kill(t)
	second := append(append([]string(nil), args...), "--shutdown-timeout", "20s") // another process, another listener
	p = startServe(t, second...)
	b.mustStore(t, p, shard, 0, "retry after a failover to a second process")
	retryAll(p, "after the failover")

	p.stop(t)
	merge(t, "--data-dir", dir)
	ids, m := readBase(t, dir)
	for _, b := range batches {
		for _, id := range b.ids {
			if ids[id] != 1 {
				t.Errorf("id %s (producer %s) is in the base %d times, want once", id, b.producer, ids[id])
			}
		}
	}
	if want := 5 * len(batches); len(ids) != want || m.Rows != int64(want) {
		t.Fatalf("the base holds %d rows, %d distinct ids; want %d", m.Rows, len(ids), want)
	}
}

// postCut starts a POST whose body never arrives whole: the connection is
// closed after part of it, as a producer that dies (or a network that
// drops) mid-request. The writer stores nothing of it.
func postCut(t *testing.T, p *serveProc, path, body string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", p.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, p.addr, server.ContentTypeNDJSON, len(body), body[:len(body)/2])
}

// TestOutOfOrderBatchIsRefused: real writer process. Two batches of one
// producer are sent at the same time; the earlier one fails (its
// connection drops mid-body). The later one is refused with 409 and the
// expected sequence, again and again, until the earlier one is retried;
// then both land. Nothing is lost, nothing stored twice.
func TestOutOfOrderBatchIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const shard = "s0"
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--shards", shard, "--flush-age", "-1s")
	earlier := sessionBatch{producer: "pipelined", seq: 0, ids: batchIDs("early", 0, 5)}
	later := sessionBatch{producer: "pipelined", seq: 5, ids: batchIDs("late", 0, 5)}

	var wg sync.WaitGroup
	var code int
	var body []byte
	wg.Go(func() { postCut(t, p, earlier.path(shard), ndjson(earlier.ids)) })
	wg.Go(func() { code, body = later.send(t, p, shard) })
	wg.Wait()
	refused := func(code int, body []byte) {
		t.Helper()
		var e struct {
			Code        string  `json:"code"`
			ExpectedSeq *uint64 `json:"expected_seq"`
		}
		if code != http.StatusConflict || json.Unmarshal(body, &e) != nil || e.Code != "sequence" || e.ExpectedSeq == nil || *e.ExpectedSeq != 0 {
			t.Fatalf("the later batch answered %d %s; want 409, code sequence, expected_seq 0", code, body)
		}
	}
	refused(code, body)
	code, body = later.send(t, p, shard)
	refused(code, body)
	if st := shardStatus(t, p, shard); st.MemtableRows != 0 {
		t.Fatalf("%d rows stored after a cut batch and two refused ones, want 0", st.MemtableRows)
	}

	earlier.mustStore(t, p, shard, 5, "the earlier batch, retried")
	later.mustStore(t, p, shard, 5, "the later batch, after the earlier")
	later.mustStore(t, p, shard, 0, "the later batch again")
	p.stop(t)
	merge(t, "--data-dir", dir)
	ids, _ := readBase(t, dir)
	if len(ids) != 10 {
		t.Fatalf("the base holds %d distinct ids, want 10", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("id %s is in the base %d times", id, n)
		}
	}
}
