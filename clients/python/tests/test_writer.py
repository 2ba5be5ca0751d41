"""Against real `writer serve` processes built from this checkout: a
producer session through SIGKILLs and restarts (each id once in the base
that `writer merge` publishes), a 400 naming row and column, a real 429
retried, Arrow and NDJSON round trips, the Batcher."""

from __future__ import annotations

import logging
import secrets
import select
import socket
import threading
import time
from typing import Any, Dict, List

import pytest
from conftest import Writer, free_port, id_counts, merge, read_base, rollouts, wait_until

import rollwal

pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def shared(writer_bin: str, tmp_path_factory: pytest.TempPathFactory):
    """One writer for the tests that need no restart: shards default, arrow,
    batch; memtables flushed only when asked."""
    d = tmp_path_factory.mktemp("shared") / "data"
    d.mkdir()
    w = Writer(writer_bin, d, ["--shards", "default,arrow,batch", "--flush-age", "-1s"]).start()
    yield w
    w.close()
    print(f"--- shared writer, last log lines:\n{w.log_tail()}")


# ---- a producer session through SIGKILLs ------------------------------------


class CutClient(rollwal.Client):
    """A client that, when armed, stops its next request at a point and
    waits there until the test has killed the writer: a SIGKILL during a
    batch, deterministically. armed is "body": after half of the body;
    "answer": once the writer's answer has arrived (so the rows are
    durable: it answers after the WAL fsync), which it then drops unread,
    as a network that loses the answer."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.armed = ""
        self.paused = threading.Event()
        self.go_on = threading.Event()

    def _send_body(self, conn: Any, data: bytes) -> None:
        armed, self.armed = self.armed, ""
        if not armed:
            return super()._send_body(conn, data)
        if armed == "body":
            conn.send(data[: len(data) // 2])
        else:
            conn.send(data)
            readable, _, _ = select.select([conn.sock], [], [], 30)
            assert readable, "no answer within 30s"
        self.paused.set()
        assert self.go_on.wait(60)
        if armed == "body":
            conn.send(data[len(data) // 2:])
        else:
            conn.close()
            raise ConnectionResetError("the answer was lost (test)")

    def pause(self, armed: str) -> None:
        self.armed = armed
        self.paused.clear()
        self.go_on.clear()


def send_in_thread(c: rollwal.Client, shard: str, rows: Any) -> "tuple[threading.Thread, Dict[str, Any]]":
    out: Dict[str, Any] = {}

    def send() -> None:
        try:
            out["result"] = c.append(shard, rows)
        except rollwal.RollwalError as e:
            out["error"] = e

    t = threading.Thread(target=send)
    t.start()
    return t, out


def test_session_survives_sigkill(spawn_writer, writer_bin):
    port = free_port()  # kept across restarts: the producers' URL stays valid
    w = spawn_writer(["--shards", "s0", "--flush-age", "200ms", "--lease-ttl", "2s"], port=port)
    producer = "py-sigkill-" + secrets.token_hex(4)
    N = 40  # rows per batch; batch k is rows k*N ... of one deterministic stream

    def batch(k: int) -> List[Dict[str, Any]]:
        return rollouts("k", k * N, N)

    # 1. SIGKILL between batches. A restarted producer (a new client, same
    # id) resumes where the writer says, and a replay of acknowledged
    # stream positions is answered as duplicates.
    c1 = rollwal.Client(w.url, producer=producer)
    for k in range(3):
        r = c1.append("s0", batch(k))
        assert (r.stored, r.session_seq) == (N, k * N)
    w.kill()
    w.start()
    c2 = CutClient(w.url, producer=producer, max_retries=2)
    assert c2.next_seq("s0") == 3 * N
    replay = rollwal.Client(w.url, producer=producer).session("s0", start_seq=N)
    r = replay.append(batch(1))
    assert (r.stored, r.duplicates, r.session_seq) == (0, N, N)

    # 2. SIGKILL during a batch: its body is halfway sent. The append fails
    # as an unknown outcome and keeps its numbers; after the restart the
    # session sends it again before the next batch.
    c2.pause("body")
    t, out = send_in_thread(c2, "s0", batch(3))
    assert c2.paused.wait(30), "the batch was not sent"
    w.kill()
    c2.go_on.set()
    t.join(60)
    err = out.get("error")
    assert isinstance(err, rollwal.UnknownOutcomeError) and isinstance(err, rollwal.TransportError), out
    assert err.attempts == 3
    assert c2.session("s0").unresolved == (3 * N, N)
    w.start()
    r = c2.append("s0", batch(4))
    assert (r.session_seq, r.stored) == (4 * N, N)
    assert c2.session("s0").unresolved is None

    # 2b. SIGKILL after the writer stored a batch and answered, the answer
    # lost: the same rows again, after the restart, are the same batch at
    # the same seq, answered as duplicates from the replayed WAL.
    c2.pause("answer")
    t, out = send_in_thread(c2, "s0", batch(5))
    assert c2.paused.wait(30), "no answer came"
    w.kill()
    c2.go_on.set()
    t.join(60)
    assert isinstance(out.get("error"), rollwal.UnknownOutcomeError), out
    w.start()
    r = c2.append("s0", batch(5))
    assert (r.session_seq, r.stored, r.duplicates) == (5 * N, 0, N)

    # 3. SIGKILLs at arbitrary points while a producer streams: its retries
    # (transport errors, then 503 while the restarted writer replays) ride
    # through each restart with the same sequence numbers; an unknown
    # outcome would be settled by appending the same rows again.
    c4 = rollwal.Client(w.url, producer=producer, max_retries=60, min_backoff=0.05, max_backoff=0.5)
    first, last = 6, 106
    assert c4.next_seq("s0") == first * N
    progress = {"next": first, "retried": 0, "unknown": 0, "duplicates": 0}
    failure: List[BaseException] = []

    def stream() -> None:
        k = first
        try:
            while k < last:
                try:
                    r = c4.append("s0", batch(k))
                except (rollwal.UnknownOutcomeError, rollwal.NotSentError):
                    progress["unknown"] += 1
                    assert progress["unknown"] < 20
                    continue  # the same rows again: the same seq
                assert r.session_seq == k * N and r.acked == N
                progress["retried"] += r.attempts - 1
                progress["duplicates"] += r.duplicates
                k += 1
                progress["next"] = k
        except BaseException as e:  # reported by the main thread
            failure.append(e)

    def setbacks() -> int:
        return progress["retried"] + progress["unknown"]

    t = threading.Thread(target=stream)
    t.start()
    for _ in range(2):
        target = progress["next"] + 4
        wait_until(f"batch {target} acknowledged", lambda: progress["next"] >= target or failure or not t.is_alive(), 90)
        assert not failure, failure
        assert t.is_alive(), f"the stream ended before the SIGKILL: {progress}"
        before = setbacks()
        w.kill()
        w.start()
        # The producer was cut off: a retry (or an unknown outcome) shows it.
        wait_until("the producer to get through the restart", lambda: setbacks() > before or failure or not t.is_alive(), 90)
        assert setbacks() > before, progress
    t.join(180)
    assert not t.is_alive() and not failure, failure
    assert progress["next"] == last
    print(f"stream through 2 SIGKILLs: {progress}")

    # Every id of the stream is in the base exactly once.
    w.stop()
    merge(writer_bin, w.data_dir)
    table, m = read_base(w.data_dir, columns=["id"])
    counts = id_counts(table)
    want = {row["id"] for k in range(last) for row in batch(k)}
    assert {i: n for i, n in counts.items() if n != 1} == {}, "ids stored more than once"
    assert set(counts) == want, f"missing {sorted(want - set(counts))[:5]}, unexpected {sorted(set(counts) - want)[:5]}"
    assert m["rows"] == last * N


# ---- a 400 names the row and the column -------------------------------------


def test_invalid_row_raises_with_row_and_column(shared):
    c = rollwal.Client(shared.url)
    good = rollouts("bad-", 0, 3)
    c.append("default", good[:1])
    rows = good[1:] + [{"id": "bad-x", "prompt": "p", "completion": "c", "reward": "high"}]
    with pytest.raises(rollwal.InvalidRowError) as ei:
        c.append("default", rows)
    e = ei.value
    assert (e.status, e.line, e.row, e.column) == (400, 3, 2, "reward")
    assert "want float64, got string" in e.message and e.attempts == 1
    assert not isinstance(e, rollwal.UnknownOutcomeError)
    # Nothing was stored: the next batch takes the refused one's numbers.
    r = c.append("default", good[1:])
    assert (r.session_seq, r.stored) == (1, 2)

    # Arrow: the writer names the record batch and row; .row is the index
    # in the table.
    t1 = pa.Table.from_pylist(rollouts("bad-a", 0, 4))
    t2 = pa.table({"id": ["bad-b0", "bad-b1"], "prompt": ["p", "p"], "completion": ["c", None], "reward": [1.0, 2.0]})
    t = pa.concat_tables([t1.select(["id", "prompt", "completion", "reward"]), t2])
    assert t.column("id").num_chunks == 2
    with pytest.raises(rollwal.InvalidRowError) as ei:
        c.append("default", t)
    e = ei.value
    assert (e.record_batch, e.batch_row, e.row, e.column) == (1, 1, 5, "completion")
    # A type that does not fit the column names the column.
    with pytest.raises(rollwal.InvalidRowError, match="reward") as ei:
        c.append("default", pa.table({"id": ["bad-t"], "prompt": ["p"], "completion": ["c"], "reward": ["1.0"]}))
    assert ei.value.column == "reward" and ei.value.row is None


# ---- 429 is retried ---------------------------------------------------------


class HeldRequest:
    """An ingest request whose body never finishes: it holds one of the
    writer's in-flight places until closed."""

    def __init__(self, w: Writer) -> None:
        host, port = w.addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(
            b"POST /v1/shards/s0/rows HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
            b"Content-Length: 1000\r\n\r\n{\"id\""
        )

    def close(self) -> None:
        self.sock.close()


class RetryLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.retried = threading.Event()
        self.records: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        self.records.append(msg)
        if "retrying" in msg:
            self.retried.set()


def test_429_is_retried(spawn_writer):
    # The writer takes one ingest request at a time and refuses the next at
    # once (429 inflight_limit, Retry-After: 1) while a held request has it.
    w = spawn_writer(["--shards", "s0", "--max-body-bytes", "65536"],
                     config="http:\n  max_inflight_requests: 1\n  inflight_wait: 0s\n")
    rows = rollouts("busy-", 0, 10)
    held = HeldRequest(w)
    try:
        wait_until("the held request to be admitted", lambda: w.metric("writer_http_inflight_requests") == 1, 30)

        # Retries run out while it stays held: BackpressureError, nothing stored.
        c0 = rollwal.Client(w.url, max_retries=1, max_backoff=0.2)
        with pytest.raises(rollwal.BackpressureError) as ei:
            c0.append("s0", rows)
        e = ei.value
        assert (e.status, e.code, e.retry_after, e.attempts) == (429, "inflight_limit", 1.0, 2)
        assert not isinstance(e, rollwal.UnknownOutcomeError)
        assert c0.next_seq("s0") == 0

        # Retried: the place frees after the first 429, and the retry, after
        # the Retry-After, is stored.
        logger = logging.getLogger("rollwal.test429")
        logger.setLevel(logging.INFO)
        logger.propagate = False
        log = RetryLog()
        logger.addHandler(log)
        c = rollwal.Client(w.url, logger=logger)
        out: Dict[str, Any] = {}

        def send() -> None:
            try:
                out["result"] = c.append("s0", rows)
            except rollwal.RollwalError as err:
                out["error"] = err

        t0 = time.monotonic()
        t = threading.Thread(target=send)
        t.start()
        assert log.retried.wait(30), "no 429 was retried"
    finally:
        held.close()
    t.join(60)
    took = time.monotonic() - t0
    res = out.get("result")
    assert res is not None, out
    assert (res.stored, res.session_seq) == (10, 0) and res.attempts >= 2
    assert took >= 1.0, f"the retry came after {took:.3f}s, before the Retry-After"
    assert "429" in log.records[0] and "inflight_limit" in log.records[0]
    assert w.metric('writer_http_inflight_refused_total{limit="requests"}') >= 3

    # 413 on the same writer: too large, typed, not retried.
    with pytest.raises(rollwal.TooLargeError) as ei:
        c.append("s0", [{"id": "huge", "prompt": "x" * 100_000, "completion": "c"}])
    assert ei.value.attempts == 1 and ei.value.code == "too_large"
    assert c.append("s0", rollouts("busy-", 10, 1)).session_seq == 10


