"""From a request's media parts to vLLM's ``features``: load, hash, process (cached), expand.

The flow for one request (all front doors share it):

1. `MultimodalRenderer.load` — the parts in prompt order (`MediaPart`) are checked against the
   per-prompt limits, fetched concurrently (``data:``, ``file://``, bounded http(s); awaiting a
   slow URL blocks nothing else), then hashed and processed on the CPU pool (Pillow and NumPy
   release the GIL). The processor cache, keyed by hash, skips decoding and resizing for an
   image seen before and answers ``uuid``-only parts. A request that sends no pixels
   (``mm_payload: "none"``) gets what its answer depends on only: the hash (over the file
   bytes) and the placeholder count (from the decoded size; the decode is checked at 1/8
   scale for JPEG, no resize, no patches).
2. `MultimodalRenderer.expand` — each placeholder token the chat template wrote (one
   ``<|image_pad|>`` per image) becomes the item's ``num_tokens`` copies, and ``features`` is
   built as vLLM 0.33's render sends it: ``{mm_hashes, mm_placeholders, kwargs_data,
   mm_metadata}`` with ``kwargs_data`` / ``mm_metadata`` null under ``mm_payload: "none"``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx

from ..errors import bad_request
from .cache import CachedItem, ProcessorCache
from .defaults import (DEFAULT_LIMIT_PER_PROMPT, DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_PROCESSOR_CACHE_GB, HASH_ALGORITHMS,
                       MediaLimits)
from .decode import decode_jpeg_sequence, decode_rgb, decoded_size, read_header
from .hashing import image_hash, video_hash
from .prompt_updates import check_non_overlapping, find_placeholders
from .media import JPEG_SEQUENCE, MediaBytes, load_file_url, load_media
from .parts import MediaPart
from .video import decode_container, sample_for_processor


async def _default_run_cpu(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


@dataclass(frozen=True)
class MultimodalConfig:
    """Operator settings (`serve` flags).

    Attributes:
        model_id: the string vLLM hashes as ``model_id``: the model path the *engine* was
            started with (``mm_hashes`` only match the engine's for the same string).
        limits: media loading limits (allow-list, remote fetch, bytes, seconds, redirects).
        limit_per_prompt: most items per modality in one request (vLLM ``--limit-mm-per-prompt``).
        max_image_pixels: largest decoded image (vLLM ``VLLM_MAX_IMAGE_PIXELS``).
        cache_bytes: processor cache capacity (vLLM ``--mm-processor-cache-gb``, default 4 GiB).
        hash_algorithm: ``blake3`` (vLLM's default), ``sha256`` or ``sha512``.
    """

    model_id: str
    limits: MediaLimits = field(default_factory=MediaLimits)
    limit_per_prompt: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMIT_PER_PROMPT))
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    cache_bytes: int = int(DEFAULT_PROCESSOR_CACHE_GB * (1 << 30))
    hash_algorithm: str = HASH_ALGORITHMS[0]


@dataclass(frozen=True)
class LoadedItem:
    """A processed item of the request, in prompt order."""

    modality: str
    mm_hash: str
    entry: CachedItem

    @property
    def num_tokens(self) -> int:
        return self.entry.num_tokens


class MultimodalRenderer:
    """Media parts → `LoadedItem` list → expanded ``token_ids`` + ``features``, for one processor.

    Args:
        processor: a family processor from `render_service.multimodal.processors`.
        config: operator settings.
        placeholder_ids: ``{modality: token id}`` of the token the template writes per item.
        run_cpu: ``async run_cpu(fn, *args)`` running CPU work off the event loop (the server's
            admission-controlled pool: overload is a 503 there); None = the loop's default executor.
    """

    def __init__(self, processor: Any, config: MultimodalConfig, placeholder_ids: dict[str, int],
                 run_cpu: Callable[..., Awaitable[Any]] | None = None):
        self.processor = processor
        self.config = config
        self.placeholder_ids = placeholder_ids
        self.modality_of = {tok: m for m, tok in placeholder_ids.items()}
        self.cache = ProcessorCache(config.cache_bytes)
        self.run_cpu = run_cpu or _default_run_cpu
        self._client: httpx.AsyncClient | None = None

    # ---- loading -------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient | None:
        if not (self.config.limits.allow_remote or self.config.limits.allowed_domains):
            return None
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.config.limits.fetch_timeout_s, trust_env=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def check_parts(self, parts: list[MediaPart]) -> None:
        """400 for an unsupported modality or more items than ``limit_per_prompt`` allows."""
        counts: dict[str, int] = {}
        refuse = getattr(self.processor, "refuse", None)   # a vision family without a processor here
        for part in parts:
            if refuse is not None:
                raise refuse(part.modality, part.param)
            if part.modality not in self.placeholder_ids:
                if hasattr(self.processor, "refuse_modality"):
                    raise self.processor.refuse_modality(part.modality, part.param)
                raise bad_request(f"This model does not accept {part.modality} inputs.", part.param)
            counts[part.modality] = counts.get(part.modality, 0) + 1
        for modality, n in counts.items():
            limit = self.config.limit_per_prompt.get(modality, 0)
            if n > limit:
                raise bad_request(f"At most {limit} {modality}(s) may be provided in one prompt; got {n}.", "messages")

    async def load(self, parts: list[MediaPart], mm_payload: str = "tensors") -> list[LoadedItem]:
        """Fetch, hash and process every part (concurrently); items in prompt order.

        With ``mm_payload`` ``"none"`` no tensors are made: items carry hashes and placeholder
        counts only (an item already in the cache is used as it is).

        Raises:
            OpenAIError: 400 for any bad part (limits, loading, decoding, aspect ratio,
            a ``uuid``-only part not in the cache).
        """
        self.check_parts(parts)
        index: dict[str, int] = {}
        tasks: dict[tuple, list[tuple[MediaPart, asyncio.Future]]] = {}
        ordered = []
        for part in parts:
            i = index[part.modality] = index.get(part.modality, -1) + 1
            # The same media twice in one request is loaded and processed once. Keyed by the URL's
            # length and ends, then compared whole: a dict keyed on a data URL runs siphash over all
            # of it on the event loop (1.7 % of a repeated image's server CPU); equal-length
            # strings compare with a memcmp.
            url = part.url
            key = (part.modality, part.uuid, None if url is None else (len(url), url[:96], url[-32:]))
            same = tasks.setdefault(key, [])
            task = next((t for p, t in same if p.url == url), None)
            if task is None:
                task = asyncio.ensure_future(self._load_one(part, i, mm_payload == "tensors"))
                same.append((part, task))
            ordered.append(task)
        try:
            return list(await asyncio.gather(*ordered))
        except BaseException:
            for same in tasks.values():
                for _, task in same:
                    task.cancel()
            raise

    async def _load_one(self, part: MediaPart, index: int, tensors: bool) -> LoadedItem:
        if part.url is None:
            if part.uuid is None:
                raise bad_request(f"A {part.modality} part needs a URL or a uuid.", part.param)
            entry = self.cache.get(part.uuid)
            if entry is None or (tensors and not entry.has_payload):
                raise bad_request(f"Cache miss for {part.modality} at index {index} but data is not provided.", part.param)
            return LoadedItem(part.modality, part.uuid, entry)
        if part.url.startswith("file:"):   # a local read: off the loop too
            media = await self.run_cpu(load_file_url, part.url, self.config.limits, part.param)
        else:
            media = await load_media(part.url, self.config.limits, self._http(), part.param)
        return await self.run_cpu(self._process, part, media, tensors)

    def _process(self, part: MediaPart, media: MediaBytes, tensors: bool = True) -> LoadedItem:
        """Hash, then process on a cache miss (runs on the CPU pool); without ``tensors``, count only."""
        if part.modality == "video":
            return self._process_video(part, media, tensors)
        header = read_header(media.data, self.config.max_image_pixels, part.param)
        mm_hash = part.uuid if part.uuid is not None else image_hash(
            self.config.model_id, media.data, header.io_config, self.config.hash_algorithm)
        entry = self.cache.get(mm_hash)
        if entry is None and not tensors and hasattr(self.processor, "image_num_tokens"):
            height, width = decoded_size(media.data, self.config.max_image_pixels, part.param)
            replacement = getattr(self.processor, "image_replacement", None)
            entry = CachedItem.count_only(self.processor.image_num_tokens(height, width, part.param),
                                          replacement(height, width, part.param) if replacement else None)
            self.cache.put(mm_hash, entry)
        elif entry is None or (tensors and not entry.has_payload):
            transposed = getattr(self.processor, "decode_transposed", None)
            # (the header's size is before any EXIF turn: a wrong guess costs time, never exactness)
            if transposed is not None and transposed(header.height, header.width):
                rgb = decode_rgb(media.data, self.config.max_image_pixels, part.param, transposed=True)
                item = self.processor.process_image(rgb, part.param, transposed=True)
            else:
                item = self.processor.process_image(decode_rgb(media.data, self.config.max_image_pixels, part.param),
                                                    part.param)
            entry = CachedItem(item)
            self.cache.put(mm_hash, entry)
        return LoadedItem(part.modality, mm_hash, entry)

    def _process_video(self, part: MediaPart, media: MediaBytes, tensors: bool = True) -> LoadedItem:
        """A ``data:video/jpeg`` frame sequence (vLLM's decoder-free form) or a container (OpenCV).

        The processor may bring its own loader sampling (``video_indices(total, fps)``) and
        frame preparation (``prepare_video(frames, metadata) -> (frames, context)``, the context
        handed to ``process_video`` / ``video_prompt``); the defaults are Qwen2-VL's.
        """
        if not hasattr(self.processor, "process_video"):
            raise bad_request("This model does not accept video inputs.", part.param)
        if media.media_type == JPEG_SEQUENCE:
            frames, metadata = decode_jpeg_sequence(media.data, self.config.max_image_pixels, part.param)
        else:
            frames, metadata = decode_container(media.data, self.config.max_image_pixels, part.param,
                                                getattr(self.processor, "video_indices", None))
        mm_hash = part.uuid if part.uuid is not None else video_hash(
            self.config.model_id, media.data, frames, metadata, self.config.hash_algorithm)
        entry = self.cache.get(mm_hash)
        if entry is None or (tensors and not entry.has_payload):
            prepare = getattr(self.processor, "prepare_video", None)
            if prepare is not None:
                used, context = prepare(frames, metadata)
            else:
                used, context = sample_for_processor(frames, metadata, self.processor.temporal_patch_size)
            if not tensors and hasattr(self.processor, "video_prompt"):
                # the hash needs the decoded frames; the prompt needs only their number, size and times
                count, replacement = self.processor.video_prompt(len(used), used.shape[1], used.shape[2], context, part.param)
                entry = CachedItem.count_only(count, replacement)
            elif not tensors and hasattr(self.processor, "video_num_tokens"):
                entry = CachedItem.count_only(self.processor.video_num_tokens(len(used), used.shape[1], used.shape[2], part.param))
            else:
                entry = CachedItem(self.processor.process_video(used, context, part.param))
            self.cache.put(mm_hash, entry)
        return LoadedItem(part.modality, mm_hash, entry)

    # ---- placeholders and features -------------------------------------------------------

    def expand(self, token_ids: list[int], items: list[LoadedItem], mm_payload: str = "tensors",
               text: str | None = None) -> tuple[list[int], dict | None]:
        """Expand each placeholder token to its item's ``num_tokens`` and build ``features``.

        ``token_ids`` is the templated prompt with one placeholder per item (in item order per
        modality). Returns the expanded ids and ``features`` (None without items). A processor
        with ``expand_text`` (MiniCPM-V: placeholders are strings, replaced in text as vLLM does)
        builds the ids from the prompt ``text`` instead.

        Raises:
            OpenAIError: 400 when the prompt's placeholders do not match the items one to one
            (e.g. placeholder tokens typed into the text).
        """
        if not items:   # placeholder tokens typed into a text-only prompt pass through, as in vLLM
            return token_ids, None
        by_modality: dict[str, list[LoadedItem]] = {}
        for item in items:
            by_modality.setdefault(item.modality, []).append(item)
        expand_text = getattr(self.processor, "expand_text", None)
        if expand_text is not None and text is not None:
            out, ranges = expand_text(text, token_ids, [i.entry.replacement for i in by_modality.get("image", [])])
            return out, self._features(by_modality, {"image": ranges}, mm_payload)
        seen = {m: 0 for m in by_modality}
        placeholders: dict[str, list[dict]] = {m: [] for m in by_modality}
        written: dict[str, list[list[int]]] = {m: [] for m in by_modality}
        out: list[int] = []
        for tok in token_ids:
            modality = self.modality_of.get(tok)
            if modality is None:
                out.append(tok)
                continue
            k = seen.get(modality, 0)
            group = by_modality.get(modality, [])
            if k >= len(group):
                raise bad_request(f"The prompt has more {modality} placeholders than {modality} items.", "messages")
            seen[modality] = k + 1
            entry = group[k].entry
            tokens = list(entry.replacement) if entry.replacement is not None else [tok] * entry.num_tokens
            placeholders[modality].append({"offset": len(out), "length": len(tokens)})
            written[modality].append(tokens)
            out.extend(tokens)
        for modality, group in by_modality.items():
            if seen[modality] != len(group):
                raise bad_request(f"The chat template placed {seen[modality]} {modality} placeholder(s) for "
                                  f"{len(group)} {modality} item(s).", "messages")
        merge = getattr(self.processor, "merge_ids", None)
        if merge is not None:   # replacements that merge with their neighbours (Gemma 3's newlines)
            out = merge(out)
            placeholders = find_placeholders(out, written, self.processor.split_tokens)
            check_non_overlapping(placeholders)
        return out, self._features(by_modality, placeholders, mm_payload)

    def _features(self, by_modality: dict[str, list[LoadedItem]], placeholders: dict[str, list[dict]],
                  mm_payload: str) -> dict[str, Any]:
        features: dict[str, Any] = {
            "mm_hashes": {m: [i.mm_hash for i in g] for m, g in by_modality.items()},
            "mm_placeholders": placeholders,
            "kwargs_data": None,
            "mm_metadata": None,
        }
        if mm_payload == "tensors":
            encoded = {m: [self.cache.encodings(i.mm_hash, i.entry) for i in g] for m, g in by_modality.items()}
            features["kwargs_data"] = {m: [kw for kw, _ in e] for m, e in encoded.items()}
            meta = {m: [md for _, md in e] for m, e in encoded.items() if any(md for _, md in e)}
            features["mm_metadata"] = meta or None
        return features
