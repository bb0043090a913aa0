"""Issue 40's check: a long tool call streams as the model writes it, over HTTP, stateless
(``stream_state`` sent back each chunk) and through the live pipe.

A 1,591-token hermes ``write_file`` call made with the Qwen3 tokenizer is derendered one
token per chunk: its arguments arrive in at least 100 chunks, the first within 16 chunks of
the call opening, joined equal to the non-streaming arguments; the state sent back does not
grow with the call.
"""

from __future__ import annotations

import json

import orjson
import pytest

from conftest import needs_shared
from test_derender_helpers import QWEN_CFG, USER, Derender, bundle, client_fixture, gen_choice, token_chunks

pytestmark = needs_shared

qwen = client_fixture("qwen3", **QWEN_CFG)
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
CALL_TOKENS = 1591


def long_call(tok, n_tokens: int) -> str:
    """A hermes ``write_file`` call of exactly ``n_tokens`` tokens: a Python module as its
    ``content`` argument (lines added, then characters trimmed until the count is exact)."""
    def call(body: str) -> str:
        return ('<tool_call>\n{"name": "write_file", "arguments": '
                + json.dumps({"path": "/tmp/module.py", "content": body}) + "}\n</tool_call>")

    body, i = "", 0
    while len(tok.encode(call(body))) < n_tokens:
        body += f"def f_{i}(x):\n    return x * {i}  # scale\n"
        i += 1
    while len(tok.encode(call(body))) > n_tokens:
        body = body[:-1]
    text = call(body)
    assert len(tok.encode(text)) == n_tokens, "no body gives exactly this many tokens"
    return text


@pytest.fixture(scope="module")
def call_ids() -> list[int]:
    return bundle("qwen3").tokenizer.encode(long_call(bundle("qwen3").tokenizer, CALL_TOKENS))


def _argument_chunks(chunks: list[dict]) -> tuple[int | None, list[tuple[int, str]]]:
    """(index of the chunk naming the call, [(chunk index, arguments piece)…])."""
    opened, pieces = None, []
    for k, chunk in enumerate(chunks):
        for ch in chunk.get("choices", []):
            for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                if tc["function"].get("name"):
                    opened = k if opened is None else opened
                if tc["function"].get("arguments"):
                    pieces.append((k, tc["function"]["arguments"]))
    return opened, pieces


def _check(chunks: list[dict], whole: str) -> None:
    """The call opens in chunk 0 (its ``<tool_call>`` token); named before its arguments,
    which arrive in >= 100 chunks, the first within 16 chunks, joined equal to ``whole``."""
    named, pieces = _argument_chunks(chunks)
    assert named is not None and named <= pieces[0][0]
    assert len({k for k, _ in pieces}) >= 100, f"arguments in {len(pieces)} chunks"
    assert pieces[0][0] <= 16, f"first arguments {pieces[0][0]} chunks after the call opened"
    assert "".join(p for _, p in pieces) == whole


def test_long_call_streams_stateless(qwen, call_ids):
    ids = call_ids + [151645]  # <|im_end|>
    d = Derender(qwen, prompt=bundle("qwen3").tokenizer.encode(USER), extra={"chat_request": {"tools": TOOLS}})
    [call] = d.whole([gen_choice(ids, "stop")])["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["path"] == "/tmp/module.py"
    chunks, states = d.stream(token_chunks(ids, "token"))
    _check(chunks, call["function"]["arguments"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # the state sent back stays the size it had once the call's arguments began
    sizes = [len(orjson.dumps(s)) for s in states[:-1]]
    assert max(sizes[-200:]) <= sizes[50] + 64, (sizes[50], max(sizes[-200:]))


def test_long_call_streams_through_the_pipe(qwen, call_ids):
    ids = call_ids + [151645]
    d = Derender(qwen, prompt=bundle("qwen3").tokenizer.encode(USER), extra={"chat_request": {"tools": TOOLS}})
    [call] = d.whole([gen_choice(ids, "stop")])["choices"][0]["message"]["tool_calls"]
    events = [e for e in d.pipe(token_chunks(ids, "token")) if "done" not in e]
    _check(events, call["function"]["arguments"])  # (no event for a chunk with an empty delta)


DOOR_TOOLS = {"messages": [{"name": "write_file", "input_schema": TOOLS[0]["function"]["parameters"]}],
              "responses": [{"type": "function", "name": "write_file", "parameters": TOOLS[0]["function"]["parameters"]}]}
DOOR_REQUESTS = {"messages": {"model": "qwen3", "max_tokens": 4096, "tools": DOOR_TOOLS["messages"],
                              "messages": [{"role": "user", "content": "Write the module."}]},
                 "responses": {"input": "Write the module.", "tools": DOOR_TOOLS["responses"]}}
ARGUMENT_EVENTS = {"messages": ("content_block_delta", lambda e: e["delta"].get("partial_json")),
                   "responses": ("response.function_call_arguments.delta", lambda e: e["delta"])}


@pytest.mark.parametrize("kind", ["messages", "responses"])
def test_long_call_streams_through_the_doors(qwen, call_ids, kind):
    """Anthropic ``input_json_delta`` and Responses ``function_call_arguments.delta`` events
    follow the same deltas: >= 100 chunks carry arguments, the first within 16 chunks."""
    ids = call_ids + [151645]
    d = Derender(qwen, prompt=bundle("qwen3").tokenizer.encode(USER),
                 extra={f"{kind}_request": DOOR_REQUESTS[kind]}, path=f"/v1/{kind}/derender")
    answers, _ = d.stream(token_chunks(ids, "token"), key="events")
    kind_of, text_of = ARGUMENT_EVENTS[kind]
    pieces = [(k, text_of(e)) for k, events in enumerate(answers) for e in events
              if e["type"] == kind_of and text_of(e)]
    assert len({k for k, _ in pieces}) >= 100 and pieces[0][0] <= 16
    args = json.loads("".join(p for _, p in pieces))
    assert args["path"] == "/tmp/module.py" and len(args["content"]) > 3000
