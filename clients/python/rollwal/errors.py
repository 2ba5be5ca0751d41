"""The exceptions of the rollwal client, and the rules that say which
answers are retried and which say that nothing was stored.

Every exception is a :class:`RollwalError`. An answer of the writer other
than 200 is a :class:`StatusError` (or one of its subclasses, by status and
``code``); a request whose answer never came is a :class:`TransportError`.

Two marks combine with those classes, so that one ``except`` clause of
either kind catches the error:

- :class:`UnknownOutcomeError`: the rows may or may not be stored (an
  answer was lost, a 5xx, 409 ``outcome_unknown``). A 503 whose retries
  ran out is raised as an instance of both :class:`UnavailableError` and
  :class:`UnknownOutcomeError`.
- :class:`NotSentError`: these rows were never sent, because a batch
  before them failed (its error's class is combined in, e.g. a
  :class:`NotSentError` that is also an :class:`UnavailableError`). Their
  outcome is known: not stored.

The rules mirror the Go client (``client/errors.go``): :func:`retryable`
and :func:`refusal`.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Optional, Sequence, Tuple, Type

__all__ = [
    "RollwalError",
    "TransportError",
    "StatusError",
    "BadRequestError",
    "InvalidRowError",
    "UnauthorizedError",
    "NotOwnerError",
    "SequenceError",
    "TooLargeError",
    "BackpressureError",
    "TooManyProducersError",
    "UnavailableError",
    "UnknownOutcomeError",
    "NotSentError",
    "ClosedError",
    "CancelledError",
    "BatcherTimeoutError",
    "retryable",
    "refusal",
    "parse_retry_after",
]

# Codes of the writer's error answers (server/server.go) that the client
# tells apart.
CODE_SEQUENCE = "sequence"
CODE_TOO_MANY_PRODUCERS = "too_many_producers"
CODE_NOT_OWNER = "not_owner"
CODE_OUTCOME_UNKNOWN = "outcome_unknown"
CODE_INVALID_APPEND = "invalid_append"


class RollwalError(Exception):
    """The base of every error of the client.

    ``attempts`` is how many times the request was sent (0 when it never
    was); ``shard`` the shard it was for, where known.
    """

    #: True on an error after which the rows may or may not be stored.
    outcome_unknown = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = 0
        self.shard: Optional[str] = None

    def __str__(self) -> str:
        return self.args[0] if self.args else self.message


class TransportError(RollwalError):
    """No answer: the connection was refused, cut or timed out, or the
    answer was unreadable. The rows may be stored; it is retried."""

    def __init__(self, message: str, cause: Optional[BaseException] = None) -> None:
        super().__init__(message)
        self.cause = cause


class StatusError(RollwalError):
    """An answer other than 200: ``status``, the writer's ``code`` (where one
    status covers several refusals, e.g. ``"disk_full"``), its ``message``,
    ``retry_after`` (seconds, from the Retry-After header, or None) and the
    decoded JSON ``body``."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str = "",
        body: Optional[Dict[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = body or {}
        self.retry_after = retry_after


class BadRequestError(StatusError):
    """400: the writer refused the request and stored nothing of it. The
    same rows would be refused again: never retried. ``parameter`` names a
    refused query parameter (``code`` ``"bad_parameter"``)."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        b = self.body
        self.parameter: str = b.get("parameter") or ""
        #: 1-based NDJSON line of the refused row, or None.
        self.line: Optional[int] = b.get("line") or None
        #: 0-based index of the refused row among the request's rows, or None.
        self.row: Optional[int] = None
        #: Arrow: 0-based record batch and row within it, or None.
        self.record_batch: Optional[int] = b.get("record_batch")
        self.batch_row: Optional[int] = b.get("row")
        self.column: str = b.get("column") or ""
        #: The refused part of a list or struct value (``messages[3].role``).
        self.path: str = b.get("path") or ""
        #: NDJSON: the 0-based offset of the refused byte in its line.
        self.byte_offset: Optional[int] = b.get("byte_offset")
        if self.line is not None:
            self.row = self.line - 1
        elif self.batch_row is not None:
            self.row = self.batch_row  # refined by locate() when batch starts are known

    def locate(self, batch_starts: Optional[Sequence[int]]) -> None:
        """Turn an Arrow record batch and row into the index in the request."""
        if batch_starts is None or self.record_batch is None or self.batch_row is None:
            return
        if 0 <= self.record_batch < len(batch_starts):
            self.row = batch_starts[self.record_batch] + self.batch_row


class InvalidRowError(BadRequestError):
    """400 naming a row: ``row`` (its index in the request, 0-based),
    ``line`` (NDJSON, 1-based) or ``record_batch``/``batch_row`` (Arrow),
    ``column`` and ``path``."""


class UnauthorizedError(StatusError):
    """401 or 403: the writer needs a bearer token (``token=``), or another
    one. Not retried; nothing was stored."""


class NotOwnerError(StatusError):
    """409: this writer does not own the shard (``code`` ``"not_owner"``:
    fenced, nothing stored; or ``"outcome_unknown"``, raised also as an
    :class:`UnknownOutcomeError`). Send the rows to the shard's owner; with
    the same producer id, the owner's next_seq says how much is stored."""


class SequenceError(StatusError):
    """409 ``"sequence"``: the writer holds a sequence of this producer that
    the session cannot account for (another process uses the same producer
    id). Nothing of the batch was stored; the session numbers on from
    ``expected``."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        b = self.body
        self.producer: str = b.get("producer") or ""
        self.seq: int = int(b.get("seq") or 0)
        self.count: int = int(b.get("count") or 0)
        self.expected: int = int(b.get("expected_seq") or 0)
        self.unknown_producer: bool = bool(b.get("unknown_producer"))


class TooLargeError(StatusError):
    """413: too many rows or bytes in one request; split the batch."""


class BackpressureError(StatusError):
    """429 (``"backpressure"``, ``"merges_behind"``, ``"inflight_limit"``):
    the writer stayed busy through every retry."""


class TooManyProducersError(StatusError):
    """429 ``"too_many_producers"``: the shard tracks as many producer
    sessions as it may. Not retried: a slot frees only when an idle session
    expires (days). Use fewer producer ids, or ``no_session=True``."""


class UnavailableError(StatusError):
    """502, 503 (``"disk_full"``, ``"store_down"``, ``"stopped"``, not
    ready) or 504 through every retry."""


class UnknownOutcomeError(RollwalError):
    """The rows may or may not be stored. In a session the client settles
    it: the same rows are sent again with the same sequence numbers before
    the shard's next batch (appending the same rows again retries them), so
    they are stored once. Raised combined with the class of the last
    error (TransportError, UnavailableError, NotOwnerError, ...); ``cause``
    is that error."""

    outcome_unknown = True


class NotSentError(RollwalError):
    """These rows were not sent, because a batch before them failed (it is
    ``cause``; this error is also an instance of its class). Nothing of them
    is stored."""

    outcome_unknown = False


class ClosedError(RollwalError):
    """The batcher (or client) is closed."""


class CancelledError(RollwalError):
    """The request was abandoned between attempts (a batcher closed with a
    timeout). Raised combined with :class:`UnknownOutcomeError` when an
    earlier attempt may have stored the rows."""


class BatcherTimeoutError(RollwalError, TimeoutError):
    """``Batcher.add`` waited its timeout for room: ``max_pending`` batches
    of the shard wait to be sent (the writer is slow or refusing)."""


_combined: Dict[Tuple[type, type], type] = {}


def _mark(err: RollwalError, mark: Type[RollwalError], message: Optional[str] = None) -> RollwalError:
    """Return a copy of err that is also an instance of mark (UnknownOutcomeError
    or NotSentError), with err as its cause."""
    if isinstance(err, mark):
        return err
    # Never stack marks: a mark applies to the plain error underneath.
    under = getattr(err, "cause", None) if isinstance(err, (UnknownOutcomeError, NotSentError)) else None
    if isinstance(under, RollwalError):
        err = under
    base = type(err)
    cls = _combined.get((base, mark))
    if cls is None:
        cls = type(base.__name__, (mark, base), {"__module__": base.__module__, "__qualname__": base.__qualname__})
        _combined[(base, mark)] = cls
    new = cls.__new__(cls)
    new.__dict__.update(err.__dict__)
    Exception.__init__(new, message if message is not None else str(err))
    new.cause = err  # type: ignore[attr-defined]
    new.__cause__ = err
    return new


def unknown_outcome(err: RollwalError) -> RollwalError:
    """err marked as an unknown outcome."""
    return _mark(err, UnknownOutcomeError, str(err) + " (outcome unknown: the rows may or may not be stored)")


def plain(err: RollwalError) -> RollwalError:
    """err without its UnknownOutcomeError mark (what it is for rows that
    were never sent)."""
    if isinstance(err, UnknownOutcomeError) and isinstance(getattr(err, "cause", None), RollwalError):
        return err.cause  # type: ignore[attr-defined,no-any-return]
    return err


def not_sent(cause: RollwalError, message: str) -> RollwalError:
    """An error for rows not sent because of cause (marked NotSentError)."""
    return _mark(plain(cause), NotSentError, message)


def retryable(err: BaseException) -> bool:
    """Whether err is worth another attempt (client/errors.go retryable):
    no answer, 408, 429 but too_many_producers, 502, 503, 504."""
    if isinstance(err, TransportError):
        return True
    if isinstance(err, StatusError) and err.status == 408:
        return True  # the body came too slowly; nothing was stored
    return isinstance(err, (BackpressureError, UnavailableError))


def refusal(err: BaseException) -> Tuple[bool, bool]:
    """(refused, always): whether err is the writer's answer that it stored
    nothing of the request, and whether the same request would always be
    refused so, whatever an earlier attempt met (client/errors.go refusal)."""
    if isinstance(err, BadRequestError):
        # invalid_append covers the shard's source limit, which an earlier
        # attempt may have passed.
        return True, err.code != CODE_INVALID_APPEND
    if isinstance(err, SequenceError):
        return True, False
    if isinstance(err, StatusError):
        if err.status in (413, 415, 401, 403):
            return True, True
        if err.status in (404, 429, 408):
            return True, False
        if err.status == 409:
            return err.code == CODE_NOT_OWNER, False
    return False, False


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date);
    None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - time.time(), 0.0)


def error_from_answer(
    status: int, body: bytes, retry_after_header: Optional[str], batch_starts: Optional[Sequence[int]] = None
) -> StatusError:
    """The error of a non-200 answer (client/errors.go statusError)."""
    doc: Dict[str, Any] = {}
    try:
        parsed = json.loads(body.decode("utf-8", "replace"))
        if isinstance(parsed, dict):
            doc = parsed
    except ValueError:
        pass
    message = doc.get("error") if isinstance(doc.get("error"), str) and doc.get("error") else body.decode("utf-8", "replace").strip()
    code = doc.get("code") if isinstance(doc.get("code"), str) else ""
    kw: Dict[str, Any] = dict(status=status, code=code, body=doc, retry_after=parse_retry_after(retry_after_header))
    text = f"rollwal: writer answered {status}" + (f" {code}" if code else "") + f": {message}"
    cls: Type[StatusError]
    if status == 400:
        locates = bool(doc.get("line")) or doc.get("row") is not None or bool(doc.get("column"))
        e: BadRequestError = (InvalidRowError if locates else BadRequestError)(text, **kw)
        e.locate(batch_starts)
        e.message = message
        return e
    if status == 409 and code == CODE_SEQUENCE and doc.get("seq") is not None and doc.get("expected_seq") is not None:
        cls = SequenceError
    elif status == 409:
        cls = NotOwnerError
    elif status == 413:
        cls = TooLargeError
    elif status == 429:
        cls = TooManyProducersError if code == CODE_TOO_MANY_PRODUCERS else BackpressureError
    elif status in (502, 503, 504):
        cls = UnavailableError
    elif status in (401, 403):
        cls = UnauthorizedError
    else:
        cls = StatusError
    err = cls(text, **kw)
    err.message = message
    return err
