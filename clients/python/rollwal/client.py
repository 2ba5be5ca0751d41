"""The client of a rollwal writer: appends with safe retries, in producer
sessions (see the package documentation and README.md)."""

from __future__ import annotations

import http.client
import json
import logging
import random
import re
import secrets
import ssl
import threading
import time
import urllib.parse
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple, Union

from . import _encode
from ._encode import Body
from .errors import (
    CancelledError,
    ClosedError,
    RollwalError,
    SequenceError,
    StatusError,
    TransportError,
    error_from_answer,
    not_sent,
    plain,
    refusal,
    retryable,
    unknown_outcome,
)

__all__ = ["Client", "Session", "Result", "Source", "DEFAULT_MAX_RETRIES", "DEFAULT_MIN_BACKOFF", "DEFAULT_MAX_BACKOFF"]

# Defaults, as the Go client's (client/client.go).
DEFAULT_MAX_RETRIES = 6
DEFAULT_MIN_BACKOFF = 0.05
DEFAULT_MAX_BACKOFF = 5.0
DEFAULT_TIMEOUT = 60.0

MAX_PRODUCER_ID_BYTES = 128
_PRODUCER_ID = re.compile(r"[A-Za-z0-9._:-]+\Z")
_MAX_ANSWER = 1 << 20
USER_AGENT = "rollwal-python/0.1.0"

log = logging.getLogger("rollwal")


class Source(NamedTuple):
    """The upstream position an append covers: after the rows' generation
    commits, the writer keeps the highest offset per source name."""

    name: str
    offset: int


SourceLike = Union[Source, Tuple[str, int], None]


def _source(src: SourceLike) -> Optional[Source]:
    if src is None:
        return None
    name, offset = src
    if not isinstance(name, str) or not name:
        raise ValueError(f"rollwal: source name {name!r}: want a non-empty string")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"rollwal: source offset {offset!r}: want an integer >= 0")
    return Source(name, offset)


@dataclass
class Result:
    """The writer's acknowledgement of one request: every row is durable.

    ``stored`` rows are new, ``duplicates`` the writer already held (a
    retried batch of the session, or an id in its memtable); ``acked`` is
    both. ``attempts`` is how many times the request was sent;
    ``session_seq`` the sequence number its first row was sent with (None
    without a session)."""

    acked: int = 0
    stored: int = 0
    duplicates: int = 0
    first_seq: int = 0
    last_seq: int = 0
    generation: int = 0
    attempts: int = 0
    session_seq: Optional[int] = None
    producer: Optional[str] = None

    @classmethod
    def _of(cls, doc: Dict[str, Any], attempts: int) -> "Result":
        def num(k: str) -> int:
            v = doc.get(k)
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0

        return cls(
            acked=num("acked"),
            stored=num("stored"),
            duplicates=num("duplicates"),
            first_seq=num("first_seq"),
            last_seq=num("last_seq"),
            generation=num("generation"),
            attempts=attempts,
        )


def validate_producer_id(pid: str) -> None:
    """The writer's rule: 1-128 bytes of [A-Za-z0-9._:-], and not "." or ".."
    (which a URL path cannot carry as a segment)."""
    if not isinstance(pid, str) or not pid or len(pid.encode()) > MAX_PRODUCER_ID_BYTES or pid in (".", ".."):
        raise ValueError(f'rollwal: producer id {pid!r}: want 1-{MAX_PRODUCER_ID_BYTES} bytes of [A-Za-z0-9._:-], not "." or ".."')
    if not _PRODUCER_ID.match(pid):
        bad = next(c for c in pid if not _PRODUCER_ID.match(c))
        raise ValueError(f"rollwal: producer id {pid!r}: {bad!r} is not one of [A-Za-z0-9._:-]")


def random_producer_id() -> str:
    """"py-" and 16 hex digits from the OS's random source."""
    return "py-" + secrets.token_hex(8)


