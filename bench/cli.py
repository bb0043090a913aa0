"""``render-service bench``: load-test render servers and compare them in one run.

Order of a run: check every URL is loopback (unless ``--allow-remote``) → start
``--spawn``ed servers → check every target answers → load the local tokenizer →
preflight each target (models, tokenizer parity, CPU meter) → per workload: build its
prompts (`Workload.prepare`), warm up every target, run the main measurement in ``--rounds`` interleaved rounds (ABBA
order, so slow drift of a shared machine hits every target alike), then the ``--sweep``
(each rate on every target before the next rate) → print the table → write
``results.json`` and the plots into ``--out``.

Exit codes: 0 measured; 1 a target answered no request successfully in some run; 2 bad
flags, unreachable target, or a spawned server that would not start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import logging
import sys
import time
from pathlib import Path

from .loadgen import Bounds, LoadSpec, run_phase
from .report import SCHEMA, comparison, run_record, table
from .stats import meets_slo, slo_capacity
from .targets import (SpawnedServer, Target, TargetError, check_reachable, check_url, post_json, preflight, spawn_args,
                      spawned_model)
from .tokens import TokenizerLoadError, load_tokenizer
from .workloads import WORKLOADS, Probe, Workload

PROGRESS_EVERY_S = 10.0     # progress line period when stderr is not a terminal
ROUND_BASE = 10**6          # session index base of round r: r * ROUND_BASE
SWEEP_BASE = 100 * 10**6    # sweep step s: SWEEP_BASE + s * ROUND_BASE
WARMUP_BASE = 999 * 10**6

DESCRIPTION = """\
Load-test one or more wire-compatible render servers (`render-service serve`, `vllm launch
render`) with the same workload, interleaved, and print their figures side by side with
ratios: req/s, p50/p90/p99 latency, errors by kind, server CPU per request, and with
--sweep/--slo-ms the highest rate that meets the SLO and what --target-rate needs.
Traffic goes to loopback addresses only, unless --allow-remote.

Exit codes: 0 measured; 1 a target answered nothing successfully in some run; 2 bad flags,
an unreachable target, or a spawned server that would not start.
"""

EPILOG = """\
examples:
  # ours (fast tokenizer) vs ours (HF tokenizer), 9k-token render and 1,600-token streamed tool call
  render-service bench render-long stream-derender --tokenizer ../shared/models/qwen3 \\
      --spawn="--tokenizer-backend fast" --spawn-baseline="--tokenizer-backend hf" --out bench/out
  # a running server against vLLM's render server (both on this machine)
  render-service bench render-long --target http://127.0.0.1:8000 --baseline http://127.0.0.1:8001 \\
      --tokenizer ../shared/models/qwen3 --model qwen3-8b
  # SLO capacity: p99 <= 50 ms, cores needed for 200 req/s
  render-service bench render-long --spawn --sweep 5,10,20,40 --slo-ms 50 --target-rate 200
