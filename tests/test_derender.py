"""Derender endpoints over real HTTP: response shapes, EOS and finish rules, logprobs,
stream_state integrity, bad input → 400, and the one-connection pipe (full duplex)."""

from __future__ import annotations

import json
import re
import socket

import orjson
import pytest

from conftest import needs_shared
from test_derender_helpers import (CHAT, QWEN_CFG, USER, Derender, bundle, client_fixture, gen_choice, message_view,
                                   parse_sse, stream_view, token_chunks)

pytestmark = needs_shared

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = '<think>\nUser asks for Paris weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


qwen = client_fixture("qwen3", **QWEN_CFG)
smol = client_fixture("smollm2-135m-instruct")


def qtok():
    return bundle("qwen3").tokenizer


def stok():
    return bundle("smollm2-135m-instruct").tokenizer


# -- non-streaming chat ------------------------------------------------------------------
def test_chat_response_has_every_key_and_the_wire_example(qwen):
    ids = qtok().encode(CALL) + [151645]
    body = {"model": None, "prompt_tokens": 18, "prompt_token_ids": qtok().encode(USER),
            "generate_response": {"request_id": "generate-tokens-chatcmpl-demo-001", "created": 1767225600,
                                  "choices": [gen_choice(ids, "stop")], "kv_transfer_params": {"k": 1}},
            "chat_request": {"model": "x", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}}
    r = qwen.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    resp = r.json()
    assert list(resp) == ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                          "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params",
                          "ec_transfer_params", "metrics"]
    assert resp["id"] == "chatcmpl-demo-001" and resp["object"] == "chat.completion" and resp["created"] == 1767225600
    assert resp["kv_transfer_params"] == {"k": 1}
    assert resp["usage"] == {"prompt_tokens": 18, "total_tokens": 18 + len(ids), "completion_tokens": len(ids),
                             "prompt_tokens_details": None, "completion_tokens_details": None}
    ch = resp["choices"][0]
    assert list(ch) == ["index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids", "routed_experts",
                        "weight_versions"]
    m = ch["message"]
    assert m["content"] is None and m["reasoning"] == m["reasoning_content"] == "\nUser asks for Paris weather.\n"
    (call,) = m["tool_calls"]
    assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", call["id"]) and call["type"] == "function"
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert (ch["finish_reason"], ch["stop_reason"]) == ("tool_calls", None)
    assert "/derender" != CHAT and qwen.post("/derender", json=body).json()["choices"][0]["finish_reason"] == "tool_calls"


def test_parse_context_is_an_alternative_to_chat_request(qwen):
    ids = qtok().encode(CALL) + [151645]
    d = Derender(qwen, prompt=qtok().encode(USER), extra={"parse_context": {
        "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": True, "include_reasoning": True,
        "chat_template_kwargs": {}, "history_tool_call_cnt": 0}})
    view = message_view(d.whole([gen_choice(ids, "stop")]))
    assert view["tool_calls"] == [("get_weather", {"city": "Paris"})] and view["finish_reason"] == "tool_calls"


