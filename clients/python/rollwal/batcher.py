"""Batching of single rows into requests, per shard (client/batcher.go)."""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future
from typing import Any, Deque, Dict, List, Mapping, Optional, Union

from ._encode import CONTENT_TYPE_NDJSON, Body, encode_row
from .client import Client, Result, Session, Source, SourceLike, _source
from .errors import BatcherTimeoutError, ClosedError, RollwalError, not_sent, plain

__all__ = ["Batcher", "DEFAULT_BATCH_ROWS", "DEFAULT_BATCH_BYTES", "DEFAULT_LINGER", "DEFAULT_MAX_PENDING"]

DEFAULT_BATCH_ROWS = 1000
DEFAULT_BATCH_BYTES = 4 << 20
DEFAULT_LINGER = 0.02
DEFAULT_MAX_PENDING = 4


class _Batch:
    __slots__ = ("lines", "size", "src", "ack", "deadline")

    def __init__(self, deadline: float) -> None:
        self.lines: List[bytes] = []
        self.size = 0
        self.src: Optional[Source] = None
        self.ack: "Future[Result]" = Future()
        self.ack.set_running_or_notify_cancel()
        self.deadline = deadline

    def body(self) -> Body:
        return Body(b"".join(self.lines), CONTENT_TYPE_NDJSON, len(self.lines))


