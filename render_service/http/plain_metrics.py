"""Counters, histograms and summaries kept in plain Python numbers, for one process.

prometheus_client's metric children guard every value with a lock and find a histogram's
bucket by a linear scan: the 15 updates of one request (http/metrics.py) cost ~13 µs of CPU
warm, ~5% of a ~50-token render. These families are updated from the event loop only (one
thread), so they keep plain ints and floats and find buckets by bisection; prometheus_client
still writes the text: each family is a collector (its ``collect`` builds the library's
``Metric``), with exactly the samples the library's own classes give — ``_total``, ``_bucket``
with ``le`` as Go formats it, ``_count``, ``_sum``, ``_created`` (unless the library's created
series are disabled) — so ``/metrics`` reads the same (tests/test_routes_metrics.py compares
it with prometheus-fastapi-instrumentator's).

Only `ServiceMetrics` in a single process uses them: with ``--workers`` the values must live in
prometheus_client's memory-mapped files, so there the library's own classes serve.
"""

from __future__ import annotations

import bisect
import time
from typing import Iterable, Sequence

import prometheus_client.metrics
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import INF, floatToGoString


class _Family:
    """A metric name with its label names and one child per label-value tuple; label-less
    families are their own child. Subclasses say the type and what a child holds."""

    kind = ""
    has_created = True

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: CollectorRegistry | None = None) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], _Family] = {}  # by the label values' strings: the series
        self._by_values: dict[tuple, _Family] = {}  # by the values as given (200 and "200" alike)
        self.created = time.time()
        if registry is not None:
            registry.register(self)

    def labels(self, *values: object) -> "_Family":
        """The child for these label values (in ``labelnames`` order, written as strings), made on first use."""
        child = self._by_values.get(values)
        if child is None:
            key = tuple(map(str, values))
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
            child = self._children.get(key) or self._children.setdefault(key, self._child())
            self._by_values[values] = child
        return child

    def _child(self) -> "_Family":
        return type(self)(self.name, self.documentation, **self._child_options())

    def _child_options(self) -> dict:
        return {}

    def collect(self) -> list[Metric]:
        metric = Metric(self._base_name(), self.documentation, self.kind)
        children = list(self._children.items()) if self.labelnames else [((), self)]
        created = getattr(prometheus_client.metrics, "_use_created", True)  # honours disable_created_metrics()
        for values, child in children:
            labels = dict(zip(self.labelnames, values))
            for suffix, extra, value in child._samples():
                metric.add_sample(self._base_name() + suffix, {**labels, **extra}, value)
            if created and self.has_created:
                metric.add_sample(self._base_name() + "_created", labels, child.created)
        return [metric]

    def describe(self) -> list[Metric]:
        return [Metric(self._base_name(), self.documentation, self.kind)]

    def _base_name(self) -> str:
        return self.name

    def _samples(self) -> Iterable[tuple[str, dict, float]]:
        raise NotImplementedError


class Counter(_Family):
    """``prometheus_client.Counter`` without its lock: ``inc(amount)``; the name may end in ``_total``."""

    kind = "counter"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def _base_name(self) -> str:
        return self.name.removesuffix("_total")

    def _samples(self):
        return (("_total", {}, self.value),)


class Summary(_Family):
    """``prometheus_client.Summary`` without its lock (count and sum, no quantiles): ``observe(value)``."""

    kind = "summary"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.count, self.sum = 0, 0.0

    def observe(self, amount: float) -> None:
        self.count += 1
        self.sum += amount

    def _samples(self):
        return (("_count", {}, float(self.count)), ("_sum", {}, self.sum))


class Histogram(_Family):
    """``prometheus_client.Histogram`` without its lock, buckets found by bisection: ``observe(value)``.
    ``buckets`` are the finite upper bounds, ascending (``+Inf`` is added)."""

    kind = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: CollectorRegistry | None = None) -> None:
        self.bounds = tuple(float(b) for b in buckets if b != INF) + (INF,)
        super().__init__(name, documentation, labelnames, registry)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def _child_options(self) -> dict:
        return {"buckets": self.bounds}

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1  # le: a value on a bound is in its bucket
        self.sum += amount

    def _samples(self):
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts):
            total += n
            out.append(("_bucket", {"le": floatToGoString(bound)}, float(total)))
        out += [("_count", {}, float(total)), ("_sum", {}, self.sum)]
        return out


class Gauge(_Family):
    """``prometheus_client.Gauge`` without its lock: ``inc``, ``dec``, ``set``. ``multiprocess_mode``
    is accepted for the library's signature and means nothing in one process."""

    kind = "gauge"
    has_created = False

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: CollectorRegistry | None = None, multiprocess_mode: str = "all") -> None:
        super().__init__(name, documentation, labelnames, registry)
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def _samples(self):
        return (("", {}, self.value),)
