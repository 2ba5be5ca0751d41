"""Fixtures: the writer binary (built once per run from this checkout), real
`writer serve` processes, `writer merge` and reading the base table back,
and a fake writer (an in-process HTTP server with the writer's session
rules and injected faults) for the client's rules."""

from __future__ import annotations

import glob
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import rollwal

REPO = Path(__file__).resolve().parents[3]


def pytest_report_header(config: Any) -> str:
    return f"rollwal {rollwal.__version__} from {Path(rollwal.__file__).parent}"


def wait_until(what: str, cond: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    """Poll cond until it returns something true, at most timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def rollouts(prefix: str, start: int, n: int) -> List[Dict[str, Any]]:
    """n rows of the rollout schema (id, prompt, completion, reward, metadata)."""
    return [
        {"id": f"{prefix}{i:06d}", "prompt": f"q{i}", "completion": f"a{i}", "reward": float(i % 7), "metadata": {"i": i}}
        for i in range(start, start + n)
    ]


# ---- the real writer -------------------------------------------------------


@pytest.fixture(scope="session")
def writer_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The writer binary: $ROLLWAL_WRITER, or built from this checkout."""
    given = os.environ.get("ROLLWAL_WRITER")
    if given:
        return given
    out = tmp_path_factory.mktemp("bin") / "writer"
    try:
        subprocess.run(["go", "build", "-o", str(out), "./cmd/writer"], cwd=REPO, check=True, timeout=900,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"go build ./cmd/writer failed:\n{e.stdout.decode(errors='replace')}")
    return str(out)


def free_port() -> int:
    """A port to listen on again after a restart: outside the kernel's
    ephemeral range when it leaves room (so that no outgoing connection
    takes it while the writer is down), else one the kernel picks."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    candidates = random.sample(range(10000, low), min(200, max(low - 10000, 0))) if low > 10100 else []
    for port in candidates + [0]:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    raise AssertionError("no free port")


class Writer:
    """A `writer serve` child process on data_dir. port None listens on :0
    (a new port each start); a port is kept across restarts."""

    def __init__(self, binary: str, data_dir: Path, args: List[str], port: Optional[int] = None) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.args = args
        self.port = port
        self.proc: Optional[subprocess.Popen] = None
        self.addr = ""
        self.starts = 0
        self.logs: List[Path] = []

    @property
    def url(self) -> str:
        return "http://" + self.addr

    def start(self, timeout: float = 90) -> "Writer":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        logf = self.data_dir.parent / f"serve-{self.data_dir.name}-{self.starts}.log"
        self.logs.append(logf)
        listen = f"127.0.0.1:{self.port or 0}"
        with open(logf, "wb") as f:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--data-dir", str(self.data_dir), "--listen", listen, *self.args],
                stdout=subprocess.DEVNULL, stderr=f, stdin=subprocess.DEVNULL,
            )

        def listening() -> Optional[str]:
            if self.proc.poll() is not None:
                raise AssertionError(f"writer serve exited ({self.proc.returncode}) before listening:\n{self.log_tail()}")
            for line in logf.read_text(errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "listening" and rec.get("addr"):
                    return str(rec["addr"])
            return None

        self.addr = wait_until("writer serve to log 'listening'", listening, timeout, 0.05)
        wait_until("/readyz", self.ready, timeout, 0.05)
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.HTTPError):
            return False

    def kill(self) -> None:
        """SIGKILL, and wait for it to be gone."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (unready, flush, release the shards) and wait for exit 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        assert rc == 0, f"writer serve exited {rc} at SIGTERM:\n{self.log_tail()}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        if not self.logs:
            return ""
        return "\n".join(self.logs[-1].read_text(errors="replace").splitlines()[-n:])

    def post(self, path: str, data: bytes = b"", content_type: Optional[str] = None) -> Tuple[int, Dict[str, Any]]:
        req = urllib.request.Request(self.url + path, data=data, method="POST")
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def flush(self, shard: str) -> None:
        code, body = self.post(f"/v1/shards/{shard}/flush")
        assert code == 200, f"flush {shard}: {code} {body}"

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def close(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def spawn_writer(writer_bin: str, tmp_path: Path):
    """spawn_writer(args, port=None, config=None) -> Writer (started); every
    one is killed at the end of the test and its log printed on failure."""
    made: List[Writer] = []

    def spawn(args: List[str] = (), port: Optional[int] = None, config: Optional[str] = None, start: bool = True) -> Writer:
        d = tmp_path / f"data{len(made)}"
        d.mkdir()
        extra = list(args)
        if config is not None:
            cfg = tmp_path / f"writer{len(made)}.yaml"
            cfg.write_text(config)
            extra = ["--config", str(cfg)] + extra
        w = Writer(writer_bin, d, extra, port)
        made.append(w)
        return w.start() if start else w

    yield spawn
    for w in made:
        w.close()
        print(f"--- writer on {w.data_dir} ({w.starts} starts), last log lines:\n{w.log_tail()}")


def merge(writer_bin: str, data_dir: Path) -> Dict[str, Any]:
    """`writer merge --data-dir D -o json`: publish committed generations."""
    p = subprocess.run([writer_bin, "merge", "--data-dir", str(data_dir), "-o", "json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180)
    assert p.returncode == 0, f"writer merge exited {p.returncode}:\n{p.stderr.decode(errors='replace')[-4000:]}"
    return {"stdout": p.stdout.decode(errors="replace")}


def read_base(data_dir: Path, table: str = "rollouts", columns: Optional[List[str]] = None):
    """The base table as the latest readers' manifest lists it (README,
    "Reading it"): (pyarrow Table, manifest)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = data_dir / table / "base"
    names = sorted(n for n in glob.glob(str(base / "_manifest" / "*.json")) if not os.path.basename(n).startswith("."))
    assert names, f"no readers' manifest under {base}/_manifest"
    m = json.loads(Path(names[-1]).read_text())
    tables = [pq.read_table(base / f["path"], columns=columns) for f in m["files"]]
    t = pa.concat_tables(tables) if tables else pa.table({})
    assert t.num_rows == m["rows"], f"the manifest's files hold {t.num_rows} rows; it says {m['rows']}"
    return t, m


def id_counts(t: Any) -> Counter:
    return Counter(t.column("id").to_pylist())


# ---- the fake writer -------------------------------------------------------

Fault = Callable[["FakeHandler", Dict[str, Any]], bool]


class FakeWriter:
    """An HTTP server with the writer's producer-session rules (per shard
    and producer the next expected seq; a batch wholly below it answers
    duplicates, one at it is stored, anything else 409 sequence) over
    NDJSON (and Arrow, when pyarrow is there). faults are consulted first,
    one per request: a fault returns True when it answered (or dropped)
    the request itself."""

    def __init__(self, ssl_context: Any = None) -> None:
        self.lock = threading.Lock()
        self.next: Dict[Tuple[str, str], int] = {}
        self.stored: Dict[str, List[str]] = {}
        self.requests: List[Dict[str, Any]] = []
        self.faults: List[Optional[Fault]] = []
        self.gate: Optional[threading.Event] = None  # when set, appends wait for it
        fake = self

        class Handler(FakeHandler):
            writer = fake

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if ssl_context is not None:
            self.httpd.socket = ssl_context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def appends(self) -> List[Dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["method"] == "POST"]

    def seqs(self) -> List[Optional[int]]:
        return [r["seq"] for r in self.appends()]

    def store(self, req: Dict[str, Any]) -> Tuple[int, Dict[str, Any]]:
        """Apply an append as the writer would: (status, answer)."""
        shard, producer, seq, ids = req["shard"], req["producer"], req["seq"], req["ids"]
        k = len(ids)
        with self.lock:
            rows = self.stored.setdefault(shard, [])
            if producer is None:
                new = [i for i in ids if i not in rows]
                rows.extend(new)
                return 200, {"acked": k, "stored": len(new), "duplicates": k - len(new), "first_seq": 1, "last_seq": 1, "generation": 1}
            key = (shard, producer)
            known = key in self.next
            n = self.next.get(key, 0)
            if seq + k <= n:
                return 200, {"acked": k, "stored": 0, "duplicates": k, "first_seq": 0, "last_seq": 0, "generation": 1}
            if seq != n:
                return 409, {"error": f"producer {producer} sent seq {seq}, expected {n}", "code": "sequence", "producer": producer,
                             "seq": seq, "count": k, "expected_seq": n, "unknown_producer": not known}
            self.next[key] = n + k
            rows.extend(ids)
            return 200, {"acked": k, "stored": k, "duplicates": 0, "first_seq": len(rows) - k + 1, "last_seq": len(rows), "generation": 1}


class FakeHandler(http.server.BaseHTTPRequestHandler):
    writer: FakeWriter
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: Any) -> None:
        pass

    def answer(self, status: int, doc: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def drop(self) -> None:
        """Close the connection without an answer: a lost answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_GET(self) -> None:
        u = urllib.parse.urlsplit(self.path)
        parts = u.path.split("/")
        req = {"method": "GET", "path": u.path, "headers": dict(self.headers)}
        with self.writer.lock:
            self.writer.requests.append(req)
            fault = self.writer.faults.pop(0) if self.writer.faults else None
        if fault is not None and fault(self, req):
            return
        # /v1/shards/{shard}/producers/{p}, or under /v1/tables/{t}
        if len(parts) >= 6 and parts[-2] == "producers":
            shard, producer = urllib.parse.unquote(parts[-3]), urllib.parse.unquote(parts[-1])
            with self.writer.lock:
                n = self.writer.next.get((shard, producer))
            self.answer(200, {"producer": producer, "next_seq": n or 0, "known": n is not None})
            return
        self.answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        parts = u.path.split("/")
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ctype = self.headers.get("Content-Type", "")
        ids: List[str] = []
        rows: List[Dict[str, Any]] = []
        if ctype == rollwal.CONTENT_TYPE_ARROW:
            import pyarrow as pa

            t = pa.ipc.open_stream(data).read_all()
            ids = t.column("id").to_pylist()
            rows = t.to_pylist()
        else:
            rows = [json.loads(line) for line in data.splitlines() if line.strip()]
            ids = [r.get("id") for r in rows]
        req = {
            "method": "POST", "path": u.path, "shard": urllib.parse.unquote(parts[-2]) if len(parts) >= 2 else "",
            "producer": q.get("producer", [None])[0], "seq": int(q["seq"][0]) if "seq" in q else None,
            "source": q.get("source", [None])[0], "offset": int(q["offset"][0]) if "offset" in q else None,
            "ids": ids, "rows": rows, "content_type": ctype, "headers": dict(self.headers), "body": data,
        }
        with self.writer.lock:
            self.writer.requests.append(req)
            fault = self.writer.faults.pop(0) if self.writer.faults else None
            gate = self.writer.gate
        if gate is not None:
            gate.wait(30)
        if fault is not None and fault(self, req):
            return
        status, doc = self.writer.store(req)
        self.answer(status, doc)


def status(code: int, error_code: str = "", retry_after: Optional[str] = None, **extra: Any) -> Fault:
    """A fault answering code with the writer's error body."""

    def f(h: FakeHandler, req: Dict[str, Any]) -> bool:
        doc = {"error": f"injected {code}", **extra}
        if error_code:
            doc["code"] = error_code
        h.answer(code, doc, {"Retry-After": retry_after} if retry_after is not None else None)
        return True

    return f


def drop(stored: bool) -> Fault:
    """A fault losing the answer, after storing the rows or not."""

    def f(h: FakeHandler, req: Dict[str, Any]) -> bool:
        if stored:
            h.writer.store(req)
        h.drop()
        return True

    return f


def passthrough(h: FakeHandler, req: Dict[str, Any]) -> bool:
    return False


@pytest.fixture
def fake():
    w = FakeWriter()
    yield w
    w.close()


class Waits(list):
    """Records a client's waits between attempts instead of sleeping."""

    def __call__(self, seconds: float, cancel: Optional[threading.Event]) -> bool:
        self.append(seconds)
        return bool(cancel is not None and cancel.is_set())


def quick_client(url: str, **kw: Any) -> Tuple[rollwal.Client, Waits]:
    """A Client whose waits are recorded, not slept."""
    c = rollwal.Client(url, **kw)
    w = Waits()
    c._wait = w
    return c, w
