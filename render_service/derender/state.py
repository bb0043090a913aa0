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
``--stream-state-secret`` when set, else with a key derived from the model fingerprint.
The derived key only detects corruption and accidental cross-model use; set a secret to
make states unforgeable by clients. Every failure is a `ValueError` with a message fit for
a 400: wrong version, another model, bad MAC, malformed payload.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson

VERSION = 1
MAX_STATE_BYTES = 1 << 20


class StateCodec:
    """Seal and open ``stream_state`` values for one model.

    Args:
        fingerprint: `ModelBundle.fingerprint` (any string identifying the model).
        secret: operator secret; None derives the key from the fingerprint.
    """

    def __init__(self, fingerprint: str, secret: str | None = None) -> None:
        self.fp = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        material = secret.encode() if secret else b"render-service stream_state\0" + fingerprint.encode()
        self._key = hashlib.sha256(material).digest()

    def _mac(self, s: str) -> str:
        return hmac.new(self._key, f"{VERSION}|{self.fp}|{s}".encode(), hashlib.sha256).hexdigest()[:32]

    def seal(self, payload: dict) -> dict:
        """Wrap ``payload`` (plain JSON data) into the wire object."""
        s = orjson.dumps(payload).decode()
        return {"v": VERSION, "fp": self.fp, "s": s, "mac": self._mac(s)}

    def open(self, state: Any) -> dict:
        """Check and unwrap a wire object; returns the payload dict.

        Raises:
            ValueError: not our format, another version, another model, MAC mismatch,
            or a payload that is not a JSON object.
        """
        if not isinstance(state, dict) or not {"v", "fp", "s", "mac"} <= state.keys():
            raise ValueError("stream_state is not a render-service state (expected keys v, fp, s, mac); "
                             "send back the stream_state of the previous response unchanged, or null to start")
        if state["v"] != VERSION:
            raise ValueError(f"stream_state version {state['v']!r} is not supported (this server speaks {VERSION})")
        if state["fp"] != self.fp:
            raise ValueError("stream_state was made for another model or tokenizer (fingerprint mismatch)")
        s, mac = state["s"], state["mac"]
        if not isinstance(s, str) or not isinstance(mac, str) or len(s) > MAX_STATE_BYTES:
            raise ValueError("stream_state is malformed")
        if not hmac.compare_digest(mac, self._mac(s)):
            raise ValueError("stream_state failed its integrity check (modified, or sealed with another secret)")
        try:
            payload = orjson.loads(s)
        except orjson.JSONDecodeError:
            raise ValueError("stream_state payload is not JSON") from None
        if not isinstance(payload, dict):
            raise ValueError("stream_state payload is malformed")
        return payload
