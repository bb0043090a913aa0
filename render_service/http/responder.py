"""The ASGI responder: one client response written through ``send`` — a JSON body, or
SSE events — and the view of a derendered chunk the client is sent."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

import orjson

from ..wire import sse


class Responder:
    """Writes one HTTP response through ASGI ``send``: a JSON body, or SSE events."""

    def __init__(self, send: Callable[[dict], Awaitable[None]]) -> None:
        self.send = send
        self.started = False
        self.status = 0

    async def json(self, status: int, obj: Any, headers: Mapping[str, str]) -> None:
        body = orjson.dumps(obj)
        await self._start(status, {"content-type": "application/json", "content-length": str(len(body)), **headers})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def start_events(self, headers: Mapping[str, str]) -> None:
        """Send a 200 event-stream head, unless a head was sent already (the driver sends it
        when decode starts; its flows call this again at the first event)."""
        if self.started:
            return
        await self._start(200, {"content-type": "text/event-stream", "cache-control": "no-cache", **headers})

    async def event(self, obj: Any) -> None:
        await self._body(sse.event(obj))

    async def end_events(self, comment: str | None = None) -> None:
        tail = sse.comment(comment) if comment else b""
        await self.send({"type": "http.response.body", "body": tail + sse.DONE, "more_body": False})

    async def raw(self, data: bytes) -> None:
        """Already-framed SSE bytes (the Responses / Messages doors name their events)."""
        await self._body(data)

    async def end(self, data: bytes = b"") -> None:
        """End the body with ``data`` (streams that have no ``[DONE]``)."""
        await self.send({"type": "http.response.body", "body": data, "more_body": False})

    async def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self.started, self.status = True, status
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]})

    async def _body(self, data: bytes) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": True})


def client_chunk(chunk: dict | None, include_usage: bool) -> dict | None:
    """A derendered chunk as the client should see it: choices with nothing to say dropped
    (a remote derender keeps them), ``usage`` only when asked for; None = send nothing."""
    if chunk is None:
        return None
    choices = [c for c in chunk.get("choices") or [] if not empty_choice(c)]
    usage = chunk.get("usage") if include_usage else None
    if not choices and usage is None:
        return None
    return {**chunk, "choices": choices, "usage": usage}


def empty_choice(c: dict) -> bool:
    if c.get("finish_reason") or c.get("logprobs"):
        return False
    delta = c.get("delta")
    if delta is not None:
        return not (delta.get("role") or delta.get("content") or delta.get("reasoning") or delta.get("tool_calls"))
    return not c.get("text")
