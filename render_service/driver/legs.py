"""Legs and attempts: one rendered prompt through the prefill and decode engines.

- `prefill_leg` / `decode_leg`: a rendered `GenerateRequest` → the two engine bodies
  (wire brief §6.1). Both legs go to tokens-only engines, which reject ``stop`` strings
  (§1.8): the driver strips them and derender applies them to the decoded text instead
  (and the driver aborts decode once derender has seen one). ``model`` is dropped: the
  driver already checked it against its own served names, and engines may serve the same
  weights under another name.
- `Leg`: runs them (HTTP), `Attempts`: which instance to try next when one cannot be
  reached, `RequestScope`: the engine requests to abort once the client request is over,
  `Collected`: a decode stream folded back into one ``GenerateTokensResponse``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator

import httpx
import orjson

from ..render import new_request_id
from ..wire import sse
from ..wire.generate import ENGINE_ID_PREFIX, OUTPUT_KIND_DELTA, OUTPUT_KIND_FINAL_ONLY
from .upstream import (HopError, Pool, error_from_event, error_from_exception, error_from_status, post_json,
                       sse_data, upstream_client)

if TYPE_CHECKING:
    from .timing import DriverMetrics, HopTimer

log = logging.getLogger("render_service.driver")

GENERATE_PATH = "/inference/v1/generate"

# §6.1 step 2: what the proxy sends prefill so that it keeps the KV for a remote decode.
PREFILL_KV_PARAMS: dict[str, Any] = {
    "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
    "remote_block_ids": None, "remote_host": None, "remote_port": None,
}


def prefill_leg(gen: dict[str, Any], pull: dict | None = None) -> dict[str, Any]:
    """The prefill leg: ``max_tokens`` 1, ``min_tokens`` 0, non-streaming, no
    ``stream_options``, `PREFILL_KV_PARAMS` (plus ``pull``: the ``remote_*`` fields of a
    decode engine's retained KV to start from, `conversations.plan_reuse`).

    The one sampled token is discarded, so prefill also gets ``ignore_eos`` and no stop
    ids: KV is handed off only when prefill ends length-capped (§6.1), and an EOS as the
    first token would otherwise end it with ``stop`` and no ``kv_transfer_params``.
    """
    sp = dict(gen.get("sampling_params") or {})
    sp.update(max_tokens=1, min_tokens=0, stop=[], stop_token_ids=[], ignore_eos=True,
              output_kind=OUTPUT_KIND_FINAL_ONLY)
    return {**gen, "sampling_params": sp, "model": None, "stream": False, "stream_options": None,
            "kv_transfer_params": {**PREFILL_KV_PARAMS, **(pull or {})}}


def decode_leg(gen: dict[str, Any], kv_transfer_params: dict | None, continuous_usage: bool = False,
               retain: bool = False) -> dict[str, Any]:
    """The decode leg: the original rendered request (full ``max_tokens``, ``min_tokens``)
    with prefill's ``kv_transfer_params`` verbatim (None: decode computes the prompt
    itself), plus ``retain_kv`` when the conversation's next turn may pull this answer's KV.
    Always streamed, whatever the client asked, so a stop string found by derender can end
    generation early; ``include_usage`` so the final usage and the engine's ``metrics`` arrive."""
    sp = dict(gen.get("sampling_params") or {})
    sp.update(stop=[], output_kind=OUTPUT_KIND_DELTA)
    if retain:
        kv_transfer_params = {**(kv_transfer_params or {}), "retain_kv": True}
    return {**gen, "sampling_params": sp, "model": None, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": continuous_usage},
            "kv_transfer_params": kv_transfer_params}


@dataclass
class RequestScope:
    """Cleanup owed by one client request: engine legs ``(hop, url, engine_request_id)`` to abort."""

    to_abort: list[tuple[str, str, str]] = field(default_factory=list)
    abort_reason: str = "error"

    @contextlib.contextmanager
    def leg(self, hop: str, url: str, engine_id: str) -> Iterator[None]:
        """Record an abort for this leg if the block ends other than with a complete answer."""
        try:
            yield
        except HopError as exc:
            if not (exc.unreachable or exc.answered):
                self.to_abort.append((hop, url, engine_id))
            raise
        except BaseException:
            self.to_abort.append((hop, url, engine_id))
            raise


