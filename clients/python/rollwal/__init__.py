"""rollwal: the Python producer client of a rollwal writer.

A :class:`Client` appends rows over HTTP (``POST /v1/shards/{shard}/rows``):
a list of dicts as NDJSON, or a pyarrow Table/RecordBatch as an Arrow IPC
stream. It returns once the writer made them durable (after its WAL fsync)
and retries what is safe to retry. A Client is a producer session
(:class:`Session`): every batch carries the producer id and the sequence
number of its first row, so a retry of a batch, at any later time, is
answered as duplicates instead of being stored twice.

    import rollwal
    c = rollwal.Client("http://127.0.0.1:8080")
    res = c.append("default", [{"id": "r1", "prompt": "2+2?", "completion": "4", "reward": 1.0}])

A :class:`Batcher` groups single rows into batches by rows, bytes and
linger. Errors are :class:`RollwalError` subclasses (see
:mod:`rollwal.errors`). The rules are the Go client's (``client/``), which
README.md of this package compares.
"""

import logging as _logging

from . import errors as _errors

from .batcher import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_ROWS, DEFAULT_LINGER, DEFAULT_MAX_PENDING, Batcher
from .client import (
    DEFAULT_MAX_BACKOFF,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MIN_BACKOFF,
    DEFAULT_TIMEOUT,
    Client,
    Result,
    Session,
    Source,
    random_producer_id,
    validate_producer_id,
)
from .errors import (
    BackpressureError,
    BadRequestError,
    BatcherTimeoutError,
    CancelledError,
    ClosedError,
    InvalidRowError,
    NotOwnerError,
    NotSentError,
    RollwalError,
    SequenceError,
    StatusError,
    TooLargeError,
    TooManyProducersError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    UnknownOutcomeError,
)

__version__ = "0.1.0"

CONTENT_TYPE_NDJSON = "application/x-ndjson"
CONTENT_TYPE_ARROW = "application/vnd.apache.arrow.stream"

_logging.getLogger("rollwal").addHandler(_logging.NullHandler())

__all__ = [
    "Client",
    "Session",
    "Batcher",
    "Result",
    "Source",
    "random_producer_id",
    "validate_producer_id",
    # every exception class of rollwal.errors
    *(_name for _name in _errors.__all__ if _name.endswith("Error")),
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MIN_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_TIMEOUT",
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_LINGER",
    "DEFAULT_MAX_PENDING",
    "CONTENT_TYPE_NDJSON",
    "CONTENT_TYPE_ARROW",
    "__version__",
]
