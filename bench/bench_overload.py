"""Goodput under overload (issue 25): does the render tier keep serving at capacity when
offered more than it can do, and do its probes keep answering?

Spawns ``render-service serve`` on loopback (or takes ``--target URL``, loopback only) and,
from this separate process:

1. measures **capacity**: closed loop, ``--concurrency`` clients, ``--seconds`` s, of
   ``POST /v1/chat/completions/render`` with a ``--prompt-chars`` user message (Python
   source, a different slice for every request, so no cache helps);
2. offers **1x, 1.5x and 3x** that rate, open loop (Poisson-free, evenly spaced, timed from
   the scheduled start: no coordinated omission), ``--seconds`` s each, at most
   ``rate x seconds`` requests, and reports per phase: goodput (200s per second of the
   phase, as a share of capacity), p50/p99 latency of the 200s, 503s and their latency,
   other errors; ``/health`` and ``/load`` latency (p50, worst) and failures from a
   separate prober process polling every 100 ms on a fresh connection each time (as a
   kubelet probe);
3. **recovery**: after each phase, the time from the last request sent until a render
   answers 200 within twice the unloaded latency.

The client shares the machine with the server; ``client_lag_p99_ms`` says how late it
could send (large values mean the offered rate was not really offered).

Usage: ``python -m bench.bench_overload [--seconds 10] [--concurrency 8] [--serve-flags "..."]``.
Writes JSON to stdout and a Markdown table to stderr. Each phase is bounded by
``--seconds`` (at most 20) and the whole run by about ``6 x --seconds + 30`` s.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import multiprocessing
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.bench_reliability import Pool, _pct
from bench.targets import SpawnedServer

ROUTE = "/v1/chat/completions/render"
MAX_PHASE_S = 20.0


def source_text() -> str:
    """Python standard-library source to slice prompts from (real code, comments, docstrings)."""
    parts, total = [], 0
    for module in (asyncio, json, argparse, inspect, multiprocessing):
        for path in sorted(Path(module.__file__).parent.glob("*.py")) if module.__file__.endswith("__init__.py") \
                else [Path(module.__file__)]:
            text = path.read_text(errors="replace")
            parts.append(text)
            total += len(text)
            if total > 2_000_000:
                return "\n".join(parts)
    return "\n".join(parts)


class Bodies:
    """The i-th request body: a system line and ``chars`` characters of source from a
    different offset each time."""

    def __init__(self, chars: int) -> None:
        self.text, self.chars = source_text(), chars

    def __call__(self, i: int) -> bytes:
        start = (i * 7919) % max(1, len(self.text) - self.chars)
        content = f"[{i}] Review this code.\n" + self.text[start:start + self.chars]
        return json.dumps({"messages": [{"role": "system", "content": "You are a careful reviewer."},
                                        {"role": "user", "content": content}], "max_tokens": 64}).encode()


class Phase:
    """Answers of one phase: latencies of 200s and 503s, other outcomes counted."""

    def __init__(self) -> None:
        self.ok_ms: list[float] = []
        self.refused_ms: list[float] = []
        self.other: dict[str, int] = {}
        self.lag_ms: list[float] = []
        self.last_sent = 0.0

    async def one(self, pool: Pool, body: bytes) -> None:
        t = time.perf_counter()
        try:
            status: int | str = await pool.post(ROUTE, body)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            status = type(exc).__name__
        ms = (time.perf_counter() - t) * 1000
        if status == 200:
            self.ok_ms.append(ms)
        elif status == 503:
            self.refused_ms.append(ms)
        else:
            self.other[str(status)] = self.other.get(str(status), 0) + 1


async def closed_loop(url: str, bodies: Bodies, concurrency: int, seconds: float, first: int) -> tuple[Phase, float]:
    phase, pool, counter = Phase(), Pool(url), iter(range(first, 10**9))
    stop = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < stop:
            await phase.one(pool, bodies(next(counter)))

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    pool.close()
    return phase, time.perf_counter() - start


async def open_loop(url: str, bodies: Bodies, rate: float, seconds: float, first: int) -> Phase:
    """``rate`` requests a second, evenly spaced, for ``seconds`` (at most rate x seconds)."""
    phase, pool, tasks = Phase(), Pool(url, size=4096), []
    loop = asyncio.get_running_loop()
    count = int(rate * seconds)
    start = loop.time()
    for i in range(count):
        due = start + i / rate
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        phase.lag_ms.append((loop.time() - due) * 1000)
        tasks.append(asyncio.create_task(phase.one(pool, bodies(first + i))))
    phase.last_sent = time.perf_counter()
    await asyncio.gather(*tasks)
    pool.close()
    return phase


def probe(url: str, conn) -> None:
    """Prober process: says "ready", then GETs /health and /load every 100 ms, each on a
    new connection (as a kubelet probe), until told to stop; sends back
    {path: [ms or the failure, ...]}."""
    parts = urlsplit(url)
    found: dict[str, list] = {"/health": [], "/load": []}
    conn.send("ready")
    while not conn.poll(0.1):
        for path in found:
            t = time.perf_counter()
            try:
                with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
                    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                    answer = b""
                    while chunk := sock.recv(4096):
                        answer += chunk
                ok = answer.startswith(b"HTTP/1.1 200")
                found[path].append((time.perf_counter() - t) * 1000 if ok else answer[:12].decode("latin-1"))
            except OSError as exc:
                found[path].append(type(exc).__name__)
    conn.send(found)


def recovery_s(url: str, bodies: Bodies, since: float, baseline_ms: float, first: int, limit_s: float = 30.0) -> float | None:
    """Seconds from ``since`` (perf_counter) until a render answers 200 within 2x ``baseline_ms``."""

    async def run() -> float | None:
        pool = Pool(url)
        phase = Phase()
        for i in range(10**6):
            if time.perf_counter() - since > limit_s:
                return None
            t = time.perf_counter()
            await phase.one(pool, bodies(first + i))
            if phase.ok_ms and (time.perf_counter() - t) * 1000 <= 2 * baseline_ms:
                pool.close()
                return time.perf_counter() - since
            await asyncio.sleep(0.02)
        return None

    return asyncio.run(run())


def summary(phase: Phase, seconds: float, capacity: float) -> dict:
    goodput = len(phase.ok_ms) / seconds
    return {"goodput_rps": round(goodput, 1), "goodput_share": round(goodput / capacity, 2),
            "ok": len(phase.ok_ms), "p50_ms": _pct(phase.ok_ms, 0.5), "p99_ms": _pct(phase.ok_ms, 0.99),
            "refused_503": len(phase.refused_ms), "refused_p50_ms": _pct(phase.refused_ms, 0.5),
            "other_errors": phase.other, "client_lag_p99_ms": _pct(phase.lag_ms, 0.99)}


def probe_summary(found: dict) -> dict:
    out = {}
    for path, values in found.items():
        ok = [v for v in values if isinstance(v, float)]
        failures: dict[str, int] = {}
        for v in values:
            if not isinstance(v, float):
                failures[v] = failures.get(v, 0) + 1
        out[path] = {"probes": len(values), "failed": failures, "p50_ms": _pct(ok, 0.5),
                     "worst_ms": round(max(ok), 1) if ok else None}
    return out


def run(url: str, args: argparse.Namespace) -> dict:
    bodies = Bodies(args.prompt_chars)
    asyncio.run(closed_loop(url, bodies, args.concurrency, 2.0, 0))  # warm-up
    unloaded, _ = asyncio.run(closed_loop(url, bodies, 1, 2.0, 10**5))
    baseline_ms = _pct(unloaded.ok_ms, 0.5) or 100.0
    cap_phase, elapsed = asyncio.run(closed_loop(url, bodies, args.concurrency, args.seconds, 2 * 10**5))
    capacity = len(cap_phase.ok_ms) / elapsed
    report = {"capacity_rps": round(capacity, 1), "unloaded_p50_ms": baseline_ms,
              "capacity_p99_ms": _pct(cap_phase.ok_ms, 0.99), "phases": []}
    ctx = multiprocessing.get_context("spawn")
    for n, factor in enumerate(args.factors):
        mine, theirs = ctx.Pipe()
        prober = ctx.Process(target=probe, args=(url, theirs), daemon=True)
        prober.start()
        mine.poll(60) and mine.recv()  # the prober is up (a spawned process takes seconds here)
        phase = asyncio.run(open_loop(url, bodies, factor * capacity, args.seconds, (3 + n) * 10**6))
        mine.send("stop")
        recovered = recovery_s(url, bodies, phase.last_sent, baseline_ms, (3 + n) * 10**6 + 900_000)
        found = mine.recv() if mine.poll(30) else {}
        prober.join(5)
        report["phases"].append({"factor": factor, "offered_rps": round(factor * capacity, 1),
                                 **summary(phase, args.seconds, capacity), "probes": probe_summary(found),
                                 "recovery_s": round(recovered, 2) if recovered is not None else None})
        time.sleep(2.0)
    return report


def _probes(p: dict) -> str:
    return f"{p.get('p50_ms')} / {p.get('worst_ms')} ({sum(p.get('failed', {}).values())} of {p.get('probes', 0)})"


def table(report: dict) -> str:
    lines = [f"capacity {report['capacity_rps']} req/s (closed loop), unloaded p50 {report['unloaded_p50_ms']} ms",
             "",
             "| offered | goodput req/s (share of capacity) | p50 / p99 ms of 200s | 503s (p50 ms) | other errors | "
             "/health p50 / worst ms (failed of probes) | /load p50 / worst ms (failed of probes) | recovery s | "
             "client lag p99 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in report["phases"]:
        h, ld = p["probes"].get("/health", {}), p["probes"].get("/load", {})
        lines.append(f"| {p['factor']}x = {p['offered_rps']}/s | {p['goodput_rps']} ({p['goodput_share']:.0%}) "
                     f"| {p['p50_ms']} / {p['p99_ms']} | {p['refused_503']} ({p['refused_p50_ms']}) "
                     f"| {sum(p['other_errors'].values())} | {_probes(h)} | {_probes(ld)} "
                     f"| {p['recovery_s']} | {p['client_lag_p99_ms']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="a running server (loopback only); default: spawn `render-service serve`")
    parser.add_argument("--serve-flags", default="", help="flags for the spawned server")
    parser.add_argument("--seconds", type=float, default=10.0, help=f"seconds of each phase (at most {MAX_PHASE_S:g})")
    parser.add_argument("--concurrency", type=int, default=8, help="clients of the capacity phase")
    parser.add_argument("--prompt-chars", type=int, default=24_000, help="characters of source per user message")
    parser.add_argument("--factors", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 1.5, 3.0],
                        help="offered load as multiples of capacity")
    args = parser.parse_args(argv)
    args.seconds = min(args.seconds, MAX_PHASE_S)
    if args.target:
        host = urlsplit(args.target).hostname
        if host not in ("127.0.0.1", "localhost", "::1"):
            parser.error("--target must be a loopback URL")
        report = run(args.target.rstrip("/"), args)
    else:
        server = SpawnedServer(shlex.split(args.serve_flags))
        server.start()
        try:
            server.wait_ready()
            report = run(server.url, args)
        finally:
            server.stop()
    report["load_average"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
