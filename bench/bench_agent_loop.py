"""``agent-loop`` through the four-hop driver: TTFT per turn with bidirectional KV reuse on and off.

    python -m bench.bench_agent_loop [--turns 8] [--conversations 3] [--tool-chars 700] [--edit-turn N]
                                     [--json out.json]

Starts two reference engines (``--role prefill`` and ``--role decode``, SmolLM2-135M on
llama.cpp, one thread each) and two ``render-service drive`` processes in front of the
same engines, one with ``--kv-reuse`` and one without. Each conversation is a coding
agent's loop: a system prompt and a task, then per turn a tool result (``--tool-chars`` of
real Python source) and the model's next step; with ``--edit-turn N`` the client rewrites
its first message at turn N (the continuity figure shows the break, and prefill pulls only
up to it). The two drivers get the same conversations,
interleaved turn by turn, greedy, streamed, with a ``conversation_id`` each.

Per turn it reports: TTFT (request sent → first streamed chunk with content) median over
conversations with reuse off and on; prompt tokens; tokens prefill pulled from decode's
retained KV vs computed (prefill's own metrics, from the driver's ``x-prefill-*`` headers);
the continuity figure (common prefix / held tokens, and the reason when it ends early).
Both drivers get the same prompt at every turn (the conversation continues from the
reuse-on answer); the report counts the turns where the two greedy answers differ, which
can happen without any stale KV: llama.cpp on CPU is not batch-invariant, and with reuse the
history's KV was computed token by token by decode instead of in one prefill batch (the
tests check reuse against one engine that carried the conversation in its own cache, and
that KV past a divergence is never used). Timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from reference_engine.testing import EngineProcess, free_port, wait_healthy

from . import corpus

_REPO = Path(__file__).resolve().parents[1]
TASK = ("You are fixing a failing test in a Python repository. After each tool result, say in one short "
        "sentence what you will do next.")


class Driver:
    """``render-service drive`` in a subprocess on a free loopback port."""

    def __init__(self, prefill: str, decode: str, reuse: bool) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "render_service.serve.cli", "drive", "--prefill", prefill, "--decode", decode,
                     "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
                     *(["--kv-reuse"] if reuse else [])]
        self._log = tempfile.TemporaryFile()

    def __enter__(self) -> "Driver":
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(self.args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        if not wait_healthy(self.proc, self.url, 120):
            self._log.seek(0)
            self.proc.kill()
            raise RuntimeError(f"driver did not start: {self._log.read().decode(errors='replace')[-1500:]}")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def one_turn(client: httpx.Client, url: str, messages: list[dict], conversation: str, max_tokens: int) -> dict:
    """Stream one turn; TTFT, the answer and the driver's reuse headers."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "conversation_id": conversation}
    start = time.perf_counter()
    ttft, text = None, []
    with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url} answered {r.status_code}: {r.read()[:300]!r}")
        headers = r.headers
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: "):])
            for c in chunk.get("choices") or []:
                delta = (c.get("delta") or {}).get("content")
                if delta:
                    ttft = ttft if ttft is not None else time.perf_counter() - start
                    text.append(delta)
    return {"ttft_s": ttft if ttft is not None else time.perf_counter() - start, "text": "".join(text),
            "reuse": headers.get("x-kv-reuse"), "continuity": headers.get("x-continuity"),
            "pulled": _int(headers.get("x-prefill-pulled-tokens")),
            "computed": _int(headers.get("x-prefill-computed-tokens"))}


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "None") else None


def _continuity(value: str | None) -> tuple[float | None, str | None]:
    if not value:
        return None, None
    fields = dict(part.strip().split("=", 1) for part in value.split(";"))
    held = int(fields["held"])
    return (int(fields["common"]) / held if held else 1.0), fields.get("reason")


