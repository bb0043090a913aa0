"""Reports: one run's record (a results.json entry) and the stdout table.

``results.json`` (schema ``render-service-bench/1``)::

    {"schema", "created", "argv", "tokenizer", "bounds": {duration_s, max_requests, warmup, rounds, timeout_s},
     "workloads": [{                           # bounds.duration_s: --duration, null when each workload's default
        "workload", "unit", "params", "duration_s", "load", "targets": [{name, url, pid, spawned, cpu_source, …}],
        "runs":  [RUN, …],                     # one per target (rounds merged), absent with --sweep only
        "comparison": {baseline name: {metric: target ÷ baseline}},
        "sweep": [RUN + {"rate"}, …],          # one per (rate, target) that ran
        "slo": {target name: stats.slo_capacity(…)} | null,
        "plots": [file names]}]}

    RUN = {"target", "load", "rounds", "issued", "ok", "error_total", "errors": {key: count},
           "error_samples": {key: first body}, "sessions": {started, completed, failed, cut},
           "elapsed_s", "req_per_s", "sessions_per_s", "latency": stats.latency_summary,
           "server_cpu_s", "cpu_ms_per_req", "cores_busy", "client_cpu_s", "client_cores_busy",
           "client_send_lag_p99_ms" (open loop: how late the client sent), "extra": workload figures}

``req_per_s`` counts successful requests; ``issued == ok + error_total`` always.
"""

from __future__ import annotations

from .loadgen import LoadSpec, PhaseResult
from .stats import latency_summary, percentile, ratio
from .workloads import Workload

SCHEMA = "render-service-bench/1"
COMPARED = ("req_per_s", "p50_ms", "p90_ms", "p99_ms", "cpu_ms_per_req")


def run_record(target: str, load: LoadSpec, phases: list[PhaseResult], cpu_s: float | None,
               workload: Workload) -> dict:
    """Merge the phases (rounds) of one target at one load into a RUN dict."""
    merged = PhaseResult()
    for ph in phases:
        merged.issued += ph.issued
        merged.ok += ph.ok
        merged.errors.update(ph.errors)
        for key, sample in ph.error_samples.items():
            merged.error_samples.setdefault(key, sample)
        merged.samples.extend(ph.samples)
        merged.sessions_started += ph.sessions_started
        merged.sessions_completed += ph.sessions_completed
        merged.sessions_failed += ph.sessions_failed
        merged.sessions_cut += ph.sessions_cut
        merged.elapsed += ph.elapsed
        merged.client_cpu_s += ph.client_cpu_s
    elapsed = merged.elapsed or None
    lat = latency_summary([s[0] for s in merged.samples])
    return {
        "target": target, "load": load.as_dict(), "rounds": len(phases),
        "issued": merged.issued, "ok": merged.ok, "error_total": sum(merged.errors.values()),
        "errors": dict(sorted(merged.errors.items())), "error_samples": merged.error_samples,
        "sessions": {"started": merged.sessions_started, "completed": merged.sessions_completed,
                     "failed": merged.sessions_failed, "cut": merged.sessions_cut},
        "elapsed_s": merged.elapsed,
        "req_per_s": ratio(merged.ok, elapsed),
        "sessions_per_s": ratio(merged.sessions_started, elapsed),
        "latency": lat,
        "server_cpu_s": cpu_s,
        "cpu_ms_per_req": None if cpu_s is None or not merged.issued else 1e3 * cpu_s / merged.issued,
        "cores_busy": ratio(cpu_s, elapsed),
        "client_cpu_s": merged.client_cpu_s,
        "client_cores_busy": ratio(merged.client_cpu_s, elapsed),
        "client_send_lag_p99_ms": _lag_p99(merged.samples),
        "extra": workload.summarise(merged.samples),
    }


def _lag_p99(samples: list[tuple[float, dict]]) -> float | None:
    lags = [t["send_lag_s"] for _, t in samples if "send_lag_s" in t]
    p99 = percentile(lags, 99)
    return None if p99 is None else 1e3 * p99


def _metric(run: dict, key: str):
    return run["latency"][key] if key.endswith("_ms") and key in run["latency"] else run.get(key)


def comparison(runs: list[dict]) -> dict:
    """``{baseline name: {metric: first run's value ÷ baseline's}}`` for `COMPARED` metrics."""
    if len(runs) < 2:
        return {}
    first = runs[0]
    return {b["target"]: {k: ratio(_metric(first, k), _metric(b, k)) for k in COMPARED} for b in runs[1:]}


def _fmt(value, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "ms":
        return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.1f}"
    if fmt == "d":
        return f"{int(round(value)):,}"
    return format(value, fmt)


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i])  # noqa: E731
                                   for i, c in enumerate(cells)).rstrip()
    return [line(header), *(line(r) for r in rows)]


