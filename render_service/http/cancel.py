"""Notice when a client leaves, so work done for it can stop (issue 14 §1).

uvicorn does not cancel a handler whose client disconnected; a render kept running for a
client that was gone. Each POST request gets a `ClientWatch` (from `front.Front`); when
the request's work goes to the CPU pool (`AppContext.run_cpu` calls `watch_client`, after the
body was read), the watch starts: it sets `render_service.model.template_sandbox.CLIENT_GONE`
(an event, visible to pool threads because `run_cpu` runs them in a copy of the request's
context) and fires it when the client disconnects. Work that can be stopped polls it: the
template sandbox kills the worker process rendering for that client. A request answered on
the event loop (a small render, inline) never starts one: a task and two events per request
were 4% of a ~50-token render's CPU.

Streaming routes (paths ending in ``/pipe``) read their own body while they answer, and
stop on disconnect by themselves, so they are not watched.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading

from starlette.types import Receive

from ..model.template_sandbox import CLIENT_GONE


class ClientWatch:
    """One request's watch for its client leaving, started on demand (`watch_client`): the
    request is served inside ``with ClientWatch(receive):``, which stops the watch at its end."""

    __slots__ = ("receive", "task", "token")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.task: asyncio.Task | None = None

    def __enter__(self) -> "ClientWatch":
        self.token = _WATCH.set(self)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.task is not None:
            self.task.cancel()
        _WATCH.reset(self.token)

    def start(self) -> None:
        """Set `CLIENT_GONE` in the current context and fire it when the client disconnects
        (the request's body must have been read: the next ``receive()`` is the disconnect)."""
        if self.task is not None:
            return
        gone = threading.Event()
        CLIENT_GONE.set(gone)

        async def watch() -> None:
            if (await self.receive())["type"] == "http.disconnect":
                gone.set()

        self.task = asyncio.get_running_loop().create_task(watch())


_WATCH: contextvars.ContextVar[ClientWatch | None] = contextvars.ContextVar("client_watch", default=None)


def watch_client() -> None:
    """Start the current request's `ClientWatch` (no-op outside a watched request). Call it
    after the body was read and before work is handed to another thread."""
    watch = _WATCH.get()
    if watch is not None:
        watch.start()