def test_parser_needs_a_parse_source(qwen):
    body = {"generate_response": {"choices": [gen_choice([9707], "length")]}, "prompt_token_ids": [151644]}
    r = qwen.post(CHAT, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_request"


def test_markers_survive_with_a_parser_even_if_the_request_skips_specials(qwen):
    # <tool_call> is an added token; skip_special_tokens:true from the client must not strip it (case 22 kind)
    ids = qtok().encode(CALL) + [151645]
    d = Derender(qwen, prompt=qtok().encode(USER), extra={"chat_request": {"tools": TOOLS, "skip_special_tokens": True}})
    assert message_view(d.whole([gen_choice(ids, "stop")]))["tool_calls"] == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("extra,finish,content", [
    ({"tool_choice": "none"}, "stop", CALL.split("</think>")[1]),                       # calls stay text
    ({"tool_choice": "auto", "parallel_tool_calls": False}, "tool_calls", None),
    ({"include_reasoning": False}, "tool_calls", None),
])
def test_tool_choice_and_reasoning_gates(qwen, extra, finish, content):
    ids = qtok().encode(CALL) + [151645]
    d = Derender(qwen, prompt=qtok().encode(USER), extra={"chat_request": {"tools": TOOLS, **extra}})
    view = message_view(d.whole([gen_choice(ids, "stop")]))
    assert view["finish_reason"] == finish and view["content"] == content
    if extra.get("include_reasoning") is False:
        assert view["reasoning"] is None
    chunks, _ = d.stream(token_chunks(ids, "token"))
    assert stream_view(chunks) == view


def test_call_cut_off_by_length_is_the_partial_call(qwen):
    """Issue 40, one rule for every family: a call cut off by max_tokens inside its
    arguments is the call as far as the model wrote it — streamed piece by piece, as vLLM
    streams it — and the finish reason stays "length"; streamed == whole. The opt-in
    ``cut_calls="content"`` of the parsers (issue 22) is not a request field."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    ids = qtok().encode(text)
    d = Derender(qwen, prompt=qtok().encode(USER), extra={"chat_request": {"tools": TOOLS}})
    choice = d.whole([gen_choice(ids, "length")])["choices"][0]
    assert choice["finish_reason"] == "length"
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Par'}
    assert not choice["message"]["content"]
    chunks, _ = d.stream(token_chunks(ids, "token", "length"))
    deltas = [ch.get("delta") or {} for c in chunks for ch in c.get("choices", [])]
    pieces = [tc["function"].get("arguments") or "" for delta in deltas for tc in delta.get("tool_calls") or []]
    assert "".join(pieces) == '{"city": "Par' and sum(bool(p) for p in pieces) > 1
    assert [ch.get("finish_reason") for c in chunks for ch in c.get("choices", [])][-1] == "length"


def test_eos_is_not_text_and_stop_reason_follows_the_engine(smol):
    tok = stok()
    ids = tok.encode("Hi there")
    d = Derender(smol, prompt=tok.encode(USER))
    assert message_view(d.whole([gen_choice(ids + [2], "stop")]))["content"] == "Hi there"
    v = message_view(d.whole([gen_choice(ids + [2], "stop", 2)]))
    assert (v["content"], v["stop_reason"]) == ("Hi there", 2)
    # a stop_token_ids hit reported as null is dropped and reported as the id
    d2 = Derender(smol, prompt=tok.encode(USER), extra={"chat_request": {"stop_token_ids": [ids[-1]]}})
    v = message_view(d2.whole([gen_choice(ids, "stop")]))
    assert (v["content"], v["stop_reason"]) == (tok.decode(ids[:-1]), ids[-1])
    # with specials kept in the text: dropped on stop, kept on length or with include_stop_str_in_output
    keep = lambda **kw: Derender(smol, prompt=tok.encode(USER), extra={"chat_request": {"skip_special_tokens": False, **kw}})  # noqa: E731
    assert message_view(keep().whole([gen_choice(ids + [2], "stop")]))["content"] == "Hi there"
    assert message_view(keep().whole([gen_choice(ids + [2], "length")]))["content"] == "Hi there<|im_end|>"
    v = message_view(keep(include_stop_str_in_output=True).whole([gen_choice(ids + [2], "stop")]))
    assert (v["content"], v["stop_reason"]) == ("Hi there<|im_end|>", None)


def test_usage_and_n_choices(smol):
    tok = stok()
    d = Derender(smol, prompt=tok.encode(USER))
    resp = d.whole([gen_choice(tok.encode("a b") + [2], "stop", index=0), gen_choice(tok.encode("c") + [2], "length", index=1)])
    assert [c["index"] for c in resp["choices"]] == [0, 1]
    assert resp["choices"][1]["message"]["content"] == "c"  # length: EOS kept but skipped as a special token
    assert [c["finish_reason"] for c in resp["choices"]] == ["stop", "length"]
    assert resp["usage"]["completion_tokens"] == len(tok.encode("a b")) + 1 + 2
    assert resp["usage"]["prompt_tokens"] == len(tok.encode(USER))


# -- logprobs ----------------------------------------------------------------------------
def _lp(ids, cands):
    return {"content": [{"token_id": i, "logprob": -0.5, "rank": 1,
                         "top_logprobs": [{"token_id": i, "logprob": -0.5, "rank": 1}] +
                                         [{"token_id": c, "logprob": -2.0, "rank": 2} for c in cands]} for i in ids]}


def test_chat_logprobs_strings_bytes_and_cut(smol):
    tok = stok()
    text = "Hi 中文😀"
    ids = tok.encode(text)
    d = Derender(smol, prompt=tok.encode(USER), extra={"chat_request": {"logprobs": True, "top_logprobs": 2}})
    resp = d.whole([gen_choice(ids, "length", logprobs=_lp(ids, [30, 31]))])
    content = resp["choices"][0]["logprobs"]["content"]
    assert len(content) == len(ids)
    assert b"".join(bytes(p["bytes"]) for p in content).decode() == text       # raw bytes join to the text
    assert all(len(p["top_logprobs"]) == 2 for p in content)                    # first 2 in engine order
    assert content[0]["token"] == tok.decode([ids[0]]) and content[0]["top_logprobs"][0]["token"] == content[0]["token"]
    assert content[-1]["token"] == "😀"   # the token completing a character shows it (§3.5 repair)
    # the same logprobs arrive when streamed
    chunks, _ = d.stream([{"choices": [gen_choice([i], "length" if k == len(ids) - 1 else None, logprobs=_lp([i], [30, 31]))]}
                          for k, i in enumerate(ids)])
    streamed = [p for c in chunks for ch in c["choices"] for p in (ch["logprobs"] or {}).get("content", [])]
    assert streamed == content


def test_completion_logprobs_text_offset_is_absolute_across_chunks(smol):
    tok = stok()
    ids = tok.encode("one two three")
    d = Derender(smol, prompt=tok.encode("Count:"), extra={"completion_request": {"logprobs": 1}},
                 path="/v1/completions/derender")
    whole = d.whole([gen_choice(ids, "length", logprobs=_lp(ids, [30, 31]))])["choices"][0]["logprobs"]
    assert whole["tokens"] == [tok.decode([i]) for i in ids]
    assert whole["text_offset"] == [sum(len(t) for t in whole["tokens"][:k]) for k in range(len(ids))]
    assert all(len(t) == 2 for t in whole["top_logprobs"])  # logprobs + 1
    chunks, _ = d.stream([{"choices": [gen_choice([i], None if k < len(ids) - 1 else "length", logprobs=_lp([i], [30, 31]))]}
                          for k, i in enumerate(ids)])
    offsets = [o for c in chunks for ch in c["choices"] for o in ch["logprobs"]["text_offset"]]
    assert offsets == whole["text_offset"]


# -- bad input -----------------------------------------------------------------------------
def _chat(ids, **kw):
    return {"generate_response": {"choices": [gen_choice(ids, "stop")]}, **kw}


@pytest.mark.parametrize("body,param", [
    (_chat([49152]), "generate_response.choices.0.token_ids"),               # vocab is 49,152
    (_chat([-1]), "generate_response.choices.0.token_ids"),
    (_chat([]), "generate_response.choices.0.token_ids"),
    (_chat([1], prompt_token_ids=[1] * 8193), "prompt_token_ids"),           # max_model_len 8192
    (_chat([1], prompt_token_ids=[99999999]), "prompt_token_ids"),
    ({"generate_response": {"choices": []}}, "generate_response.choices"),
    ({"generate_response": {"choices": [gen_choice([1], "stop")] * 2}}, "generate_response.choices.1.index"),
    ({"generate_response": {"choices": [gen_choice([1], "stop", logprobs=_lp([1], list(range(3, 40))))]}},
     "generate_response.choices.0.logprobs"),
    ({"generate_response": {"choices": [gen_choice([1], "stop", logprobs=_lp([1], [10**7]))]}},
     "generate_response.choices.0.logprobs"),
    ({"prompt_token_ids": [1]}, "generate_response"),
    (_chat([1], chat_request={"stop": [""]}), "stop"),
    (_chat([1], chat_request={"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}), "tool_choice"),
    ({"stream": True, "generate_chunk": {"choices": [gen_choice([1])]}, "stream_state": {"v": 1}}, "stream_state"),
    ({"stream": True, "generate_chunk": {"choices": [gen_choice([1])]}, "stream_state": "abc"}, None),
    ({"stream": "yes", "generate_response": {"choices": [gen_choice([1], "stop")]}}, "stream"),
])
def test_bad_input_is_400(smol, body, param):
    r = smol.post(CHAT, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "BadRequestError" and err["message"]
    if param is not None:
        assert err["param"] == param, err


def test_negative_prompt_tokens_is_400_for_completions_like_chat(smol):
    r = smol.post(CHAT, json=_chat([1], prompt_tokens=-5))
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_tokens"
    body = {"generate_responses": [{"choices": [gen_choice([1], "stop")]}], "prompt_tokens": [-5]}
    r = smol.post("/v1/completions/derender", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt_tokens.0"


def test_negative_usage_from_the_engine_is_400(smol):
    usage = {"prompt_tokens": -5, "completion_tokens": 1, "total_tokens": -4}
    body = {"generate_responses": [{"choices": [gen_choice([1], "stop")], "usage": usage}]}
    r = smol.post("/v1/completions/derender", json=body)
    assert r.status_code == 400 and "usage" in (r.json()["error"]["param"] or ""), r.text


@pytest.mark.parametrize("raw,ctype", [(b"{not json", "application/json"), (b"[1,2]", "application/json"),
                                       (b"{}", "text/plain")])
def test_malformed_bodies_are_400(smol, raw, ctype):
    r = smol.post(CHAT, content=raw, headers={"content-type": ctype})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400


def test_too_many_choices_is_400(smol):
    body = {"generate_response": {"choices": [gen_choice([1], "stop", index=i) for i in range(16385)]}}
    r = smol.post(CHAT, json=body)
    assert r.status_code == 400 and "16384" in r.json()["error"]["message"]


def test_unknown_model_is_404(smol):
    r = smol.post(CHAT, json=_chat([1], model="other"))
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


# -- stream_state integrity ------------------------------------------------------------------
def _first_state(client, tok):
    d = Derender(client, prompt=tok.encode(USER))
    _, states = d.stream([{"choices": [gen_choice(tok.encode("Hello wor"))]}])
    return d, states[0]


@pytest.mark.parametrize("tamper,needle", [
    (lambda s: {**s, "s": s["s"].replace('"n":', '"n": 1, "x":', 1)}, "integrity"),
    (lambda s: {**s, "mac": "0" * 32}, "integrity"),
    (lambda s: {**s, "fp": "0" * 16}, "another model"),
    (lambda s: {**s, "v": 0}, "version"),
    (lambda s: {k: v for k, v in s.items() if k != "mac"}, "not a render-service state"),
    (lambda s: {"prev_tokens": [], "prefix_offset": 0, "read_offset": 0}, "not a render-service state"),  # vLLM's
])
def test_bad_stream_state_is_400(smol, tamper, needle):
    d, state = _first_state(smol, stok())
    body = {"stream": True, "generate_chunk": {"choices": [gen_choice(stok().encode("ld"))]}, "stream_state": tamper(state)}
    r = smol.post(CHAT, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "stream_state" and needle in r.json()["error"]["message"]


def test_state_from_another_model_is_400(smol, qwen):
    _, state = _first_state(smol, stok())
    body = {"stream": True, "generate_chunk": {"choices": [gen_choice([9707])]}, "stream_state": state,
            "chat_request": {"messages": []}}
    r = qwen.post(CHAT, json=body)
    assert r.status_code == 400 and "another model" in r.json()["error"]["message"]


def test_stream_state_survives_any_client_json_roundtrip(smol):
    d, state = _first_state(smol, stok())
    reencoded = json.loads(json.dumps(state, indent=2, ensure_ascii=True))
    body = {"stream": True, "generate_chunk": {"choices": [gen_choice(stok().encode("ld"), "length")]}, "stream_state": reencoded}
    r = smol.post(CHAT, json=body)
    assert r.status_code == 200 and r.json()["chunk"]["choices"][0]["delta"]["content"] == "ld"


def test_usage_chunk_passes_through_and_ids_are_stable(smol):
    tok = stok()
    d = Derender(smol, prompt=tok.encode(USER), extra={"prompt_tokens": 7})
    chunks, _ = d.stream(token_chunks(tok.encode("ok") + [2], "token") +
                         [{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 7
    assert chunks[-1]["usage"]["completion_tokens"] == 2
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"] == "chatcmpl-t"
    assert len({c["created"] for c in chunks}) == 1


# -- pipe ----------------------------------------------------------------------------------
def test_pipe_usage_error_and_bad_header(smol):
    tok = stok()
    d = Derender(smol, prompt=tok.encode(USER))
    events = d.pipe(token_chunks(tok.encode("Hello") + [2], "token"), header={"stream_options": {"include_usage": True}})
    assert events[-1] == {"done": True}
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(tok.encode("Hello")) + 1
    assert usage["usage"]["prompt_tokens"] == len(tok.encode(USER))
    # an engine error event is forwarded, then [DONE]
    body = b'{"prompt_token_ids": [1]}\n' + b'data: {"error": {"message": "boom", "code": 500}}\n\ndata: [DONE]\n\n'
    events = parse_sse(smol.post("/v1/chat/completions/derender/pipe", content=body).content)
    assert events == [{"error": {"message": "boom", "code": 500}}, {"done": True}]
    # a derender error mid-stream is an error event in the OpenAI shape
    body = b'{}\ndata: {"choices": [{"index": 0, "token_ids": [99999999]}]}\n\n'
    events = parse_sse(smol.post("/v1/chat/completions/derender/pipe", content=body).content)
    assert events[0]["error"]["code"] == 400 and events[-1] == {"done": True}
    # a stream that ends without [DONE] says so
    body = b'{}\ndata: {"choices": [{"index": 0, "token_ids": [28]}]}\n\n'
    events = parse_sse(smol.post("/v1/chat/completions/derender/pipe", content=body).content)
    assert "error" in events[-2] and events[-1] == {"done": True}
    # a bad header is a plain 400 before any stream starts
    r = smol.post("/v1/chat/completions/derender/pipe", content=b"not json\n")
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    r = smol.post("/v1/chat/completions/derender/pipe", content=b'{"model": "other"}\n')
    assert r.status_code == 404


def test_pipe_is_full_duplex(smol):
    """Output for chunk k arrives before chunk k+1 is sent (raw HTTP/1.1 chunked upload)."""
    tok = stok()
    words = ["Hello", " there", ",", " friend", "!"]
    host, port = str(smol.base_url.host), smol.base_url.port
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions/derender/pipe HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")

        def send(data: bytes) -> None:
            s.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        send(orjson.dumps({"prompt_token_ids": tok.encode(USER)}) + b"\n")
        received = b""
        for k, w in enumerate(words):
            ids = tok.encode(w)
            finish = "stop" if k == len(words) - 1 else None
            send(b"data: " + orjson.dumps({"choices": [gen_choice(ids, finish)]}) + b"\n\n")
            while w.encode() not in received.split(b"\r\n\r\n", 1)[-1]:
                chunk = s.recv(65536)
                assert chunk, "connection closed early"
                received += chunk
        send(b"data: [DONE]\n\n")
        send(b"")
        while not received.rstrip().endswith(b"0"):
            chunk = s.recv(65536)
            if not chunk:
                break
            received += chunk
    assert received.startswith(b"HTTP/1.1 200")
    assert b"data: [DONE]" in received


def test_pipe_accepts_crlf_comments_and_one_byte_splits(smol):
    tok = stok()
    ids = tok.encode("Hello there") + [2]
    events = [b"data: " + orjson.dumps({"choices": [gen_choice([i], "stop" if k == len(ids) - 1 else None)]}) + b"\r\n\r\n"
              for k, i in enumerate(ids)]
    body = orjson.dumps({"prompt_token_ids": tok.encode(USER)}) + b"\n: keep-alive comment\r\n\r\n" + b"".join(events) + b"data: [DONE]\r\n\r\n"
    r = smol.post("/v1/chat/completions/derender/pipe", content=(body[i:i + 1] for i in range(len(body))))
    out = parse_sse(r.content)
    assert out[-1] == {"done": True}
    assert stream_view(out[:-1]) == {"content": "Hello there", "reasoning": None, "tool_calls": [],
                                     "finish_reason": "stop", "stop_reason": None}
