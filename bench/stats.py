"""Figures from samples: percentiles, latency summaries, ratios and SLO capacity.

Pure functions over plain numbers; times are seconds in, milliseconds out (``*_ms``).
"""

from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default ``linear`` method); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    rank = (len(xs) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def latency_summary(latencies_s: Sequence[float]) -> dict:
    """``{n, mean_ms, p50_ms, p90_ms, p99_ms, max_ms}`` of latencies in seconds (None when empty)."""
    n = len(latencies_s)
    ms = lambda v: None if v is None else 1e3 * v  # noqa: E731
    return {"n": n, "mean_ms": ms(sum(latencies_s) / n) if n else None,
            "p50_ms": ms(percentile(latencies_s, 50)), "p90_ms": ms(percentile(latencies_s, 90)),
            "p99_ms": ms(percentile(latencies_s, 99)), "max_ms": ms(max(latencies_s)) if n else None}


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def meets_slo(point: dict, slo_ms: float) -> bool:
    """A sweep point passes when it had successes, no errors and p99 ≤ ``slo_ms``."""
    p99 = point.get("p99_ms")
    return p99 is not None and point.get("errors", 0) == 0 and p99 <= slo_ms


def slo_capacity(points: list[dict], slo_ms: float, target_rate: float | None = None) -> dict:
    """Highest offered rate whose run meets the SLO, and what a target rate then needs.

    Args:
        points: one dict per swept rate: ``rate`` (offered, sessions/s), ``p99_ms``,
            ``errors``, ``cores_busy`` (server CPU seconds per wall second, or None).
        slo_ms: the p99 latency objective.
        target_rate: the rate to size for (same unit as ``rate``), or None.

    Returns:
        ``{slo_ms, max_rate, limited_by_sweep, cores_busy_at_max, target_rate,
        instances_needed, cores_needed}``; ``max_rate`` is None when no rate passed;
        ``limited_by_sweep`` says it is the highest rate swept (the real limit is higher).
        ``instances_needed`` = ceil(target / max_rate) servers like the measured one;
        ``cores_needed`` = target / max_rate × the cores the server burned at max_rate
        (CPU scales with load), None without a CPU figure.
    """
    passing = [p for p in points if meets_slo(p, slo_ms)]
    best = max(passing, key=lambda p: p["rate"], default=None)
    out = {"slo_ms": slo_ms, "max_rate": best["rate"] if best else None,
           "limited_by_sweep": bool(best) and best["rate"] == max(p["rate"] for p in points),
           "cores_busy_at_max": best.get("cores_busy") if best else None,
           "target_rate": target_rate, "instances_needed": None, "cores_needed": None}
    if best and target_rate:
        out["instances_needed"] = math.ceil(target_rate / best["rate"])
        if best.get("cores_busy") is not None:
            out["cores_needed"] = target_rate / best["rate"] * best["cores_busy"]
    return out
