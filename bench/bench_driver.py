"""The four-hop driver's front-tier CPU per request, HEAD against a baseline (issue 36's rows).

Method. Two scripted reference engines (prefill, decode; this checkout's, ~1 ms per request
each) and one `render-service drive` per version in front of them, render in process on the
Qwen3 tokenizer (../shared/models/qwen3). Requests go one at a time, each to one driver and then
the same request to the other, the order alternating request by request (ABBA). The driver's
CPU (engines excluded) is read before and after each request from the scheduler's per-thread
run time (`bench.targets.ThreadCpu`). Every request starts with a fresh nonce, so no prefix
cache helps. Rows:

- ``chat``: a ~50-token chat, 16 tokens out;
- ``9k``: a ~8,900-token user message, 16 tokens out;
- ``stream``: the ~50-token chat streamed, 32 tokens out.

Run: ``python -m bench.bench_driver --baseline REF [--rounds 3] [--requests 100]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from .regress import DEFAULT_MODEL, checkout
from .targets import ModuleProcess, TargetError, ThreadCpu

_REPO = Path(__file__).resolve().parents[1]
QUESTION = "Please explain in a few words why the sky looks blue during the day and red at sunset."


def _script(model: Path) -> dict:
    """32 ordinary Qwen3 tokens then <|im_end|>: a ``length`` cut at 16, a stop at 33."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = tok.encode(" The sky scatters blue light more than red, so it looks blue by day; at sunset the"
                     " light crosses more air and the blue is scattered away, leaving red and orange"
                     " hues in the evening sky.").ids[:32]
    return {"model": "scripted", "responses": [{"token_ids": ids + [tok.token_to_id("<|im_end|>")]}]}


def _rows() -> dict[str, tuple[dict, bool]]:
    long = " ".join(["The quick brown fox jumps over the lazy dog near the quiet river bank."] * 600)
    return {"chat": ({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 16}, False),
            "9k": ({"messages": [{"role": "user", "content": long}], "max_tokens": 16}, False),
            "stream": ({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 32, "stream": True}, True)}


class Side:
    """One driver version, its CPU meter and a kept-alive client."""

    def __init__(self, name: str, root: Path | str, prefill: str, decode: str, model: Path) -> None:
        self.name = name
        self.driver = ModuleProcess(name, root, ["render_service.serve.cli", "drive", "--prefill", prefill, "--decode",
                                        decode, "--model", str(model), "--uvicorn-log-level", "warning"])
        time.sleep(5)  # the fast tokenizer backend is built in the background after /health
        self.cpu = ThreadCpu(self.driver.proc.pid)
        self.client = httpx.Client(base_url=self.driver.url, timeout=60, trust_env=False)

    def call(self, body: dict, stream: bool) -> float:
        body = {**body, "messages": [{"role": "system", "content": f"nonce {uuid.uuid4().hex}"}, *body["messages"]]}
        before = self.cpu.sample()
        r = self.client.post("/v1/chat/completions", json=body)
        if r.status_code != 200 or (stream and not r.text.rstrip().endswith("data: [DONE]")):
            raise TargetError(f"{self.name}: {r.status_code} {r.text[:300]}")
        return ThreadCpu.delta(before, self.cpu.sample())

    def stop(self) -> None:
        self.client.close()
        self.driver.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_driver", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="git ref, source directory or 'installed' to compare against")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="tokenizer dir (default: Qwen3 in ../shared)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100, help="requests per row per round per side")
    parser.add_argument("--only", nargs="+", choices=list(_rows()), help="rows to run (default all)")
    args = parser.parse_args(argv)
    if not (args.model / "tokenizer.json").is_file():
        print(f"bench_driver: no tokenizer.json in {args.model} (../shared absent?)", file=sys.stderr)
        return 2
    rows = {k: v for k, v in _rows().items() if not args.only or k in args.only}
    procs: list = []  # ModuleProcess | Side, stopped in reverse
    table: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(_script(args.model)))
        try:
            engine = ["reference_engine", "--scripted", str(script)]
            p = ModuleProcess("prefill engine", _REPO, [*engine, "--role", "prefill"])
            procs.append(p)
            d = ModuleProcess("decode engine", _REPO, [*engine, "--role", "decode"])
            procs.append(d)
            sides = [Side("HEAD", _REPO, p.url, d.url, args.model)]
            procs.append(sides[0])
            if args.baseline:
                root, label = checkout(args.baseline, Path(tmp))
                sides.append(Side(f"baseline {label}", root, p.url, d.url, args.model))
                procs.append(sides[-1])
            k = 0
            for name, (body, stream) in rows.items():
                for side in sides:
                    for _ in range(5):
                        side.call(body, stream)
                per_side: list[list[float]] = [[] for _ in sides]
                ratios = []
                for _ in range(args.rounds):
                    got: list[list[float]] = [[] for _ in sides]
                    for _ in range(args.requests):
                        order = range(len(sides)) if k % 2 == 0 else reversed(range(len(sides)))
                        k += 1
                        for i in order:
                            got[i].append(sides[i].call(body, stream))
                    for i, g in enumerate(got):
                        per_side[i] += g
                    if len(sides) == 2:
                        ratios.append(statistics.median(got[0]) / statistics.median(got[1]))
                table[name] = ([statistics.median(g) * 1000 for g in per_side], ratios)
        finally:
            for proc in reversed(procs):
                proc.stop()
    print(f"driver CPU per request (median ms; {args.rounds} rounds x {args.requests} requests, ABBA)")
    print("| row | " + " | ".join(s.name for s in sides) + (" | HEAD / baseline (median, range) |" if len(sides) == 2 else " |"))
    print("|---" * (len(sides) + 1 + (len(sides) == 2)) + "|")
    for name, (ms, ratios) in table.items():
        cells = [f"{x:.2f}" for x in ms]
        if ratios:
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
