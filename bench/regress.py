"""``render-service bench regress --baseline REF``: does HEAD cost more server CPU per request
than REF, on the workloads that matter, measured in one run?

Method. Both versions are spawned as ``render-service serve`` on loopback, one after the
other (so each start-up is timed alone: seconds to ``/health``), with the same model and
flags and serve's default logging (the access log is part of the cost). Then ``--rounds``
rounds; in each, every workload runs on both servers in lockstep: each request goes to one
server and then the same request to the other, the order alternating request by request
(ABBA), so load from elsewhere on a shared machine falls on both alike. Requests go one at a
time (no queueing in the figure);
the server's CPU is read before and after each request from the scheduler's per-thread
run time (`bench.targets.ThreadCpu`, nanoseconds: a 0.5 ms request is measured, not
rounded to a 10 ms clock tick). A round gives each server a CPU-per-request figure; the
table prints each side's median over rounds and the HEAD/baseline ratio as the median of
the per-round ratios with their range, so a box shared with other work moves both sides of
a ratio alike and the range says how far to trust it.

Workloads (``--only`` picks some):

- ``render-short``: a one-line chat question, ~50 rendered tokens (the fixed cost).
- ``render-9k``: `RenderLong` at 9,000 rendered tokens (fixed cost + tokenization).
- ``agent-trace``: `AgentTrace`, 41 turns growing to ~136k tokens, then cold renders of a
  last-turn prompt never seen; figures: the median CPU of the last five turns and of a cold
  render, their ratio (what incremental tokenization wins), and the whole conversation's CPU.
- ``stream-chunk``: one streamed derender (reasoning + 400-token hermes tool call), CPU per chunk.
- ``render-mm``: `RenderMM`, chat render with 1–4 fresh JPEG images (tensors in the answer), and
  ``render-mm-repeat``: the same images in every request (processor-cache hits). These run on a
  vision-language model (Qwen2.5-VL, ``../shared/models/qwen2.5-vl-instruct``): both versions
  are spawned a second time on it, after the text workloads' servers have stopped.

REF is a git ref of this repository (extracted with ``git archive`` into a temporary
directory, removed afterwards), a directory holding a source tree, or ``installed`` (the
``render_service`` installed in this Python). HEAD is this checkout's working tree
(uncommitted edits included) unless ``--head REF`` names another.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
import orjson

from .targets import SpawnedServer, TargetError, ThreadCpu
from .tokens import load_tokenizer
from .workloads import Probe, Workload
from .workloads.derender import StreamDerender
from .workloads.multimodal import RenderMM, RenderMMRepeat
from .workloads.render import AgentTrace, RenderLong, RenderShort

_REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = _REPO.parent / "shared" / "models" / "qwen3"
VISION_MODEL = _REPO.parent / "shared" / "models" / "qwen2.5-vl-instruct"
LATE_TURNS = 5
# serve's log lines (render_service.tokenizer.text_tokenizer) around a background fast-backend build
BUILDING = "while the fastokens backend is built"
SWITCHED = ("tokenizer backend fastokens (", "tokenizer backend falls back", "fast tokenizer backend failed")


@dataclass
class Spec:
    """One regress workload: how to build it, how many sessions per round, what to report."""

    name: str
    build: Callable[[], Workload]
    sessions: int
    figures: Callable[[list[tuple[float, dict]]], dict[str, float]]
    model: Path | None = None   # served model; None: --tokenizer (default DEFAULT_MODEL)


def _per_request(samples: list[tuple[float, dict]]) -> dict[str, float]:
    return {"CPU ms/request": 1e3 * sum(c for c, _ in samples) / len(samples)}


def _per_chunk(samples: list[tuple[float, dict]]) -> dict[str, float]:
    return {"CPU ms/chunk": 1e3 * sum(c for c, _ in samples) / len(samples)}


def _agent_figures(samples: list[tuple[float, dict]]) -> dict[str, float]:
    turns = [(t["turn"], c) for c, t in samples if not t.get("cold")]
    last = max(turn for turn, _ in turns)
    late = [c for turn, c in turns if turn > last - LATE_TURNS]
    cold = [c for c, t in samples if t.get("cold")]
    # medians: one collector pass (~20-30 ms, once a run) landing in one of a round's few late turns
    # or cold renders moved a mean by more than the change being measured; the conversation's
    # total below keeps every millisecond
    late_ms, cold_ms = 1e3 * statistics.median(late), 1e3 * statistics.median(cold)
    return {f"CPU ms/turn, turns {last - LATE_TURNS + 1}-{last}": late_ms, "CPU ms/cold render": cold_ms,
            "late turn / cold render": late_ms / cold_ms,
            "CPU ms/conversation": 1e3 * sum(c for _, c in turns)}


SPECS = {
    "render-short": Spec("render-short", RenderShort, 300, _per_request),
    "render-9k": Spec("render-9k", lambda: RenderLong(9000), 40, _per_request),
    "agent-trace": Spec("agent-trace", AgentTrace, 1, _agent_figures),
    "stream-chunk": Spec("stream-chunk", lambda: StreamDerender(400), 1, _per_chunk),
    "render-mm": Spec("render-mm", RenderMM, 12, _per_request, VISION_MODEL),
    "render-mm-repeat": Spec("render-mm-repeat", RenderMMRepeat, 12, _per_request, VISION_MODEL),
}
NOT_RATIOS = ("late turn / cold render",)  # already a ratio within one server


@dataclass
class Side:
    """One version under test: its source, its spawned server, its meter and client."""

    name: str
    label: str
    root: Path | str
    server: SpawnedServer | None = None
    cpu: ThreadCpu | None = None
    client: httpx.Client | None = None
    startup_s: float | None = None
    figures: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def start(self, args: list[str]) -> None:
        self.server = SpawnedServer(args, root=self.root, log_level=None)
        t0 = time.monotonic()
        self.server.start()
        self.server.wait_ready()
        self.startup_s = time.monotonic() - t0
        # A server may answer /health before its fast tokenizer backend takes over: measure after
        deadline = time.monotonic() + 300
        while (BUILDING in self.server.output() and not any(m in self.server.output() for m in SWITCHED)
               and time.monotonic() < deadline):
            time.sleep(0.2)
        self.cpu = ThreadCpu(self.server.proc.pid)
        self.client = httpx.Client(base_url=self.server.url, timeout=120, trust_env=False)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.stop()

    def post(self, path: str, body: dict) -> Any:
        r = self.client.post(path, content=orjson.dumps(body), headers={"content-type": "application/json"})
        if r.status_code != 200:
            raise TargetError(f"{self.name}: {path} answered {r.status_code}: {r.text[:300]}")
        return orjson.loads(r.content)

    def call(self, call) -> tuple[float, Any]:
        """POST one call; (server CPU seconds it took, parsed answer)."""
        before = self.cpu.sample()
        answer = self.post(call.path, call.body)
        used = ThreadCpu.delta(before, self.cpu.sample())
        if call.check is not None:
            call.check(answer)
        return used, answer


def run_lockstep(sides: list[Side], workload: Workload, first: int, sessions: int, flip: bool,
                 max_calls: int | None = None) -> list[list[tuple[float, dict]]]:
    """Run ``sessions`` sessions from index ``first`` on every side in lockstep: each call goes
    to one side and then the other (the order alternating call by call, starting reversed when
    ``flip``), so load from elsewhere on the machine falls on both alike. Each side drives its
    own session generator (answers such as ``stream_state`` differ between versions).
    Returns (CPU s, tag) per call, per side. ``max_calls`` cuts each session short (warm-up)."""
    out: list[list[tuple[float, dict]]] = [[] for _ in sides]
    k = int(flip)
    for index in range(first, first + sessions):
        gens = [workload.session(index) for _ in sides]
        answers: list[Any] = [None] * len(sides)
        calls = 0
        try:
            while max_calls is None or calls < max_calls:
                pending = [g.send(a) for g, a in zip(gens, answers)]
                order = range(len(sides)) if k % 2 == 0 else reversed(range(len(sides)))
                k += 1
                for i in order:
                    used, answers[i] = sides[i].call(pending[i])
                    out[i].append((used, dict(pending[i].tag)))
                calls += 1
        except StopIteration:
            pass
        finally:
            for g in gens:
                g.close()
    return out


def checkout(ref: str, tmp: Path) -> tuple[Path | str, str]:
    """The source root for REF and a label: ``installed`` → ``""`` (no PYTHONPATH), a
    directory → itself, else ``git archive REF`` of this repository into ``tmp``."""
    if ref == "installed":
        return "", "the installed render_service"
    if Path(ref).is_dir():
        return Path(ref).resolve(), f"the tree {ref}"
    try:
        sha = subprocess.run(["git", "-C", str(_REPO), "rev-parse", "--short", ref], check=True, capture_output=True,
                             text=True).stdout.strip()
    except subprocess.CalledProcessError as exc:
        raise TargetError(f"--baseline {ref}: not a git ref of {_REPO}, a directory, or 'installed' "
                          f"({exc.stderr.strip()})") from None
    root = tmp / sha
    root.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(_REPO), "archive", "--format=tar", ref], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(root)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise TargetError(f"git archive {ref} failed")
    return root, f"{ref} ({sha})"


def _summary(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def report(sides: list[Side], specs: list[Spec], rounds: int) -> tuple[str, dict]:
    """The table (HEAD first, baseline second) and the same figures as a JSON-able dict."""
    head, base = sides
    lines = [f"== bench regress: head = {head.label}, baseline = {base.label}; {rounds} rounds interleaved, "
             f"one request at a time; server CPU from {head.cpu.source}"]
    header = ("workload", "figure", "head", "baseline", "head/baseline median [range]")
    rows = [("start-up", "s to /health", f"{head.startup_s:.2f}", f"{base.startup_s:.2f}",
             f"{head.startup_s / base.startup_s:.2f}")]
    doc: dict = {"head": head.label, "baseline": base.label, "rounds": rounds,
                 "startup_s": {"head": head.startup_s, "baseline": base.startup_s}, "workloads": {}}
    for spec in specs:
        for figure, head_values in head.figures[spec.name].items():
            base_values = base.figures[spec.name][figure]
            h, b = _summary(head_values)[0], _summary(base_values)[0]
            entry = {"head": head_values, "baseline": base_values}
            if figure in NOT_RATIOS:
                cell = ""
            else:
                ratios = [x / y for x, y in zip(head_values, base_values) if y]
                med, lo, hi = _summary(ratios)
                entry["ratios"] = ratios
                cell = f"{med:.2f} [{lo:.2f}-{hi:.2f}]"
            doc["workloads"].setdefault(spec.name, {})[figure] = entry
            rows.append((spec.name, figure, f"{h:.3f}", f"{b:.3f}", cell))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(r)))
    return "\n".join(lines), doc


def _serve_args(model: str, vision: bool, args: argparse.Namespace) -> list[str]:
    if vision:   # the VL model's own length and no text parsers
        return [model, *shlex.split(args.spawn or "")]
    return [model, "--max-model-len", "262144", "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
            "--enable-auto-tool-choice", *shlex.split(args.spawn or "")]


def run_regress(args: argparse.Namespace) -> int:
    """``bench regress``: see the module docstring. Returns the exit code."""
    names = args.only.split(",") if args.only else list(SPECS)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        raise TargetError(f"--only: unknown regress workload(s) {', '.join(unknown)} (choose from {', '.join(SPECS)})")
    if len(args.baseline) != 1:
        raise TargetError("bench regress needs exactly one --baseline REF (a git ref, a directory, or 'installed')")
    specs = [SPECS[n] for n in names]
    text_model = args.tokenizer or str(DEFAULT_MODEL)
    groups: dict[str, list[Spec]] = {}   # served model -> its workloads; one pair of servers per model
    for spec in specs:
        if spec.model is not None and not spec.model.is_dir():
            raise TargetError(f"{spec.name} needs {spec.model} (not present)")
        groups.setdefault(str(spec.model) if spec.model is not None else text_model, []).append(spec)
    rounds = args.rounds or 4
    scale = args.scale
    with tempfile.TemporaryDirectory(prefix="bench-regress-") as tmp:
        head_root, head_label = checkout(args.head, Path(tmp)) if args.head else (_REPO, f"working tree of {_REPO}")
        base_root, base_label = checkout(args.baseline[0], Path(tmp))
        sides = [Side("head", head_label, head_root), Side("baseline", base_label, base_root)]
        for model, group in groups.items():
            serve = _serve_args(model, group[0].model is not None, args)
            pair = [Side(s.name, s.label, s.root, figures=s.figures) for s in sides]
            try:
                pair[1].start(serve + shlex.split(" ".join(args.spawn_baseline)))
                pair[0].start(serve)
                for side, started in zip(sides, pair):   # the first pair's start-up is the one reported
                    side.startup_s = side.startup_s if side.startup_s is not None else started.startup_s
                    side.cpu = side.cpu or started.cpu
                tokenizer = load_tokenizer(model)
                workloads = {}
                for spec in group:
                    workload = workloads[spec.name] = spec.build()
                    workload.prepare(Probe(tokenizer, None, lambda p, b: pair[0].post(p, b), print))
                    run_lockstep(pair, workload, 10**9 - 1, 1, False, max_calls=10)  # warm-up, not measured
                for r in range(rounds):
                    for spec in group:
                        n = max(1, round(spec.sessions * scale))
                        per_side = run_lockstep(pair, workloads[spec.name], r * 10**6, n, flip=r % 2 == 1)
                        for side, samples in zip(pair, per_side):
                            for figure, value in spec.figures(samples).items():
                                side.figures.setdefault(spec.name, {}).setdefault(figure, []).append(value)
                    if not args.quiet:
                        print(f"bench regress: {Path(model).name}: round {r + 1}/{rounds} done", flush=True)
            finally:
                for side in pair:
                    side.stop()
    text, doc = report(sides, specs, rounds)
    print(text, flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "regress.json").write_text(json.dumps(doc, indent=1))
        print(f"wrote {out / 'regress.json'}")
    return 0
