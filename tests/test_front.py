"""http/front.py: the render server's one front layer calls exact-path routes itself, and
answers as Starlette's own layers would (the same bodies and statuses), for every kind of route."""

from __future__ import annotations

import asyncio

import httpx
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from render_service.errors import OpenAIError
from render_service.http.admission import Admission
from render_service.http.common import error_response, http_error_response
from render_service.http.front import Front, FrontedApp
from render_service.http.metrics import ServiceMetrics


async def ok(request):
    return JSONResponse({"body": (await request.body()).decode(), "path": request.url.path})


async def refused(request):
    raise OpenAIError(422, "no such thing", param="x")


async def broken(request):
    raise RuntimeError("boom")


def sync(request):
    return PlainTextResponse("sync")


class Raw:
    """A raw ASGI endpoint (as the pipes are)."""

    async def __call__(self, scope, receive, send):
        if scope["path"].endswith("fail"):
            raise OpenAIError(409, "raw refused")
        await send({"type": "http.response.start", "status": 201, "headers": [(b"content-length", b"3")]})
        await send({"type": "http.response.body", "body": b"raw"})


class Tag:
    """A per-route middleware: the route must keep it (so Front leaves the route to Starlette)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-tag", b"1")]}
            await send(message)
        await self.app(scope, receive, tagged)


ROUTES = [Route("/v1/ok", ok, methods=["POST", "GET"]), Route("/v1/refused", refused, methods=["POST"]),
          Route("/v1/broken", broken, methods=["POST"]), Route("/v1/sync", sync), Route("/v1/raw", Raw(), methods=["POST"]),
          Route("/v1/rawfail", Raw(), methods=["POST"]), Route("/v1/items/{n:int}", ok),
          Route("/v1/tagged", ok, middleware=[Middleware(Tag)])]


def _app(fronted: bool):
    async def openai_error(request, exc):
        return error_response(exc)

    async def unexpected(request, exc):
        return error_response(OpenAIError(500, f"Internal error ({type(exc).__name__})"))

    from starlette.exceptions import HTTPException

    app = FrontedApp(routes=ROUTES, exception_handlers={OpenAIError: openai_error, HTTPException: http_error_response,
                                                        RuntimeError: unexpected})
    if fronted:
        front = Front(app, ServiceMetrics(), Admission(2, 1.0), ROUTES)
        return app, front
    return app, None


def _answers(app) -> list[tuple]:
    calls = [("POST", "/v1/ok", b"hi"), ("GET", "/v1/ok", b""), ("HEAD", "/v1/ok", b""), ("PUT", "/v1/ok", b""),
             ("POST", "/v1/refused", b""), ("POST", "/v1/broken", b""), ("GET", "/v1/sync", b""),
             ("POST", "/v1/raw", b""), ("POST", "/v1/rawfail", b""), ("GET", "/v1/items/7", b""),
             ("GET", "/v1/tagged", b""), ("GET", "/nowhere", b""), ("GET", "/v1/ok/", b"")]

    async def main():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            out = []
            for method, path, body in calls:
                r = await c.request(method, path, content=body)
                out.append((method, path, r.status_code, r.headers.get("x-tag"), r.headers.get("allow"), r.content))
            return out

    return asyncio.run(main())


def test_front_answers_as_starlettes_own_layers():
    plain, _ = _app(fronted=False)
    fronted, front = _app(fronted=True)
    served = {(path, method) for (path, method) in front.direct}
    # async functions and raw ASGI endpoints at exact paths are called by the front; a sync
    # endpoint, a path with parameters and a route with its own middleware are not
    assert ("/v1/ok", "POST") in served and ("/v1/raw", "POST") in served and ("/v1/ok", "HEAD") in served
    assert not {p for p, _ in served} & {"/v1/sync", "/v1/items/{n:int}", "/v1/tagged"}
    want, got = _answers(plain), _answers(fronted)
    assert got == want
    statuses = {path + " " + method: status for method, path, status, *_ in got}
    assert statuses == {"/v1/ok POST": 200, "/v1/ok GET": 200, "/v1/ok HEAD": 200, "/v1/ok PUT": 405,
                        "/v1/refused POST": 422, "/v1/broken POST": 500, "/v1/sync GET": 200, "/v1/raw POST": 201,
                        "/v1/rawfail POST": 409, "/v1/items/7 GET": 200, "/v1/tagged GET": 200,
                        "/nowhere GET": 404, "/v1/ok/ GET": 307}
    assert [tag for _, path, _, tag, *_ in got if path == "/v1/tagged"] == ["1"]
