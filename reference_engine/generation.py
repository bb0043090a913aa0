"""The per-request generation loop: prompt in, token events out. No HTTP.

Runs in a worker thread. Order of work for one request:

1. decode leg: pull the KV blob from the prefill engine (outside the model lock, so a slow
   peer does not stall other requests) and check it (`kv.blob_to_prefix`);
   on failure ``kv_load_failure_policy`` decides: ``fail`` raises `KVLoadFailed`,
   ``recompute`` carries on without it. A prefill leg that names a decode engine's retained
   KV (`kv.wants_pull`) pulls it the same way and keeps only the positions its prompt
   shares (`kv.blob_to_reusable_prefix`); on any failure it computes the whole prompt;
2. under ``backend.lock``: ``backend.begin`` (prompt evaluation, KV load or export), then
   sample until a stop condition, calling ``emit(token_ids, finish)`` once per token
   (``finish`` is set on the last call) and checking ``cancel`` between tokens;
3. a request with ``retain_kv`` that was not aborted snapshots the KV it holds
   (``Session.retained``) for the next turn of its conversation.

Stop rules follow vLLM's stop checker: nothing stops before ``min_tokens``; then the model's
EOS ids (unless ``ignore_eos``) and ``stop_token_ids`` stop with ``stop_reason`` = that id
(on a tokens-only server EOS arrives as a stop id, wire brief §1.8); then ``max_tokens`` and
the context length stop with ``"length"``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from . import kv
from .backend import Backend, Finish, KVStateError, SamplingSpec, Session


@dataclass(frozen=True)
class Job:
    """One validated generate request as the loop sees it.

    ``kv_params`` is the request's ``kv_transfer_params``; ``export_kv`` / ``import_kv`` say
    which leg of a prefill→decode handoff this is (both False for a plain request).
    """

    request_id: str
    prompt: list[int]
    sampling: SamplingSpec
    kv_params: dict | None = None
    export_kv: bool = False
    import_kv: bool = False
    pull_kv: bool = False
    retain_kv: bool = False


@dataclass
class Outcome:
    """What the loop returns after the last ``emit``.

    ``kv_source``: ``"remote"`` (decode loaded P's KV), ``"recompute"`` (decode leg whose KV
    load failed and policy is recompute), ``"local"`` (computed here, no KV received),
    ``"none"`` (aborted before the prompt was processed).
    ``kv_error`` is the load failure message when ``kv_source == "recompute"`` (or, for a
    prefill that could not pull, ``"local"``).
    ``kv_retained``: ``(token ids, payload)`` kept for the next turn (``retain_kv``).
    """

    finish: Finish
    num_generated: int
    kv_source: str = "local"
    kv_remote_tokens: int = 0
    kv_error: str | None = None
    kv_export: bytes | None = field(default=None, repr=False)
    kv_retained: tuple[list[int], bytes] | None = field(default=None, repr=False)


class KVLoadFailed(Exception):
    """A decode leg could not use P's KV and the policy is ``fail``."""


Emit = Callable[[list[int], "Finish | None"], None]


def run_job(
    backend: Backend,
    job: Job,
    *,
    cancel: threading.Event,
    emit: Emit,
    failure_policy: str = "fail",
    fetch: Callable[[kv.RemoteKV], bytes] = kv.fetch_blob,
) -> Outcome:
    """Generate for ``job``; see the module docstring. Raises `KVLoadFailed`."""
    prefix, kv_error = None, None
    if job.import_kv:
        try:
            blob = fetch(kv.parse_remote(job.kv_params or {}))
            prefix = kv.blob_to_prefix(blob, model_id=backend.model_id, prompt=job.prompt)
        except KVStateError as exc:
            kv_error = str(exc)
    elif job.pull_kv:
        params = job.kv_params or {}
        limit = params.get("remote_num_tokens")
        try:
            blob = fetch(kv.parse_remote(params))
            prefix = kv.blob_to_reusable_prefix(blob, model_id=backend.model_id, prompt=job.prompt,
                                                limit=limit if isinstance(limit, int) else None)
        except KVStateError as exc:
            kv_error = str(exc)
    with backend.lock:
        if cancel.is_set():  # aborted while queued for the model: skip the prompt work
            return Outcome(finish=_abort(emit), num_generated=0, kv_source="none")
        session = None
        if prefix is not None:
            try:
                session = backend.begin(job.prompt, job.sampling, prefix, job.export_kv, cancel)
            except KVStateError as exc:
                prefix, kv_error = None, str(exc)
        if kv_error is not None and job.import_kv and failure_policy != "recompute":
            raise KVLoadFailed(f"KV transfer from the prefill engine failed: {kv_error}")
        if session is None:
            session = backend.begin(job.prompt, job.sampling, None, job.export_kv, cancel)
        finish, produced = _sample(backend, job, session, cancel, emit)
        retained = session.retained() if job.retain_kv and finish.finish_reason != "abort" else None
    return Outcome(
        finish=finish,
        num_generated=produced,
        kv_source="remote" if prefix is not None else ("recompute" if job.import_kv else "local"),
        kv_remote_tokens=len(prefix.token_ids) if prefix is not None else 0,
        kv_error=kv_error,
        kv_export=session.kv_export,
        kv_retained=retained,
    )


def _sample(backend: Backend, job: Job, session: Session, cancel: threading.Event, emit: Emit) -> tuple[Finish, int]:
    sp = job.sampling
    eos = set() if sp.ignore_eos else set(backend.eos_token_ids)
    stop_ids = eos | set(sp.stop_token_ids)
    room = None if backend.max_model_len is None else backend.max_model_len - len(job.prompt)
    limits = [x for x in (sp.max_tokens, room) if x is not None]
    limit = min(limits) if limits else None
    produced = 0
    while True:
        if cancel.is_set():
            return _abort(emit), produced
        token = session.next_token()
        if cancel.is_set():  # aborted while the step ran: do not hand out more
            return _abort(emit), produced
        produced += 1
        finish = None
        if produced >= sp.min_tokens and token in stop_ids:
            finish = Finish("stop", token)
        elif limit is not None and produced >= limit:
            finish = Finish("length")
        elif session.end is not None:
            finish = session.end
        emit([token], finish)
        if finish is not None:
            return finish, produced


def _abort(emit: Emit) -> Finish:
    finish = Finish("abort")
    emit([], finish)
    return finish
