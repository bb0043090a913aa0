"""`wire.openai._plain_message`, the fast path of the chat request's message checks: it
passes only messages `check_message_fields` passes (anything else takes that check, so a
bad message is the same 400 as before), and it does pass an agent's usual messages."""

from __future__ import annotations

import itertools

import pytest

from render_service.wire.openai import ChatCompletionRequest, _plain_message, check_message_fields
from render_service.wire.validate import validate
from render_service.errors import OpenAIError

VALUES = [None, "x", "", 1, 0, True, False, 1.5, [], ["x"], {}, {"a": 1}]


def _passes(message) -> bool:
    try:
        check_message_fields(message, "messages.0")
    except ValueError:
        return False
    return True


def _shapes():
    for role, name, call_id in itertools.product(VALUES, VALUES[:4] + [True], VALUES[:4] + [True]):
        yield {"role": role, "name": name, "tool_call_id": call_id, "content": "hi"}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    yield {"role": "assistant", "tool_calls": []}
    for calls in VALUES + [[call], [call, "x"], [call, None], {"0": call}]:
        yield {"role": "assistant", "tool_calls": calls}
    for key, value in itertools.product(["id", "type", "function"], VALUES):
        yield {"role": "assistant", "tool_calls": [{**call, key: value}]}
    yield {"role": "assistant", "tool_calls": [{k: v for k, v in call.items() if k != "id"}]}
    for key, value in itertools.product(["name", "arguments"], VALUES):
        yield {"role": "assistant", "tool_calls": [{**call, "function": {**call["function"], key: value}}]}
    for other in VALUES:
        yield other


@pytest.mark.parametrize("message", list(_shapes()), ids=repr)
def test_fast_path_passes_only_what_the_full_check_passes(message):
    if _plain_message(message):
        assert _passes(message)


def test_fast_path_takes_an_agents_messages_and_errors_stay_the_same():
    from bench.workloads.render import AgentLoop

    loop = AgentLoop(turns=6)
    messages = [m for _, m in loop.conversation(3)][-1]
    assert all(_plain_message(m) for m in messages)
    bad = [*messages, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]
    with pytest.raises(OpenAIError) as exc:
        validate(ChatCompletionRequest, {"messages": bad})
    assert exc.value.param == "messages"
    assert f"messages.{len(messages)}.tool_calls.0.id is required" in str(exc.value)