# ---- round trips through the base -------------------------------------------


def test_ndjson_and_arrow_round_trip(shared, writer_bin):
    c = rollwal.Client(shared.url)
    dict_rows = rollouts("rt-d", 0, 5)
    dict_rows[1]["reward"] = None
    dict_rows[2].pop("metadata")
    r = c.append("arrow", dict_rows)
    assert r.stored == 5
    t = pa.table({
        "id": [f"rt-a{i}" for i in range(6)],
        "prompt": [f"p{i}" for i in range(6)],
        "completion": [f"c{i}" for i in range(6)],
        "reward": [0.5, None, 1.5, 2.5, None, 3.5],
        "metadata": ['{"k": 1}', None, "[1, 2]", '"s"', "null", "{}"],
    })
    t = pa.concat_tables([t.slice(0, 2), t.slice(2, 4)])  # two record batches
    r = c.append("arrow", t)
    assert (r.stored, r.session_seq) == (6, 5)
    r = c.append("arrow", t.combine_chunks().to_batches()[0].slice(0, 2))  # a RecordBatch of ids sent before
    assert r.stored == 0 and r.duplicates == 2  # in the memtable: deduplicated by id

    shared.flush("arrow")
    merge(writer_bin, shared.data_dir)
    base, _ = read_base(shared.data_dir)
    got = {row["id"]: row for row in base.to_pylist() if row["id"].startswith("rt-")}
    assert sorted(got) == sorted([f"rt-d{i:06d}" for i in range(5)] + [f"rt-a{i}" for i in range(6)])
    for want in t.to_pylist():
        row = got[want["id"]]
        assert (row["prompt"], row["completion"], row["reward"], row["metadata"]) == (
            want["prompt"], want["completion"], want["reward"], want["metadata"])
    assert got["rt-d000001"]["reward"] is None and got["rt-d000002"]["metadata"] is None
    assert got["rt-d000003"]["metadata"] == '{"i":3}'  # json stored as sent


def test_batcher_against_real_writer(shared):
    c = rollwal.Client(shared.url, producer="py-batcher-" + secrets.token_hex(4))
    with rollwal.Batcher(c, max_rows=64, max_bytes=8192, linger=0.05) as b:
        acks = [b.add(row, shard="batch", source=("feed", i)) for i, row in enumerate(rollouts("bt-", 0, 500))]
        b.flush(timeout=60)
        last = b.add(rollouts("bt-", 500, 1)[0], shard="batch", source=("feed", 500))
        res = last.result(timeout=30)  # the linger sends it
    results = {id(a.result()): a.result() for a in acks}
    assert sum(r.stored for r in results.values()) == 500 and len(results) >= 8
    assert sorted(r.session_seq for r in results.values())[0] == 0
    assert res.session_seq == 500 and res.stored == 1
    # A fresh client with the same producer id resumes after the last row.
    assert rollwal.Client(shared.url, producer=c.producer).next_seq("batch") == 501
