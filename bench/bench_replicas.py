"""K concurrent agent conversations through HAProxy to N render replicas, against one replica.

    python -m bench.bench_replicas [--replicas 4] [--conversations 16] [--turns 32] [--turn-tokens 2500]
                                   [--rounds 3] [--tokenizer DIR] [--no-round-robin] [--config FILE]
                                   [--balance-factor N] [--json out.json]

The conversations are the ``agent-loop`` workload's (a coding agent's system prompt and a
ticket, then per turn a tool call and ~``--turn-tokens`` of real code as its result), sent
with **no session header**, each conversation's turns one after another and the
conversations all at once. The same traffic is sent in turn to:

- ``one``: a single ``render-service serve`` (the reuse an agent loop gets when every turn
  reaches the replica that rendered the turn before);
- ``hashed``: ``--replicas`` fresh replicas behind ``deploy/haproxy/haproxy.cfg`` as shipped
  (consistent hashing with bounded load on the conversation's opening);
- ``round-robin``: the same config with ``balance roundrobin`` (what a plain Service does),
  unless ``--no-round-robin``.

Per phase: total server CPU (``/proc/<pid>/task/*/schedstat`` of every replica, the exact
run time) and its ratio to ``one``'s; per-replica CPU max/mean; prompt tokens reused and
tokenized anew (each replica's ``render_service_prompt_tokens_{reused,tokenized}_total``);
how many conversations stayed on one replica (the proxy's ``X-Render-Replica``); and whether
every answer's token ids equal ``one``'s. "busy" subtracts what the replicas spend idle (measured
for 3 s after the phase, times its wall time): the cost of running N processes rather than of
routing. Each phase's servers are started fresh, warmed with one short render and left to
finish their background start-up work before it is measured, and stopped after it, so at most
``--replicas`` servers run at once; ``--rounds`` repeat every phase in ABBA order and the
figures are medians [ranges] of the per-round ratios (phases run one after another, so a
shared machine's load moves the ratios: compare within rounds). HAProxy must be installed
(``apt-get install -y haproxy``). Figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .targets import SpawnedServer, ThreadCpu
from .workloads.render import RENDER_PATH, AgentLoop, _chat
from . import corpus

_REPO = Path(__file__).resolve().parents[1]
CONFIG = _REPO / "deploy" / "haproxy" / "haproxy.cfg"
PARSER_FLAGS = ["--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice"]
"""The agent's requests carry tools (``tool_choice`` auto): the serve flags a Qwen3 tier runs with."""
IDLE_S = 3.0
SERVER_LINE = re.compile(r"^\s*server r\d .*\n", re.M)


def proxy_config(replicas: int, round_robin: bool, balance_factor: int | None = None, config: Path = CONFIG) -> str:
    """The shipped config with one ``server`` line per replica (ports ``${R1}`` …), and
    ``balance roundrobin`` instead of the hash when asked, or another ``hash-balance-factor``."""
    text = config.read_text()
    lines = "".join(f'    server r{i} 127.0.0.1:"${{R{i}}}"\n' for i in range(1, replicas + 1))
    first = SERVER_LINE.search(text).start()
    text = SERVER_LINE.sub("", text)
    text = text[:first] + lines + text[first:]
    if round_robin:  # what a plain Service does: no hash, no stickiness
        text = text.replace("    balance hash var(txn.key)\n", "    balance roundrobin\n")
        text = re.sub(r"^\s*stick on .*\n", "", text, flags=re.M)
    if balance_factor is not None:
        text = re.sub(r"hash-balance-factor \d+", f"hash-balance-factor {balance_factor}", text)
    return text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def haproxy(config: str, ports: list[int], binary: str | None = None):
    """HAProxy (``binary``, default the one installed) running ``config`` in the foreground, the
    replicas at ``ports`` as ``${R1}`` …; yields its URL. Exits when it will not start."""
    binary = binary or shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        sys.exit("bench_replicas: haproxy is not installed (apt-get install -y haproxy)")
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(config)
    env = {**os.environ, "PROXY_PORT": str(port), **{f"R{i + 1}": str(p) for i, p in enumerate(ports)}}
    proc = subprocess.Popen([binary, "-db", "-f", f.name], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                sys.exit(f"bench_replicas: haproxy exited: {proc.stderr.read().decode()[-800:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                sys.exit("bench_replicas: haproxy did not come up")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.unlink(f.name)


@contextlib.contextmanager
def replicas(n: int, model: str):
    servers = [SpawnedServer([model, *PARSER_FLAGS]) for _ in range(n)]
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_ready()
        yield servers
    finally:
        for s in servers:
            s.stop()


def settle(servers: list[SpawnedServer], model: str) -> None:
    """Warm every replica with a short render of its own (template, first-prompt costs) and wait
    until none is busy (the background fastokens build starts after the first healthy probe and
    takes seconds of CPU): start-up is not what a phase measures."""
    for s in servers:
        body = _chat([{"role": "user", "content": f"warm-up {s.port}"}], model)
        httpx.post(s.url + RENDER_PATH, json=body, timeout=120).raise_for_status()
    meters = [ThreadCpu(s.proc.pid) for s in servers]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        before = [m.sample() for m in meters]
        time.sleep(1.0)
        if all(ThreadCpu.delta(b, m.sample()) < 0.02 for b, m in zip(before, meters)):
            return


def reuse(url: str) -> tuple[float, float]:
    """``(reused, tokenized)`` prompt tokens so far, from ``url``'s /metrics."""
    values = {"reused": 0.0, "tokenized": 0.0}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        for name in values:
            if line.startswith(f"render_service_prompt_tokens_{name}_total "):
                values[name] = float(line.split()[1])
    return values["reused"], values["tokenized"]


async def replay(url: str, workload: AgentLoop, conversations: int) -> dict:
    """Every conversation at once, each one's turns in order; ``{(conversation, turn): (ids, replica)}``."""
    out: dict = {}
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=conversations)) as c:
        async def one(index: int) -> None:
            for turn, messages in workload.conversation(index):
                reply = await c.post(RENDER_PATH, json=_chat(messages, workload.model, corpus.TOOLS))
                reply.raise_for_status()
                out[index, turn] = (reply.json()["token_ids"], reply.headers.get("x-render-replica"))
        await asyncio.gather(*(one(i) for i in range(conversations)))
    return out


