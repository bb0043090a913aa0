"""The ``stream_state`` codec: our own versioned, authenticated, bounded format.

Wire shape (a JSON object, opaque to clients; send back exactly what was received)::

    {"v": 1, "fp": "<16 hex of the model fingerprint>", "s": "<compact JSON payload>", "mac": "<32 hex>"}

``s`` is a JSON *string* so that the MAC covers exact bytes no matter how a client
re-serialises the outer object. Payload: ``{"c": created, "pl": prompt length,
"ch": {"<choice index>": ChoiceStream.export_state(), ...}}`` — one entry per choice index,
so ``n > 1`` streams carry all their choices in one value (vLLM needs one state per index,
wire brief §8 item 11). Its size depends only on what is unfinished (detokenizer window,
stop-string hold-back, parser state), never on how many tokens were already streamed —
unlike vLLM's ``DerenderStreamState`` whose ``output_token_ids`` grows with the output (§3.3).

``mac`` = HMAC-SHA256 over ``v|fp|s``, truncated to 128 bits, keyed with
``--stream-state-secret`` (env ``RENDER_SERVICE_STATE_SECRET``, at least 32 characters)
when set, else with a random key drawn once per process group (``serve`` draws it before
forking ``--workers``, so they share it). States are therefore unforgeable by default; a
stream moves between replicas only when every replica has the same secret (deploy/: a
Kubernetes Secret). Every failure is a `ValueError` with a message fit for a 400: wrong
version, another model, bad MAC, malformed payload, a state too large.

Size: ``MAX_STATE_BYTES`` fits the largest ``n`` (16,384 choices, vLLM's limit) at 1 KiB of
unfinished state per choice (a typical one is ~110 bytes; held stop text is at most 999
characters); the default ``--max-body-bytes`` (32 MiB) carries it back.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import secrets
from typing import Any, Iterator

import orjson

VERSION = 1
ROUTES = {"chat": "/v1/chat/completions/derender", "completion": "/v1/completions/derender",
          "responses": "/v1/responses/derender", "messages": "/v1/messages/derender"}
"""Route families a state is sealed for (``api`` in the payload) and the route each names."""
MAX_STATE_BYTES = 16 << 20
MIN_SECRET_CHARS = 32
_PROCESS_SECRET = secrets.token_hex(32)  # the default key: random, never derived from public files
log = logging.getLogger(__name__)


class StateContentError(ValueError):
    """A state that passed its MAC check failed when the stream resumed from it (see `resumed_from`)."""


@contextlib.contextmanager
def resumed_from(payload: dict | None) -> Iterator[None]:
    """Run the code that resumes a stream from an opened ``payload`` (None: a new stream).

    The MAC proves a state is ours only while the key is secret; with the real key a client
    can seal any inner value, of any type, and the parsers resume from theirs without
    checking it (a ``calls`` entry that is ``null`` made ``feed()`` fail inside the Messages
    stream: a 500). Everything a resumed stream raises is the state's fault, so it becomes
    `StateContentError` (a ValueError, for a 400 naming ``stream_state``); errors that are
    already the client's (`OpenAIError`) pass unchanged, and so does everything for a new
    stream (those are our bugs).

    Raises:
        StateContentError: ``payload`` was given and the body raised anything else.
    """
    if payload is None:
        yield
        return
    from ..errors import OpenAIError

    try:
        yield
    except OpenAIError:
        raise
    except Exception as exc:
        log.warning("a stream resumed from a client's stream_state failed: %s: %s", type(exc).__name__, exc)
        raise StateContentError("stream_state content is not one this server could have written") from None


def random_secret() -> str:
    """A fresh key for ``--stream-state-secret`` (64 hex characters)."""
    return secrets.token_hex(32)


def check_secret(secret: str | None) -> None:
    """Raise ``ValueError`` for an operator secret shorter than `MIN_SECRET_CHARS` (None: the
    process's random key, fine)."""
    if secret is not None and len(secret) < MIN_SECRET_CHARS:
        raise ValueError(f"the stream-state secret must be at least {MIN_SECRET_CHARS} characters "
                         "(e.g. `openssl rand -hex 32`)")


class StateCodec:
    """Seal and open ``stream_state`` values for one model.

    Args:
        fingerprint: `ModelBundle.fingerprint` (any string identifying the model).
        secret: operator secret of at least `MIN_SECRET_CHARS`; None uses this process's random key.

    Raises:
        ValueError: a secret shorter than `MIN_SECRET_CHARS`.
    """

    def __init__(self, fingerprint: str, secret: str | None = None) -> None:
        check_secret(secret)
        self.fp = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        material = b"render-service stream_state\0" + (secret or _PROCESS_SECRET).encode() + b"\0" + fingerprint.encode()
        self._key = hashlib.sha256(material).digest()
        # HMAC's two keyed hashes (RFC 2104; the 32-byte key padded to SHA-256's 64-byte block),
        # the inner one past the fixed "v|fp|" prefix: each MAC copies them (no key schedule per
        # call, and no `hmac.HMAC` object: its Python methods cost more than the hashing of a state)
        block = self._key.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block) + f"{VERSION}|{self.fp}|".encode())
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def _mac(self, s: bytes) -> str:
        """HMAC-SHA256(key, ``v|fp|`` + ``s``), hex, truncated to 128 bits."""
        inner = self._inner.copy()
        inner.update(s)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()[:32]

    def seal(self, payload: dict, api: str | None = None) -> dict:
        """Wrap ``payload`` (plain JSON data) into the wire object; ``api`` (a key of `ROUTES`)
        names the route family that issued it, so `open` can refuse it on another."""
        raw = orjson.dumps(payload if api is None else {**payload, "api": api})
        s = raw.decode()
        if len(s) > MAX_STATE_BYTES:
            raise ValueError(f"the stream's state exceeds {MAX_STATE_BYTES >> 20} MiB; use the pipe route for it")
        return {"v": VERSION, "fp": self.fp, "s": s, "mac": self._mac(raw)}  # raw is s.encode()

    def open(self, state: Any, api: str | None = None) -> dict:
        """Check and unwrap a wire object; returns the payload dict. With ``api``, the state
        must have been sealed for that route family.

        Raises:
            ValueError: not our format, another version, another model, MAC mismatch,
            a payload that is not a JSON object, or a state of another route family.
        """
        if not isinstance(state, dict) or not {"v", "fp", "s", "mac"} <= state.keys():
            raise ValueError("stream_state is not a render-service state (expected keys v, fp, s, mac); "
                             "send back the stream_state of the previous response unchanged, or null to start")
        if state["v"] != VERSION:
            raise ValueError(f"stream_state version {state['v']!r} is not supported (this server speaks {VERSION})")
        if state["fp"] != self.fp:
            raise ValueError("stream_state was made for another model or tokenizer (fingerprint mismatch)")
        s, mac = state["s"], state["mac"]
        if not isinstance(s, str) or not isinstance(mac, str) or len(s) > MAX_STATE_BYTES or not mac.isascii():
            raise ValueError("stream_state is malformed")
        if not hmac.compare_digest(mac, self._mac(s.encode())):
            raise ValueError("stream_state failed its integrity check (modified, or sealed with another secret)")
        try:
            payload = orjson.loads(s)
        except orjson.JSONDecodeError:
            raise ValueError("stream_state payload is not JSON") from None
        if not isinstance(payload, dict):
            raise ValueError("stream_state payload is malformed")
        issuer = payload.get("api")  # absent in states sealed before it existed: not checked
        if issuer is not None and not (isinstance(issuer, str) and issuer in ROUTES):
            raise ValueError("stream_state payload is malformed (api)")
        if api is not None and issuer is not None and issuer != api:
            raise ValueError(f"this stream_state belongs to a stream of {ROUTES[issuer]}, not of {ROUTES[api]}; "
                             "send it back to the route that issued it")
        return payload
