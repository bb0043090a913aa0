"""The session key of a render request, echoed in ``X-Session-ID`` so a proxy, router or
client can route a conversation's turns to the replica that holds its prefix (issue 39).

A render replica keeps an agent loop's tokens in its own process (`tokenizer.segments.PrefixCache`):
turn N+1 costs ~0.3x a cold render only on the replica that rendered turn N. Routing on a key
that is the same for every turn of a conversation keeps that reuse across N replicas.

The key, in order:

1. the caller's own: the first of the headers ``X-Session-ID``, ``X-Dynamo-Session-ID``
   (NVIDIA Dynamo's), ``X-SMG-Routing-Key`` (SGLang's model gateway), then the body's
   ``prompt_cache_key`` (OpenAI's field: a string); sent back as is;
2. else derived from the conversation's opening, which every later turn repeats unchanged:
   ``"open-"`` + 32 hex digits of BLAKE3 over the system prompt and the first user message
   (chat ``messages``; Responses ``instructions`` + ``input``; Messages ``system`` +
   ``messages``), each message's text, whether sent as a string or as text parts; for
   completions, the first 1024 characters (or 256 ids) of the first prompt, stable once the
   prompt is longer than that.

Responses' ``previous_response_id`` is not a key: render refuses it (this tier keeps no
responses), and it names a different response every turn.

The route parses the body (`common.read_json` leaves it in the scope under `PARSED_BODY`);
`Front` calls `echo` once for every render route's 200, so no route repeats it.
"""

from __future__ import annotations

from typing import Any

import orjson
from blake3 import blake3

from ..doors import DOORS
from .common import PARSED_BODY

HEADER = b"x-session-id"
"""The response header carrying the key (and the first request header read)."""
CALLER_HEADERS = (HEADER, b"x-dynamo-session-id", b"x-smg-routing-key")
_RANK = {name: i for i, name in enumerate(CALLER_HEADERS)}
MAX_KEY_CHARS = 256
"""A caller's key longer than this (or not printable ASCII) is hashed like an opening, not echoed."""
PROMPT_CHARS = 1024
PROMPT_IDS = 256

RENDER_PATHS = frozenset([*(door.render_path for door in DOORS.values()), "/render"])
"""The routes whose answers carry the key."""

_SYSTEM_ROLES = ("system", "developer")


def session_key(headers: list[tuple[bytes, bytes]], body: Any) -> str | None:
    """The request's session key (see the module doc), or None when the body has nothing to
    derive one from (e.g. no messages). ``headers``: the ASGI scope's; ``body``: the parsed
    JSON (any value: a malformed one gives None, never an error)."""
    found = None  # (rank, value) of the caller's header that ranks first
    for k, v in headers:
        rank = _RANK.get(k)
        if rank is not None and v and (found is None or rank < found[0]):
            found = rank, v
    if found is not None:
        return _printable(found[1].decode("latin-1"))
    if type(body) is not dict:
        return None
    own = body.get("prompt_cache_key")
    if type(own) is str and own:
        return _printable(own)
    opening = _opening(body)
    if opening is None:
        return None
    # BLAKE3, not BLAKE2b: an opening with images holds their data URLs (MBs), hashed ~5x faster
    return "open-" + blake3(orjson.dumps(opening)).hexdigest(16)


def echo(scope: dict, response: Any) -> None:
    """Add ``X-Session-ID`` to ``response`` (a Starlette response) for a render route's 200."""
    if response.status_code != 200 or scope["path"] not in RENDER_PATHS:
        return
    key = session_key(scope["headers"], scope.get(PARSED_BODY))
    if key is not None:
        response.raw_headers.append((HEADER, key.encode("latin-1")))


def _printable(key: str) -> str:
    if len(key) <= MAX_KEY_CHARS and key.isascii() and key.isprintable():
        return key
    return "key-" + blake3(key.encode("utf-8", "surrogatepass")).hexdigest(16)


def _text(content: Any) -> Any:
    """A message's content as one value whether sent as a string or as text parts (Responses'
    first turn sends ``input: "hi"``, its next ``[{"role": "user", "content": "hi"}]``)."""
    if type(content) is list and all(type(p) is dict and type(p.get("text")) is str for p in content):
        return "".join(p["text"] for p in content)
    return content


def _opening(body: dict) -> list | None:
    """What every turn of the conversation repeats: its system text(s) and first user message."""
    messages = body.get("messages")
    if messages is None:
        messages = body.get("input")
        if type(messages) is str:
            messages = [{"role": "user", "content": messages}]
    if type(messages) is list:
        out = [_text(body[k]) for k in ("instructions", "system") if body.get(k) is not None]
        for message in messages:
            if type(message) is not dict:
                return None
            role = message.get("role")
            if role in _SYSTEM_ROLES:
                out.append(_text(message.get("content")))
            elif role == "user":
                out.append(_text(message.get("content")))
                return out
        return out or None
    prompt = body.get("prompt")
    if type(prompt) is list and prompt and type(prompt[0]) in (str, list):
        prompt = prompt[0]  # a batch: its first prompt
    if type(prompt) is str:
        return [prompt[:PROMPT_CHARS]]
    if type(prompt) is list:
        return [prompt[:PROMPT_IDS]]
    return None
