"""Reliability of the render tier under mixed load, overload and a soak (issue 14).

Spawns ``render-service serve --workers N`` on loopback for each N of ``--workers`` and
reports, side by side:

- **mixed load** (closed loop, ``--concurrency`` clients, ``--duration`` s): 90 % valid
  requests (chat render, completions render, derender) and 10 % invalid ones (bad JSON,
  token ids out of range, too many stop strings, ``truncate_prompt_tokens: 0``):
  req/s, p50/p99 of the valid ones, and errors on valid requests (must be 0);
- **3x overload** (open loop at three times the measured req/s, ``--duration`` s): the
  503 rate, time-to-503 (p50/p99: how fast a refused client knows), the valid requests
  served per second and their p99, and valid requests that failed otherwise than with 503
  (must be 0). The client shares the machine: ``client_launch_lag_p99_ms`` says how late it
  could send; when it is large (a 3x rate from the cores the server uses), latencies
  measure the client's backlog as much as the server's;
- **soak** (open loop at 70 % of capacity for ``--soak-seconds``): server RSS (all its
  processes) after warm-up (the first 20 %) and at the end, and the growth in % (goal:
  under 5 %), and errors on valid requests.

Usage: ``python -m bench.bench_reliability [--workers 1,2] [--duration 10] [--soak-seconds 600]``.
Writes a JSON report to stdout and a Markdown table to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench.targets import SpawnedServer

USER = ("Summarise the following notes in two sentences. " * 12).strip()
VALID = [
    ("/v1/chat/completions/render", {"messages": [{"role": "system", "content": "You are terse."},
                                                  {"role": "user", "content": USER}], "max_tokens": 64}),
    ("/v1/completions/render", {"prompt": USER, "max_tokens": 32}),
    ("/v1/chat/completions/derender", {"generate_response": {"choices": [
        {"index": 0, "token_ids": list(range(28, 128)), "finish_reason": "stop"}]},
        "prompt_token_ids": [1, 2, 3], "chat_request": {"messages": []}}),
]
INVALID = [
    ("/v1/chat/completions/render", b"{not json"),
    ("/v1/chat/completions/derender", {"generate_response": {"choices": [
        {"index": 0, "token_ids": [10**9], "finish_reason": "stop"}]}, "chat_request": {"messages": []}}),
    ("/v1/chat/completions/derender", {"generate_response": {"choices": [
        {"index": 0, "token_ids": [28], "finish_reason": "stop"}]},
        "chat_request": {"messages": [], "stop": [f"s{i}" for i in range(100)]}}),
    ("/v1/chat/completions/render", {"messages": [{"role": "user", "content": "hi"}], "truncate_prompt_tokens": 0}),
]


def request_for(i: int) -> tuple[str, bytes, bool]:
    """The i-th request of the mix: (path, body, valid)."""
    if i % 10 == 9:
        path, body = INVALID[(i // 10) % len(INVALID)]
        valid = False
    else:
        path, body = VALID[i % len(VALID)]
        valid = True
    return path, body if isinstance(body, bytes) else json.dumps(body).encode(), valid


class Conn:
    """One kept-alive HTTP/1.1 connection: a lean client (httpx costs more CPU per request than
    the render it measures; on a shared machine the client would be the bottleneck)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        try:
            self.writer.write(head + body)
            await self.writer.drain()
            status_line = await self.reader.readuntil(b"\r\n")
            headers = await self.reader.readuntil(b"\r\n\r\n")
            length, close = 0, False
            for line in headers.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"connection" and value.strip().lower() == b"close":
                    close = True
            await self.reader.readexactly(length)
            if close:
                self.close()
            return int(status_line.split()[1])
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.close()
            raise

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Pool:
    """Idle connections to reuse; a new one when none is idle (at most ``size`` open)."""

    def __init__(self, url: str, size: int = 512) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.idle: list[Conn] = []
        self.slots = asyncio.Semaphore(size)

    async def post(self, path: str, body: bytes) -> int:
        async with self.slots:
            reused = bool(self.idle)
            conn = self.idle.pop() if reused else Conn(self.host, self.port)
            try:
                status = await conn.post(path, body)
            except asyncio.IncompleteReadError as exc:
                if not reused or exc.partial:
                    raise
                # The server closed this kept-alive connection while it sat idle (its
                # keep-alive deadline): retry once on a new one, as HTTP clients do.
                conn = Conn(self.host, self.port)
                status = await conn.post(path, body)
            except ConnectionResetError:
                if not reused:
                    raise
                conn = Conn(self.host, self.port)
                status = await conn.post(path, body)
            if conn.writer is not None:
                self.idle.append(conn)
            return status

    def close(self) -> None:
        for conn in self.idle:
            conn.close()


class Tally:
    """Statuses and latencies of one phase."""

    def __init__(self) -> None:
        self.valid_ms: list[float] = []
        self.refused_ms: list[float] = []
        self.valid_errors: dict[str, int] = {}
        self.invalid_not_4xx = 0
        self.done = 0
        self.launch_lag_ms: list[float] = []

    async def one(self, pool: Pool, i: int) -> None:
        path, body, valid = request_for(i)
        t = time.perf_counter()
        try:
            status: int | str = await pool.post(path, body)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            status = type(exc).__name__
        ms = (time.perf_counter() - t) * 1000
        self.done += 1
        if status == 503:
            self.refused_ms.append(ms)
        elif valid and status == 200:
            self.valid_ms.append(ms)
        elif valid:
            self.valid_errors[str(status)] = self.valid_errors.get(str(status), 0) + 1
        elif not (isinstance(status, int) and 400 <= status < 500):
            self.invalid_not_4xx += 1


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)


