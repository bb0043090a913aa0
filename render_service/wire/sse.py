"""Server-sent events, sans-IO: one reader and one writer for every hop that streams.

The engine writes its token chunks with `event`/`DONE`, the pipe and the driver read them
with `SSEReader`, derender and the driver write OpenAI chunks with `event`/`DONE`, the
bench reads them back. Format: the WHATWG ``text/event-stream`` subset that vLLM and OpenAI
use — ``data: <json>\\n\\n`` per event, ``data: [DONE]\\n\\n`` at the end; ``event:``,
``id:``, ``retry:`` fields and ``:`` comments carry nothing for us and are skipped.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
MAX_LINE_BYTES = 16 * 1024 * 1024


class SSEError(ValueError):
    """The byte stream is not SSE we can read (a line longer than the reader's limit)."""


def event(obj: Any) -> bytes:
    """One ``data:`` event: ``obj`` serialised with orjson (bytes are sent as they are)."""
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def named_event(name: str, obj: Any) -> bytes:
    """``event: <name>`` then one ``data:`` line: the framing of the Responses and
    Anthropic Messages streams (their events repeat the name as ``type``)."""
    return b"event: " + name.encode() + b"\n" + event(obj)


def comment(text: str) -> bytes:
    """An SSE comment line (ignored by readers), e.g. a reason before ``[DONE]``."""
    return f": {text}\n\n".encode()


def is_done(payload: bytes | str) -> bool:
    """True for the ``[DONE]`` sentinel payload."""
    return payload.strip() in (b"[DONE]", "[DONE]")


class SSEReader:
    """Bytes in any split → the ``data`` payload of each complete event.

    Multi-line data is joined with ``\\n`` (per the spec); one space after ``data:`` is
    dropped. State is the unfinished line and the data lines of the unfinished event, both
    bounded: a line or an event past ``max_line_bytes`` is an `SSEError` (so ``data:`` lines
    with no blank line between them cannot grow memory without limit). Each byte is
    scanned once, however the input is split.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._parts: list[bytes] = []  # the unfinished line, in pieces
        self._partial = 0
        self._data: list[bytes] = []
        self._event_bytes = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads of the events that ``data`` completes (possibly none).

        Raises:
            SSEError: an unfinished line or event grew past ``max_line_bytes``.
        """
        if b"\n" not in data:
            self._parts.append(data)
            self._partial += len(data)
            if self._partial > self.max_line_bytes:
                raise SSEError(f"SSE line exceeds {self.max_line_bytes // (1024 * 1024)} MiB")
            return []
        *lines, tail = data.split(b"\n")
        if self._parts:
            lines[0] = b"".join(self._parts) + lines[0]
        self._parts, self._partial = ([tail], len(tail)) if tail else ([], 0)
        if self._partial > self.max_line_bytes:
            raise SSEError(f"SSE line exceeds {self.max_line_bytes // (1024 * 1024)} MiB")
        out: list[bytes] = []
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if self._data:
                    out.append(b"\n".join(self._data))
                    self._data, self._event_bytes = [], 0
            elif line.startswith(b"data:"):
                value = line[5:]
                value = value[1:] if value.startswith(b" ") else value
                self._event_bytes += len(value) + 1
                if self._event_bytes > self.max_line_bytes:
                    raise SSEError(f"SSE event exceeds {self.max_line_bytes // (1024 * 1024)} MiB")
                self._data.append(value)
        return out

    def close(self) -> list[bytes]:
        """End of input: the payload of an event left without its closing blank line."""
        return self.feed(b"\n\n") if self._data or self._parts else []