class Upstreams:
    """What legs use of the driver: the prefill/decode pools, the shared HTTP client, the
    metrics, the bidirectional-KV book (`conversations.KVReuse`, or None) and the observer.
    Legs take this, never the `Driver`, so nothing below the driver calls back into it.

    Args:
        config: `DriverConfig` (pools from ``prefill`` / ``decode``, client timeouts and limits).
        metrics: `DriverMetrics`.
        kv_reuse: `KVReuse` when ``drive --kv-reuse``, else None.
        observer: optional ``observer(event, info)`` called synchronously at hop boundaries.
    """

    def __init__(self, config: Any, metrics: "DriverMetrics", kv_reuse: Any = None,
                 observer: Callable[[str, dict], None] | None = None) -> None:
        self.config, self.metrics, self.kv_reuse, self.observer = config, metrics, kv_reuse, observer
        self.pools = {"prefill": Pool("prefill", config.prefill), "decode": Pool("decode", config.decode)}
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        """The shared HTTP client (created on first use, inside the serving event loop)."""
        if self._client is None:
            c = self.config
            self._client = upstream_client(httpx.Timeout(c.timeout, connect=c.connect_timeout),
                                           httpx.Limits(max_connections=c.max_connections, max_keepalive_connections=256))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def notify(self, event: str, info: dict) -> None:
        if self.observer is not None:
            self.observer(event, info)

    def attempts(self, hop: str, key: str | None) -> "Attempts":
        return Attempts(self, self.pools[hop], key)


class Leg:
    """One rendered prompt on its way through prefill and decode."""

    def __init__(self, upstreams: "Upstreams", gen: dict, conversation: str | None, scope: RequestScope,
                 timer: HopTimer) -> None:
        self.upstreams, self.gen, self.conversation, self.scope, self.timer = upstreams, gen, conversation, scope, timer
        self.prompt: list[int] = gen["token_ids"]
        self.n = int((gen.get("sampling_params") or {}).get("n") or 1)
        self.keeps_stop_text = bool((gen.get("sampling_params") or {}).get("include_stop_str_in_output"))
        rid = str(gen.get("request_id") or new_request_id())
        self.engine_id = ENGINE_ID_PREFIX + rid
        self.headers = {"X-Request-Id": rid}
        if conversation is not None:
            self.headers["X-Session-ID"] = conversation
        self.kv_params: dict | None = None
        self.prefill_done = 0.0
        # Bidirectional KV reuse (`conversations.KVReuse.prepare`): what prefill pulls, whether
        # decode keeps its KV, where the outcome is reported; then what decode produced.
        self.pull: dict | None = None
        self.retain = False
        self.report: dict | None = None
        self.decode_url: str | None = None
        self.output: list[int] = []
        self.kept: dict | None = None
        # Called once the decode engine has answered 200, before its first token (a stream's
        # response head goes out there, so the client's TTFT is the engine's).
        self.on_decode_start: Callable[[], Awaitable[None]] | None = None

    async def prefill(self) -> None:
        """Run the prefill leg; keeps its ``kv_transfer_params`` for decode."""
        pool, client = self.upstreams.pools["prefill"], self.upstreams.client()
        body = prefill_leg(self.gen, self.pull)
        with self.timer.measure("prefill"):
            attempts = self.upstreams.attempts("prefill", self.conversation)
            for url in attempts:
                with pool.use(url), self.scope.leg("prefill", url, self.engine_id):
                    try:
                        resp = await post_json(client, "prefill", url, GENERATE_PATH, body, self.headers)
                    except HopError as exc:
                        if exc.unreachable:
                            attempts.failed(exc)
                            continue
                        raise
                break
        self.prefill_done = time.perf_counter()
        params = resp.get("kv_transfer_params") if isinstance(resp, dict) else None
        self.kv_params = params if isinstance(params, dict) else None
        if self.report is not None and self.upstreams.kv_reuse is not None:
            self.upstreams.kv_reuse.observe_prefill(self, resp.get("metrics") if isinstance(resp, dict) else None)
        self.upstreams.notify("prefill_done", {"request_id": self.engine_id, "url": url,
                                            "kv_transfer_params": self.kv_params})

    async def decode_events(self, continuous_usage: bool) -> AsyncIterator[dict]:
        """The decode leg's SSE chunks as dicts, until ``[DONE]``.

        Raises:
            HopError: connect failure on every instance (503), non-200 answer, an error
            event in the stream (502), timeout (504), broken connection (502).
        """
        pool, client = self.upstreams.pools["decode"], self.upstreams.client()
        content = orjson.dumps(decode_leg(self.gen, self.kv_params, continuous_usage, self.retain))
        headers = {"content-type": "application/json", **self.headers}
        attempts = self.upstreams.attempts("decode", self.conversation)
        for url in attempts:
            request = client.build_request("POST", url + GENERATE_PATH, content=content, headers=headers)
            with self.scope.leg("decode", url, self.engine_id):
                try:
                    response = await client.send(request, stream=True)
                except httpx.HTTPError as exc:
                    err = error_from_exception("decode", url, exc)
                    if err.unreachable:
                        attempts.failed(err)
                        continue
                    raise err from None
            break
        with pool.use(url), self.scope.leg("decode", url, self.engine_id):
            try:
                if response.status_code != 200:
                    raise error_from_status("decode", url, response.status_code, await response.aread())
                if self.on_decode_start is not None:
                    await self.on_decode_start()
                events = sse_data(response)
                async for data in events:
                    if sse.is_done(data):
                        await _drain(events)
                        return
                    try:
                        chunk = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        raise HopError("decode", 502, f"decode hop failed: {url} sent an event that is not JSON.") from None
                    if isinstance(chunk, dict) and "error" in chunk:  # the engine ended the request and says why
                        raise error_from_event("decode", url, chunk["error"])
                    self._held(url, chunk)
                    yield chunk
                raise HopError("decode", 502, f"decode hop failed: the stream from {url} ended without [DONE].")
            except httpx.HTTPError as exc:
                raise error_from_exception("decode", url, exc) from None
            except sse.SSEError as exc:
                raise HopError("decode", 502, f"decode hop failed: {url} sent an {exc}.") from None
            finally:
                await response.aclose()


    def _held(self, url: str, chunk: dict) -> None:
        """Keep what the conversation's next turn needs: choice 0's ids, the decode instance
        and its retained-KV params (last chunk)."""
        self.decode_url = url
        for c in chunk.get("choices") or []:
            if c.get("index", 0) == 0:
                self.output += c.get("token_ids") or []
        if isinstance(chunk.get("kv_transfer_params"), dict):
            self.kept = chunk["kv_transfer_params"]


