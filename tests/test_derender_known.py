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


# -- KnownBody: fields kept by their bytes ---------------------------------------------------

import json  # noqa: E402

import orjson  # noqa: E402

from render_service.derender import known as known_mod  # noqa: E402
from render_service.derender.known import KnownBody, SplitBody  # noqa: E402
from render_service.wire.derender import DerenderChatRequest  # noqa: E402

PROMPT = list(range(151000, 151300))  # large enough to be kept (known.MIN_FIELD_BYTES)


def stream_body(ids=(5,), state=None, prompt=PROMPT, **chat) -> dict:
    return {"stream": True, "stream_state": state, "prompt_tokens": len(prompt), "prompt_token_ids": list(prompt),
            "chat_request": {"messages": [{"role": "user", "content": "hi " * 300}], "tools": TOOLS, **chat},
            "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": list(ids), "finish_reason": None}]}}


def new_known() -> KnownBody:
    return KnownBody(("prompt_token_ids", "chat_request"), KnownFields("chat_request", ChatRequestFields))


def through(known: KnownBody, data: bytes, model=DerenderChatStreamRequest):
    """What the route does with a body's bytes (orjson's error as read_json would see it)."""
    return known.validate(model, known.loads(data))


def test_a_repeated_field_is_taken_by_its_bytes_and_validates_as_the_whole_body():
    known = new_known()
    for dumps in (orjson.dumps, lambda b: json.dumps(b).encode(), lambda b: b"\n " + orjson.dumps(b) + b"\r\n"):
        for k in range(3):
            data = dumps(stream_body(ids=(k,), state={"v": k}))
            body = known.loads(data)
            assert type(body) is SplitBody
            req = through(known, data)
            assert req == validate(DerenderChatStreamRequest, orjson.loads(data))
            assert req.model_fields_set == validate(DerenderChatStreamRequest, orjson.loads(data)).model_fields_set
    # spaced values are other bytes than compact ones: one miss each, then hits (compact in whitespace: all hits)
    assert known.hits == {"prompt_token_ids": 7, "chat_request": 7}
    first = through(known, orjson.dumps(stream_body()))
    assert first.prompt_token_ids is through(known, orjson.dumps(stream_body(ids=(9,)))).prompt_token_ids
    # another value is another entry
    other = through(known, orjson.dumps(stream_body(prompt=PROMPT[::-1], stop=["x"])))
    assert other.prompt_token_ids == PROMPT[::-1] and other.chat_request.stop == ["x"]


def test_a_body_split_only_when_its_members_are_all_of_it():
    known = new_known()
    good = orjson.dumps(stream_body())
    through(known, good)  # its fields are known now
    odd = [good[:-1] + b',"stream":true}',                                  # a member twice
           good.replace(b'"stream":', b'"str\\u0065am":'),                  # an escaped key
           good.replace(b'"stream":', b'"stream" :'),                       # a space
           json.dumps(orjson.loads(good), indent=1).encode(),
           good.replace(b'"stream":true', b'"\xc3\xa9":1,"stream":true')]    # a non-ASCII key
    for data in odd:
        body = known.loads(data)
        assert type(body) is dict and body == orjson.loads(data)
        assert through(known, data) == validate(DerenderChatStreamRequest, orjson.loads(data))