def phase(name: str, servers: list[SpawnedServer], url: str, workload: AgentLoop, conversations: int) -> dict:
    settle(servers, workload.model)
    counts = [reuse(s.url) for s in servers]  # (a scrape costs CPU: outside the measured span)
    meters = [ThreadCpu(s.proc.pid) for s in servers]
    before = [m.sample() for m in meters]
    start = time.monotonic()
    answers = asyncio.run(replay(url, workload, conversations))
    wall = time.monotonic() - start
    cpu = [ThreadCpu.delta(b, m.sample()) for b, m in zip(before, meters)]
    idle_before = [m.sample() for m in meters]
    time.sleep(IDLE_S)  # what the replicas spend doing nothing: a cost of running N processes, not of routing
    idle = sum(ThreadCpu.delta(b, m.sample()) for b, m in zip(idle_before, meters)) / IDLE_S
    grown = [tuple(a - b for a, b in zip(reuse(s.url), c)) for s, c in zip(servers, counts)]
    reused, tokenized = sum(g[0] for g in grown), sum(g[1] for g in grown)
    places = {}
    for (index, _), (_, replica) in answers.items():
        places.setdefault(index, set()).add(replica)
    return {"phase": name, "replicas": len(servers), "wall_s": round(wall, 2), "cpu_s": round(sum(cpu), 3),
            "cpu_s_per_replica": [round(c, 3) for c in cpu],
            "max_over_mean": round(max(cpu) / statistics.mean(cpu), 3),
            "idle_cpu_s_per_s": round(idle, 4), "busy_cpu_s": round(sum(cpu) - idle * wall, 3),
            "reused_tokens": int(reused), "tokenized_tokens": int(tokenized),
            "reuse_share": round(reused / max(1.0, reused + tokenized), 3),
            "conversations_on_one_replica": sum(len(p) == 1 for p in places.values()),
            "_answers": {k: v[0] for k, v in answers.items()}}


def run_round(args: argparse.Namespace, workload: AgentLoop, flip: bool) -> list[dict]:
    """One round: every phase on fresh servers (in reverse order when ``flip``); results in phase order."""
    phases = [("one", None), ("hashed", False)] + ([] if args.no_round_robin else [("round-robin", True)])
    out = {}
    for name, round_robin in (reversed(phases) if flip else phases):
        n = 1 if round_robin is None else args.replicas
        with replicas(n, args.tokenizer) as servers:
            workload.model = workload.model or httpx.get(servers[0].url + "/v1/models").json()["data"][0]["id"]
            if round_robin is None:
                out[name] = phase(name, servers, servers[0].url, workload, args.conversations)
                continue
            config = proxy_config(args.replicas, round_robin, args.balance_factor, args.config)
            with haproxy(config, [s.port for s in servers]) as url:
                out[name] = phase(name, servers, url, workload, args.conversations)
    reference = out["one"]["_answers"]
    for r in out.values():
        r["cpu_vs_one"] = round(r["cpu_s"] / out["one"]["cpu_s"], 3)
        r["busy_vs_one"] = round(r["busy_cpu_s"] / out["one"]["busy_cpu_s"], 3)
        r["token_identical"] = r.pop("_answers") == reference
    return [out[name] for name, _ in phases]


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=32)
    ap.add_argument("--turn-tokens", type=int, default=2500)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every phase, in ABBA order (default 3)")
    ap.add_argument("--tokenizer", default=str(_REPO.parent / "shared" / "models" / "qwen3"))
    ap.add_argument("--no-round-robin", action="store_true", help="skip the round-robin phase")
    ap.add_argument("--config", type=Path, default=CONFIG, help="the HAProxy config (default the shipped one)")
    ap.add_argument("--balance-factor", type=int, help="hash-balance-factor instead of the shipped one (0: unbounded)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    workload = AgentLoop(args.turns, args.turn_tokens, args.seed)
    rounds = [run_round(args, workload, flip=bool(k % 2)) for k in range(args.rounds)]
    print(f"{args.conversations} concurrent conversations x {args.turns} turns (~{args.turn_tokens} tokens a turn), "
          f"no session header; model {args.tokenizer}; {args.rounds} rounds, median [range]")
    print(f"{'phase':<12} {'replicas':>8} {'CPU vs one':>18} {'busy CPU vs one':>18} {'CPU max/mean':>18} "
          f"{'reuse':>6} {'on one':>7} {'identical':>9}")
    for i, first in enumerate(rounds[0]):
        rs = [r[i] for r in rounds]
        print(f"{first['phase']:<12} {first['replicas']:>8} {_median_range([r['cpu_vs_one'] for r in rs]):>18} "
              f"{_median_range([r['busy_vs_one'] for r in rs]):>18} {_median_range([r['max_over_mean'] for r in rs]):>18} "
              f"{statistics.median(r['reuse_share'] for r in rs):>6.2f} "
              f"{min(r['conversations_on_one_replica'] for r in rs):>7} {str(all(r['token_identical'] for r in rs)):>9}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rounds}, indent=2, default=str))
    return 0 if all(r["token_identical"] for rs in rounds for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