"""


class UsageError(RuntimeError):
    """Flags that do not make sense together."""


def _rates(text: str) -> list[float]:
    try:
        rates = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rates: {text!r}") from None
    if not rates or rates[0] <= 0:
        raise argparse.ArgumentTypeError("rates must be positive")
    return rates


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bench`` subcommand (``set_defaults(func=run)``) to the top-level CLI."""
    p = subparsers.add_parser("bench", help="capacity bench for render servers (ours or vLLM's)",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="+", choices=sorted([*WORKLOADS, "regress"]), metavar="WORKLOAD",
                   help=f"one or more of: {', '.join(WORKLOADS)}; or `regress --baseline REF` alone (below)")
    g = p.add_argument_group("targets")
    g.add_argument("--target", metavar="URL", help="the server under test, e.g. http://127.0.0.1:8000")
    g.add_argument("--baseline", metavar="URL", action="append", default=[],
                   help="a server to compare with (repeatable); `vllm launch render MODEL --port 8001` works as is")
    g.add_argument("--spawn", metavar="FLAGS", nargs="?", const="",
                   help="start `render-service serve FLAGS` on a free loopback port as the target "
                        "(quote the flags: --spawn=\"--tokenizer-backend fast\")")
    g.add_argument("--spawn-baseline", metavar="FLAGS", nargs="?", const="", action="append", default=[],
                   help="start another `render-service serve FLAGS` as a baseline (repeatable)")
    g.add_argument("--target-pid", type=int, help="PID of the target server, for CPU seconds from /proc")
    g.add_argument("--baseline-pid", type=int, action="append", default=[],
                   help="PID of each --baseline, in order (else CPU comes from /metrics)")
    g.add_argument("--allow-remote", action="store_true",
                   help="allow non-loopback targets (only machines you are responsible for)")
    g = p.add_argument_group("load")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=_positive(int), help="closed loop: sessions in flight (default 4)")
    mode.add_argument("--request-rate", type=_positive(float), metavar="R",
                      help="open loop: Poisson session arrivals per second")
    g.add_argument("--sweep", type=_rates, metavar="R1,R2,...", help="open-loop rates to sweep (after the main run, "
                   "if --concurrency/--request-rate is given)")
    g.add_argument("--slo-ms", type=_positive(float), help="p99 latency objective for the sweep")
    g.add_argument("--target-rate", type=_positive(float), metavar="R", help="size for this rate (needs --slo-ms and --sweep)")
    g.add_argument("--duration", type=_positive(float), metavar="S",
                   help="seconds per target per measurement (split over --rounds; default 10, stream-derender "
                        "long enough for every session to finish a stream: 40 for 1,600 call tokens)")
    g.add_argument("--max-requests", type=_positive(int), metavar="N", help="requests per target per measurement")
    g.add_argument("--warmup", type=int, default=5, metavar="N", help="warm-up requests per target, not measured (default 5)")
    g.add_argument("--rounds", type=_positive(int), help="interleaved rounds of the main run (default 2; regress 4)")
    g.add_argument("--timeout", type=_positive(float), default=60.0, metavar="S", help="per-request timeout (default 60)")
    g.add_argument("--seed", type=int, default=0, help="workload and arrival seed (default 0)")
    g = p.add_argument_group("workloads")
    g.add_argument("--tokenizer", metavar="DIR", help="HF tokenizer dir matching the servers' model "
                   "(default: the spawned model dir, else the embedded SmolLM2)")
    g.add_argument("--model", metavar="NAME", help="`model` to send (default: none, which servers accept)")
    g.add_argument("--prompt-tokens", type=_positive(int), help="render-long: rendered prompt length (default 9000); "
                   "four-hop: user message length (default 512)")
    g.add_argument("--turns", type=_positive(int), help="agent-loop / agent-trace: turns per conversation (default 10 / 41)")
    g.add_argument("--turn-tokens", type=_positive(int), help="agent-loop / agent-trace: tokens per tool result "
                   "(default 600 / 3300)")
    g.add_argument("--call-tokens", type=_positive(int), help="tool-call length in tokens "
                   "(stream-derender default 1600, derender 400)")
    g.add_argument("--max-tokens", type=_positive(int), default=64, help="four-hop: max_tokens (default 64)")
    g.add_argument("--stream", action="store_true", help="four-hop: stream the chat completions")
    g.add_argument("--tools", action="store_true", help="four-hop: bring the coding-agent tools (the driver needs "
                   "--tool-call-parser and --enable-auto-tool-choice)")
    g = p.add_argument_group("regress: `render-service bench regress --baseline REF` (HEAD's server CPU per "
                             "request against REF's; bench/regress.py)")
    g.add_argument("--head", metavar="REF", help="the version under test (default: this working tree)")
    g.add_argument("--only", metavar="W1,W2", help="regress workloads: render-short, render-9k, agent-trace, "
                   "stream-chunk, render-mm, render-mm-repeat (default all; the mm ones on "
                   "../shared/models/qwen2.5-vl-instruct); --tokenizer is the text workloads' model (default ../shared/models/qwen3), "
                   "--spawn / --spawn-baseline add serve flags (both / the baseline)")
    g.add_argument("--scale", type=_positive(float), default=1.0, help="regress: sessions per round x this (default 1)")
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="DIR", help="write DIR/results.json and PNG plots")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the bench; returns the exit code (see the module docstring)."""
    for noisy in ("httpx", "httpcore", "matplotlib"):  # one log line per request would drown the table
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if "regress" in args.workloads:
            if args.workloads != ["regress"]:
                raise UsageError("regress runs alone: `render-service bench regress --baseline REF [--only W1,W2]`")
            from .regress import run_regress

            return run_regress(args)
        args.rounds = args.rounds or 2
        return _run(args)
    except (UsageError, TargetError, TokenizerLoadError) as exc:
        print(f"render-service bench: error: {exc}", file=sys.stderr)
        return 2


def _warn(message: str) -> None:
    print(f"render-service bench: warning: {message}", file=sys.stderr)


def _check_flags(args: argparse.Namespace, workloads: list[Workload]) -> list[str]:
    if (args.target is None) == (args.spawn is None):
        raise UsageError("give the server under test with --target URL or --spawn [FLAGS] (one of them)")
    if len(args.baseline_pid) > len(args.baseline):
        raise UsageError("more --baseline-pid than --baseline")
    if args.target_rate and not (args.slo_ms and args.sweep):
        raise UsageError("--target-rate needs --slo-ms and --sweep")
    if args.slo_ms and not args.sweep:
        raise UsageError("--slo-ms needs --sweep R1,R2,... (the capacity is the highest rate that meets it)")
    if (args.spawn is not None or args.spawn_baseline) and any(w.target_kind != "render" for w in workloads):
        raise UsageError("four-hop runs against a driver: give --target URL of a running `render-service drive` "
                         "(--spawn starts a render server only)")
    if args.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    if args.out and importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--out writes PNG plots with matplotlib, which is not installed: "
                         "pip install 'render-service[bench]' (checked before measuring, so no run is lost)")
    urls = [args.target] if args.target else []
    return [check_url(u, args.allow_remote) for u in urls + args.baseline]


def _run(args: argparse.Namespace) -> int:
    workloads = [WORKLOADS[name].from_args(args) for name in dict.fromkeys(args.workloads)]
    urls = _check_flags(args, workloads)
    tok_dir = args.tokenizer or (spawned_model(args.spawn) if args.spawn else None)
    if tok_dir is not None and not Path(tok_dir).is_dir() and args.tokenizer is None:
        tok_dir = None  # a spawned GGUF or hub id: the bench cannot read its tokenizer; embedded default
    spawned: list[SpawnedServer] = []
    try:
        targets = _targets(args, urls, workloads, spawned)
        for target in targets:
            check_reachable(target)
        tokenizer = load_tokenizer(tok_dir)
        for target in targets:
            for message in preflight(target, tokenizer):
                _warn(message)
            target.attach_cpu()
        results = [_bench_workload(args, w, targets, tokenizer) for w in workloads]
    finally:
        for server in spawned:
            notice = server.death_notice()
            if notice:  # its requests failed as connection errors; say why
                _warn(notice)
            server.stop()
    doc = {"schema": SCHEMA, "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "argv": sys.argv, "tokenizer": tokenizer.source,
           "bounds": {"duration_s": args.duration, "max_requests": args.max_requests, "warmup": args.warmup,
                      "rounds": args.rounds, "timeout_s": args.timeout},
           "workloads": results}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))  # the figures first, safe
        from .plots import write_plots

        for result in results:
            result["plots"] = write_plots(result, out, args.slo_ms)
        (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
        print(f"wrote {out / 'results.json'} and {sum(len(r['plots']) for r in results)} plots", flush=True)
    dead = [r["target"] for res in results for r in res.get("runs") or [] if r["ok"] == 0]
    if dead:
        _warn(f"no successful request in a run of: {', '.join(dict.fromkeys(dead))}")
        return 1
    return 0


def _targets(args, urls: list[str], workloads: list[Workload], spawned: list[SpawnedServer]) -> list[Target]:
    context = max(max(w.context_tokens() for w in workloads), 8192)
    parsers = any(w.needs_parsers for w in workloads)
    specs: list[tuple[str, str | None, int | None, str | None]] = []  # name, url, pid, spawn flags
    if args.spawn is not None:
        specs.append(("target", None, None, args.spawn))
    else:
        specs.append(("target", urls[0], args.target_pid, None))
    baseline_urls = urls[1:] if args.spawn is None else urls
    for i, url in enumerate(baseline_urls):
        specs.append((None, url, args.baseline_pid[i] if i < len(args.baseline_pid) else None, None))
    specs += [(None, None, None, flags) for flags in args.spawn_baseline]
    targets, starting = [], []
    for i, (name, url, pid, flags) in enumerate(specs):
        name = name or ("baseline" if i == 1 else f"baseline-{i}")
        if flags is None:
            targets.append(Target(name, url, pid))
            continue
        server = SpawnedServer(spawn_args(flags, args.tokenizer, context, parsers))
        server.start()
        spawned.append(server)
        targets.append(Target(name, server.url, server.proc.pid, server.args))
        starting.append(server)
    for server in starting:  # started together, waited for together: the model loads overlap
        server.wait_ready()
    return targets


class _ProgressLines:
    """Progress for logs and CI (stderr not a terminal): one line every ``PROGRESS_EVERY_S``."""

    def __init__(self, desc: str, total: int | None) -> None:
        self.desc, self.total, self.n = desc, total, 0
        self.t0 = self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            of = f"/{self.total}" if self.total else ""
            print(f"render-service bench: {self.desc}: {self.n}{of} requests, {now - self.t0:.0f} s",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> "_ProgressLines":
        return self

    def __exit__(self, *exc) -> None:
        return None


def _progress(args, desc: str, total: int | None):
    """A tqdm bar on a terminal, periodic lines otherwise, nothing with ``--quiet``."""
    if args.quiet:
        return contextlib.nullcontext(None)
    if sys.stderr.isatty() and importlib.util.find_spec("tqdm") is not None:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="req", file=sys.stderr, leave=False, dynamic_ncols=True)
    return _ProgressLines(desc, total)


def _phase(args, target: Target, workload: Workload, load: LoadSpec, bounds: Bounds, base: int, desc: str):
    """One phase with CPU metering: (PhaseResult, server CPU seconds or None)."""
    cpu0 = target.cpu_seconds()
    with _progress(args, f"{workload.name} {target.name} {desc}", bounds.max_requests) as bar:
        result = asyncio.run(run_phase(target.url, workload, load, bounds, base, args.seed + base, bar))
    cpu1 = target.cpu_seconds()
    return result, (None if cpu0 is None or cpu1 is None else cpu1 - cpu0)


def _split(total: int | None, parts: int, i: int) -> int | None:
    return None if total is None else total // parts + (1 if i < total % parts else 0)


def _bench_workload(args, workload: Workload, targets: list[Target], tokenizer) -> dict:
    first = targets[0].url
    probe = Probe(tokenizer, args.model, lambda path, body: post_json(first, path, body), _warn)
    workload.prepare(probe)
    warm_rates = []  # calls/s one session got in the warm-up: how fast this box is right now
    if args.warmup:
        for t in targets:
            warm, _ = _phase(args, t, workload, LoadSpec(concurrency=1), Bounds(60.0, args.warmup, args.timeout),
                             WARMUP_BASE, "warm-up")
            if warm.ok == 0 and warm.issued:
                key, sample = next(iter(warm.error_samples.items()))
                _warn(f"{workload.name}: every warm-up request to {t.name} failed ({key}: {sample[:200]})")
            elif warm.ok and warm.elapsed > 0:
                warm_rates.append(warm.ok / warm.elapsed)
    main_load = None
    if args.request_rate is not None or args.concurrency is not None or not args.sweep:
        main_load = LoadSpec(rate=args.request_rate) if args.request_rate else LoadSpec(concurrency=args.concurrency or 4)
    sessions = (main_load.concurrency if main_load and main_load.concurrency else None) or 4
    duration = args.duration or workload.default_duration(min(warm_rates, default=None), sessions)
    result = {"workload": workload.name, "unit": workload.unit, "params": workload.params(), "duration_s": duration,
              "load": main_load.as_dict() if main_load else None,
              "targets": [t.describe() for t in targets], "runs": [], "comparison": {}, "sweep": [], "slo": None,
              "plots": []}
    if main_load is not None:
        phases = {t.name: [] for t in targets}
        cpu = {t.name: 0.0 for t in targets}
        for r in range(args.rounds):
            cap = _split(args.max_requests, args.rounds, r)
            if cap == 0:
                continue
            bounds = Bounds(duration / args.rounds, cap, args.timeout)
            for t in targets if r % 2 == 0 else targets[::-1]:
                ph, used = _phase(args, t, workload, main_load, bounds, r * ROUND_BASE, f"round {r + 1}/{args.rounds}")
                phases[t.name].append(ph)
                cpu[t.name] = None if used is None or cpu[t.name] is None else cpu[t.name] + used
        result["runs"] = [run_record(t.name, main_load, phases[t.name], cpu[t.name], workload) for t in targets]
        _warn_unfinished(workload, result["runs"])
        result["comparison"] = comparison(result["runs"])
    if args.sweep:
        result["sweep"] = _sweep(args, workload, targets, duration)
        if args.slo_ms:
            result["slo"] = {t.name: slo_capacity([_point(r) for r in result["sweep"] if r["target"] == t.name],
                                                  args.slo_ms, args.target_rate) for t in targets}
    print(table(result, workload) + "\n", flush=True)
    return result


def _warn_unfinished(workload: Workload, runs: list[dict]) -> None:
    """A run in which no session finished measured starts, not throughput: say so."""
    if workload.unit == "request":
        return
    for run in runs:
        sessions = run["sessions"]
        if sessions["started"] and not sessions["completed"]:
            _warn(f"{workload.name}: no {workload.unit} finished on {run['target']} within the run "
                  f"({sessions['started']} started, {sessions['cut']} cut at the bound), so '{workload.unit}s/s' "
                  f"counts starts only; raise --duration or --max-requests")


def _point(run: dict) -> dict:
    return {"rate": run["rate"], "p99_ms": run["latency"]["p99_ms"], "errors": run["error_total"],
            "cores_busy": run["cores_busy"]}


def _sweep(args, workload: Workload, targets: list[Target], duration: float) -> list[dict]:
    """Each rate on every target (alternating order); a target that misses the SLO at one
    rate is not driven at higher rates."""
    out, done = [], set()
    for s, rate in enumerate(args.sweep):
        load = LoadSpec(rate=rate)
        order = targets if s % 2 == 0 else targets[::-1]
        for t in order:
            if t.name in done:
                continue
            ph, used = _phase(args, t, workload, load, Bounds(duration, args.max_requests, args.timeout),
                              SWEEP_BASE + s * ROUND_BASE, f"sweep {rate:g}/s")
            run = {**run_record(t.name, load, [ph], used, workload), "rate": rate}
            out.append(run)
            if args.slo_ms and not meets_slo(_point(run), args.slo_ms):
                done.add(t.name)
    return out