async def relay(leg: Leg, session: Any, continuous_usage: bool) -> AsyncIterator[tuple[dict, dict | None]]:
    """``leg``'s decode chunks, each with its derendered view (``await session.step(chunk)``;
    None without ``session``). Stops, cutting decode, once derender has finished every
    choice the engine has not (a stop string): ``leg.scope.abort_reason`` says so."""
    timer, first = leg.timer, None
    derendered: set[int] = set()
    engine_done: set[int] = set()
    events = leg.decode_events(continuous_usage)
    try:
        async for chunk in events:
            if first is None:
                first = time.perf_counter()
                timer.add("kv_handoff", first - leg.prefill_done)
            metrics = chunk.get("metrics")
            if isinstance(metrics, dict) and metrics.get("kv_source"):
                timer.kv_source = str(metrics["kv_source"])
            for c in chunk.get("choices") or []:
                if c.get("finish_reason"):
                    engine_done.add(c.get("index", 0))
                    if not leg.keeps_stop_text:
                        _unname_stop_token(c)
            out = None
            if session is not None:
                with timer.measure("derender"):
                    out = await session.step(chunk)
                derendered.update(c.get("index", 0) for c in out.get("choices") or [] if c.get("finish_reason"))
            yield chunk, out
            if len(derendered) >= leg.n and len(engine_done) < leg.n:
                leg.scope.abort_reason = "stop_string"
                break
    finally:
        await events.aclose()
        if first is not None:
            timer.add("decode", time.perf_counter() - first)


DRAIN_SECONDS = 0.5
"""How long the end of a decode body may lag its ``[DONE]`` before the connection is dropped."""


