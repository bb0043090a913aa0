"""`TextTokenizer`: the tokenizer interface render and derender call."""

from __future__ import annotations

import hashlib
import logging
import threading
from functools import cached_property

import tokenizers

from . import budget
from .backends import Backend, BackendUnavailable, HfBackend, make_backend
from .corpus import chat_like_prompts, selfcheck_corpus
from .segments import PrefixCache, SegmentCache, SegmentSplitter
from .selfcheck import backend_mismatch, first_mismatch

log = logging.getLogger("render_service.tokenizer")

DEFAULT_SEGMENT_CACHE_BYTES = 64 << 20
DEFAULT_PREFIX_CACHE_BYTES = 256 << 20
BACKEND_CHOICES = ("auto", "hf", "fast")


class TextTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` with the calls render and derender need.

    Encoding goes through a backend (HF reference or `fastokens`), an exact prefix cache
    and an exact segment cache (`segments.py`); decoding and vocabulary look-ups use ``hf``. Either way
    ``encode(text)`` equals ``hf.encode(text).ids``.

    Args:
        hf: the reference Rust tokenizer (from ``tokenizer.json`` or rebuilt from a GGUF).
        backend: ``"hf"`` (default here, no load-time cost), ``"fast"`` or ``"auto"``; see `from_hf`.
        name: label for log lines (model name).
        segment_cache_bytes: budget of the segment cache (estimated resident bytes); 0 turns it
            off; None (default) = 64 MiB with the HF backend, off with `fastokens`, which
            encodes a whole prompt faster than the Python-level cache can split and look it
            up (bench/bench_tokenize.py, 9k-token prompt: ~0.1 ms whole vs ~0.15-0.3 ms cached).
        prefix_cache_bytes: budget of the prefix cache (`segments.PrefixCache`: a prompt that
            starts like one seen before, as each turn of an agent loop does, reuses its ids
            up to a shared cut token and encodes only the rest); None (default) = 256 MiB with
            every backend, 0 turns it off. Needs a checked splitter, like the segment cache.
        background: with ``"auto"``, build and check `fastokens` on a thread (see `from_hf`).
        build_now: with ``background``: False leaves the thread to `start_fast_build` (`serve`
            starts it once it has answered ``/health``: the build, partly holding the GIL,
            delayed that answer by ~0.45 s); HF encodes until then, as during the build.

    Raises:
        ValueError: unknown ``backend``; or ``backend="fast"`` and the fast backend is
            missing or not equal to HF on the self-check corpus (the message says why).
    """

    def __init__(self, hf: tokenizers.Tokenizer, backend: str = "hf", *, name: str | None = None,
                 segment_cache_bytes: int | None = None, prefix_cache_bytes: int | None = None,
                 background: bool = False, build_now: bool = True) -> None:
        if backend not in BACKEND_CHOICES:
            raise ValueError(f"unknown tokenizer backend {backend!r} (expected one of {', '.join(BACKEND_CHOICES)})")
        self.hf = hf
        self.name = name or "tokenizer"
        self._special_ids = frozenset(i for i, tok in hf.get_added_tokens_decoder().items() if tok.special)
        self._reference = HfBackend(hf)
        self._backend: Backend = self._reference
        self.backend_note = "hf requested"
        self._fast_ready = threading.Event()
        self._fast_ready.set()
        self._spec_json: str | None = None  # hf.to_str(), made once (`_serialized`): ~0.15 s for a large vocabulary
        self._spec_digest: bytes | None = None
        self._spec_lock = threading.Lock()
        self._fast_build: threading.Thread | None = None
        self._fast_build_lock = threading.Lock()
        if backend == "auto" and background:
            # Building fastokens from tokenizer.json is most of a text model's start-up (seconds, the
            # GIL released); HF serves meanwhile, equal by definition, and fastokens takes over once proven.
            self.backend_note = "hf while fastokens is built and checked"
            log.info("%s: encoding with HF while the fastokens backend is built and checked", self.name)
            self._fast_ready.clear()
            # Not a daemon: a process exiting mid-build (a short-lived server, a test) waits for it,
            # since a daemon thread inside the Rust build at interpreter shutdown aborts the
            # process (SIGABRT, "exception not rethrown").
            self._fast_build = threading.Thread(target=self._take_fast, name="fastokens-build")
            if build_now:
                self.start_fast_build()
        elif backend != "hf":
            self._backend, self.backend_note = self._choose_fast(backend)
        if segment_cache_bytes is None:
            hf_only = self._backend is self._reference and self._fast_ready.is_set()
            segment_cache_bytes = DEFAULT_SEGMENT_CACHE_BYTES if hf_only else 0
        if prefix_cache_bytes is None:
            prefix_cache_bytes = DEFAULT_PREFIX_CACHE_BYTES
        self._cache = SegmentCache(segment_cache_bytes)
        self._splitter: SegmentSplitter | None = None
        self._prefix: PrefixCache | None = None
        self.cache_note = "off: budget 0" if self._backend is self._reference else "off: opt-in with fastokens"
        self.prefix_note = "off: budget 0"
        if segment_cache_bytes > 0 or prefix_cache_bytes > 0:
            splitter, note = self._check_splitter()
            if segment_cache_bytes > 0:
                self._splitter, self.cache_note = splitter, note
            if prefix_cache_bytes > 0:
                self.prefix_note = note
                if splitter is not None:
                    self._prefix = PrefixCache(splitter, prefix_cache_bytes, self._encode_plain,
                                               self._encode_batch)

    @classmethod
    def from_hf(cls, hf: tokenizers.Tokenizer, backend: str = "auto", name: str | None = None,
                segment_cache_bytes: int | None = None, prefix_cache_bytes: int | None = None,
                background: bool = False, build_now: bool = True) -> "TextTokenizer":
        """The constructor the model loader calls.

        ``backend``: ``"auto"`` uses `fastokens` when it is installed and encodes the
        self-check corpus (multilingual text, emoji, digits, code, whitespace runs, every
        added token, look-alikes; `corpus.selfcheck_corpus`) exactly like ``hf``, else HF,
        logging one line saying why; ``"fast"`` insists on `fastokens` (ValueError if it
        cannot be proven equal); ``"hf"`` is the reference alone. ``segment_cache_bytes``:
        see the class doc (None = on for HF, off for `fastokens`); ``prefix_cache_bytes``: see
        the class doc (None = on). ``background`` (with ``"auto"``): return at once encoding
        with HF, and build and check `fastokens` in a thread, switching to it once proven equal
        (`wait_fast` waits for that); the server's start-up takes this path. ``build_now``:
        see the class doc.
        """
        return cls(hf, backend, name=name, segment_cache_bytes=segment_cache_bytes,
                   prefix_cache_bytes=prefix_cache_bytes, background=background, build_now=build_now)

    def spec_digest(self) -> bytes:
        """SHA-256 of ``hf.to_str()`` (the serialized tokenizer: what `ModelBundle.fingerprint`
        hashes), computed once."""
        self._serialized()
        return self._spec_digest

    def _serialized(self) -> str | None:
        """``hf.to_str()`` while no backend has been built from it yet (then None); sets the digest."""
        with self._spec_lock:
            if self._spec_digest is None:
                self._spec_json = self.hf.to_str()
                self._spec_digest = hashlib.sha256(self._spec_json.encode()).digest()
            return self._spec_json

    def start_fast_build(self) -> None:
        """Start the background `fastokens` build left waiting by ``build_now=False``; no-op
        when there is none or it has started (from any thread)."""
        with self._fast_build_lock:
            build, self._fast_build = self._fast_build, None
        if build is not None:
            build.start()

    def _take_fast(self) -> None:
        try:
            self.max_token_chars  # noqa: B018 - computed here, off the request path (see its doc)
            self._backend, self.backend_note = self._choose_fast("auto")
        except Exception:  # noqa: BLE001 - a failed build must not kill the thread silently: HF stays
            log.exception("%s: building the fast tokenizer backend failed; HF stays", self.name)
            self.backend_note = "hf fallback: the fastokens build failed"
        finally:
            self._fast_ready.set()

    def wait_fast(self, timeout: float | None = None) -> bool:
        """Wait until a background fast-backend build (``background=True``) has finished
        (switched or fallen back); True when it has."""
        return self._fast_ready.wait(timeout)

    def _added_contents(self) -> list[str]:
        return [t.content for _, t in sorted(self.hf.get_added_tokens_decoder().items()) if t.content]

    def _choose_fast(self, backend: str) -> tuple[Backend, str]:
        try:
            fast = make_backend("fast", self.hf, self._serialized())
            self._spec_json = None  # 4-5 MB for a large vocabulary, not needed again (the digest is kept)
            reason = backend_mismatch(self._reference, fast, selfcheck_corpus(self._added_contents()))
        except BackendUnavailable as exc:
            fast, reason = None, str(exc)
        if reason is None:
            log.info("%s: tokenizer backend fastokens (equal to HF on the self-check corpus)", self.name)
            return fast, "fastokens: equal to HF on the self-check corpus"
        if backend == "fast":
            raise ValueError(f"{self.name}: tokenizer backend 'fast' refused: {reason}")
        log.warning("%s: tokenizer backend falls back to HF: %s", self.name, reason)
        return self._reference, f"hf fallback: {reason}"

    def _check_splitter(self) -> tuple[SegmentSplitter | None, str]:
        splitter = SegmentSplitter(self.hf)
        if splitter.blockers:
            log.info("%s: segment cache off: %s", self.name, "; ".join(splitter.blockers))
            return None, "off: " + "; ".join(splitter.blockers)
        if not splitter.cut_token_ids:
            return None, "off: no added token can cut a prompt into independent segments"
        prompts = chat_like_prompts(self._added_contents(), 150)
        segmented = [SegmentCache(0).encode_segments(splitter.split(p), self._reference.encode_batch)
                     for p in prompts]
        diff = first_mismatch(prompts, self._reference.encode_batch(prompts), segmented)
        if diff is not None:
            log.warning("%s: segment cache off: segmented encoding differs on %s", self.name, diff)
            return None, f"off: segmented encoding differs on {diff}"
        return splitter, f"on: cuts at {len(splitter.cut_token_ids)} added tokens"

    @property
    def backend_name(self) -> str:
        """``"hf"`` or ``"fastokens"``: which library encodes."""
        return self._backend.name

    @cached_property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (``len(tokenizer)`` in transformers)."""
        return self.hf.get_vocab_size(with_added_tokens=True)

    @cached_property
    def max_token_chars(self) -> int:
        """Characters of the vocabulary's longest token string (vLLM's ``max_chars_per_token``:
        ``max(len(tok) for tok in get_vocab())``). ~0.15 s for a 150k vocabulary, once: the
        background fastokens build computes it after the first healthy probe, so a server's
        first prompt does not pay it (it took 162 ms against ~2 ms for the next ones)."""
        return max((len(tok) for tok in self.hf.get_vocab()), default=1)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` runs the post-processor (BOS/EOS).

        Equal to ``hf.encode(text, add_special_tokens=...).ids``. Without post-processing, a
        prompt that starts like one seen before reuses its ids (prefix cache; they come as a
        `ids_json.TokenIds` carrying their JSON), and text segments between added tokens come
        from the segment cache when seen before.
        """
        if add_special_tokens:
            budget.check(len(text))
            return self._backend.encode(text, True)
        if self._prefix is not None:
            return self._prefix.encode(text)
        return self._encode_plain(text)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._backend.encode_batch(texts)

    def _encode_plain(self, text: str) -> list[int]:
        budget.check(len(text))
        if self._splitter is None:
            return self._backend.encode(text, False)
        return self._cache.encode_segments(self._splitter.split(text), self._backend.encode_batch)

    def cache_stats(self) -> dict[str, int]:
        """Segment cache counters (``hits``, ``misses``, ``hit_chars``, ``miss_chars``,
        ``evictions``, ``entries``, ``bytes``, ``max_bytes``) and ``enabled`` (0/1), for metrics."""
        return {**self._cache.stats(), "enabled": int(self._splitter is not None)}

    def prefix_stats(self) -> dict[str, int]:
        """Prefix cache counters (`PrefixCache.stats`) and ``enabled`` (0/1), for metrics."""
        stats = self._prefix.stats() if self._prefix is not None else {}
        return {**stats, "enabled": int(self._prefix is not None)}

    def clear_cache(self) -> None:
        """Empty the segment and prefix caches (counters are kept)."""
        self._cache.clear()
        if self._prefix is not None:
            self._prefix.clear()

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``, as ``tokenizer.decode`` in transformers."""
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, id: int) -> str | None:
        """Raw vocabulary piece of ``id`` (e.g. ``"Ġworld"``), or None when out of range."""
        return self.hf.id_to_token(id)

    def token_to_id(self, token: str) -> int | None:
        """Id of a vocabulary piece or added token, or None."""
        return self.hf.token_to_id(token)

    def is_special(self, id: int) -> bool:
        """True for added tokens flagged special (they vanish under skip_special_tokens)."""
        return id in self._special_ids
