"""Batching by rows, bytes and linger, in order, with backpressure, against
the fake writer (client/batcher_test.go)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import drop, quick_client, status, wait_until

import rollwal


def test_batches_by_rows(fake):
    c, _ = quick_client(fake.url)
    with rollwal.Batcher(c, max_rows=10, linger=60) as b:
        acks = [b.add({"id": f"r{i}"}, shard="s0") for i in range(25)]
        # Two full batches go without waiting for the linger.
        wait_until("two full batches", lambda: len(fake.appends()) == 2, 10)
        assert not acks[20].done()
        b.flush(timeout=10)
    assert [len(r["ids"]) for r in fake.appends()] == [10, 10, 5]
    assert fake.seqs() == [0, 10, 20]
    res = {id(a.result()) for a in acks}
    assert len(res) == 3  # one Result per batch, shared by its rows
    assert acks[0].result().session_seq == 0 and acks[24].result().session_seq == 20
    assert fake.stored["s0"] == [f"r{i}" for i in range(25)]


def test_batches_by_bytes(fake):
    c, _ = quick_client(fake.url)
    line = len(json.dumps({"id": "r00"}, separators=(",", ":"))) + 1
    with rollwal.Batcher(c, max_bytes=3 * line, linger=60) as b:
        for i in range(8):
            b.add({"id": f"r{i:02d}"}, shard="s0")
    assert [len(r["ids"]) for r in fake.appends()] == [3, 3, 2]
    assert all(len(r["body"]) <= 3 * line for r in fake.appends())


def test_linger_sends_without_flush(fake):
    c, _ = quick_client(fake.url)
    b = rollwal.Batcher(c, linger=0.2)
    try:
        t0 = time.monotonic()
        ack = b.add({"id": "a"}, shard="s0")
        b.add({"id": "b"}, shard="s0")
        res = ack.result(timeout=10)
        took = time.monotonic() - t0
        assert res.stored == 2 and res.session_seq == 0
        assert took >= 0.19, f"sent after {took:.3f}s, before the linger"
    finally:
        b.close(timeout=10)


def test_source_name_cuts_and_offset_is_the_highest(fake):
    c, _ = quick_client(fake.url)
    with rollwal.Batcher(c, linger=60) as b:
        b.add({"id": "a"}, shard="s0", source=("s1", 4))
        b.add({"id": "b"}, shard="s0", source=("s1", 9))
        b.add({"id": "c"}, shard="s0", source=("s1", 2))
        b.add({"id": "d"}, shard="s0", source=("s2", 1))
    got = [(r["ids"], r["source"], r["offset"]) for r in fake.appends()]
    assert got == [(["a", "b", "c"], "s1", 9), (["d"], "s2", 1)]


def test_shards_have_their_own_batches(fake):
    c, _ = quick_client(fake.url)
    with rollwal.Batcher(c, max_rows=2, linger=60) as b:
        for i in range(3):
            b.add({"id": f"x{i}"}, shard="s0")
            b.add({"id": f"y{i}"}, shard="s1")
    assert fake.stored["s0"] == ["x0", "x1", "x2"] and fake.stored["s1"] == ["y0", "y1", "y2"]


def test_session_batcher(fake):
    c, _ = quick_client(fake.url, producer="p1")
    s = c.session("s3")
    with s.batcher(max_rows=2, linger=60) as b:
        for i in range(5):
            b.add({"id": f"z{i}"})
        with pytest.raises(ValueError, match="sends to shard 's3'"):
            b.add({"id": "no"}, shard="s0")
    assert fake.seqs() == [0, 2, 4] and s.next_seq() == 5


def test_failure_is_sticky(fake):
    c, _ = quick_client(fake.url)
    fake.gate = threading.Event()  # hold the first batch until the second is queued
    fake.faults = [status(400, line=1, column="reward")]
    b = rollwal.Batcher(c, max_rows=1, linger=60)
    try:
        first = b.add({"id": "a"}, shard="s0")
        second = b.add({"id": "b"}, shard="s0")
        wait_until("the first batch to be sent", lambda: len(fake.appends()) == 1, 10)
        fake.gate.set()
        with pytest.raises(rollwal.InvalidRowError):
            first.result(timeout=10)
        with pytest.raises(rollwal.NotSentError) as ei:
            second.result(timeout=10)
        assert isinstance(ei.value, rollwal.InvalidRowError)  # it carries the failure's class
        with pytest.raises(rollwal.NotSentError, match="refused after an earlier batch failed"):
            b.add({"id": "c"}, shard="s0")
        with pytest.raises(rollwal.NotSentError):
            b.flush(timeout=10)
        assert len(fake.appends()) == 1  # nothing after the failed batch was sent
    finally:
        b.close(timeout=10)


def test_unknown_outcome_is_settled_by_the_session(fake):
    # A batch whose answers were all lost fails as an unknown outcome; the
    # rows of a new Batcher of the same client follow it, and the session
    # sends the unknown batch again first: every row once, no gap.
    c, _ = quick_client(fake.url, max_retries=1)
    fake.faults = [drop(False), drop(False)]
    b = rollwal.Batcher(c, max_rows=2, linger=60)
    first = b.add({"id": "a"}, shard="s0")
    b.add({"id": "b"}, shard="s0")
    with pytest.raises(rollwal.UnknownOutcomeError):
        first.result(timeout=10)
    b.close(timeout=10)
    with rollwal.Batcher(c, max_rows=2, linger=60) as b2:
        ack = b2.add({"id": "c"}, shard="s0")
    assert ack.result().session_seq == 2
    assert fake.stored["s0"] == ["a", "b", "c"] and fake.seqs() == [0, 0, 0, 2]


def test_add_blocks_when_batches_pile_up(fake):
    c, _ = quick_client(fake.url)
    fake.gate = threading.Event()
    b = rollwal.Batcher(c, max_rows=1, max_pending=2, linger=60)
    try:
        b.add({"id": "a"}, shard="s0")  # sent, held by the gate
        wait_until("the first batch to be sent", lambda: len(fake.appends()) == 1, 10)
        b.add({"id": "b"}, shard="s0")
        b.add({"id": "c"}, shard="s0")  # two wait
        t0 = time.monotonic()
        with pytest.raises(rollwal.BatcherTimeoutError):
            b.add({"id": "d"}, shard="s0", timeout=0.2)
        assert time.monotonic() - t0 >= 0.19
        assert isinstance(rollwal.BatcherTimeoutError("x"), TimeoutError)
        blocked = []
        t = threading.Thread(target=lambda: blocked.append(b.add({"id": "d"}, shard="s0", timeout=30)))
        t.start()
        t.join(0.05)
        assert t.is_alive() and not blocked  # still waiting for room
        fake.gate.set()
        t.join(30)
        assert blocked
        b.flush(timeout=10)
    finally:
        fake.gate.set()
        b.close(timeout=10)
    assert fake.stored["s0"] == ["a", "b", "c", "d"]


def test_refuses_after_close(fake):
    c, _ = quick_client(fake.url)
    b = rollwal.Batcher(c)
    b.add({"id": "a"}, shard="s0")
    b.close(timeout=10)
    with pytest.raises(rollwal.ClosedError):
        b.add({"id": "b"}, shard="s0")
    assert fake.stored["s0"] == ["a"]


def test_close_with_timeout_abandons_retries(fake):
    c = rollwal.Client(fake.url, max_retries=50, min_backoff=0.2, max_backoff=0.2)
    fake.faults = [status(503, "stopped") for _ in range(100)]
    b = rollwal.Batcher(c)
    ack = b.add({"id": "a"}, shard="s0")
    wait_until("a first attempt", lambda: fake.appends(), 10)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        b.close(timeout=0.3)
    assert time.monotonic() - t0 < 5
    with pytest.raises(rollwal.CancelledError) as ei:
        ack.result(timeout=5)
    assert isinstance(ei.value, rollwal.UnknownOutcomeError)  # 503s: maybe stored


def test_many_threads_add_concurrently(fake):
    c, _ = quick_client(fake.url)
    errors = []
    with rollwal.Batcher(c, max_rows=7, linger=0.01) as b:
        def produce(k: int) -> None:
            try:
                for j in range(50):
                    b.add({"id": f"t{k}-{j}"}, shard=f"s{k % 2}")
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors
    for shard in ("s0", "s1"):
        rows = fake.stored[shard]
        assert len(rows) == 150 == len(set(rows))
        seqs = sorted(r["seq"] for r in fake.appends() if r["shard"] == shard)
        sizes = [len(r["ids"]) for r in sorted((r for r in fake.appends() if r["shard"] == shard), key=lambda r: r["seq"])]
        assert seqs[0] == 0 and all(seqs[i + 1] == seqs[i] + sizes[i] for i in range(len(seqs) - 1))
        assert max(sizes) <= 7
