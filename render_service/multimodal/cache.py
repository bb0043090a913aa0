"""The processor cache: processed items keyed by ``mm_hash``, bounded in bytes (vLLM's ``--mm-processor-cache-gb``).

A hit skips decoding, resizing and (once encoded) msgpack + base64: the entry then holds the
item's ``kwargs_data`` / ``mm_metadata`` strings, which every later answer carries as they are
(copied into the response, never encoded again). A part that carries only a ``uuid`` is
answered from here or refused (vLLM: "Cache miss for image at index 0 but data is not
provided."). Thread-safe: workers of the CPU pool insert while the event loop reads.
`ProcessorCache.collect` gives its figures to ``/metrics``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .items import ProcessedItem
from .serde import encode_item


# What a count-only entry is charged: its key and objects, so the byte bound also bounds their number
COUNT_ONLY_BYTES = 256


@dataclass
class CachedItem:
    """A processed item, then (once a request asks for tensors) its wire encodings instead.

    Encoding drops the tensors: the base64 is what every later answer sends, so keeping both
    would hold each image twice (a 720p image: 5.6 MB of pixels, 7.5 MB of base64).
    An entry made for a request that sends no pixels (``mm_payload: "none"``) holds only
    ``num_tokens`` (`has_payload` false); a request that wants tensors processes the item again.
    """

    item: ProcessedItem | None
    kwargs_b64: str | None = None
    metadata_b64: str | None = None
    encoded: bool = False
    num_tokens: int = 0
    replacement: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.item is not None:
            self.num_tokens = self.item.num_tokens
            self.replacement = self.item.replacement

    @classmethod
    def count_only(cls, num_tokens: int, replacement: tuple[int, ...] | None = None) -> "CachedItem":
        """An entry that answers placeholders and hashes, not tensors (``replacement``: see `ProcessedItem`)."""
        return cls(None, num_tokens=num_tokens, replacement=replacement)

    @property
    def has_payload(self) -> bool:
        """True when the entry can give ``kwargs_data`` (tensors held, or already encoded)."""
        return self.item is not None or self.encoded

    @property
    def nbytes(self) -> int:
        if not self.has_payload:
            return COUNT_ONLY_BYTES
        return (self.item.nbytes if self.item is not None else 0) + len(self.kwargs_b64 or "") + len(self.metadata_b64 or "")


class ProcessorCache:
    """LRU of `CachedItem` by hash, evicting least recently used entries past ``capacity_bytes``.

    ``capacity_bytes`` 0 disables caching (every lookup misses, nothing is kept).
    """

    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[str, CachedItem] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.encoded = 0    # items encoded for an answer
        self.reused = 0     # answers' items taken from kept encodings

    def get(self, key: str) -> CachedItem | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def put(self, key: str, entry: CachedItem) -> None:
        """Insert or replace; entries larger than the whole capacity are not kept."""
        size = entry.nbytes
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old.nbytes
            if size > self.capacity_bytes:
                return
            self._entries[key] = entry
            self._size += size
            self._evict()

    def encodings(self, key: str, entry: CachedItem) -> tuple[str | None, str | None]:
        """``(kwargs_data entry, mm_metadata entry)`` of ``entry`` (None: null): encoded once, then
        kept (and counted) in place of the tensors; later calls hand out the kept strings
        (`reused` counts them)."""
        item = entry.item
        if entry.encoded or item is None:
            with self._lock:
                self.reused += 1
            return entry.kwargs_b64, entry.metadata_b64
        kwargs_b64, metadata_b64 = encode_item(item), encode_item(item, metadata_only=True)
        with self._lock:
            self.encoded += 1
            if not entry.encoded:
                before = entry.nbytes
                entry.kwargs_b64, entry.metadata_b64, entry.encoded, entry.item = kwargs_b64, metadata_b64, True, None
                if self._entries.get(key) is entry:
                    self._size += entry.nbytes - before
                    self._evict()
        return entry.kwargs_b64, entry.metadata_b64

    def _evict(self) -> None:
        while self._size > self.capacity_bytes and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.nbytes
            self.evictions += 1

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def collect(self):
        """Prometheus collector protocol: the cache's counters and sizes (``/metrics``)."""
        with self._lock:
            counts = {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                      "encoded": self.encoded, "reused": self.reused}
            sizes = {"bytes": self._size, "entries": len(self._entries), "capacity_bytes": self.capacity_bytes}
        for name, doc in (("hits", "lookups that found the item"), ("misses", "lookups that did not"),
                          ("evictions", "items evicted to stay within --mm-processor-cache-gb"),
                          ("encoded", "items encoded (msgpack + base64) for an answer"),
                          ("reused", "items answered from kept encodings, not encoded again")):
            counter = CounterMetricFamily(f"render_mm_processor_cache_{name}", f"processor cache: {doc}")
            counter.add_metric([], counts[name])
            yield counter
        for name, doc in (("bytes", "bytes held"), ("entries", "items held"), ("capacity_bytes", "byte bound")):
            gauge = GaugeMetricFamily(f"render_mm_processor_cache_{name}", f"processor cache: {doc}")
            gauge.add_metric([], sizes[name])
            yield gauge
