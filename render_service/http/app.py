"""`create_app`: the render server assembled from its route modules."""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..config.serve import ServeConfig
from ..doors import DOORS
from ..errors import OpenAIError
from . import derender_routes, door_routes, info_routes, render_routes
from .common import AppContext, JSONResponse, error_response, http_error_response
from .front import Front, FrontedApp
from .connections import BodyLimits, EarlyAnswers

log = logging.getLogger("render_service.http")

# Feature modules that contribute routes; each exposes `routes(ctx) -> list[Route]`.
ROUTE_MODULES = (render_routes, derender_routes, info_routes, door_routes)


async def _openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
    return error_response(exc)


async def _malformed(request: Request, exc: Exception) -> JSONResponse:
    """Errors that only malformed input reaches (a field of the wrong shape deep in a body,
    nesting past the recursion limit): the client's fault, so a 400, never a 500."""
    log.warning("malformed request on %s: %s: %s", request.url.path, type(exc).__name__, exc)
    if isinstance(exc, RecursionError):  # within the body's 1024 levels, yet past Python's stack (e.g. tool-call arguments)
        return error_response(OpenAIError(400, "Invalid request: a value is nested too deeply to render "
                                               "(e.g. tool-call arguments nested about a thousand levels); flatten it."))
    return error_response(OpenAIError(400, f"Invalid request ({type(exc).__name__}): {exc}"[:500]))


# Registered with starlette's ExceptionMiddleware, which answers and does not re-raise
# (a handler for bare `Exception` is re-raised after the response and drops the connection).
_INPUT_ERRORS = (TypeError, ValueError, AttributeError, LookupError, RecursionError)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s", request.url.path)
    return error_response(OpenAIError(500, f"Internal error ({type(exc).__name__}); this is a bug, please report it."))


def _multimodal_renderer(bundle, config: ServeConfig, run_cpu):
    """A `MultimodalRenderer` when the model directory names a supported vision family, else None."""
    from ..multimodal.families import model_config, takes_media

    if not takes_media(model_config(config.model)):   # a text model: no processor module is imported
        return None
    from ..multimodal import MultimodalRenderer, load_processor
    from ..multimodal.settings import from_serve_config

    processor = load_processor(config.model, bundle.tokenizer)
    if processor is None:
        return None
    from ..multimodal.memory import keep_large_buffers

    keep_large_buffers()
    ids = {m: bundle.tokenizer.token_to_id(tok) for m, tok in processor.placeholder_tokens.items()}
    ids = {m: i for m, i in ids.items() if i is not None}
    # a placeholder string in the text (MiniCPM-V) matches no single token: -1 marks the modality as taken
    ids.update({m: -1 for m in getattr(processor, "placeholder_texts", {})})
    log.info("multimodal: %s for %s", type(processor).__name__, ", ".join(sorted(ids)))
    return MultimodalRenderer(processor, from_serve_config(config), ids, run_cpu)


GENERATION_HINTS = {
    door.path: (f"This is the render tier: it renders ({door.render_path}) and derenders ({door.derender_path}) "
                f"but does not generate. For an OpenAI endpoint that generates, run `render-service drive` (render "
                f"-> prefill -> decode -> derender over tokens-only engines), which serves {door.path}.")
    for door in DOORS.values()
}
"""The 404 of a generation route on ``serve`` says where generation is (vLLM's render server
answers a bare 404 there; ours keeps the status, so routers probing routes see the same)."""


def create_app(bundle, config: ServeConfig) -> Starlette:
    """The render server for ``bundle`` (a `ModelBundle`) configured by ``config``."""
    ctx = AppContext(bundle=bundle, config=config)
    ctx.multimodal = _multimodal_renderer(bundle, config, ctx.run_cpu)
    routes = []
    for module in ROUTE_MODULES:
        routes.extend(module.routes(ctx))
    app = FrontedApp(
        routes=routes,
        exception_handlers={
            OpenAIError: _openai_error,
            HTTPException: http_error_response,
            **{cls: _malformed for cls in _INPUT_ERRORS},
            ArithmeticError: _unexpected,
            RuntimeError: _unexpected,
            OSError: _unexpected,
            Exception: _unexpected,
        },
    )
    # API key, vLLM's HTTP series and ours, admission at the door, the client watch (http/front.py)
    Front(app, ctx.metrics, ctx.admission, routes, keys=config.api_key or ())
    app.state.ctx = ctx
    app.state.not_found_hints = GENERATION_HINTS
    app.state.drain = ctx.drain  # started by connections.HardenedProtocol.shutdown
    app.state.body_limits = BodyLimits(config.body_read_timeout, config.body_min_rate)  # read by connections.py
    app.state.early_answers = EarlyAnswers(ctx.admission, {b"/health": ctx.probe_status, b"/ping": ctx.probe_status})  # connections.py
    return app