def run(args: argparse.Namespace) -> dict:
    engine_args = ("--n-threads", "1", "--n-ctx", str(args.n_ctx), "--kv-lease-duration", "300")
    turns: dict[str, list[list[dict]]] = {"off": [], "on": []}
    with EngineProcess(*engine_args, role="prefill") as p, EngineProcess(*engine_args, role="decode") as d, \
            Driver(p.url, d.url, reuse=False) as off, Driver(p.url, d.url, reuse=True) as on, \
            httpx.Client(timeout=600) as client:
        drivers = {"off": off, "on": on}
        for c in range(args.conversations):
            history = [{"role": "system", "content": TASK},
                       {"role": "user", "content": f"The test test_case_{c} fails with an AssertionError. Start."}]
            rows = {m: [] for m in drivers}
            for t in range(args.turns):
                if args.edit_turn == t + 1:  # the client rewrites the task (history compaction, a correction)
                    history = [history[0], {**history[1], "content": history[1]["content"] + " It is flaky."},
                               *history[2:]]
                order = ("on", "off") if t % 2 else ("off", "on")  # interleaved: both see the same machine state
                for mode in order:
                    out = one_turn(client, drivers[mode].url, history, f"bench-{os.getpid()}-{mode}-{c}",
                                   args.max_tokens)
                    rows[mode].append(out)
                # Both drivers continue from the reuse-on answer, so every turn's prompt is the same
                # for both (greedy answers may differ in the last bits: llama.cpp is not batch-invariant).
                tool = corpus.excerpt(corpus.offset_for(1000 * c + t), args.tool_chars)
                history = history + [{"role": "assistant", "content": rows["on"][-1]["text"]},
                                     {"role": "user", "content": f"Tool result (read_file):\n{tool}"}]
                print(f"conversation {c + 1}/{args.conversations} turn {t + 1}: TTFT off "
                      f"{rows['off'][-1]['ttft_s'] * 1000:.0f} ms, on {rows['on'][-1]['ttft_s'] * 1000:.0f} ms "
                      f"(pulled {rows['on'][-1]['pulled']}, computed {rows['on'][-1]['computed']})",
                      file=sys.stderr, flush=True)
            for mode in drivers:
                turns[mode].append(rows[mode])
    return summarise(turns, args)


def summarise(turns: dict[str, list[list[dict]]], args: argparse.Namespace) -> dict:
    per_turn = []
    for t in range(args.turns):
        off = [conv[t] for conv in turns["off"]]
        on = [conv[t] for conv in turns["on"]]
        ratios = [_continuity(r["continuity"]) for r in on]
        reasons = sorted({str(reason) for _, reason in ratios if reason is not None})
        per_turn.append({
            "turn": t + 1,
            "ttft_off_ms": statistics.median(r["ttft_s"] for r in off) * 1000,
            "ttft_on_ms": statistics.median(r["ttft_s"] for r in on) * 1000,
            "prompt_tokens": statistics.median((r["pulled"] or 0) + (r["computed"] or 0) for r in on),
            "pulled_tokens": statistics.median(r["pulled"] or 0 for r in on),
            "computed_tokens": statistics.median(r["computed"] or 0 for r in on),
            "reuse": sorted({str(r["reuse"]) for r in on}),
            "continuity": (statistics.median(x for x, _ in ratios if x is not None)
                           if any(x is not None for x, _ in ratios) else None),
            "continuity_reasons": reasons,
        })
    differ = sum(a["text"] != b["text"] for ca, cb in zip(turns["off"], turns["on"]) for a, b in zip(ca, cb))
    return {"workload": "agent-loop", "target": "render-service drive (reference engines, SmolLM2-135M)",
            "params": {"turns": args.turns, "conversations": args.conversations, "tool_chars": args.tool_chars,
                       "max_tokens": args.max_tokens, "edit_turn": args.edit_turn},
            "turns_with_different_answers": differ, "turns": per_turn}


def table(result: dict) -> str:
    lines = ["turn  TTFT off ms  TTFT on ms  speed-up  prompt  pulled  computed  continuity  reuse / reason",
             "----  -----------  ----------  --------  ------  ------  --------  ----------  --------------"]
    for r in result["turns"]:
        cont = "-" if r["continuity"] is None else f"{r['continuity']:.3f}"
        why = ",".join(r["reuse"]) + (f" / {','.join(r['continuity_reasons'])}" if r["continuity_reasons"] else "")
        lines.append(f"{r['turn']:>4}  {r['ttft_off_ms']:>11.0f}  {r['ttft_on_ms']:>10.0f}  "
                     f"{r['ttft_off_ms'] / r['ttft_on_ms']:>7.2f}x  {r['prompt_tokens']:>6.0f}  "
                     f"{r['pulled_tokens']:>6.0f}  {r['computed_tokens']:>8.0f}  {cont:>10}  {why}")
    lines.append(f"turns whose greedy answer differed with and without reuse: {result['turns_with_different_answers']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--conversations", type=int, default=3)
    ap.add_argument("--tool-chars", type=int, default=700, help="characters of source per tool result (default 700)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--n-ctx", type=int, default=4096, help="engine context length (default 4096)")
    ap.add_argument("--edit-turn", type=int, default=None, metavar="N",
                    help="at turn N the client edits its first message: continuity breaks there, and prefill "
                         "may pull only up to the edit")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args(argv)
    result = run(args)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
