"""A render answer with tensors written as pieces: the kept base64 strings go out without a copy.

A cold 4-image answer is ~20 MB, nearly all of it ``kwargs_data`` base64 that the processor cache
already keeps as ``str``. Serialized whole, it was copied three times on the way out: orjson
growing its buffer (realloc), uvicorn's head joined to the body, then the kernel's socket copy;
the first two were a quarter of a cold image request's CPU (profile, issue 24), most of it page
faults on fresh megabytes. `answer_pieces` gives the same bytes as ``orjson.dumps(answer)`` as a
list: small JSON runs, each made by orjson, and a read-only view of each kept string's own
characters; `PiecesResponse` sends them one ASGI body message each (one ``Content-Length``), so
the transport (uvloop: ``writev``, holding a reference while the socket drains) reads the
strings in place.

The views are `ascii_view.ascii_bytes` (CPython's compact ASCII layout, checked at import;
else one copy per string, same bytes).
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson
from starlette.responses import Response

from .ascii_view import ascii_bytes

BUFFER_EXTENSION = "render_service.buffer_up_to"
"""The server protocol's ASGI extension (``http.connections.BUFFER_EXTENSION``: a higher layer)."""


def answer_pieces(answer: dict[str, Any]) -> list[bytes | memoryview]:
    """``orjson.dumps(answer)`` as pieces (their concatenation is byte-equal to it).

    ``answer`` is a render answer (`GenerateRequest` dict); each string of
    ``answer["features"]["kwargs_data"][modality]`` becomes its own piece, a view of the string
    (`ascii_bytes`); everything else is orjson's bytes, merged into as few pieces as possible.

    Raises:
        orjson.JSONEncodeError: as ``orjson.dumps(answer)`` would.
    """
    pieces: list[bytes | memoryview] = []
    pieces.append(bytes(_object(answer, ("features", "kwargs_data"), bytearray(), pieces)))
    return pieces


def _object(obj: dict, path: tuple[str, ...], buf: bytearray, pieces: list) -> bytearray:
    """Append ``obj`` as JSON to ``buf``, following ``path`` (keys) down to the object whose values
    are lists of strings to send in place; returns the buffer to go on with."""
    buf += b"{"
    for n, (key, value) in enumerate(obj.items()):
        if n:
            buf += b","
        buf += orjson.dumps(key)
        buf += b":"
        if path and key == path[0] and isinstance(value, dict):
            buf = _object(value, path[1:], buf, pieces)
        elif not path and isinstance(value, list):
            buf += b"["
            for i, item in enumerate(value):
                if i:
                    buf += b","
                if isinstance(item, str):
                    buf += b'"'
                    pieces += (bytes(buf), ascii_bytes(item))
                    buf = bytearray(b'"')
                else:
                    buf += orjson.dumps(item)
            buf += b"]"
        else:
            buf += orjson.dumps(value)
    buf += b"}"
    return buf


class PiecesResponse(Response):
    """A 200 ``application/json`` answer sent as ``pieces`` (one ASGI body message each, one
    ``Content-Length``), e.g. from `answer_pieces`."""

    media_type = "application/json"

    def __init__(self, pieces: list[bytes | memoryview], headers: Mapping[str, str] | None = None):
        self.pieces = pieces
        super().__init__(None, headers=headers)
        self.length = sum(len(p) for p in pieces)
        length = str(self.length).encode()
        self.raw_headers = [(k, length if k == b"content-length" else v) for k, v in self.raw_headers]

    async def __call__(self, scope, receive, send) -> None:
        # The pieces are held by the answer anyway: let the transport queue them all rather than
        # drain after each (the server's own protocol offers this; others: the default flow control)
        buffer_up_to = scope.get("extensions", {}).get(BUFFER_EXTENSION)
        if buffer_up_to is not None:
            buffer_up_to(max(self.length, 1 << 16))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            last = len(self.pieces) - 1
            for i, piece in enumerate(self.pieces):
                await send({"type": "http.response.body", "body": piece, "more_body": i < last})
        finally:
            if buffer_up_to is not None:
                buffer_up_to(None)