class Batcher:
    """Accumulates rows per shard and sends them in batches, in order, one
    batch of a shard at a time, through a :class:`Client` (in its session,
    or without one when it has no_session) or a :class:`Session` (one
    shard). It is thread-safe; close it (or use ``with``) to send the last
    rows.

    A shard's open batch is sent when it holds ``max_rows`` rows or
    ``max_bytes`` bytes of NDJSON (a row that would pass ``max_bytes``
    starts a new batch), or once its first row has waited ``linger``
    seconds. A row with another source name than the open batch's starts a
    new batch; a batch's source offset is the highest of its rows'.

    :meth:`add` returns the batch's acknowledgement, a
    :class:`concurrent.futures.Future` of its :class:`Result`: the row is
    stored once ``ack.result()`` returns. An acknowledged batch means every
    earlier batch of the shard was acknowledged too. Once ``max_pending``
    batches of a shard wait to be sent, ``add`` blocks (backpressure) until
    one is acknowledged, or raises :class:`BatcherTimeoutError` after its
    timeout.

    After a batch fails for good, the shard's later rows are refused
    (:class:`NotSentError` combined with the failure's class), and so are
    the batches queued behind it, so that no failed batch is skipped over;
    start a new Batcher and resend from the last acknowledged position. A
    batch of unknown outcome in a session is sent again by the session
    itself before the shard's next batch.
    """

    def __init__(
        self,
        target: Union[Client, Session],
        *,
        max_rows: int = DEFAULT_BATCH_ROWS,
        max_bytes: int = DEFAULT_BATCH_BYTES,
        linger: float = DEFAULT_LINGER,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if not isinstance(target, (Client, Session)):
            raise TypeError(f"rollwal: Batcher sends through a Client or a Session, not {type(target).__name__}")
        for name, v in (("max_rows", max_rows), ("max_bytes", max_bytes), ("max_pending", max_pending)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"rollwal: {name} {v!r}: want an integer > 0")
        if not linger > 0:
            raise ValueError(f"rollwal: linger {linger!r}: want > 0 seconds")
        self._target = target
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.linger = float(linger)
        self.max_pending = max_pending
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._lanes: Dict[str, _Lane] = {}
        self._closed = False

    @property
    def _client(self) -> Client:
        return self._target.client if isinstance(self._target, Session) else self._target

    def add(self, row: Mapping[str, Any], shard: Optional[str] = None, source: SourceLike = None, timeout: Optional[float] = None) -> "Future[Result]":
        """Queue row for shard (a Session's batcher: its shard, or None) and
        return the Future of the batch it joins."""
        line = encode_row(row)
        src = _source(source)
        if isinstance(self._target, Session):
            if shard is not None and shard != self._target.shard:
                raise ValueError(f"rollwal: this batcher sends to shard {self._target.shard!r} (its session's), not {shard!r}")
            shard = self._target.shard
        elif not isinstance(shard, str) or not shard:
            raise ValueError("rollwal: Batcher.add: give the shard")
        return self._lane(shard).add(line, src, timeout)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send every open batch and wait until all batches added so far are
        acknowledged; raise the first failure among them (TimeoutError when
        the timeout passes first)."""
        acks = [a for a in (lane.cut_last(False) for lane in self._snapshot()) if a is not None]
        deadline = None if timeout is None else time.monotonic() + timeout
        for a in acks:
            a.result(None if deadline is None else max(deadline - time.monotonic(), 0))

    def close(self, timeout: Optional[float] = None) -> None:
        """Send the open batches and wait for every send to end. When timeout
        passes first, the sends still retrying are abandoned at their next
        wait (their futures fail), and TimeoutError is raised."""
        with self._lock:
            self._closed = True
        lanes = self._snapshot()
        for lane in lanes:
            lane.cut_last(True)
        deadline = None if timeout is None else time.monotonic() + timeout
        for lane in lanes:
            lane.thread.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        if any(lane.thread.is_alive() for lane in lanes):
            self._cancel.set()
            bound = self._client.timeout + 1.0  # a request in flight ends within its socket timeout
            for lane in lanes:
                lane.thread.join(bound)
            raise TimeoutError(f"rollwal: batcher closed after {timeout}s before every batch was sent")

    def __enter__(self) -> "Batcher":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close()

    def _lane(self, shard: str) -> "_Lane":
        with self._lock:
            if self._closed:
                raise ClosedError("rollwal: batcher closed")
            lane = self._lanes.get(shard)
            if lane is None:
                lane = _Lane(self, shard)
                self._lanes[shard] = lane
                lane.thread.start()
            return lane

    def _snapshot(self) -> "List[_Lane]":
        with self._lock:
            return list(self._lanes.values())

    def _send(self, shard: str, body: Body, src: Optional[Source]) -> Result:
        t = self._target
        if isinstance(t, Session):
            return t._append_body(body, src, self._cancel)
        return t._append_body(shard, body, src, self._cancel)


class _Lane:
    """One shard's batches: the open one, the cut ones in order, and a
    sender thread that posts them one at a time and cuts the open one when
    it has lingered."""

    def __init__(self, b: Batcher, shard: str) -> None:
        self.b = b
        self.shard = shard
        self.cond = threading.Condition()
        self.cur: Optional[_Batch] = None
        self.queue: Deque[_Batch] = collections.deque()
        self.last: "Optional[Future[Result]]" = None
        self.closing = False
        self.failed: Optional[RollwalError] = None
        self.thread = threading.Thread(target=self.run, name=f"rollwal-batcher-{shard}", daemon=True)

    def add(self, line: bytes, src: Optional[Source], timeout: Optional[float]) -> "Future[Result]":
        b = self.b
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while True:
                if self.failed is not None:
                    raise self.failed
                if self.closing:
                    raise ClosedError("rollwal: batcher closed")
                if len(self.queue) < b.max_pending:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise BatcherTimeoutError(
                        f"rollwal: shard {self.shard!r}: {b.max_pending} batches wait to be sent; waited {timeout}s for room"
                    )
                self.cond.wait(left)
            cur = self.cur
            if cur is not None and ((cur.src.name if cur.src else None) != (src.name if src else None) or cur.size + len(line) > b.max_bytes):
                self._cut()
            if self.cur is None:
                self.cur = _Batch(time.monotonic() + b.linger)
                self.cond.notify_all()  # the sender times the linger
            bt = self.cur
            bt.lines.append(line)
            bt.size += len(line)
            if src is not None and (bt.src is None or src.offset > bt.src.offset):
                bt.src = src
            if len(bt.lines) >= b.max_rows or bt.size >= b.max_bytes:
                self._cut()
            return bt.ack

    def _cut(self) -> None:
        """Move the open batch to the queue; cond is held."""
        bt = self.cur
        assert bt is not None
        self.cur = None
        self.queue.append(bt)
        self.last = bt.ack
        self.cond.notify_all()

    def cut_last(self, closing: bool) -> "Optional[Future[Result]]":
        with self.cond:
            if self.cur is not None:
                self._cut()
            if closing:
                self.closing = True
                self.cond.notify_all()
            return self.last

    def _next(self) -> Optional[_Batch]:
        with self.cond:
            while True:
                if self.queue:
                    bt = self.queue.popleft()
                    self.cond.notify_all()  # room for a blocked add
                    return bt
                if self.cur is not None:
                    left = self.cur.deadline - time.monotonic()
                    if left <= 0:
                        self._cut()
                        continue
                    self.cond.wait(left)
                elif self.closing:
                    return None
                else:
                    self.cond.wait()

    def run(self) -> None:
        while True:
            bt = self._next()
            if bt is None:
                return
            try:
                res = self.b._send(self.shard, bt.body(), bt.src)
            except RollwalError as e:
                self._fail(e)
                bt.ack.set_exception(e)
            except BaseException as e:  # a bug, not an answer: fail the batch, keep the lane honest
                err = RollwalError(f"rollwal: shard {self.shard!r}: sending a batch failed: {e!r}")
                self._fail(err)
                bt.ack.set_exception(e)
            else:
                bt.ack.set_result(res)

    def _fail(self, err: RollwalError) -> None:
        """Refuse everything after a failed batch: sending later batches
        would let their source offsets pass rows never stored."""
        with self.cond:
            if self.failed is None:
                self.failed = not_sent(err, f"rollwal: shard {self.shard!r}: refused after an earlier batch failed: {plain(err)}")
            dropped = list(self.queue)
            if self.cur is not None:
                dropped.append(self.cur)
            self.cur = None
            self.queue.clear()
            self.cond.notify_all()
            failed = self.failed
        for bt in dropped:
            bt.ack.set_exception(failed)
