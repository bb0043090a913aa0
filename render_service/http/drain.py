"""Graceful shutdown of ``drive`` and of ``serve``'s derender pipes (shared by both: http/ is below driver/).

On SIGTERM uvicorn stops accepting and waits for the requests in flight. A stream of a
long generation can outlast any grace period, and uvicorn then cancels it mid-body: the
client sees a cut stream with neither an error event nor ``[DONE]``, and the engines keep
generating for nobody. `DrainingServer` starts a `Drain` when uvicorn begins its shutdown:
requests still running at ``--graceful-shutdown-timeout`` are ended by the driver itself —
their engine legs aborted, a stream closed with an error event and ``[DONE]``, a request
that had not answered yet given 503 + ``Retry-After`` — a few seconds before uvicorn's own
cut (`CUT_MARGIN_S`). ``serve`` has no server subclass (``--workers`` runs uvicorn's own):
its connections start the drain when uvicorn shuts them down
(`render_service.http.connections`), and a derender pipe whose engine side went quiet ends
with an error event, ``[DONE]`` (chat, completions) and the chunked terminator, instead of
being cut mid-stream.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

import uvicorn

from ..errors import OpenAIError
from ..doors import Door
from .responder import Responder

log = logging.getLogger(__name__)

CUT_MARGIN_S = 5
"""uvicorn's own grace period is this much longer than the drain's."""


@dataclass
class Ended:
    """What `Drain.end_all` marks on a tracked request that is not a driver request (a
    ``serve`` pipe); the driver's `RequestScope` has the same field."""

    abort_reason: str | None = None


class Scope(Protocol):
    """A tracked request: the driver's `RequestScope` or an `Ended` (a ``serve`` pipe)."""

    abort_reason: str | None


def grace_before_cut(timeout_s: float) -> float:
    """The drain's grace for uvicorn's ``timeout_graceful_shutdown`` of ``timeout_s``: ends
    requests `CUT_MARGIN_S` before uvicorn cuts them, or halfway for a shorter timeout."""
    return max(0.0, timeout_s - min(CUT_MARGIN_S, timeout_s / 2))


class Drain:
    """The requests in flight, and ending them when the grace period is over."""

    def __init__(self) -> None:
        self._inflight: dict[asyncio.Task, Scope] = {}
        self.draining = False

    def track(self, work: asyncio.Task, scope: Scope) -> None:
        self._inflight[work] = scope

    def untrack(self, work: asyncio.Task) -> None:
        self._inflight.pop(work, None)

    def begin(self, grace_s: float) -> None:
        """Shutdown started: end what still runs after ``grace_s`` seconds (once: later calls,
        one per connection uvicorn shuts down, change nothing)."""
        if self.draining:
            return
        self.draining = True
        log.info("draining %d request(s) for up to %g s", len(self._inflight), grace_s)
        asyncio.get_running_loop().call_later(grace_s, self.end_all)

    def end_all(self) -> None:
        """Cancel every request still running; its endpoint answers and aborts its legs."""
        for work, scope in list(self._inflight.items()):
            scope.abort_reason = "shutdown"
            work.cancel()


def shutting_down(work: asyncio.Task, scope: Scope) -> bool:
    """True when ``work`` was ended by `Drain.end_all`."""
    return work.cancelled() and scope.abort_reason == "shutdown"


async def answer_cut(out: Responder, door: Door) -> None:
    """Close a request of ``door`` ended by the drain: a 503, or the stream's error and end."""
    err = OpenAIError(503, "The server is shutting down; retry the request.", type="ServiceUnavailableError")
    if not out.started:
        await out.json(503, door.error_body(err), {"retry-after": "1"})
    else:
        await door.answer.end_cut(out, door, err)


class DrainingServer(uvicorn.Server):
    """uvicorn's server that starts ``drain`` as its shutdown begins."""

    def __init__(self, config: uvicorn.Config, drain: Drain, grace_s: float) -> None:
        super().__init__(config)
        self.drain, self.grace_s = drain, grace_s

    async def shutdown(self, sockets=None) -> None:
        self.drain.begin(self.grace_s)
        await super().shutdown(sockets)
