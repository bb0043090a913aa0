"""HTTP face of the reference engine (starlette): the vLLM tokens-only routes plus KV pull.

Routes:
    POST /inference/v1/generate         GenerateRequest → GenerateTokensResponse | SSE (§1.8)
    POST /inference/v1/abort_requests   {"request_ids": [...]} → empty 200 (§1.9)
    POST /abort_requests                same handler (legacy path)
    GET  /kv/{handle}?engine_id=…       a prefill snapshot (`kv` blob), freed once fetched
    GET  /health                        empty 200
    GET  /v1/models                     the served names
    GET  /metrics                       Prometheus text counters (``render_service_engine_*``)
    GET  /stats                         the same counters as JSON

Each generate request runs `generation.run_job` in a worker thread (on the event loop itself
when the backend is ``instant``, a script without token delays, and no KV is fetched over
HTTP); tokens reach the event loop through an asyncio queue as ``("tokens", ids, finish)`` items, then one
``("end", outcome, kv_transfer_params, metrics)`` or ``("error", OpenAIError)``. Abort,
client disconnect and stream cancellation all set the job's ``cancel`` event, which the
loop checks between tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from render_service.errors import OpenAIError, bad_request, not_found
from render_service.http.common import JSONResponse, error_response, http_error_response, read_json
from render_service.wire.validate import validate
from render_service.wire import generate as wire
from render_service.wire import sse

from . import checks, kv
from .backend import Backend
from .generation import Job, KVLoadFailed, Outcome, run_job

log = logging.getLogger("reference_engine")

ROLES = ("prefill", "decode", "both")
FAILURE_POLICIES = ("fail", "recompute")
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")

COUNTERS = {
    "requests": "generate requests accepted",
    "requests_aborted": "requests that ended with finish_reason abort",
    "requests_failed": "requests that ended in an error after acceptance",
    "generated_tokens": "output tokens produced",
    "kv_exported": "prefill snapshots stored for a decode engine",
    "kv_served": "snapshots fetched by a decode engine",
    "kv_fetch_missing": "snapshot fetches for an unknown, fetched or expired handle",
    "kv_loaded": "decode legs that loaded the prefill engine's KV",
    "kv_recomputed": "decode legs that recomputed the prompt after a failed KV load",
    "kv_load_failed": "decode legs that failed because the KV load failed (policy fail)",
    "kv_retained": "answers whose KV was kept under a lease for the conversation's next turn",
    "kv_pulled": "prefill legs that started from a decode engine's retained KV",
    "kv_pull_failed": "prefill legs that could not use the retained KV named and computed the whole prompt",
    "kv_pulled_tokens": "prompt tokens prefill took from retained KV instead of computing them",
}


@dataclass(frozen=True)
class EngineConfig:
    """Engine server settings (one per `render-service engine` flag).

    ``kv_lease_duration`` is in seconds; ``host`` is also what prefill advertises as
    ``remote_host`` unless it is a wildcard (then the Host header the proxy used).
    """

    role: str = "both"
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_names: tuple[str, ...] = ()
    kv_lease_duration: float = 30.0
    kv_load_failure_policy: str = "fail"
    kv_fetch_timeout: float = 10.0
    max_body_bytes: int = 64 << 20


@dataclass(eq=False)
class RunningJob:
    """A job in flight: what abort and disconnect need to reach it."""

    job: Job
    internal_id: str
    advertise_host: str
    queue: asyncio.Queue
    cancel: threading.Event = field(default_factory=threading.Event)
    ended: bool = False
    """The job ran inline (`Engine.start`) and its whole output is in ``queue``."""


class Engine:
    """Shared state of one engine process: backend, KV leases, jobs in flight, counters."""

    def __init__(self, backend: Backend, config: EngineConfig):
        self.backend = backend
        self.config = config
        self.engine_id = str(uuid.uuid4())
        self.started = time.time()
        self.names = list(config.served_model_names) or [backend.default_name]
        self.store = kv.KVLeaseStore(config.kv_lease_duration)
        self.executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="engine")
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._counter_lock = threading.Lock()
        self._jobs: dict[str, set[RunningJob]] = {}

    def count(self, name: str, n: int = 1) -> None:
        with self._counter_lock:
            self.counters[name] += n

    def snapshot(self) -> dict[str, int]:
        """Counters plus lease gauges."""
        with self._counter_lock:
            out = dict(self.counters)
        self.store.sweep()
        out["kv_leases_active"] = len(self.store)
        out["kv_leases_expired"] = self.store.expired
        return out

    # -- jobs -------------------------------------------------------------------------

    def start(self, job: Job, advertise_host: str) -> RunningJob:
        """Register ``job`` for abort and run it in a worker thread."""
        loop = asyncio.get_running_loop()
        run = RunningJob(job, f"{job.request_id}-{uuid.uuid4().hex[:8]}", advertise_host, asyncio.Queue())
        for key in (job.request_id, run.internal_id):
            self._jobs.setdefault(key, set()).add(run)
        self.count("requests")
        # A backend that answers at once (a script without token delays) and a job that fetches
        # no KV over HTTP run right here: no worker thread, no cross-thread wake-up per token.
        inline = getattr(self.backend, "instant", False) and not (job.import_kv or job.pull_kv)

        def put(item: tuple) -> None:
            if inline:
                run.queue.put_nowait(item)
            else:
                loop.call_soon_threadsafe(run.queue.put_nowait, item)

        def work() -> None:
            try:
                outcome = run_job(
                    self.backend,
                    job,
                    cancel=run.cancel,
                    emit=lambda ids, finish: put(("tokens", ids, finish)),
                    failure_policy=self.config.kv_load_failure_policy,
                    fetch=lambda remote: kv.fetch_blob(remote, self.config.kv_fetch_timeout),
                )
                put(("end", outcome, *self._settle(run, outcome)))
            except KVLoadFailed as exc:
                self.count("kv_load_failed")
                self.count("requests_failed")
                put(("error", OpenAIError(500, str(exc))))
            except Exception as exc:  # the engine must answer, not hang
                log.exception("generation failed for %s", job.request_id)
                self.count("requests_failed")
                put(("error", OpenAIError(500, f"generation failed: {exc.__class__.__name__}: {exc}")))
            finally:
                if inline:
                    self._forget(run)
                else:
                    loop.call_soon_threadsafe(self._forget, run)

        if inline:
            work()
            run.ended = True
        else:
            loop.run_in_executor(self.executor, work)
        return run

    def _settle(self, run: RunningJob, outcome: Outcome) -> tuple[dict | None, dict | None]:
        """Store an exported snapshot, count, and build (kv_transfer_params, metrics)."""
        job = run.job
        self.count("generated_tokens", outcome.num_generated)
        if outcome.finish.finish_reason == "abort":
            self.count("requests_aborted")
        params = None
        # vLLM hands KV off only when the prefill leg finished length-capped (§6.1).
        if job.export_kv and outcome.kv_export is not None and outcome.finish.finish_reason == "length":
            blob = kv.pack_blob(
                self.backend.model_id, job.prompt[:-1], outcome.kv_export,
                engine_id=self.engine_id, request_id=run.internal_id,
            )
            handle = self.store.put(blob)
            self.count("kv_exported")
            params = kv.prefill_params(
                engine_id=self.engine_id, request_id=run.internal_id, host=run.advertise_host,
                port=self.config.port, handle=handle, num_tokens=len(job.prompt),
            )
        if outcome.kv_retained is not None and outcome.kv_retained[0]:
            ids, payload = outcome.kv_retained
            blob = kv.pack_blob(self.backend.model_id, ids, payload, engine_id=self.engine_id,
                                request_id=run.internal_id)
            self.count("kv_retained")
            params = kv.retained_params(
                engine_id=self.engine_id, request_id=run.internal_id, host=run.advertise_host,
                port=self.config.port, handle=self.store.put(blob), num_tokens=len(ids),
                lease_seconds=self.config.kv_lease_duration,
            )
        if job.pull_kv:
            self.count("kv_pulled" if outcome.kv_source == "remote" else "kv_pull_failed")
            self.count("kv_pulled_tokens", outcome.kv_remote_tokens)
        elif outcome.kv_source == "remote":
            self.count("kv_loaded")
        elif outcome.kv_source == "recompute":
            self.count("kv_recomputed")
        if not (job.export_kv or job.import_kv or job.retain_kv):
            return params, None
        metrics: dict[str, Any] = {
            "kv_source": outcome.kv_source,
            "kv_remote_tokens": outcome.kv_remote_tokens,
            "kv_computed_prompt_tokens": len(job.prompt) - outcome.kv_remote_tokens,
        }
        if outcome.kv_error is not None:
            metrics["kv_error"] = outcome.kv_error
        return params, metrics

    def _forget(self, run: RunningJob) -> None:
        for key in (run.job.request_id, run.internal_id):
            runs = self._jobs.get(key)
            if runs is not None:
                runs.discard(run)
                if not runs:
                    del self._jobs[key]

    def cancel_all(self) -> None:
        """Cancel every job in flight (shutdown)."""
        for runs in list(self._jobs.values()):
            for run in list(runs):
                run.cancel.set()

    def abort(self, request_id: str) -> int:
        """Cancel every job registered under ``request_id`` (public or internal id)."""
        runs = self._jobs.get(request_id, ())
        for run in runs:
            run.cancel.set()
        return len(runs)

    # -- request → job ----------------------------------------------------------------

    def make_job(self, req: wire.GenerateRequest, header_request_id: str | None) -> Job:
        """Validate a parsed request against this engine. Raises `OpenAIError` (400/404)."""
        checks.check_request(req)
        sampling = checks.sampling_spec(req.sampling_params)
        if req.model is not None and req.model not in self.names:
            raise not_found(
                f"The model `{req.model}` does not exist. Valid aliases: {', '.join(self.names)}.", param="model"
            )
        prompt = req.token_ids
        limit = self.backend.max_model_len
        if limit is not None and len(prompt) >= limit:
            raise bad_request(
                f"The decoder prompt (length {len(prompt)}) is longer than the maximum model length of {limit}; "
                "generation needs at least one free position.",
                param="token_ids",
            )
        try:
            self.backend.check_prompt(prompt)
        except ValueError as exc:
            raise bad_request(str(exc), param="token_ids") from None
        params = req.kv_transfer_params
        export, imp = kv.wants_export(params), kv.wants_import(params)
        role = self.config.role
        if export and imp:
            raise bad_request("kv_transfer_params cannot set both do_remote_decode and do_remote_prefill",
                              param="kv_transfer_params")
        if export and role == "decode":
            raise bad_request("this engine runs --role decode; send prefill legs (do_remote_decode) to a prefill engine",
                              param="kv_transfer_params")
        if imp and role == "prefill":
            raise bad_request("this engine runs --role prefill; send decode legs (do_remote_prefill) to a decode engine",
                              param="kv_transfer_params")
        if export and req.stream:
            raise bad_request("a prefill leg (do_remote_decode) must be non-streaming: stream chunks cannot carry "
                              "kv_transfer_params", param="stream")
        base = header_request_id or req.request_id or uuid.uuid4().hex
        return Job(
            request_id=f"{wire.ENGINE_ID_PREFIX}{base}", prompt=prompt, sampling=sampling,
            kv_params=params, export_kv=export, import_kv=imp,
            pull_kv=kv.wants_pull(params), retain_kv=kv.wants_retain(params) and not export,
        )

    def advertise_host(self, request: Request) -> str:
        """What prefill advertises as ``remote_host``: ``--host``, or for a wildcard bind the
        host name the proxy used to reach us."""
        host = self.config.host
        if host in _WILDCARD_HOSTS:
            return request.url.hostname or "127.0.0.1"
        return host


# -- handlers ---------------------------------------------------------------------------


async def _watch_disconnect(request: Request, run: RunningJob) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    run.cancel.set()


async def _collect(engine: Engine, req: wire.GenerateRequest, run: RunningJob, request: Request) -> Response:
    # a job that ran inline has queued its end already: no disconnect to watch for
    watcher = None if run.ended else asyncio.create_task(_watch_disconnect(request, run))
    tokens: list[int] = []
    try:
        while True:
            item = await run.queue.get()
            if item[0] == "tokens":
                tokens.extend(item[1])
            elif item[0] == "error":
                return error_response(item[1])
            else:
                _, outcome, params, metrics = item
                break
    finally:
        if watcher is not None:
            watcher.cancel()
    job = run.job
    return JSONResponse(
        wire.generate_response(
            request_id=job.request_id, model=req.model or engine.names[0],
            prompt_token_ids=job.prompt if req.return_token_ids else None,
            token_ids=tokens, finish=outcome.finish, num_prompt=len(job.prompt),
            metrics=metrics, kv_transfer_params=params,
        )
    )


async def _stream(req: wire.GenerateRequest, run: RunningJob) -> AsyncIterator[bytes]:
    job = run.job
    opts = req.stream_options
    include_usage = opts is not None and opts.include_usage
    continuous = include_usage and opts.continuous_usage_stats
    first, produced, ahead = True, 0, None
    try:
        while True:
            item, ahead = ahead or await run.queue.get(), None
            if item[0] == "error":
                yield sse.event(item[1].body())
                break
            if item[0] == "end":
                if include_usage:
                    yield sse.event(wire.usage_chunk(job.request_id, wire.usage(len(job.prompt), produced), item[3]))
                break
            ids, finish = list(item[1]), item[2]
            while finish is None and not run.queue.empty():  # coalesce tokens already waiting
                nxt = run.queue.get_nowait()
                if nxt[0] != "tokens":
                    ahead = nxt
                    break
                ids += nxt[1]
                finish = nxt[2]
            metrics = kept = None
            if finish is not None:  # the end item follows at once and carries the metrics
                ahead = await run.queue.get()
                metrics, kept = (ahead[3], ahead[2]) if ahead[0] == "end" else (None, None)
            produced += len(ids)
            chunk = wire.stream_chunk(
                job.request_id, ids, finish,
                usage_info=wire.usage(len(job.prompt), produced) if continuous else None,
                prompt_token_ids=job.prompt if first and req.return_token_ids else None,
                metrics=metrics,
            )
            if kept is not None:  # retain_kv: where the next turn's prefill pulls this answer's KV
                chunk["kv_transfer_params"] = kept
            yield sse.event(chunk)
            first = False
        yield sse.DONE
    finally:
        run.cancel.set()


async def generate(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    try:
        body, prompt = checks.split_prompt(await read_json(request, engine.config.max_body_bytes))
        req = validate(wire.GenerateRequest, body)
        if prompt is not None:
            req.token_ids = prompt
        checks.check_enforceable(body)
        job = engine.make_job(req, request.headers.get("x-request-id"))
        checks.check_vllm_schema(body)  # and refuse what a real vLLM engine refuses that our checks let through
    except OpenAIError as err:
        return error_response(err)
    run = engine.start(job, engine.advertise_host(request))
    if req.stream:
        return StreamingResponse(_stream(req, run), media_type="text/event-stream")
    return await _collect(engine, req, run, request)


async def abort_requests(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    try:
        body = await read_json(request, engine.config.max_body_bytes)
    except OpenAIError as err:
        return error_response(err)
    ids = body.get("request_ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return error_response(bad_request("request_ids must be a list of strings", param="request_ids"))
    for rid in ids:
        engine.abort(rid)
    return Response(status_code=200)


async def fetch_kv(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    handle = request.path_params["handle"]
    wanted = request.query_params.get("engine_id")
    blob = engine.store.take(handle) if wanted in (None, engine.engine_id) else None
    if blob is None:
        engine.count("kv_fetch_missing")
        return error_response(
            not_found(f"KV handle {handle} is unknown to engine {engine.engine_id}, already fetched, or its lease expired")
        )
    engine.count("kv_served")
    return Response(blob, media_type="application/octet-stream")


async def health(request: Request) -> Response:
    return Response(status_code=200)


async def models(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    created = int(engine.started)
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "render-service",
         "root": engine.backend.source, "parent": None, "max_model_len": engine.backend.max_model_len,
         "permission": []}
        for name in engine.names
    ]
    return JSONResponse({"object": "list", "data": data})


async def stats(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    return JSONResponse({"role": engine.config.role, "engine_id": engine.engine_id,
                         "model_id": engine.backend.model_id, "eos_token_ids": engine.backend.eos_token_ids,
                         "counters": engine.snapshot()})


async def metrics(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    lines = []
    for name, value in engine.snapshot().items():
        kind = "gauge" if name == "kv_leases_active" else "counter"
        metric = f"render_service_engine_{name}" + ("_total" if kind == "counter" else "")
        lines += [f"# HELP {metric} {COUNTERS.get(name, name.replace('_', ' '))}", f"# TYPE {metric} {kind}",
                  f"{metric} {value}"]
    return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


def create_app(backend: Backend, config: EngineConfig) -> Starlette:
    """The engine app. ``app.state.engine`` is the `Engine` (tests may poke its counters)."""
    engine = Engine(backend, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(min(1.0, max(config.kv_lease_duration / 4, 0.05)))
                engine.store.sweep()

        task = asyncio.create_task(sweeper())
        try:
            yield
        finally:
            task.cancel()
            engine.cancel_all()
            engine.executor.shutdown(wait=False, cancel_futures=True)

    app = Starlette(
        routes=[
            Route("/inference/v1/generate", generate, methods=["POST"]),
            Route("/inference/v1/abort_requests", abort_requests, methods=["POST"]),
            Route("/abort_requests", abort_requests, methods=["POST"]),
            Route("/kv/{handle:int}", fetch_kv, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/stats", stats, methods=["GET"]),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error_response},
    )
    app.state.engine = engine
    return app
