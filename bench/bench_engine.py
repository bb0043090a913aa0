"""What the scripted reference engine costs: CPU per generate request, HEAD against a baseline.

The ``four-hop`` bench and every driver test run on ``render-service engine --scripted``; its
own CPU must stay far below the front tier's (issue 36: ≤ 1 ms per request at any prompt
length), or a capacity run on a small machine measures the test engine.

Method. Both versions start ``python -m reference_engine --scripted SCRIPT`` on loopback (the
same script: one 32-token answer). Requests go one at a time, each to one engine and then the
same request to the other, the order alternating request by request (ABBA), so load from
elsewhere on a shared machine falls on both alike. The engine's CPU is read before and after
each request from the scheduler's per-thread run time (`bench.targets.ThreadCpu`, ns), after
the answer has been read whole. Workloads:

- ``short``: a 50-token prompt, 32 tokens out, non-streaming;
- ``short-stream``: the same, streamed (one SSE event per token);
- ``9k``: a 9,000-token prompt, 16 tokens out, non-streaming;
- ``prefill-leg``: a P/D prefill leg (``do_remote_decode``, ``max_tokens`` 1) of a 50-token prompt.

Each round prints nothing; the table gives each side's median CPU per request over all
rounds and the HEAD/baseline ratio as the median of per-round ratios with their range.

Run: ``python -m bench.bench_engine --baseline REF [--rounds 3] [--requests 100]``
(REF: a git ref, a source directory, or ``installed``; HEAD: this working tree).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from .regress import checkout
from .targets import ModuleProcess, TargetError, ThreadCpu

_REPO = Path(__file__).resolve().parents[1]
SCRIPT = {"model": "scripted", "eos_token_ids": [2], "responses": [{"token_ids": list(range(1000, 1032))}]}


def _body(n_prompt: int, max_tokens: int, stream: bool = False, prefill: bool = False) -> dict:
    """A GenerateRequest as the driver sends one (every sampling key present)."""
    sampling = {"n": 1, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": None,
                "max_tokens": 1 if prefill else max_tokens, "min_tokens": 0, "stop": None, "stop_token_ids": [],
                "include_stop_str_in_output": False, "ignore_eos": False, "skip_special_tokens": True,
                "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "logprobs": None,
                "prompt_logprobs": None, "structured_outputs": None, "output_kind": 1 if stream else 2}
    kv = ({"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
           "remote_block_ids": None, "remote_host": None, "remote_port": None} if prefill else None)
    return {"request_id": "", "token_ids": [(7 * i) % 150000 + 10 for i in range(n_prompt)],
            "sampling_params": sampling, "model": "scripted", "stream": stream,
            "stream_options": {"include_usage": True} if stream else None, "kv_transfer_params": kv}


WORKLOADS = {
    "short": _body(50, 32),
    "short-stream": _body(50, 32, stream=True),
    "9k": _body(9000, 16),
    "prefill-leg": _body(50, 32, prefill=True),
}


class EngineSide:
    """One engine version: its process on a free port, its CPU meter and a kept-alive client."""

    def __init__(self, name: str, root: Path | str, script: Path) -> None:
        self.name = name
        self.engine = ModuleProcess(f"{name} engine", root, ["reference_engine", "--scripted", str(script)], 60)
        self.cpu = ThreadCpu(self.engine.proc.pid)
        self.client = httpx.Client(base_url=self.engine.url, timeout=60, trust_env=False)

    def call(self, n: int, body: bytes) -> float:
        """One request (``n`` its sequence number); the engine's CPU seconds for it."""
        before = self.cpu.sample()
        r = self.client.post("/inference/v1/generate", content=body.replace(b'"request_id":""', b'"request_id":"r%d"' % n),
                             headers={"content-type": "application/json"})
        r.read()
        if r.status_code != 200:
            raise TargetError(f"{self.name}: {r.status_code} {r.text[:300]}")
        return ThreadCpu.delta(before, self.cpu.sample())

    def stop(self) -> None:
        self.client.close()
        self.engine.stop()


def run(sides: list[EngineSide], rounds: int, requests: int) -> dict[str, dict]:
    """{workload: {"ms": [median ms per side], "ratios": [per-round HEAD/baseline]}}."""
    out: dict[str, dict] = {}
    for name, body in WORKLOADS.items():
        raw = orjson.dumps(body)
        for side in sides:  # warm-up: first calls import and allocate
            for i in range(5):
                side.call(i, raw)
        per_side: list[list[float]] = [[] for _ in sides]
        ratios = []
        k = 0
        for _ in range(rounds):
            got: list[list[float]] = [[] for _ in sides]
            for n in range(requests):
                order = range(len(sides)) if k % 2 == 0 else reversed(range(len(sides)))
                k += 1
                for i in order:
                    got[i].append(sides[i].call(k * 10 + i, raw))
            medians = [statistics.median(g) for g in got]
            for i, g in enumerate(got):
                per_side[i] += g
            if len(sides) == 2 and medians[1] > 0:
                ratios.append(medians[0] / medians[1])
        out[name] = {"ms": [statistics.median(g) * 1000 for g in per_side], "ratios": ratios}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_engine", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="git ref, source directory or 'installed' to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100, help="requests per workload per round per side")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(SCRIPT))
        sides = []
        try:
            sides.append(EngineSide("HEAD", _REPO, script))
            if args.baseline:
                root, label = checkout(args.baseline, Path(tmp))
                sides.append(EngineSide(f"baseline {label}", root, script))
            t0 = time.monotonic()
            table = run(sides, args.rounds, args.requests)
        finally:
            for side in sides:
                side.stop()
    print(f"scripted engine CPU per request (median ms; {args.rounds} rounds x {args.requests} requests, "
          f"interleaved ABBA, {time.monotonic() - t0:.0f} s)")
    head = "| workload | " + " | ".join(s.name for s in sides) + (" | HEAD / baseline (median, range) |" if len(sides) == 2 else " |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, row in table.items():
        cells = [f"{ms:.3f}" for ms in row["ms"]]
        if row["ratios"]:
            r = row["ratios"]
            cells.append(f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
