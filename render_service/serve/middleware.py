"""The two ASGI middlewares of vLLM's flags: ``--enable-request-id-headers`` and
``--enable-log-requests``."""

from __future__ import annotations

import logging

log = logging.getLogger("render_service.serve.cli")


class RequestIdHeaderMiddleware:
    """``--enable-request-id-headers``: each response carries ``X-Request-Id`` (the request's own,
    else a random uuid4 hex), as vLLM's `XRequestIdMiddleware`."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import uuid

        from ..wire.limits import MAX_REQUEST_ID_CHARS

        given = dict(scope.get("headers") or []).get(b"x-request-id")
        # one too long to echo is refused by the app (http.admission); its 400 does not repeat it
        request_id = given if given and len(given) <= MAX_REQUEST_ID_CHARS else uuid.uuid4().hex.encode()

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", request_id)]}
            await send(message)

        await self.app(scope, receive, send_with_id)


class RequestLogMiddleware:
    """``--enable-log-requests``: one log line per request (method, path, status, milliseconds)."""

    def __init__(self, app, max_log_len: int | None = None) -> None:
        self.app = app
        self.max_log_len = max_log_len

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import time

        start = time.perf_counter()
        status = [0]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope.get("path", "")
            if self.max_log_len is not None:
                path = path[: self.max_log_len]
            log.info("request %s %s -> %d in %.1f ms", scope.get("method"), path, status[0],
                     (time.perf_counter() - start) * 1000)