def test_errors_are_the_whole_bodys_whether_fields_were_kept_or_not():
    known = new_known()
    good = orjson.dumps(stream_body())
    through(known, good)
    prompt = orjson.dumps(PROMPT)
    bad_json = [good.replace(b'"request_id":"r"', b'"request_id":"\xff"'),      # invalid UTF-8 in a member parsed now
                good.replace(b'"stream":true', b'"stream":1e999'),             # a number orjson refuses
                good.replace(b'"stream":true', b'"prompt_token_ids":[1e999],"stream":true'),  # in a duplicate
                good.replace(b'"stream":true', b'"stream":tru')]
    for data in bad_json:
        with pytest.raises(orjson.JSONDecodeError) as whole:
            orjson.loads(data)
        with pytest.raises(orjson.JSONDecodeError) as split:
            known.loads(data)
        assert str(split.value) == str(whole.value)
    bad_rest = good.replace(b'"index":0', b'"index":-1').replace(b'"token_ids":[5]', b'"token_ids":["x"]')
    bad_prompt = good.replace(prompt, prompt.replace(b"151000", b'"x"'))
    bad_chat = good.replace(b'"tools":', b'"min_tokens":-1,"tools":')
    for data in (bad_rest, bad_prompt, bad_prompt, bad_chat, bad_chat):  # an invalid value is never kept
        assert error_of(lambda: through(known, data)) == \
            error_of(lambda: validate(DerenderChatStreamRequest, orjson.loads(data)))
    assert known.hits == {"prompt_token_ids": 1 + 2, "chat_request": 1 + 2}  # bad_rest, bad_prompt x2 took the chat_request


def test_a_field_kept_for_one_model_is_validated_for_another():
    known = new_known()
    streamed = stream_body()
    through(known, orjson.dumps(streamed))
    plain = {k: v for k, v in streamed.items() if k not in ("stream", "stream_state", "generate_chunk")}
    plain["generate_response"] = {"request_id": "r", "choices": [{"index": 0, "token_ids": [5], "finish_reason": "stop"}]}
    data = orjson.dumps(plain)
    for _ in range(2):
        assert through(known, data, DerenderChatRequest) == validate(DerenderChatRequest, orjson.loads(data))
    assert known.hits == {"prompt_token_ids": 1, "chat_request": 1}  # the second plain body took both


def test_kept_fields_are_bounded(monkeypatch):
    known = KnownBody(("prompt_token_ids", "chat_request"), capacity=3)
    for n in range(3):
        through(known, orjson.dumps(stream_body(prompt=PROMPT + [n])))
    assert len(known) == 3  # the chat_request (taken by each body) and the last two prompts
    through(known, orjson.dumps(stream_body(prompt=PROMPT + [0])))
    assert known.hits["prompt_token_ids"] == 0  # the oldest was dropped
    through(known, orjson.dumps(stream_body(prompt=PROMPT + [2])))
    assert known.hits["prompt_token_ids"] == 1
    monkeypatch.setattr(known_mod, "MAX_KEPT_BYTES", 3 * len(orjson.dumps(PROMPT)))
    for n in range(4):
        through(known, orjson.dumps(stream_body(prompt=PROMPT + [n])))
    assert known._bytes == sum(len(b) for _, b in known._values) <= known_mod.MAX_KEPT_BYTES
    assert len(known) == 3  # the chat_request and two prompts fit in three prompts' bytes


def test_kept_values_are_found_by_their_bytes_only_where_the_member_is(monkeypatch):
    known = new_known()
    through(known, orjson.dumps(stream_body()))
    split = []
    monkeypatch.setattr(known_mod, "_members", lambda data, real=known_mod._members: split.append(len(data)) or real(data))
    data = orjson.dumps(stream_body(ids=(9,)))
    assert through(known, data) == validate(DerenderChatStreamRequest, orjson.loads(data))
    kept = len(orjson.dumps(PROMPT)) + len(orjson.dumps(stream_body()["chat_request"]))
    assert split == [len(data) - kept + 2]  # the kept ids and chat_request were not scanned
    # the same bytes first under a nested "prompt_token_ids" key (chat_request comes first here):
    # the split of the text without them has no 0 at the top-level member, so the body is split whole
    other = PROMPT[:-1] + [7]
    for top in (other, PROMPT):
        body = {"chat_request": {"messages": [], "x": {"prompt_token_ids": PROMPT}}, **stream_body(prompt=top)}
        body["chat_request"] = {"messages": [], "x": {"prompt_token_ids": PROMPT}}
        data = orjson.dumps(body)
        assert data.find(b'"prompt_token_ids":[') < data.find(b'"stream"')
        split.clear()
        req = through(known, data)
        assert req == validate(DerenderChatStreamRequest, orjson.loads(data)) and req.prompt_token_ids == top
        assert split[-1] == len(data)
