"""Connection hygiene of ASGI servers, side by side on loopback (issue 14 §3, §4, §7).

Runs one tiny ASGI app (below) under each server and worker count and measures what a
hostile or careless client can do to the connection layer, independent of our routes:

- ``p50_ms`` / ``p99_ms``: sequential requests on one kept-alive connection. The app sends
  headers and body as two writes, so a server that leaves Nagle on (no ``TCP_NODELAY``)
  waits ~40 ms for the client's delayed ACK on every response.
- ``rps``: 8 concurrent kept-alive clients for 2 s.
- ``idle_close_s``: a connection that never sends a byte: seconds until the server closes
  it (None: still open at the end of the probe).
- ``slow_header_close_s``: a client that trickles one header byte per second.
- ``served_past_cap``: with 300 idle connections open (cap 256 per worker), does a new
  client get a fast answer, and how many of the 300 had the server turned away by then?
- ``early_413``: the app answers 413 without reading a 32 MiB upload: does the client read
  the status, or does it get a connection reset first?

``uvicorn-hardened`` is uvicorn with `render_service.http.connections.HardenedProtocol`,
what ``render-service serve`` runs.

Usage: ``python -m bench.bench_servers [--servers uvicorn,uvicorn-hardened,granian,hypercorn] [--workers 1,2]``.
Servers that are not installed are skipped. Writes a JSON report to stdout.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time

IDLE_TIMEOUT_S = 5
CONNECTION_CAP = 256
PROBE_LIMIT_S = 15


async def app(scope, receive, send):
    """The probed app: /upload refuses large bodies unread; anything else echoes a small JSON."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    headers = dict(scope["headers"])
    if scope["path"] == "/upload" and int(headers.get(b"content-length", b"0")) > 1 << 20:
        await send({"type": "http.response.start", "status": 413, "headers": _headers(TOO_LARGE)})
        await send({"type": "http.response.body", "body": TOO_LARGE})
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": _headers(OK)})
    await send({"type": "http.response.body", "body": OK})


OK = b'{"object":"ok","token_ids":[1,2,3,4,5,6,7,8]}'
TOO_LARGE = b'{"error":"too large"}'


def _headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]


