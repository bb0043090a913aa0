"""Model info and tokenizer routes: ``/v1/models``, ``/health``, ``/version``, ``/load``,
``/tokenize``, ``/detokenize``, ``/metrics`` (wire brief §1.1, §1.10)."""

from __future__ import annotations

import time
from typing import Any, Callable

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel, ConfigDict, NonNegativeInt
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..errors import check_token_ids
from ..render import render_chat
from ..render.request import check_prompt_chars
from ..wire.limits import fail_fast_list
from ..wire.openai import ChatCompletionRequest
from .common import AppContext, JSONResponse, authorized, read_json, unauthorized
from ..wire.validate import validate

_STARTED = int(time.time())


class _TokenizePrompt(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class _Detokenize(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    tokens: fail_fast_list(NonNegativeInt)


class _TokenizerCacheCollector:
    """Segment- and prefix-cache figures of the served tokenizer (issues 6, 24), scraped on demand."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def collect(self):
        stats_of = getattr(self.tokenizer, "cache_stats", None)
        stats = stats_of() if stats_of else {}
        for name in ("hits", "misses", "evictions"):
            counter = CounterMetricFamily(f"render_tokenizer_segment_cache_{name}", f"segment cache {name}")
            counter.add_metric([], stats.get(name, 0))
            yield counter
        gauge = GaugeMetricFamily("render_tokenizer_segment_cache_bytes", "bytes held by the segment cache")
        gauge.add_metric([], stats.get("bytes", 0))
        yield gauge
        prefix_of = getattr(self.tokenizer, "prefix_stats", None)
        prefix = prefix_of() if prefix_of else {}
        for name, doc in (("hits", "prompts that reused the ids of a prompt seen before"),
                          ("misses", "prompts encoded whole"), ("evictions", "prompts evicted"),
                          ("reused_tokens", "prompt tokens reused instead of encoded"),
                          ("encoded_tokens", "prompt tokens encoded"),
                          ("taken_over", "id lists of sent answers that became the next turn's, uncopied")):
            counter = CounterMetricFamily(f"render_tokenizer_prefix_cache_{name}", f"prefix cache: {doc}")
            counter.add_metric([], prefix.get(name, 0))
            yield counter
        # the same two figures under the service's prefix, the ones a multi-replica dashboard reads
        # (issue 39): how much of each prompt a replica took from the turn before instead of tokenizing
        for name, key, doc in (("reused", "reused_tokens", "prompt tokens taken from the agent-turn prefix "
                                "cache (a turn before in this replica) instead of tokenized"),
                               ("tokenized", "encoded_tokens", "prompt tokens tokenized anew")):
            counter = CounterMetricFamily(f"render_service_prompt_tokens_{name}", doc)
            counter.add_metric([], prefix.get(key, 0))
            yield counter
        for name, doc in (("bytes", "bytes held"), ("entries", "prompts held")):
            gauge = GaugeMetricFamily(f"render_tokenizer_prefix_cache_{name}", f"prefix cache: {doc}")
            gauge.add_metric([], prefix.get(name, 0))
            yield gauge


def load_route(server_load: Callable[[], int], saturation: Callable[[], float] | None = None) -> Route:
    """``GET /load`` → ``{"server_load": N}`` (vLLM's route; N = ``server_load()``, the
    requests in flight), plus ``"saturation"`` (``saturation()``, 0..1; 1 = new requests
    are refused with 503: `Admission.saturation`) where the server has a CPU pool. Served
    by ``serve`` and ``drive``."""

    async def load(request: Request) -> JSONResponse:
        out: dict[str, Any] = {"server_load": server_load()}
        if saturation is not None:
            out["saturation"] = round(saturation(), 3)
        return JSONResponse(out)

    return Route("/load", load, methods=["GET"])


def routes(ctx: AppContext) -> list[Route]:
    """Info, tokenize and metrics routes bound to ``ctx``."""
    bundle = ctx.bundle
    ctx.metrics.add_collector(_TokenizerCacheCollector(bundle.tokenizer))
    ctx.metrics.add_collector(ctx.admission.collector())
    if ctx.multimodal is not None:   # the processor cache's figures (multimodal/cache.py)
        ctx.metrics.add_collector(ctx.multimodal.cache)

    def card(name: str, root: str, parent: str | None, max_model_len: int | None) -> dict:
        return {
            "id": name, "object": "model", "created": _STARTED, "owned_by": "render-service",
            "root": root, "parent": parent, "max_model_len": max_model_len,
            "permission": [{
                "id": f"modelperm-{bundle.fingerprint[:16]}", "object": "model_permission",
                "created": _STARTED, "allow_create_engine": False, "allow_sampling": True,
                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False,
            }],
        }

    # vLLM's main API server (`OpenAIServingModels.show_available_models`): the base model's names,
    # then each LoRA adapter with its path as root, its base model as parent and no max_model_len.
    # Made on the first call: the fingerprint serializes the tokenizer, which start-up does not wait for.
    cards: list[dict] = []

    async def models(request: Request) -> JSONResponse:
        if not cards:
            cards.extend([card(name, bundle.source, None, bundle.max_model_len) for name in bundle.served_model_names]
                         + [card(m["name"], m["path"], m["base_model_name"] or bundle.model_name, None)
                            for m in ctx.config.lora_modules])
        return JSONResponse({"object": "list", "data": cards})

    async def health(request: Request) -> Response:
        # also answered by the connection itself (connections.Door), before the app
        return Response(status_code=ctx.probe_status())

    async def version(request: Request) -> JSONResponse:
        return JSONResponse({"version": __version__})

    async def ping(request: Request) -> Response:
        # SageMaker's health probe, as vLLM answers it (GET and POST)
        return Response(status_code=ctx.probe_status())

    async def tokenize(request: Request) -> JSONResponse:
        body = await read_json(request, ctx.config.max_body_bytes)
        if isinstance(body, dict) and "messages" in body:
            req = validate(ChatCompletionRequest, body)
            # A request template is code: /tokenize runs it only for callers render would accept.
            with_template = req.chat_template is not None or "chat_template" in (req.chat_template_kwargs or {})
            if with_template and ctx.config.api_key and not authorized(request.scope["headers"], ctx.config.api_key):
                raise unauthorized()
            ctx.check_model(req.model)
            rendered = await ctx.run_cpu(render_chat, bundle, ctx.config, req, "tokenize")
            ids = rendered["token_ids"]
            want_strs = bool(body.get("return_token_strs"))
        else:
            req = validate(_TokenizePrompt, body)
            ctx.check_model(req.model)
            check_prompt_chars(bundle, req.prompt, None)  # refused before the tokenizer spends on it
            ids = await ctx.run_cpu(bundle.tokenizer.encode, req.prompt, req.add_special_tokens)
            want_strs = req.return_token_strs
        out: dict[str, Any] = {"count": len(ids), "max_model_len": bundle.max_model_len, "tokens": ids,
                               "token_strs": [bundle.tokenizer.id_to_token(i) for i in ids] if want_strs else None}
        return JSONResponse(out)

    async def detokenize(request: Request) -> JSONResponse:
        req = validate(_Detokenize, await read_json(request, ctx.config.max_body_bytes))
        ctx.check_model(req.model)
        check_token_ids(req.tokens, bundle.tokenizer.vocab_size, "tokens")
        # special tokens kept, as vLLM's /detokenize (its recorded answer for <|im_start|>user: "<|im_start|>user")
        return JSONResponse({"prompt": await ctx.run_cpu(bundle.tokenizer.decode, req.tokens, False)})

    async def metrics(request: Request) -> Response:
        return Response(ctx.metrics.exposition(), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        load_route(lambda: ctx.metrics.server_load, ctx.admission.saturation),
        Route("/ping", ping, methods=["GET", "POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
