"""The stream_state codec's MAC is the one its format documents (render_service.derender.state):
HMAC-SHA256 over ``v|fp|s``, truncated to 128 bits, whatever way it is computed."""

from __future__ import annotations

import hashlib
import hmac

import orjson
import pytest

from render_service.derender.state import StateCodec

SECRET = "s" * 40


@pytest.mark.parametrize("secret", [SECRET, None])
def test_the_mac_is_hmac_sha256_of_version_fingerprint_and_payload(secret):
    codec = StateCodec("model-fingerprint", secret)
    for payload in ({"c": 1, "pl": 3, "ch": {}}, {"c": 2, "pl": 0, "ch": {"0": {"d": {"ids": [1], "read": 1}, "t": "é" * 300}}}):
        state = codec.seal(payload, "chat")
        expected = hmac.new(codec._key, f"{state['v']}|{state['fp']}|{state['s']}".encode(), hashlib.sha256)
        assert state["mac"] == expected.hexdigest()[:32]
        assert codec.open(state, "chat") == orjson.loads(state["s"])
        with pytest.raises(ValueError, match="integrity"):
            codec.open({**state, "s": state["s"].replace('"pl"', '"pl" ')}, "chat")
