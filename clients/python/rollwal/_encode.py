"""Request bodies: NDJSON from dicts, Arrow IPC streams from pyarrow."""

from __future__ import annotations

import base64
import datetime as _dt
import json
from typing import Any, Iterable, List, Mapping, Optional

CONTENT_TYPE_NDJSON = "application/x-ndjson"
CONTENT_TYPE_ARROW = "application/vnd.apache.arrow.stream"


class Body:
    """An encoded request body: its bytes, content type and row count;
    batch_starts (Arrow) is the index of each record batch's first row."""

    __slots__ = ("data", "content_type", "rows", "batch_starts")

    def __init__(self, data: bytes, content_type: str, rows: int, batch_starts: Optional[List[int]] = None) -> None:
        self.data = data
        self.content_type = content_type
        self.rows = rows
        self.batch_starts = batch_starts

    def same(self, other: "Body") -> bool:
        return self.rows == other.rows and self.content_type == other.content_type and self.data == other.data


def _default(v: Any) -> Any:
    # As Go's encoding/json: []byte is base64 (standard, padded), time.Time
    # RFC 3339. A naive datetime names no instant: refused.
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None or v.utcoffset() is None:
            raise TypeError(f"datetime {v!r} has no time zone: give tzinfo (e.g. datetime.timezone.utc)")
        return v.isoformat()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def encode_row(row: Mapping[str, Any]) -> bytes:
    """One NDJSON line (with its newline). NaN and infinities are refused,
    as the writer refuses them (and Go's encoder does)."""
    if not isinstance(row, Mapping):
        raise TypeError(f"a row is a mapping of column to value, not {type(row).__name__}")
    return (json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default) + "\n").encode("utf-8")


def is_arrow(rows: Any) -> bool:
    mod = type(rows).__module__ or ""
    return mod.startswith("pyarrow") and hasattr(rows, "schema") and hasattr(rows, "num_rows")


def encode(rows: Any) -> Body:
    """The body for rows: a pyarrow Table or RecordBatch (an Arrow IPC
    stream), or an iterable of mappings (NDJSON)."""
    if is_arrow(rows):
        return encode_arrow(rows)
    if isinstance(rows, Mapping):
        raise TypeError("rollwal: rows is one mapping: pass a list of rows")
    if not isinstance(rows, Iterable) or isinstance(rows, (str, bytes, bytearray)):
        raise TypeError(f"rollwal: rows: want a list of mappings or a pyarrow Table/RecordBatch, not {type(rows).__name__}")
    parts: List[bytes] = []
    for i, r in enumerate(rows):
        try:
            parts.append(encode_row(r))
        except (TypeError, ValueError) as e:
            raise type(e)(f"rollwal: row {i}: {e}") from None
    if not parts:
        raise ValueError("rollwal: no rows to append")
    return Body(b"".join(parts), CONTENT_TYPE_NDJSON, len(parts))


def encode_arrow(data: Any) -> Body:
    import pyarrow as pa  # optional dependency: only for Arrow input

    if isinstance(data, pa.RecordBatch):
        batches = [data]
    elif isinstance(data, pa.Table):
        batches = data.to_batches()
    else:
        raise TypeError(f"Arrow input: want a pyarrow Table or RecordBatch, not {type(data).__name__}")
    batches = [b for b in batches if b.num_rows > 0]
    if not batches:
        raise ValueError("rollwal: no rows to append")
    sink = pa.BufferOutputStream()
    starts: List[int] = []
    n = 0
    with pa.ipc.new_stream(sink, data.schema) as w:
        for b in batches:
            starts.append(n)
            n += b.num_rows
            w.write_batch(b)
    return Body(sink.getvalue().to_pybytes(), CONTENT_TYPE_ARROW, n, starts)
