"""Notice when a client leaves, so work done for it can stop (issue 14 §1).

uvicorn does not cancel a handler whose client disconnected; a render kept running for a
client that was gone. `ClientGoneMiddleware` watches each JSON route's connection once the
request body has been read, and sets `render_service.model.template_sandbox.CLIENT_GONE`
(an event, visible to CPU-pool threads because `AppContext.run_cpu` runs them in a copy of
the request's context) when the client disconnects. Work that can be stopped polls it: the
template sandbox kills the worker process rendering for that client.

Streaming routes (paths ending in ``/pipe``) read their own body while they answer, and
stop on disconnect by themselves, so they are not watched.
"""

from __future__ import annotations

import asyncio
import threading

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..model.template_sandbox import CLIENT_GONE


class ClientGoneMiddleware:
    """Set `CLIENT_GONE` for each POST request and fire it when the client disconnects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].endswith("/pipe"):
            await self.app(scope, receive, send)
            return
        gone = threading.Event()
        body_read = asyncio.Event()

        async def tracked_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                body_read.set()
            return message

        async def watch() -> None:
            await body_read.wait()
            if (await receive())["type"] == "http.disconnect":
                gone.set()

        token = CLIENT_GONE.set(gone)
        watcher = asyncio.create_task(watch())
        try:
            await self.app(scope, tracked_receive, send)
        finally:
            watcher.cancel()
            CLIENT_GONE.reset(token)