async def closed_loop(url: str, concurrency: int, seconds: float, backoff: bool = False) -> tuple[Tally, float]:
    """``concurrency`` clients, one request outstanding each; with ``backoff`` a client
    refused with 503 waits its ``Retry-After`` (1 s) as a router would."""
    tally, counter, pool = Tally(), iter(range(10**9)), Pool(url)
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop:
            refused = len(tally.refused_ms)
            await tally.one(pool, next(counter))
            if backoff and len(tally.refused_ms) > refused:
                await asyncio.sleep(min(1.0, max(0.0, stop - time.perf_counter())))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    pool.close()
    return tally, time.perf_counter() - start


async def open_loop(url: str, rate: float, seconds: float, on_tick=None) -> Tally:
    """Start ``rate`` requests a second for ``seconds``, whatever the answers take."""
    tally, tasks, pool = Tally(), [], Pool(url)
    loop = asyncio.get_running_loop()
    start, i, last_tick = loop.time(), 0, -1
    while loop.time() - start < seconds:
        due = start + i / rate
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        tally.launch_lag_ms.append((loop.time() - due) * 1000)  # the client's own backlog
        tasks.append(asyncio.create_task(tally.one(pool, i)))
        i += 1
        second = int(loop.time() - start)
        if on_tick is not None and second != last_tick:
            last_tick = second
            on_tick(second)
    await asyncio.gather(*tasks)
    pool.close()
    return tally


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (``--workers`` children), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def measure(workers: int, args: argparse.Namespace) -> dict:
    server = SpawnedServer(["--workers", str(workers), "--max-queue-delay-ms", str(args.max_queue_delay_ms)])
    server.start()
    try:
        server.wait_ready()
        time.sleep(1.0 * workers)  # every worker up
        asyncio.run(closed_loop(server.url, args.concurrency, 2.0))  # warm-up
        mixed, elapsed = asyncio.run(closed_loop(server.url, args.concurrency, args.duration))
        rps = mixed.done / elapsed
        over = asyncio.run(open_loop(server.url, 3 * rps, args.duration))
        over_s = args.duration
        samples: list[tuple[int, int]] = []
        soak = asyncio.run(open_loop(server.url, 0.7 * rps, args.soak_seconds,
                                     on_tick=lambda s: samples.append((s, tree_rss_bytes(server.proc.pid)))))
        samples.append((int(args.soak_seconds), tree_rss_bytes(server.proc.pid)))
        warm = [rss for s, rss in samples if s >= 0.2 * args.soak_seconds]
        rss_start, rss_end = (warm[0], warm[-1]) if warm else (samples[0][1], samples[-1][1])
        return {
            "workers": workers,
            "mixed": {"rps": round(rps, 1), "p50_ms": _pct(mixed.valid_ms, 0.5), "p99_ms": _pct(mixed.valid_ms, 0.99),
                      "valid_errors": mixed.valid_errors, "invalid_not_4xx": mixed.invalid_not_4xx,
                      "refused_503": len(mixed.refused_ms)},
            "overload_3x": {"offered_rps": round(3 * rps, 1), "requests": over.done,
                            "served_rps": round(len(over.valid_ms) / over_s, 1),
                            "rate_503": round(len(over.refused_ms) / max(over.done, 1), 3),
                            "time_to_503_p50_ms": _pct(over.refused_ms, 0.5),
                            "time_to_503_p99_ms": _pct(over.refused_ms, 0.99),
                            "served_p99_ms": _pct(over.valid_ms, 0.99), "valid_errors": over.valid_errors,
                            "client_launch_lag_p99_ms": _pct(over.launch_lag_ms, 0.99)},
            "soak": {"seconds": args.soak_seconds, "offered_rps": round(0.7 * rps, 1), "requests": soak.done,
                     "rss_after_warmup_mb": round(rss_start / 2**20, 1), "rss_end_mb": round(rss_end / 2**20, 1),
                     "rss_growth_pct": round(100 * (rss_end - rss_start) / max(rss_start, 1), 2),
                     "valid_errors": soak.valid_errors, "refused_503": len(soak.refused_ms),
                     "client_launch_lag_p99_ms": _pct(soak.launch_lag_ms, 0.99)},
        }
    finally:
        server.stop()


def table(rows: list[dict]) -> str:
    lines = ["| workers | req/s | p50 / p99 ms | valid errors | 3x: 503 rate | time-to-503 p50 / p99 ms | "
             "3x: served req/s, p99 ms | 3x: other valid errors | soak s | RSS MB (warm → end) | RSS growth | "
             "soak valid errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, o, s = r["mixed"], r["overload_3x"], r["soak"]
        lines.append(f"| {r['workers']} | {m['rps']} | {m['p50_ms']} / {m['p99_ms']} | {sum(m['valid_errors'].values())} "
                     f"| {o['rate_503']} | {o['time_to_503_p50_ms']} / {o['time_to_503_p99_ms']} "
                     f"| {o['served_rps']}, {o['served_p99_ms']} | {sum(o['valid_errors'].values())} | {s['seconds']} "
                     f"| {s['rss_after_warmup_mb']} → {s['rss_end_mb']} | {s['rss_growth_pct']} % "
                     f"| {sum(s['valid_errors'].values())} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated --workers values to compare")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the mixed and overload phases")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="seconds of the soak (issue: 10 minutes)")
    parser.add_argument("--concurrency", type=int, default=16, help="clients of the closed-loop phase")
    parser.add_argument("--max-queue-delay-ms", type=int, default=250, help="the server's --max-queue-delay-ms")
    args = parser.parse_args(argv)
    rows = [measure(int(w), args) for w in args.workers.split(",")]
    print(json.dumps(rows, indent=1))
    print(table(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
