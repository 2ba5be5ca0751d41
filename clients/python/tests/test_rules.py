"""The client's rules against a fake writer with injected faults: retries,
backoff and Retry-After, typed refusals, and how a producer session
numbers its batches (the Go client's tests in client/*_test.go)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time

import pytest
from conftest import FakeWriter, drop, passthrough, quick_client, rollouts, status

import rollwal


def ids(prefix: str, n: int):
    return [{"id": f"{prefix}{i}"} for i in range(n)]


def test_append_sends_the_session_and_numbers_batches(fake):
    c, waits = quick_client(fake.url)
    r1 = c.append("s0", ids("a", 3))
    r2 = c.append("s0", ids("b", 2), source=("stream", 7))
    r3 = c.append("s1", ids("c", 1))
    assert (r1.session_seq, r2.session_seq, r3.session_seq) == (0, 3, 0)
    assert (r1.stored, r1.acked, r1.attempts, r1.producer) == (3, 3, 1, c.producer)
    reqs = fake.appends()
    assert [(r["shard"], r["producer"], r["seq"]) for r in reqs] == [("s0", c.producer, 0), ("s0", c.producer, 3), ("s1", c.producer, 0)]
    assert (reqs[1]["source"], reqs[1]["offset"]) == ("stream", 7)
    assert reqs[0]["content_type"] == rollwal.CONTENT_TYPE_NDJSON
    assert reqs[0]["path"] == "/v1/shards/s0/rows"
    assert c.next_seq("s0") == 5 and not waits


def test_table_route_token_and_no_session(fake):
    c, _ = quick_client(fake.url, table="judged", token="sekrit", no_session=True)
    c.append("s/0", ids("a", 1))
    r = fake.appends()[0]
    assert r["path"] == "/v1/tables/judged/shards/s%2F0/rows"
    assert r["headers"].get("Authorization") == "Bearer sekrit"
    assert r["producer"] is None and r["seq"] is None


def test_bad_request_is_typed_not_retried_and_gives_back_its_seq(fake):
    c, waits = quick_client(fake.url)
    c.append("s0", ids("a", 2))
    fake.faults = [status(400, line=3, column="reward")]
    with pytest.raises(rollwal.InvalidRowError) as ei:
        c.append("s0", ids("b", 3))
    e = ei.value
    assert (e.row, e.line, e.column, e.attempts, e.outcome_unknown) == (2, 3, "reward", 1, False)
    assert not isinstance(e, rollwal.UnknownOutcomeError) and not waits
    res = c.append("s0", ids("c", 1))
    assert (res.session_seq, res.stored) == (2, 1)
    assert fake.next[("s0", c.producer)] == 3


@pytest.mark.parametrize(
    "code,error_code,cls",
    [
        (409, "not_owner", rollwal.NotOwnerError),
        (413, "too_large", rollwal.TooLargeError),
        (401, "unauthorized", rollwal.UnauthorizedError),
        (403, "forbidden", rollwal.UnauthorizedError),
        (404, "", rollwal.StatusError),
        (415, "", rollwal.StatusError),
        (429, "too_many_producers", rollwal.TooManyProducersError),
    ],
)
def test_refusals_are_typed_not_retried_and_give_back_their_seq(fake, code, error_code, cls):
    c, waits = quick_client(fake.url)
    fake.faults = [status(code, error_code)]
    with pytest.raises(cls) as ei:
        c.append("s0", ids("a", 2))
    assert ei.value.message == f"injected {code}" and ei.value.status == code
    assert not isinstance(ei.value, rollwal.UnknownOutcomeError)
    assert len(fake.appends()) == 1 and not waits
    assert c.append("s0", ids("b", 1)).session_seq == 0  # nothing was stored: the numbers went back


def test_429_is_retried_after_retry_after(fake):
    # Real sleeping: the client waits the writer's Retry-After (1 s), then
    # the retry, with the same seq, is stored.
    c = rollwal.Client(fake.url)
    fake.faults = [status(429, "backpressure", retry_after="1")]
    t0 = time.monotonic()
    res = c.append("s0", ids("a", 2))
    took = time.monotonic() - t0
    assert (res.stored, res.attempts, res.session_seq) == (2, 2, 0)
    assert took >= 1.0, f"retried after {took:.3f}s, before the Retry-After of 1s"
    assert fake.seqs() == [0, 0]


def test_gives_up_after_max_retries(fake):
    c, waits = quick_client(fake.url, max_retries=2, max_backoff=0.5)
    fake.faults = [status(429, "backpressure", retry_after="1") for _ in range(10)]
    with pytest.raises(rollwal.BackpressureError, match="gave up after 3 attempts") as ei:
        c.append("s0", ids("a", 1))
    assert ei.value.attempts == 3 and ei.value.retry_after == 1.0 and ei.value.code == "backpressure"
    assert not isinstance(ei.value, rollwal.UnknownOutcomeError)  # every attempt was refused
    assert waits == [0.5, 0.5]  # Retry-After, cut to max_backoff
    fake.faults = []
    assert c.append("s0", ids("b", 1)).session_seq == 0


def test_503_is_retried_then_unavailable_and_unknown(fake):
    c, waits = quick_client(fake.url, max_retries=3)
    fake.faults = [status(503, "disk_full", retry_after="5") for _ in range(4)]
    with pytest.raises(rollwal.UnavailableError) as ei:
        c.append("s0", ids("a", 2))
    e = ei.value
    assert isinstance(e, rollwal.UnknownOutcomeError) and e.code == "disk_full" and e.attempts == 4
    assert len(waits) == 3 and all(w == rollwal.DEFAULT_MAX_BACKOFF for w in waits)  # Retry-After 5 s, within max_backoff
    assert c.session("s0").unresolved == (0, 2)
    # The next append sends the unknown batch again first, at its numbers.
    res = c.append("s0", ids("b", 1))
    assert res.session_seq == 2 and fake.seqs() == [0, 0, 0, 0, 0, 2]
    assert fake.stored["s0"] == ["a0", "a1", "b0"]


def test_409_outcome_unknown_is_not_owner_and_unknown(fake):
    c, waits = quick_client(fake.url)
    fake.faults = [status(409, "outcome_unknown")]
    with pytest.raises(rollwal.NotOwnerError) as ei:
        c.append("s0", ids("a", 2))
    assert isinstance(ei.value, rollwal.UnknownOutcomeError) and not waits
    assert c.session("s0").unresolved == (0, 2)


def test_transport_errors_are_retried(fake):
    c, waits = quick_client(fake.url)
    fake.faults = [drop(stored=True), drop(stored=False)]
    res = c.append("s0", ids("a", 3))
    # The first lost answer had stored the rows: the retry is a duplicate.
    assert (res.attempts, res.stored, res.duplicates, res.session_seq) == (3, 0, 3, 0)
    assert len(waits) == 2 and fake.stored["s0"] == ["a0", "a1", "a2"]


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "not-stored"])
@pytest.mark.parametrize("retry", [True, False], ids=["retried", "other-rows-next"])
def test_unknown_outcome_settles_before_the_next_batch(fake, stored, retry):
    c, _ = quick_client(fake.url, max_retries=1)
    fake.faults = [drop(stored), drop(stored)]
    first = ids("a", 3)
    with pytest.raises(rollwal.UnknownOutcomeError) as ei:
        c.append("s0", first)
    assert isinstance(ei.value, rollwal.TransportError)
    assert c.next_seq("s0") == 3  # the range stays taken
    if retry:
        res = c.append("s0", first)
        assert (res.session_seq, res.acked) == (0, 3)
    res = c.append("s0", ids("d", 1))
    assert (res.session_seq, res.stored) == (3, 1)
    assert sorted(fake.stored["s0"]) == ["a0", "a1", "a2", "d0"]
    assert fake.next[("s0", c.producer)] == 4


def test_next_batch_not_sent_while_the_unknown_one_fails(fake):
    c, _ = quick_client(fake.url, max_retries=0)
    fake.faults = [drop(False), status(503, "stopped")]
    with pytest.raises(rollwal.UnknownOutcomeError):
        c.append("s0", ids("a", 2))
    with pytest.raises(rollwal.NotSentError) as ei:
        c.append("s0", ids("b", 1))
    e = ei.value
    assert isinstance(e, rollwal.UnavailableError) and not isinstance(e, rollwal.UnknownOutcomeError)
    assert "still has an unknown outcome" in str(e)
    assert fake.seqs() == [0, 0]  # b was never sent
    res = c.append("s0", ids("b", 1))
    assert res.session_seq == 2 and fake.stored["s0"] == ["a0", "a1", "b0"]


def test_unknown_batch_refused_when_resent_gives_back_its_numbers(fake):
    c, _ = quick_client(fake.url, max_retries=0)
    fake.faults = [drop(False), status(400, column="reward", line=1)]
    with pytest.raises(rollwal.UnknownOutcomeError):
        c.append("s0", ids("a", 2))
    res = c.append("s0", ids("b", 1))  # a is refused (400: never stored); b takes its numbers
    assert res.session_seq == 0 and fake.stored["s0"] == ["b0"]


def test_sequence_error_is_typed(fake):
    a, _ = quick_client(fake.url, producer="shared")
    b, _ = quick_client(fake.url, producer="shared")
    assert b.next_seq("s0") == 0
    a.append("s0", ids("a", 3))
    with pytest.raises(rollwal.SequenceError) as ei:
        b.append("s0", ids("b", 5))
    e = ei.value
    assert (e.shard, e.producer, e.seq, e.count, e.expected, e.unknown_producer) == ("s0", "shared", 0, 5, 3, False)
    res = b.append("s0", ids("b", 5))
    assert (res.session_seq, res.stored) == (3, 5)


def test_forgotten_producer_renumbers(fake):
    def forgotten(h, req):
        h.answer(409, {"error": "unknown producer", "code": "sequence", "producer": req["producer"], "seq": req["seq"],
                       "count": len(req["ids"]), "expected_seq": 0, "unknown_producer": True})
        with h.writer.lock:
            h.writer.next.pop((req["shard"], req["producer"]), None)
        return True

    c, _ = quick_client(fake.url)
    fake.faults = [passthrough, passthrough, forgotten]
    seqs = [c.append("s0", ids(x, 1)).session_seq for x in "abcd"]
    assert seqs == [0, 1, 0, 1]
    assert fake.seqs() == [0, 1, 2, 0, 1]


def test_resumed_producer_continues(fake):
    first, _ = quick_client(fake.url, producer="job-7")
    first.append("s0", ids("a", 4))
    # A restarted producer with the same id: the writer says where it left off.
    again, _ = quick_client(fake.url, producer="job-7")
    assert again.next_seq("s0") == 4
    assert again.append("s0", ids("b", 2)).session_seq == 4
    gets = [r for r in fake.requests if r["method"] == "GET"]
    assert [g["path"] for g in gets] == ["/v1/shards/s0/producers/job-7", "/v1/shards/s0/producers/job-7"]
    # A deterministic stream replayed from a known position: its acked rows
    # are answered as duplicates.
    replay, _ = quick_client(fake.url, producer="job-7")
    res = replay.session("s0", start_seq=2).append([{"id": "a2"}, {"id": "a3"}])
    assert (res.session_seq, res.stored, res.duplicates) == (2, 0, 2)


def test_one_session_object_per_shard_and_id(fake):
    c, _ = quick_client(fake.url)
    assert c.session("s0") is c.session("s0")
    assert c.session("s0") is not c.session("s1")
    s = c.session("s0", producer_id="other", start_seq=5)
    assert s.producer_id == "other" and s.next_seq() == 5
    with pytest.raises(ValueError, match="start_seq applies to a new one"):
        c.session("s0", producer_id="other", start_seq=6)


def test_concurrent_appends_to_one_shard_take_turns(fake):
    c, _ = quick_client(fake.url)
    errors = []

    def produce(k: int) -> None:
        try:
            for j in range(10):
                c.append("s0", ids(f"t{k}-{j}-", 3))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sorted(fake.seqs()) == list(range(0, 180, 3))  # no gap, no 409
    assert len(fake.stored["s0"]) == 180 == len(set(fake.stored["s0"]))


def test_arrow_table_is_sent_as_an_ipc_stream(fake):
    pa = pytest.importorskip("pyarrow")
    c, _ = quick_client(fake.url)
    t = pa.Table.from_pylist(rollouts("x", 0, 5))
    res = c.append("s0", t)
    assert res.stored == 5
    r = fake.appends()[0]
    assert r["content_type"] == rollwal.CONTENT_TYPE_ARROW and r["ids"] == [f"x{i:06d}" for i in range(5)]
    # The same table again (e.g. after an unknown outcome) is the same batch.
    assert c.append("s0", t.to_batches()[0]).session_seq == 5


def test_closed_client_refuses_without_retrying(fake):
    c, waits = quick_client(fake.url)
    c.append("s0", ids("a", 1))
    c.close()
    with pytest.raises(rollwal.ClosedError):
        c.append("s0", ids("b", 1))
    assert not waits and len(fake.appends()) == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_with_ssl_context(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    w = FakeWriter(ssl_context=server)
    try:
        assert w.url.startswith("https://")
        c = rollwal.Client(w.url, ssl_context=ssl.create_default_context(cafile=str(cert)))
        assert c.append("s0", ids("a", 2)).stored == 2
        # A writer the client cannot verify: a transport error (retried, then
        # an unknown outcome, as the Go client's failed handshake).
        untrusting, _ = quick_client(w.url, max_retries=1)
        with pytest.raises(rollwal.TransportError, match="CERTIFICATE_VERIFY_FAILED") as ei:
            untrusting.append("s0", ids("b", 1))
        assert isinstance(ei.value, rollwal.UnknownOutcomeError) and ei.value.attempts == 2
    finally:
        w.close()