def table(result: dict, workload: Workload) -> str:
    """The human table for one workload's result (the dict documented above)."""
    out = [f"== {result['workload']}: {_title(result)}"]
    for t in result["targets"]:
        how = f"spawned: serve {t['spawned']}" if t.get("spawned") is not None else "given"
        out.append(f"   {t['name']:<10} {t['url']}  ({how}; server CPU from {t.get('cpu_source') or 'nowhere'})")
    runs = result.get("runs") or []
    if runs:
        out += _main_rows(runs, workload, result["unit"])
    if result.get("sweep"):
        out += _sweep_rows(result)
    for run in runs + (result.get("sweep") or []):
        for key, n in run["errors"].items():
            where = f"{run['target']}" + (f" @ {run['rate']:g}/s" if "rate" in run else "")
            out.append(f"   errors at {where}: {n} x {key}: {run['error_samples'].get(key, '')[:120]!r}")
    return "\n".join(out)


def _title(result: dict) -> str:
    load = result.get("load")
    desc = LoadSpec(**{k: v for k, v in load.items() if k != "mode"}).describe(result["unit"]) if load else "sweep only"
    params = ", ".join(f"{k}={v}" for k, v in result["params"].items() if not isinstance(v, (dict, list)))
    return f"{desc}; {params}"


def _main_rows(runs: list[dict], workload: Workload, unit: str) -> list[str]:
    names = [r["target"] for r in runs]
    header = ["metric", *names, *(f"{names[0]}/{b}" for b in names[1:])]
    spec = [("requests ok", lambda r: r["ok"], "d", False), ("errors", lambda r: r["error_total"], "d", False),
            ("req/s", lambda r: r["req_per_s"], ".1f", True)]
    if unit != "request":
        spec.append((f"{unit}s/s", lambda r: r["sessions_per_s"], ".2f", True))
    spec += [(f"{p} ms", (lambda r, p=p: r["latency"][f"{p}_ms"]), "ms", True) for p in ("p50", "p90", "p99")]
    spec += [("server CPU ms/req", lambda r: r["cpu_ms_per_req"], "ms", True),
             ("server cores busy", lambda r: r["cores_busy"], ".2f", False),
             ("bench client cores busy", lambda r: r["client_cores_busy"], ".2f", False)]
    if any(r["client_send_lag_p99_ms"] is not None for r in runs):
        spec.append(("bench client send lag p99 ms", lambda r: r["client_send_lag_p99_ms"], "ms", False))
    rows = []
    for label, get, fmt, compare in spec:
        values = [get(r) for r in runs]
        rows.append([label, *(_fmt(v, fmt) for v in values),
                     *((_fmt(ratio(values[0], v), ".2f") if compare else "") for v in values[1:])])
    extra_rows: dict[str, list] = {}
    for i, r in enumerate(runs):
        for label, value, fmt in workload.rows(r["extra"]):
            extra_rows.setdefault(label, [fmt, [None] * len(runs)])[1][i] = value
    for label, (fmt, values) in extra_rows.items():
        rows.append([label, *(_fmt(v, fmt) for v in values),
                     *(_fmt(ratio(values[0], v), ".2f") if fmt != "d" else "" for v in values[1:])])
    return _grid(header, rows)


def _sweep_rows(result: dict) -> list[str]:
    sweep = result["sweep"]
    names = list(dict.fromkeys(r["target"] for r in sweep))
    rates = sorted({r["rate"] for r in sweep})
    by = {(r["target"], r["rate"]): r for r in sweep}
    header = [f"offered {result['unit']}s/s", *(f"{n} p50/p99 ms (req/s, err)" for n in names)]
    rows = []
    for rate in rates:
        cells = [f"{rate:g}"]
        for n in names:
            r = by.get((n, rate))
            cells.append("skipped" if r is None else
                         f"{_fmt(r['latency']['p50_ms'], 'ms')}/{_fmt(r['latency']['p99_ms'], 'ms')} "
                         f"({_fmt(r['req_per_s'], '.1f')}, {r['error_total']})")
        rows.append(cells)
    out = ["-- sweep (open loop, Poisson arrivals)", *_grid(header, rows)]
    for name, cap in (result.get("slo") or {}).items():
        out.append("   " + capacity_line(name, cap, result["unit"]))
    return out


def capacity_line(name: str, cap: dict, unit: str) -> str:
    """One sentence: what ``name`` sustains within the SLO and what the target rate needs."""
    slo = f"p99 <= {cap['slo_ms']:g} ms"
    if cap["max_rate"] is None:
        return f"{name}: no swept rate met {slo}"
    busy = f", {cap['cores_busy_at_max']:.2f} cores busy" if cap.get("cores_busy_at_max") is not None else ""
    line = f"{name}: sustains {cap['max_rate']:g} {unit}s/s within {slo}{busy}"
    if cap.get("limited_by_sweep"):
        line += " (the highest rate swept: sweep higher to find the limit)"
    if cap.get("target_rate"):
        cores = f", ~{cap['cores_needed']:.1f} cores" if cap.get("cores_needed") is not None else ""
        line += (f"; {cap['target_rate']:g} {unit}s/s needs {cap['instances_needed']} such "
                 f"instance{'s' if cap['instances_needed'] != 1 else ''}{cores}")
    return line
