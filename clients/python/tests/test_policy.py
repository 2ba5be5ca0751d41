"""The retry decision table: which answers are retried, which say nothing
was stored (and whether every attempt would meet them), as the Go client
decides (client/errors.go: statusError, retryable, refusal)."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

import rollwal
from rollwal.errors import error_from_answer, parse_retry_after, refusal, retryable, unknown_outcome

# (status, code) -> (class, retried, refused, always)
TABLE = [
    (400, "", rollwal.BadRequestError, False, True, True),
    (400, "bad_parameter", rollwal.BadRequestError, False, True, True),
    (400, "invalid_append", rollwal.BadRequestError, False, True, False),  # the source limit: an earlier attempt may have passed it
    (401, "unauthorized", rollwal.UnauthorizedError, False, True, True),
    (403, "forbidden", rollwal.UnauthorizedError, False, True, True),
    (404, "", rollwal.StatusError, False, True, False),
    (404, "unknown_table", rollwal.StatusError, False, True, False),
    (408, "body_timeout", rollwal.StatusError, True, True, False),
    (409, "not_owner", rollwal.NotOwnerError, False, True, False),
    (409, "outcome_unknown", rollwal.NotOwnerError, False, False, False),
    (409, "sequence", rollwal.SequenceError, False, True, False),
    (413, "too_large", rollwal.TooLargeError, False, True, True),
    (415, "", rollwal.StatusError, False, True, True),
    (429, "backpressure", rollwal.BackpressureError, True, True, False),
    (429, "merges_behind", rollwal.BackpressureError, True, True, False),
    (429, "inflight_limit", rollwal.BackpressureError, True, True, False),
    (429, "too_many_producers", rollwal.TooManyProducersError, False, True, False),
    (500, "", rollwal.StatusError, False, False, False),
    (502, "", rollwal.UnavailableError, True, False, False),
    (503, "", rollwal.UnavailableError, True, False, False),
    (503, "disk_full", rollwal.UnavailableError, True, False, False),
    (503, "store_down", rollwal.UnavailableError, True, False, False),
    (503, "stopped", rollwal.UnavailableError, True, False, False),
    (504, "", rollwal.UnavailableError, True, False, False),
]


def answer(status: int, code: str) -> bytes:
    doc = {"error": f"e{status}", "code": code}
    if code == "sequence":
        doc.update(producer="p", seq=5, count=2, expected_seq=3, unknown_producer=False)
    return json.dumps(doc).encode()


@pytest.mark.parametrize("status,code,cls,retried,refused,always", TABLE, ids=[f"{s}-{c or 'none'}" for s, c, *_ in TABLE])
def test_decision_table(status, code, cls, retried, refused, always):
    err = error_from_answer(status, answer(status, code), None)
    assert type(err) is cls, f"{status} {code}: {type(err).__name__}, want {cls.__name__}"
    assert err.status == status and err.code == code and err.message == f"e{status}"
    assert retryable(err) is retried
    assert refusal(err) == (refused, always)


def test_transport_errors_are_retried_and_not_refusals():
    err = rollwal.TransportError("cut")
    assert retryable(err)
    assert refusal(err) == (False, False)


def test_classes_match_the_go_categories():
    # Go's StatusError.Is: every 409 matches ErrNotOwner (a 409 sequence is
    # a SequenceError instead); 429 too_many_producers is not backpressure.
    nu = error_from_answer(409, answer(409, "outcome_unknown"), None)
    assert isinstance(nu, rollwal.NotOwnerError)
    tmp = error_from_answer(429, answer(429, "too_many_producers"), None)
    assert not isinstance(tmp, rollwal.BackpressureError)
    seq = error_from_answer(409, answer(409, "sequence"), None)
    assert (seq.producer, seq.seq, seq.count, seq.expected, seq.unknown_producer) == ("p", 5, 2, 3, False)
    assert not isinstance(seq, rollwal.NotOwnerError)
    # A 409 "sequence" without its fields is no SequenceError (as in Go).
    assert type(error_from_answer(409, b'{"error":"x","code":"sequence"}', None)) is rollwal.NotOwnerError


def test_bad_request_names_row_and_column():
    e = error_from_answer(400, b'{"error":"line 3, column \\"reward\\": want number","line":3,"column":"reward"}', None)
    assert isinstance(e, rollwal.InvalidRowError)
    assert (e.line, e.row, e.column, e.path) == (3, 2, "reward", "")
    # Arrow: record batch and row, turned into the index in the request.
    e = error_from_answer(400, b'{"error":"x","record_batch":2,"row":1,"column":"id","path":""}', None, [0, 4, 9])
    assert isinstance(e, rollwal.InvalidRowError)
    assert (e.record_batch, e.batch_row, e.row, e.line) == (2, 1, 10, None)
    # A refused parameter names no row.
    e = error_from_answer(400, b'{"error":"bad seq","code":"bad_parameter","parameter":"seq"}', None)
    assert type(e) is rollwal.BadRequestError and e.parameter == "seq" and e.row is None
    # A body that is not JSON still gives its text.
    e = error_from_answer(503, b"upstream gone\n", None)
    assert isinstance(e, rollwal.UnavailableError) and e.message == "upstream gone"


def test_retry_after():
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("1") == 1.0
    assert parse_retry_after("garbage") is None
    assert parse_retry_after("-3") is None
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after(future) <= 31
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert parse_retry_after(past) == 0.0
    e = error_from_answer(429, answer(429, "backpressure"), "1")
    assert e.retry_after == 1.0


def test_backoff_stays_within_bounds():
    c = rollwal.Client("http://127.0.0.1:1", min_backoff=0.001, max_backoff=1.0)
    for attempt in range(1, 80):
        ceiling = min(0.001 * (1 << min(attempt - 1, 20)), 1.0)
        for _ in range(5):
            d = c._backoff(attempt, None)
            assert ceiling / 2 <= d <= ceiling, (attempt, d)
    assert c._backoff(1, 3600.0) == 1.0  # a Retry-After past max_backoff is cut to it
    assert c._backoff(1, 0.5) >= 0.5  # and honoured below it


def test_unknown_outcome_mark_keeps_the_class():
    e = error_from_answer(503, answer(503, "disk_full"), "5")
    u = unknown_outcome(e)
    assert isinstance(u, rollwal.UnavailableError) and isinstance(u, rollwal.UnknownOutcomeError)
    assert u.outcome_unknown and not e.outcome_unknown
    assert u.code == "disk_full" and u.retry_after == 5.0 and u.cause is e
    assert type(u) is type(unknown_outcome(error_from_answer(503, b"{}", None)))  # one class per combination
    assert unknown_outcome(u) is u


@pytest.mark.parametrize(
    "url,kw,want",
    [
        ("127.0.0.1:8080", {}, "want http(s)://host"),
        ("ftp://h", {}, "want http(s)://host"),
        ("http://h", {"min_backoff": 1.0, "max_backoff": 0.001}, "min_backoff"),
        ("http://h", {"producer": "p", "no_session": True}, "a producer id needs a session"),
        ("http://h", {"producer": "a/b"}, "'/' is not one of"),
        ("http://h", {"producer": ".."}, 'not "." or ".."'),
        ("http://h", {"producer": "p" * 129}, "want 1-128 bytes"),
        ("http://h", {"max_retries": -1}, "max_retries"),
        ("http://h", {"ssl_context": object()}, "is not https"),
    ],
)
def test_client_refuses_bad_options(url, kw, want):
    with pytest.raises(ValueError, match=want.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        rollwal.Client(url, **kw)


def test_default_producer_is_random_per_client():
    a, b = rollwal.Client("http://h"), rollwal.Client("http://h")
    assert a.producer.startswith("py-") and len(a.producer) == 19 and a.producer != b.producer
    assert rollwal.Client("http://h", no_session=True).producer is None


def test_rows_are_encoded_as_go_encodes_them():
    import datetime

    from rollwal._encode import encode

    b = encode([{"id": "a", "bin": b"\x00\x01", "t": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc), "s": "é"}])
    assert b.data == '{"id":"a","bin":"AAE=","t":"2024-01-02T03:04:05+00:00","s":"é"}\n'.encode()
    with pytest.raises(ValueError, match="row 0"):
        encode([{"id": "a", "reward": float("nan")}])
    with pytest.raises(TypeError, match="row 1.*time zone"):
        encode([{"id": "a"}, {"id": "b", "t": datetime.datetime(2024, 1, 2)}])
    with pytest.raises(ValueError, match="no rows"):
        encode([])
    with pytest.raises(TypeError, match="one mapping"):
        encode({"id": "a"})