def _command(server: str, port: int, workers: int) -> list[str]:
    target = "bench.bench_servers:app"
    if server.startswith("uvicorn"):  # the stack pyproject installs: httptools + uvloop
        http = "render_service.http.connections:HardenedProtocol" if server == "uvicorn-hardened" else "httptools"
        return [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
                "--workers", str(workers), "--http", http, "--loop", "uvloop", "--timeout-keep-alive",
                str(IDLE_TIMEOUT_S), "--limit-concurrency", str(CONNECTION_CAP), "--log-level", "warning",
                "--no-access-log"]
    if server == "granian":
        return [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
                "--workers", str(workers), "--http", "1", "--http1-header-read-timeout", str(IDLE_TIMEOUT_S * 1000),
                "--backpressure", str(CONNECTION_CAP), "--log-level", "warning", "--no-access-log", target]
    if server == "hypercorn":
        return [sys.executable, "-m", "hypercorn", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                "--keep-alive", str(IDLE_TIMEOUT_S), "--read-timeout", str(IDLE_TIMEOUT_S), "--log-level", "warning",
                target]
    raise ValueError(server)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REQUEST = (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")


def _read_response(sock: socket.socket, buf: bytearray) -> bytes:
    """Read one response with Content-Length framing; returns its status line."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    buf[:] = rest[length:]
    return head.split(b"\r\n")[0]


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=PROBE_LIMIT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def probe_latency(port: int, n: int = 300) -> dict:
    with _connect(port) as sock:
        buf = bytearray()
        times = []
        for i in range(n + 20):
            t = time.perf_counter()
            sock.sendall(REQUEST)
            _read_response(sock, buf)
            if i >= 20:
                times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(times[int(len(times) * 0.99) - 1], 2)}


def probe_throughput(port: int, clients: int = 8, seconds: float = 2.0) -> dict:
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        while time.perf_counter() < stop:
            try:
                with _connect(port) as sock:
                    buf = bytearray()
                    while time.perf_counter() < stop:
                        sock.sendall(REQUEST)
                        _read_response(sock, buf)
                        counts[i] += 1
            except OSError:
                continue

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"rps": round(sum(counts) / seconds)}


def _seconds_until_closed(sock: socket.socket, start: float, trickle: bytes = b"") -> float | None:
    """Wait until the peer closes ``sock`` (sending one byte of ``trickle`` a second)."""
    sock.settimeout(1.0)
    sent = 0
    while time.perf_counter() - start < PROBE_LIMIT_S:
        try:
            if trickle and sent < len(trickle):
                sock.sendall(trickle[sent:sent + 1])
                sent += 1
            data = sock.recv(4096)
            if not data:
                return round(time.perf_counter() - start, 1)
            return round(time.perf_counter() - start, 1)  # an error status counts as closing it out
        except socket.timeout:
            continue
        except OSError:
            return round(time.perf_counter() - start, 1)
    return None


def probe_idle_and_slow(port: int) -> dict:
    results: dict = {}

    def idle() -> None:
        with _connect(port) as sock:
            results["idle_close_s"] = _seconds_until_closed(sock, time.perf_counter())

    def slow() -> None:
        with _connect(port) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
            results["slow_header_close_s"] = _seconds_until_closed(sock, time.perf_counter(), b"X-Slow: " + b"a" * 64)

    threads = [threading.Thread(target=idle), threading.Thread(target=slow)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def probe_cap(port: int, idle: int = 300) -> dict:
    held = [_connect(port) for _ in range(idle)]
    try:
        time.sleep(0.5)
        t = time.perf_counter()
        try:
            with _connect(port) as sock:
                sock.sendall(REQUEST)
                status = _read_response(sock, bytearray()).decode()
        except OSError as exc:
            status = f"error: {type(exc).__name__}"
        elapsed = round((time.perf_counter() - t) * 1000, 1)
        closed = 0
        for s in held:
            s.setblocking(False)
            try:
                s.recv(1)  # an answer (503) or EOF: the server turned it away
                closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return {"served_past_cap": f"{status} in {elapsed} ms", "idle_turned_away": closed}
    finally:
        for s in held:
            s.close()


def probe_early_413(port: int, size: int = 32 << 20) -> dict:
    """Send the whole upload first, as most HTTP clients do, then read the answer."""
    with _connect(port) as sock:
        head = (b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Length: %d\r\n\r\n" % size)
        sent, error = 0, ""
        try:
            sock.sendall(head)
            chunk = b"\0" * (1 << 20)
            while sent < size:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError as exc:
            error = f"{type(exc).__name__} while sending after {sent >> 20} MiB; "
        try:
            sock.settimeout(5)
            received = sock.recv(65536)
        except OSError as exc:
            return {"early_413": f"{error}{type(exc).__name__} on read: no status"}
    status = received.split(b"\r\n")[0].decode() or "closed without a status"
    return {"early_413": f"{error}{status}"}


def measure(server: str, workers: int) -> dict:
    port = _free_port()
    proc = subprocess.Popen(_command(server, port, workers), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.perf_counter() + 30
        while True:
            try:
                with _connect(port) as sock:
                    sock.sendall(REQUEST)
                    _read_response(sock, bytearray())
                break
            except OSError:
                if proc.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"{server} did not start: {proc.stderr.read().decode()[-500:]}") from None
                time.sleep(0.2)
        time.sleep(0.5 * workers)  # let every worker come up
        row = {"server": server, "workers": workers}
        for probe in (probe_latency, probe_throughput, probe_idle_and_slow, probe_cap, probe_early_413):
            try:
                row.update(probe(port))
            except OSError as exc:
                row[probe.__name__] = f"failed: {exc!r}"
        return row
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="uvicorn,uvicorn-hardened,granian,hypercorn")
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args(argv)
    rows = []
    for server in args.servers.split(","):
        try:
            __import__(server.split("-")[0])
        except ImportError:
            print(f"skip {server}: not installed", file=sys.stderr)
            continue
        for workers in (int(w) for w in args.workers.split(",")):
            row = measure(server, workers)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
