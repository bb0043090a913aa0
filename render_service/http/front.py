"""`Front`: what every request to the render server passes before its route, in one layer.

In order: the API key (``--api-key``: 401 before anything is counted), then inside the
request series (`metrics.RequestMetrics`) the ``X-Request-Id`` bound (400), admission at the
door (503 before the body is read; in flight once the body is in: `admission`), the client
watch (`cancel.ClientWatch`), and the route; a render route's 200 gets the conversation's
``X-Session-ID`` (`session_key.echo`). A route whose path is exact and whose endpoint
is an async function (``request -> Response``) or a raw ASGI app (a pipe) is called straight
from here, its exceptions answered by the app's handlers as Starlette would; any other
request (a path with parameters, a 404 or 405, lifespan) goes through the Starlette app's
own stack.

Why one layer: these were four middlewares (API key, metrics, admission, client watch) over
Starlette's three (server errors, handled exceptions, router) and its per-route wrapper, so
a ~50-token render passed eight coroutine frames and five send or receive wrappers before
its handler ran.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .admission import Admission, Overloaded, bad_request_id, send_error
from .cancel import ClientWatch
from .common import authorized, error_response, unauthorized
from .metrics import RequestMetrics, ServiceMetrics, get_route_path
from .session_key import echo as echo_session_key

# vLLM guards /v1, /v2 and /inference; our short aliases of /v1 routes are guarded too.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/render", "/derender")


class FrontedApp(Starlette):
    """A Starlette app with a `Front` (``app.front``, set once the app is built): its middleware
    stack is the app's own middlewares (added with ``add_middleware``: CORS, request logs,
    tracing; they stay outermost), then the front, which hands what it does not serve itself
    to Starlette's own layers (server errors, handled exceptions, router)."""

    front: "Front | None" = None

    def build_middleware_stack(self):
        if self.front is None:
            return super().build_middleware_stack()
        outer, self.user_middleware = self.user_middleware, []
        try:
            self.front.app = super().build_middleware_stack()
        finally:
            self.user_middleware = outer
        app = self.front
        for cls, args, kwargs in reversed(outer):
            app = cls(app, *args, **kwargs)
        return app


class Front(RequestMetrics):
    """The render server's one middleware in front of ``app`` (serving ``routes``), installed
    as ``app.front``; what it does not serve itself goes to ``self.app`` (`FrontedApp` sets it).

    ``keys``: the accepted API keys (empty: no key needed). With keys, paths under
    `GUARDED_PREFIXES` (past the ASGI root path) need ``Authorization: Bearer KEY``;
    ``OPTIONS`` (CORS preflight) passes, as in vLLM; the 401 is in the OpenAI error shape.
    """

    def __init__(self, app: FrontedApp, metrics: ServiceMetrics, admission: Admission, routes: list,
                 keys: tuple[str, ...] = ()) -> None:
        # self.app: the router until FrontedApp builds its stack
        super().__init__(app.router, metrics, {getattr(r, "path", None) for r in routes} - {None})
        self.starlette, self.admission, self.keys = app, admission, keys
        # (path, method) -> (endpoint, True) for a `request -> Response` function, or (ASGI app, False)
        self.direct: dict[tuple[str, str], tuple[Any, bool]] = {}
        for route in routes:
            if isinstance(route, Route) and not route.param_convertors:
                handler = route.endpoint
                while isinstance(handler, functools.partial):
                    handler = handler.func
                takes_request = inspect.isfunction(handler) or inspect.ismethod(handler)  # as Route decides
                if takes_request and not inspect.iscoroutinefunction(handler):
                    continue  # a sync endpoint runs in Starlette's thread pool: its way
                if (route.app is not route.endpoint) if not takes_request else not inspect.isfunction(route.app):
                    continue  # the route wraps its endpoint in middleware (a class instance): its way
                for method in route.methods or ():
                    self.direct[(route.path, method)] = (route.endpoint if takes_request else route.app, takes_request)
        app.front = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (self.keys and scope["type"] == "http" and scope["method"] != "OPTIONS"
                and get_route_path(scope).startswith(GUARDED_PREFIXES)  # past --root-path, as vLLM
                and not authorized(scope["headers"], self.keys)):
            await error_response(unauthorized())(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (bad := bad_request_id(scope["headers"])) is not None:
            await send_error(send, bad, scope["path"])
            return
        if scope["method"] != "POST" or scope["path"].endswith("/pipe"):  # pipes queue per step, watch themselves
            await self.route(scope, receive, send)
            return
        a = self.admission
        if a.overloaded_at_the_door():
            a.refused_at_the_door()
            await send_error(send, Overloaded("Server is at capacity; retry shortly."), scope["path"])
            return
        # in flight only once the whole body is in: a client trickling a body holds a connection
        # (cut by the body deadline), never a place in the queue (300 slow uploads locked out every POST)
        counted = False

        async def receive_and_count():
            nonlocal counted
            message = await receive()
            if not counted and message["type"] == "http.request" and not message.get("more_body", False):
                counted = True
                a.inflight += 1
            return message

        try:
            with ClientWatch(receive_and_count):
                await self.route(scope, receive_and_count, send)
        finally:
            if counted:
                a.inflight -= 1

    async def route(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request's route: its endpoint called here when `direct` has it, else Starlette's stack."""
        found = self.direct.get((get_route_path(scope), scope["method"]))
        if found is None:
            await self.app(scope, receive, send)
            return
        endpoint, takes_request = found
        if not takes_request:  # a raw ASGI endpoint answers by itself (a pipe, a derender chunk)
            try:
                await endpoint(scope, receive, send)
            except Exception as exc:  # answered as Starlette would (after a started answer this start fails, as there)
                await (await self._handled(Request(scope, receive), exc))(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await endpoint(request)
            echo_session_key(scope, response)  # a render route's answer names its conversation (issue 39)
        except Exception as exc:
            response = await self._handled(request, exc)
        await response(scope, receive, send)

    async def _handled(self, request: Request, exc: Exception) -> Response:
        """The app's exception handler's answer for ``exc`` (by its class's MRO, as Starlette
        looks it up); without one, ``exc`` is raised again."""
        handlers: dict[Any, Any] = self.starlette.exception_handlers
        for cls in type(exc).__mro__:
            handler = handlers.get(cls)
            if handler is not None:
                response = await handler(request, exc)
                exc.__traceback__ = None  # a reused instance (a constant error) would pile up tracebacks
                return response
        raise exc
