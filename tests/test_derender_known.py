"""Request fields validated once per stream (render_service.derender.known): the same
request model, the same 400s, whether the field's value was kept or not."""

from __future__ import annotations

import pytest

from render_service.derender.known import KnownFields
from render_service.errors import OpenAIError
from render_service.wire.derender import ChatRequestFields, DerenderChatStreamRequest
from render_service.wire.validate import validate

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "a": {"type": "string"}}}}}]


def body(**chat) -> dict:
    return {"stream": True, "stream_state": None, "prompt_token_ids": [1, 2, 3],
            "chat_request": {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, **chat},
            "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": [5], "finish_reason": None}]}}


def error_of(fn) -> tuple:
    with pytest.raises(OpenAIError) as err:
        fn()
    return err.value.status, err.value.param, str(err.value)


def test_a_kept_value_gives_the_model_validate_gives():
    known = KnownFields("chat_request", ChatRequestFields)
    first = known.validate(DerenderChatStreamRequest, body(stop=["x"]))
    # messages are not read: another conversation with the same read keys is a hit
    again = body(stop=["x"])
    again["chat_request"]["messages"].append({"role": "assistant", "content": "more"})
    second = known.validate(DerenderChatStreamRequest, again)
    assert known.hits == 1 and second.chat_request is first.chat_request
    assert second == validate(DerenderChatStreamRequest, again) == first
    # other values of a read key are another entry
    other = known.validate(DerenderChatStreamRequest, body(stop=["y"]))
    assert known.hits == 1 and other.chat_request.stop == ["y"]


def test_errors_are_those_of_validate_whether_the_value_was_kept_or_not():
    known = KnownFields("chat_request", ChatRequestFields)
    known.validate(DerenderChatStreamRequest, body())
    bad_rest = {**body(), "generate_chunk": {"choices": [{"index": -1, "token_ids": ["x"]}]}}
    assert error_of(lambda: known.validate(DerenderChatStreamRequest, bad_rest)) == \
        error_of(lambda: validate(DerenderChatStreamRequest, bad_rest))
    assert known.hits == 1
    bad_field = body(min_tokens=-1)
    for _ in range(2):  # an invalid value is never kept
        assert error_of(lambda: known.validate(DerenderChatStreamRequest, bad_field)) == \
            error_of(lambda: validate(DerenderChatStreamRequest, bad_field))
    assert known.hits == 1


def test_kept_values_are_bounded():
    known = KnownFields("chat_request", ChatRequestFields, capacity=2)
    for n in range(4):
        known.validate(DerenderChatStreamRequest, body(stop=[str(n)]))
    known.validate(DerenderChatStreamRequest, body(stop=["0"]))
    assert known.hits == 0  # the oldest were dropped
    known.validate(DerenderChatStreamRequest, body(stop=["3"]))
    assert known.hits == 1
