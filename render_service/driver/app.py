"""The driver's HTTP face (starlette).

| route | answer |
|---|---|
| ``POST /v1/chat/completions`` | OpenAI chat completion, JSON or SSE (``stream: true``) |
| ``POST /v1/completions`` | OpenAI completion, JSON or SSE |
| ``POST /v1/responses`` | OpenAI Responses ``Response``, or its typed SSE events (``stream: true``) |
| ``POST /v1/messages`` | Anthropic ``message``, or its content-block SSE events; errors in Anthropic's shape |
| ``POST /v1/messages/count_tokens`` | ``{"input_tokens"}``: the rendered prompt's length |
| ``GET /v1/models`` | the served model (in-process render) or the render server's list |
| ``GET /version`` | in-process render only |
| ``GET /load`` | ``{"server_load": N}``, N the client requests in flight (serve's route) |
| ``GET /health`` | ``{"prefill": {url: state}, "decode": {…}[, "render": {…}]}``; 503 unless every hop has a healthy instance |
| ``GET /metrics`` | Prometheus text (``render_service_driver_*``) |

The four request routes are raw ASGI endpoints: the request runs in its own task while
the endpoint waits for ``http.disconnect``; a client that goes away cancels the task (the
engine connections close) and the engine legs still in flight are aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable

import httpx

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import OpenAIError, bad_request
from ..http import info_routes
from ..http.admission import RequestIdLimitMiddleware
from ..http.connections import BodyLimits
from ..http.common import JSONResponse, error_response, http_error_response, read_json
from ..doors import DOORS, Door
from ..http.drain import Drain, answer_cut, shutting_down
from .flow import Driver
from .legs import RequestScope
from ..http.responder import Responder
from .upstream import error_from_exception


async def _until_disconnect(receive: Callable) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class DriveEndpoint:
    """``POST`` handler for one kind (``"chat"``, ``"completion"``, ``"responses"``,
    ``"messages"``) of request."""

    def __init__(self, driver: Driver, kind: str, drain: Drain) -> None:
        self.driver, self.kind, self.drain = driver, kind, drain

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        request = Request(scope, receive)
        out = Responder(send)
        try:
            body = await read_json(request, self.driver.config.serve.max_body_bytes)
            if not isinstance(body, dict):
                raise bad_request("Request body must be a JSON object.")
        except OpenAIError as err:
            self.driver.metrics.requests.labels(self.kind, str(err.status)).inc()
            await out.json(err.status, DOORS[self.kind].error_body(err), {})
            return
        rscope = RequestScope()
        work = asyncio.create_task(self.driver.handle(self.kind, body, request.headers, out, rscope))
        gone = asyncio.create_task(_until_disconnect(receive))
        self.drain.track(work, rscope)
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():  # the client went away first
                rscope.abort_reason = "client_disconnect"
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
            elif shutting_down(work, rscope):  # the drain ended it: say so, then abort its legs
                await answer_cut(out, DOORS[self.kind])
        finally:
            self.drain.untrack(work)
            gone.cancel()
            await self.driver.flush_aborts(rscope)


def create_app(driver: Driver) -> Starlette:
    """The driver app; ``app.state.driver`` is the `Driver`, ``app.state.drain`` its `Drain`."""
    drain = Drain()

    async def health(request: Request) -> Response:
        status, body = await driver.health()
        return JSONResponse(body, status_code=status)

    def count_tokens(door: Door):
        async def handle(request: Request) -> Response:
            try:
                body = await read_json(request, driver.config.serve.max_body_bytes)
            except OpenAIError as err:
                return JSONResponse(door.error_body(err), status_code=err.status)
            status, answer = await driver.doors.count_tokens(door, body)
            return JSONResponse(answer, status_code=status)
        return handle

    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(driver.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    routes = [
        *(Route(door.path, DriveEndpoint(driver, name, drain), methods=["POST"]) for name, door in DOORS.items()),
        *(Route(door.count_tokens_path, count_tokens(door), methods=["POST"])
          for door in DOORS.values() if door.count_tokens is not None),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        info_routes.load_route(driver.metrics.server_load),
    ]
    if driver.config.render:
        async def models(request: Request) -> Response:
            try:
                r = await driver.client().get(driver.config.render + "/v1/models")
            except httpx.HTTPError as exc:
                return error_response(error_from_exception("render", driver.config.render, exc))
            return Response(r.content, status_code=r.status_code, media_type="application/json")

        routes.append(Route("/v1/models", models, methods=["GET"]))
    else:
        from ..http.common import AppContext

        # The render server's own /v1/models and /version, bound to the same model.
        ctx = AppContext(bundle=driver.hops.bundle, config=driver.hops.config)
        routes += [r for r in info_routes.routes(ctx) if r.path in ("/v1/models", "/version")]

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        try:
            yield
        finally:
            await driver.aclose()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={OpenAIError: lambda req, exc: error_response(exc),
                                        HTTPException: http_error_response})
    app.add_middleware(RequestIdLimitMiddleware)
    app.state.driver = driver
    app.state.drain = drain
    app.state.body_limits = BodyLimits(driver.config.serve.body_read_timeout, driver.config.serve.body_min_rate)
    return app