async def _drain(events: AsyncIterator[bytes]) -> None:
    """Read a decode stream to its end after ``[DONE]`` (the engine ends the body right
    after it), so its kept-alive connection goes back to the pool: httpx closes one whose
    body was not read whole, and every decode leg then paid a new TCP connection."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass
    except (TimeoutError, httpx.HTTPError, sse.SSEError):
        pass  # the connection is closed instead


def _unname_stop_token(choice: dict) -> None:
    """A choice that stopped on its last token: ``stop_reason`` null, as vLLM's server would
    say it before derender works it out.

    A ``--tokens-only`` engine has no tokenizer, so render puts the model's EOS ids among the
    stop ids and the engine names the EOS it stopped on (``stop_reason: 2``), where vLLM's
    server, which checks its tokenizer's EOS first, says null. Given null and the token,
    derender reports what vLLM's server does (wire brief §3.2 step 2): null for the
    tokenizer's EOS unless ``ignore_eos``, else the id when it is one of the request's stop
    ids or the generation config's EOS ids. (With ``include_stop_str_in_output`` derender
    skips that step, so the caller leaves the engine's value.)
    """
    reason, ids = choice.get("stop_reason"), choice.get("token_ids")
    if choice["finish_reason"] == "stop" and type(reason) is int and ids and ids[-1] == reason:
        choice["stop_reason"] = None


class Attempts:
    """The instances of one hop to try for one leg, best first (`Pool.order`). Iterating
    past the last one raises a single 503 that lists every connect failure."""

    def __init__(self, upstreams: "Upstreams", pool: Pool, key: str | None) -> None:
        self.upstreams, self.pool, self.order = upstreams, pool, pool.order(key)
        self.errors: list[str] = []

    def __iter__(self) -> Iterator[str]:
        yield from self.order
        hop = self.pool.hop
        raise HopError(hop, 503, f"{hop} hop failed: no {hop} engine could be reached: {'; '.join(self.errors)}.")

    def failed(self, err: HopError) -> None:
        """The last instance yielded could not be connected to; the next one is tried."""
        log.warning("%s", err.message)
        self.upstreams.metrics.upstream_errors.labels(self.pool.hop, "connect").inc()
        self.errors.append(err.message.removeprefix(f"{self.pool.hop} hop failed: ").rstrip("."))


class Collected:
    """A decode stream folded into the non-streaming ``GenerateTokensResponse`` (§1.8)."""

    def __init__(self, leg: Leg) -> None:
        self.leg = leg
        self.request_id = leg.engine_id
        self.choices: dict[int, dict] = {}
        self.usage: dict | None = None
        self.metrics: Any = None
        self.prompt_token_ids: list[int] | None = None

    def add(self, chunk: dict) -> None:
        self.request_id = chunk.get("request_id") or self.request_id
        self.usage = chunk.get("usage") or self.usage
        self.metrics = chunk.get("metrics") or self.metrics
        self.prompt_token_ids = self.prompt_token_ids or chunk.get("prompt_token_ids")
        for c in chunk.get("choices") or []:
            acc = self.choices.setdefault(c.get("index", 0), {"token_ids": [], "finish_reason": None,
                                                             "stop_reason": None, "logprobs": None})
            acc["token_ids"] += c.get("token_ids") or []
            if c.get("finish_reason"):
                acc["finish_reason"], acc["stop_reason"] = c["finish_reason"], c.get("stop_reason")
            if c.get("logprobs"):
                lp = acc["logprobs"] or {"content": []}
                lp["content"] += c["logprobs"].get("content") or []
                acc["logprobs"] = lp

    def response(self) -> dict:
        """Raises `HopError` (502) when a choice ended without a single token."""
        choices = []
        for index in sorted(self.choices):
            c = self.choices[index]
            if not c["token_ids"]:
                raise HopError("decode", 502, f"decode hop failed: the engine ended choice {index} without a token "
                                              f"(finish_reason {c['finish_reason']!r}).", answered=True)
            # A choice cut short by the driver (stop string) has no engine finish: "abort"
            # tells derender nothing was dropped; it reports the stop string it finds.
            choices.append({"index": index, "finish_reason": c["finish_reason"] or "abort",
                            "stop_reason": c["stop_reason"], "token_ids": c["token_ids"], "routed_experts": None,
                            "sampling_mask": None, "weight_versions": None, "logprobs": c["logprobs"]})
        if not choices:
            raise HopError("decode", 502, "decode hop failed: the engine stream carried no tokens.", answered=True)
        completion = sum(len(c["token_ids"]) for c in choices)
        usage = self.usage or {"prompt_tokens": len(self.leg.prompt), "completion_tokens": completion,
                               "total_tokens": len(self.leg.prompt) + completion}
        return {"request_id": self.request_id, "model": None, "created": int(time.time()), "usage": usage,
                "prompt_logprobs": None, "prompt_token_id_logprobs": None,
                "prompt_token_ids": self.prompt_token_ids, "mm_placeholders": None, "metrics": self.metrics,
                "kv_transfer_params": None, "ec_transfer_params": None, "output_mode": "tokens",
                "choices": choices}