class _Turn:
    """A FIFO lock: one batch of a session is on its way at a time, and
    concurrent appends take turns in the order they asked."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tickets = 0
        self._serving = 0

    def __enter__(self) -> "_Turn":
        with self._cond:
            mine = self._tickets
            self._tickets += 1
            while self._serving != mine:
                self._cond.wait()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


class _Batch:
    """A batch of a session: its body, source and sequence. maybe: some
    attempt ended without a definite answer, so it may be stored although
    the writer refused a later attempt."""

    __slots__ = ("body", "src", "seq", "maybe")

    def __init__(self, body: Body, src: Optional[Source]) -> None:
        self.body = body
        self.src = src
        self.seq = 0
        self.maybe = False

    @property
    def rows(self) -> int:
        return self.body.rows

    def same(self, other: "_Batch") -> bool:
        return self.body.same(other.body) and self.src == other.src


def _wait(seconds: float, cancel: Optional[threading.Event]) -> bool:
    """Sleep; True when cancel was set first."""
    if cancel is None:
        time.sleep(seconds)
        return False
    return cancel.wait(seconds)


class Client:
    """A client of the writer at ``base_url`` (``http://host:port``). It is
    safe to share between threads, and it is a producer session: every
    append carries its producer id and the sequence number of its first row
    (see :class:`Session`).

    :param table: the table, for a writer serving several (routes
        ``/v1/tables/{table}/...``); None is the writer's first table.
    :param token: a bearer token (the writer's ingest token).
    :param producer: the producer id (1-128 bytes of [A-Za-z0-9._:-]); None
        makes a random one ("py-" and 16 hex digits) numbered from 0 in every
        shard. A caller's id resumes: before its first batch to a shard the
        client asks the writer where the id left off.
    :param no_session: append without a session (``client.append`` sends no
        producer/seq: retries are then deduplicated by ids only while the
        first copy is in the writer's memtable).
    :param timeout: seconds each socket operation of a request may take.
    :param max_retries: retries after a request's first attempt (0: none).
    :param min_backoff: seconds before the first retry, doubled on each
        next one up to ``max_backoff``, with jitter; a Retry-After beyond
        ``max_backoff`` is cut to it.
    :param ssl_context: for an https:// writer: the CAs that sign its
        certificate and the client's own certificate, if it asks for one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        table: Optional[str] = None,
        token: Optional[str] = None,
        producer: Optional[str] = None,
        no_session: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        min_backoff: float = DEFAULT_MIN_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        ssl_context: Optional[ssl.SSLContext] = None,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment:
            raise ValueError(f"rollwal: base URL {base_url!r}: want http(s)://host[:port]")
        if ssl_context is not None and u.scheme != "https":
            raise ValueError(f"rollwal: ssl_context is set but base URL {base_url!r} is not https://")
        if max_retries < 0:
            raise ValueError(f"rollwal: max_retries {max_retries}: want >= 0")
        if min_backoff <= 0 or max_backoff <= 0 or min_backoff > max_backoff:
            raise ValueError(f"rollwal: min_backoff {min_backoff} and max_backoff {max_backoff}: want 0 < min_backoff <= max_backoff")
        if timeout <= 0:
            raise ValueError(f"rollwal: timeout {timeout}: want > 0 seconds")
        if producer is not None and no_session:
            raise ValueError(f"rollwal: producer {producer!r} and no_session: a producer id needs a session")
        if producer is not None:
            validate_producer_id(producer)
        if table is not None and not table:
            raise ValueError("rollwal: table: want a name or None")
        self.base_url = base_url
        self.table = table
        self.timeout = timeout
        self.max_retries = max_retries
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.no_session = no_session
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._ssl = ssl_context
        self._token = token
        self._log = logger or log
        self._producer = None if no_session else (producer or random_producer_id())
        self._resume = producer is not None
        v1 = u.path.rstrip("/") + "/v1"
        self._v1 = v1 + ("/tables/" + urllib.parse.quote(table, safe="") if table else "")
        self._lock = threading.Lock()
        self._sessions: Dict[Tuple[str, str], Session] = {}
        self._local = threading.local()
        self._conns: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()
        self._closed = False
        # Replaced by tests to observe the waits between attempts.
        self._wait: Callable[[float, Optional[threading.Event]], bool] = _wait

    # ---- public API ------------------------------------------------------

    @property
    def producer(self) -> Optional[str]:
        """The id of the client's producer session; None with no_session."""
        return self._producer

    def append(self, shard: str, rows: Any, source: SourceLike = None) -> Result:
        """Send rows to shard as one request and return once the writer made
        them durable, retrying as the package documentation says.

        rows is a list of dicts (sent as NDJSON) or a pyarrow Table or
        RecordBatch (sent as an Arrow IPC stream); source an optional
        ``(name, offset)``. In the client's session (unless no_session),
        appends to one shard take turns; appends to different shards run in
        parallel from different threads."""
        return self._append_body(shard, _encode.encode(rows), _source(source))

    def session(self, shard: str, producer_id: Optional[str] = None, start_seq: Optional[int] = None) -> "Session":
        """The producer session of ``producer_id`` (default: the client's) in
        shard. There is one Session per shard and id in a client: the same
        object is returned each time.

        start_seq, for a new session, is where its numbering starts. None
        (the default) is 0 for the client's random id, and for a caller's id
        what the writer says (``GET .../producers/{id}``, before the first
        batch). Give it only for a deterministic stream that you replay from
        a known position: sequence k must always be row k of the stream,
        because a batch wholly below what the writer holds is answered as
        duplicates."""
        if producer_id is None:
            if self._producer is None:
                raise ValueError("rollwal: the client has no session (no_session): give a producer_id")
            producer_id, resume = self._producer, self._resume
        else:
            validate_producer_id(producer_id)
            resume = True
        if not isinstance(shard, str) or not shard:
            raise ValueError(f"rollwal: shard {shard!r}: want a non-empty string")
        if start_seq is not None and (isinstance(start_seq, bool) or not isinstance(start_seq, int) or start_seq < 0):
            raise ValueError(f"rollwal: start_seq {start_seq!r}: want an integer >= 0")
        with self._lock:
            s = self._sessions.get((shard, producer_id))
            if s is None:
                s = Session(self, shard, producer_id, resume, start_seq)
                self._sessions[(shard, producer_id)] = s
            elif start_seq is not None and s._start_seq != start_seq:
                raise ValueError(
                    f"rollwal: producer {producer_id!r} already has a session in shard {shard!r} in this client; "
                    "start_seq applies to a new one only"
                )
            return s

    def next_seq(self, shard: str) -> int:
        """The sequence number the client's session gives the next row it
        sends to shard (asking the writer first for a caller's id)."""
        return self.session(shard).next_seq()

    def close(self) -> None:
        """Close the client's connections."""
        self._closed = True
        for c in list(self._conns):
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"rollwal.Client({self.base_url!r}, table={self.table!r}, producer={self._producer!r})"

    # ---- sending ---------------------------------------------------------

    def _append_body(self, shard: str, body: Body, src: Optional[Source], cancel: Optional[threading.Event] = None) -> Result:
        if not isinstance(shard, str) or not shard:
            raise ValueError(f"rollwal: shard {shard!r}: want a non-empty string")
        if self._producer is None:
            res, _, maybe, err = self._send(shard, body, src, None, None, cancel)
            if err is not None:
                raise _outcome(err, maybe)
            assert res is not None
            return res
        return self.session(shard)._append_body(body, src, cancel)

    def _shard_path(self, shard: str) -> str:
        return f"{self._v1}/shards/{urllib.parse.quote(shard, safe='')}"

    def _rows_path(self, shard: str, src: Optional[Source], producer: Optional[str], seq: Optional[int]) -> str:
        q = []
        if src is not None:
            q += [("source", src.name), ("offset", str(src.offset))]
        if producer is not None and seq is not None:
            q += [("producer", producer), ("seq", str(seq))]
        path = self._shard_path(shard) + "/rows"
        return path + ("?" + urllib.parse.urlencode(q) if q else "")

    def _send(
        self,
        shard: str,
        body: Body,
        src: Optional[Source],
        producer: Optional[str],
        seq: Optional[int],
        cancel: Optional[threading.Event],
    ) -> Tuple[Optional[Result], int, bool, Optional[RollwalError]]:
        """Post body, retrying what is safe to retry, with the same seq on
        every attempt. Returns (result, attempts, maybe, error); maybe says
        whether some attempt ended without a definite answer, so that the
        rows may be stored even when error is a refusal."""
        path = self._rows_path(shard, src, producer, seq)
        doc, attempts, maybe, err = self._retrying("append", shard, lambda: self._once("POST", path, body), cancel)
        if err is not None:
            err.shard = shard
            return None, attempts, maybe, err
        assert doc is not None
        return Result._of(doc, attempts), attempts, maybe, None

    def _retrying(
        self, what: str, shard: str, attempt: Callable[[], Dict[str, Any]], cancel: Optional[threading.Event]
    ) -> Tuple[Optional[Dict[str, Any]], int, bool, Optional[RollwalError]]:
        maybe = False
        n = 0
        while True:
            n += 1
            try:
                return attempt(), n, maybe, None
            except (TransportError, StatusError) as e:
                err: RollwalError = e
            refused, _ = refusal(err)
            if not refused:
                maybe = True
            err.attempts = n
            if not retryable(err) or n > self.max_retries:
                if n > 1:
                    err.args = (f"rollwal: {what} to shard {shard!r}: gave up after {n} attempts: {err}",)
                return None, n, maybe, err
            wait = self._backoff(n, getattr(err, "retry_after", None))
            self._log.info("rollwal: retrying %s to shard %r: attempt %d failed (%s); waiting %.3fs", what, shard, n, err, wait)
            if self._wait(wait, cancel):
                c = CancelledError(f"rollwal: {what} to shard {shard!r}: cancelled after {n} attempts: {err}")
                c.attempts, c.shard = n, shard
                c.cause = err  # type: ignore[attr-defined]
                return None, n, maybe, c

    def _backoff(self, attempt: int, retry_after: Optional[float]) -> float:
        """The wait before retry number attempt: exponential from
        min_backoff, with equal jitter (half fixed, half random), never
        shorter than the writer's Retry-After, all within max_backoff."""
        d = self.max_backoff
        if attempt - 1 < 32:
            exp = self.min_backoff * (1 << (attempt - 1))
            if 0 < exp < d:
                d = exp
        d = d / 2 + random.uniform(0, d / 2)
        return min(max(d, retry_after or 0.0), self.max_backoff)

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
            self._conns.add(conn)
        return conn

    def _send_body(self, conn: http.client.HTTPConnection, data: bytes) -> None:
        """Send a request's body on conn (tests override it)."""
        conn.send(data)

    @staticmethod
    def _early_answer(conn: http.client.HTTPConnection) -> Optional[http.client.HTTPResponse]:
        try:
            if conn.sock is not None:
                conn.sock.settimeout(1.0)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException):
            return None
        return resp if resp.status != 200 else None

    def _once(self, method: str, path: str, body: Optional[Body]) -> Dict[str, Any]:
        """One attempt: the decoded 200 answer, or TransportError/StatusError."""
        if self._closed:
            raise ClosedError("rollwal: the client is closed")
        conn = self._connection()
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            conn.putheader("User-Agent", USER_AGENT)
            conn.putheader("Accept", "application/json")
            if self._token:
                conn.putheader("Authorization", "Bearer " + self._token)
            if body is not None:
                conn.putheader("Content-Type", body.content_type)
                conn.putheader("Content-Length", str(len(body.data)))
            conn.endheaders()
            early = False
            if body is not None:
                try:
                    self._send_body(conn, body.data)
                except OSError as e:
                    # The writer may have answered before it read the whole
                    # body (413 for a declared length over its limit) and
                    # closed: read that answer if it came, as Go's client does.
                    resp = self._early_answer(conn)
                    if resp is None:
                        raise e
                    early = True
                else:
                    resp = conn.getresponse()
            else:
                resp = conn.getresponse()
            data = resp.read(_MAX_ANSWER)
            if early or not resp.isclosed():
                conn.close()  # cut by the writer, or an answer past the limit: not reusable
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"rollwal: {method} {path}: {type(e).__name__}: {e}", e) from e
        if resp.status != 200:
            raise error_from_answer(resp.status, data, resp.getheader("Retry-After"), body.batch_starts if body else None)
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError as e:
            # A cut answer: the rows may be stored, and a retry is safe.
            raise TransportError(f"rollwal: unreadable answer {data[:200]!r}: {e}", e) from None
        return doc


def _outcome(err: RollwalError, maybe: bool) -> RollwalError:
    """err marked as an unknown outcome when some attempt ended without a
    definite answer, unless the last answer is a refusal that every attempt
    would have met."""
    if not maybe:
        return err
    refused, always = refusal(err)
    if refused and always:
        return err
    return unknown_outcome(err)


class Session:
    """A producer session in one shard: the writer's idempotent producer.

    Every batch carries the producer id and the sequence number of its
    first row (``?producer=P&seq=N``); the session numbers its rows 0, 1,
    2, ... without gaps across batches, and the writer keeps, per producer
    and shard, the next sequence it expects (through flushes, merges,
    crashes, restarts and failovers):

    - a batch at the expected sequence is stored;
    - a batch wholly below it is a retry of an acknowledged one: answered
      with every row a duplicate, nothing stored, at any later time;
    - anything else is refused with 409 naming the expected sequence.

    How the session numbers its batches (as the Go client does):

    - One batch is on its way at a time; concurrent appends take turns.
    - A batch is retried (no answer, 408, 429, 502, 503, 504) with the same
      sequence number.
    - A batch the writer refused, storing nothing (400, 404, 413, 429 after
      the retries, 409 not_owner with no earlier attempt that might have
      been stored), gives its numbers back: the next batch takes them.
    - A batch whose outcome stays unknown (:class:`UnknownOutcomeError`)
      keeps its numbers. Appending the same rows (and source) again retries
      it at the same numbers; appending anything else first sends the
      unknown batch again, then the new one (which fails with a
      :class:`NotSentError`, not sent, while the unknown one still fails).
    - A 409 saying the writer expects an earlier sequence (it forgot the
      producer) renumbers the batch to it and sends it again; a 409 saying
      it expects a later one (another process uses the same id) is a
      :class:`SequenceError`, and the session numbers on from there.
    """

    def __init__(self, client: Client, shard: str, producer_id: str, resume: bool, start_seq: Optional[int]) -> None:
        self._client = client
        self._shard = shard
        self._producer = producer_id
        self._turn = _Turn()
        self._start_seq = start_seq
        self._started = start_seq is not None or not resume
        self._next = start_seq or 0
        self._unresolved: Optional[_Batch] = None

    @property
    def shard(self) -> str:
        return self._shard

    @property
    def producer_id(self) -> str:
        return self._producer

    @property
    def client(self) -> Client:
        return self._client

    @property
    def unresolved(self) -> Optional[Tuple[int, int]]:
        """(seq, rows) of the batch whose outcome is unknown, or None."""
        u = self._unresolved
        return (u.seq, u.rows) if u is not None else None

    def next_seq(self) -> int:
        """The sequence number of the next row this session sends (a batch of
        unknown outcome counts as sent). For a resumed id, rows 0 ... N-1 of
        the stream are stored when this says N before any append."""
        with self._turn:
            self._start(None)
            return self._next

    def append(self, rows: Any, source: SourceLike = None) -> Result:
        """Send rows as the session's next batch; see :meth:`Client.append`."""
        return self._append_body(_encode.encode(rows), _source(source))

    def batcher(self, **kw: Any) -> "Any":
        """A :class:`rollwal.Batcher` sending through this session."""
        from .batcher import Batcher

        return Batcher(self, **kw)

    def __repr__(self) -> str:
        return f"rollwal.Session(shard={self._shard!r}, producer_id={self._producer!r}, next_seq={self._next if self._started else '?'})"

    # ---- internals (sendInSession, start and sendSeq of client/session.go) ----

    def _append_body(self, body: Body, src: Optional[Source], cancel: Optional[threading.Event] = None) -> Result:
        b = _Batch(body, src)
        with self._turn:
            self._start(cancel)
            u = self._unresolved
            if u is not None:
                if b.same(u):
                    return self._send_seq(u, cancel)  # the caller's retry: the same sequence
                self._client._log.info(
                    "rollwal: shard %r, producer %r: sending the batch of unknown outcome (seq %d, %d rows) again before the next",
                    self._shard, self._producer, u.seq, u.rows,
                )
                try:
                    self._send_seq(u, cancel)
                except RollwalError as e:
                    if self._unresolved is not None:
                        raise not_sent(
                            e,
                            f"rollwal: shard {self._shard!r}: batch not sent: the batch before it (seq {u.seq}, {u.rows} rows) "
                            f"still has an unknown outcome: {plain(e)}",
                        ) from e
                    # Settled as not stored: its numbers went back, and b takes them.
                    self._client._log.warning(
                        "rollwal: shard %r, producer %r: the batch of unknown outcome (seq %d, %d rows) was refused when sent again: "
                        "it is not stored: %s",
                        self._shard, self._producer, u.seq, u.rows, e,
                    )
            b.seq = self._next
            return self._send_seq(b, cancel)

    def _start(self, cancel: Optional[threading.Event]) -> None:
        if self._started:
            return
        c = self._client
        path = f"{c._shard_path(self._shard)}/producers/{urllib.parse.quote(self._producer, safe='')}"
        doc, _, _, err = c._retrying("resume request", self._shard, lambda: c._once("GET", path, None), cancel)
        if err is not None:
            err.shard = self._shard
            err.args = (f"rollwal: shard {self._shard!r}: asking where producer {self._producer!r} resumes: {err}",)
            raise err
        assert doc is not None
        nxt = doc.get("next_seq")
        if isinstance(nxt, bool) or not isinstance(nxt, int) or nxt < 0:
            raise TransportError(f"rollwal: shard {self._shard!r}: the writer's answer {doc!r} has no next_seq")
        c._log.debug("rollwal: shard %r: producer %r resumes at %d (known %s)", self._shard, self._producer, nxt, doc.get("known"))
        self._next, self._started = nxt, True

    def _send_seq(self, b: _Batch, cancel: Optional[threading.Event]) -> Result:
        """Send b at b.seq and move the numbering by the outcome. The caller
        holds the turn, and b is the unresolved batch or a new one at next."""
        attempts = 0
        renumbered = False
        while True:
            res, n, maybe, err = self._client._send(self._shard, b.body, b.src, self._producer, b.seq, cancel)
            attempts += n
            b.maybe = b.maybe or maybe
            if err is None:
                assert res is not None
                self._next, self._unresolved = b.seq + b.rows, None
                res.attempts, res.session_seq, res.producer = attempts, b.seq, self._producer
                return res
            err.attempts = attempts
            if isinstance(err, SequenceError):
                if err.expected < b.seq and not renumbered:
                    # The writer holds nothing of the producer from expected on
                    # (its state expired): every batch before b was settled.
                    self._client._log.warning(
                        "rollwal: shard %r, producer %r: the writer expects seq %d, not %d (unknown producer: %s): renumbering the batch",
                        self._shard, self._producer, err.expected, b.seq, err.unknown_producer,
                    )
                    b.seq = err.expected
                    renumbered = True
                    continue
                # Another process holds a sequence this session cannot account
                # for: nothing of b was stored; go on where the writer is.
                self._next, self._unresolved = err.expected, None
                raise err
            refused, always = refusal(err)
            if refused and (always or not b.maybe):
                # Nothing of b was stored: its range is given back.
                self._next, self._unresolved = b.seq, None
                raise err
            self._next, self._unresolved = b.seq + b.rows, b
            raise unknown_outcome(err)
