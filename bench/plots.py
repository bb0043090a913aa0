"""PNG figures from a workload's result dict (the results.json entry), with matplotlib's
Agg backend (no display needed). Everything plotted is in results.json, so figures can be
redrawn from it.

- ``<workload>_latency_vs_rate.png``: p50 and p99 latency against the offered rate of the
  sweep (or the achieved rate of the main run when there is no sweep), one colour per
  target, the SLO as a dashed line.
- ``<workload>_latency_by_position.png`` (``stream-derender``): median chunk latency
  against the token position in the tool call.
- ``<workload>_latency_by_turn.png`` (``agent-loop``): p50/p99 render latency per turn.
"""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(result: dict, out_dir: Path, slo_ms: float | None = None) -> list[str]:
    """Write the figures that apply to ``result`` into ``out_dir``; returns the file names."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [_latency_vs_rate(plt, result, out_dir, slo_ms)]
    runs = result.get("runs") or []
    if any(r["extra"].get("curve_ms") for r in runs):
        files.append(_by_position(plt, result, runs, out_dir))
    if any(r["extra"].get("by_turn") for r in runs):
        files.append(_by_turn(plt, result, runs, out_dir))
    return files


def _save(plt, fig, ax, result: dict, out_dir: Path, title: str, name: str) -> str:
    """Title, grid and legend, then ``<workload>_<name>.png``; returns the file name."""
    ax.set_title(f"{result['workload']}: {title}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    file = f"{result['workload']}_{name}.png"
    fig.savefig(out_dir / file, dpi=110)
    plt.close(fig)
    return file


def _p50_p99(ax, xs: list, rows: list[dict], colour: str, name: str) -> None:
    ax.plot(xs, [r["p50_ms"] for r in rows], "o-", color=colour, label=f"{name} p50")
    ax.plot(xs, [r["p99_ms"] for r in rows], "s--", color=colour, alpha=0.7, label=f"{name} p99")


def _latency_vs_rate(plt, result: dict, out_dir: Path, slo_ms: float | None) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    unit = result["unit"]
    sweep = result.get("sweep") or []
    if sweep:
        points = [(r["target"], r["rate"], r) for r in sweep]
        ax.set_xlabel(f"offered rate ({unit}s/s, Poisson)")
    else:
        points = [(r["target"], r["sessions_per_s"] or 0.0, r) for r in result.get("runs") or []]
        ax.set_xlabel(f"achieved rate ({unit}s/s, {result['load']['mode']} loop)")
    for i, name in enumerate(dict.fromkeys(p[0] for p in points)):
        mine = sorted((x, r["latency"]) for n, x, r in points if n == name and r["latency"]["n"])
        if not mine:
            continue
        _p50_p99(ax, [x for x, _ in mine], [lat for _, lat in mine], f"C{i}", name)
    if slo_ms:
        ax.axhline(slo_ms, color="red", linestyle=":", label=f"SLO p99 {slo_ms:g} ms")
    ax.set_ylabel("latency (ms)")
    return _save(plt, fig, ax, result, out_dir, "latency vs rate", "latency_vs_rate")


def _by_position(plt, result: dict, runs: list[dict], out_dir: Path) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, run in enumerate(runs):
        curve = run["extra"].get("curve_ms") or []
        if curve:
            ax.plot([c[0] for c in curve], [c[1] for c in curve], "-", color=f"C{i}",
                    label=f"{run['target']} (median per {run['extra'].get('curve_bucket', 1)} tokens)")
        for w in run["extra"].get("by_position") or []:
            if w["p50_ms"] is not None:
                ax.plot([w["position"]], [w["p50_ms"]], "o", color=f"C{i}")
    ax.axvline(0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("token position in the tool call (negative: reasoning before it)")
    ax.set_ylabel("chunk latency (ms)")
    ax.set_ylim(bottom=0)
    return _save(plt, fig, ax, result, out_dir, "per-chunk latency by position (one token per chunk)",
                 "latency_by_position")


def _by_turn(plt, result: dict, runs: list[dict], out_dir: Path) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, run in enumerate(runs):
        rows = [r for r in run["extra"].get("by_turn") or [] if r["p50_ms"] is not None]
        if rows:
            _p50_p99(ax, [r["turn"] for r in rows], rows, f"C{i}", run["target"])
    ax.set_xlabel("turn (the conversation grows by one tool call + result per turn)")
    ax.set_ylabel("render latency (ms)")
    ax.set_ylim(bottom=0)
    return _save(plt, fig, ax, result, out_dir, "render latency per turn", "latency_by_turn")
