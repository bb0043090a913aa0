"""Continuity of an agent loop, turn by turn, on real templates and tokenizers.

Oracle for the prompts: transformers ``apply_chat_template(tokenize=True)``. Each turn's
model output is the text the model would generate (Qwen3: a ``<think>`` block, then the
answer or a ``<tool_call>``; Llama 3.1: the answer or a JSON call), encoded by the same
tokenizer and ended by the model's stop token. The check must find the exact token where
the next prompt leaves the held sequence and name the right reason.
"""

from __future__ import annotations

import json

import pytest

from conftest import MODELS, needs_shared
from render_service.continuity import HeldSequence, check, common_prefix, system_end

pytestmark = needs_shared
transformers = pytest.importorskip("transformers", reason="oracle for prompts")

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


class Loop:
    """One conversation on one tokenizer: render turns, hold outputs, check continuity."""

    def __init__(self, model: str, tools=None, **kwargs) -> None:
        self.tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / model))
        self.tools, self.kwargs = tools, kwargs
        self.held: HeldSequence | None = None

    def prompt(self, messages: list[dict]) -> list[int]:
        out = self.tok.apply_chat_template(messages, tools=self.tools, add_generation_prompt=True, tokenize=True,
                                           **self.kwargs)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    def text(self, messages: list[dict]) -> str:
        return self.tok.apply_chat_template(messages, tools=self.tools, add_generation_prompt=True, tokenize=False,
                                            **self.kwargs)

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def turn(self, messages: list[dict], output_text: str):
        """Render ``messages``, check it against the held sequence, then hold its output."""
        prompt = self.prompt(messages)
        result = None
        if self.held is not None:
            first = messages[0]
            sys_end = (system_end(lambda: self.tok.apply_chat_template([first], tools=self.tools, tokenize=False,
                                                                        **self.kwargs), self.decode(prompt))
                       if first["role"] == "system" else None)
            result = check(self.held, prompt, self.decode, system_end_char=sys_end)
        output = self.tok.encode(output_text, add_special_tokens=False)
        self.held = HeldSequence(prompt, output)
        return prompt, result


def test_common_prefix():
    assert common_prefix([], [1]) == 0
    assert common_prefix(list(range(1000)), list(range(700)) + [-1]) == 700
    assert common_prefix("abc", "abd") == 2


# -- Qwen3: drops past reasoning -----------------------------------------------------------

def test_qwen3_turn_by_turn():
    loop = Loop("qwen3", tools=[WEATHER_TOOL])
    system = {"role": "system", "content": "You are a weather bot."}
    user1 = {"role": "user", "content": "Weather in Paris?"}
    call_args = '{"city": "Paris"}'
    out1 = ('<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
            + call_args + '}\n</tool_call><|im_end|>')
    p1, _ = loop.turn([system, user1], out1)

    # Turn 2: the tool result. The call sits after the last user query, so Qwen3 keeps its
    # reasoning, and the string arguments are written verbatim: the prompt extends.
    a1 = {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
          "tool_calls": [{"type": "function", "id": "c1",
                          "function": {"name": "get_weather", "arguments": call_args}}]}
    tool1 = {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}
    out2 = "<think>\nThe tool answered.\n</think>\n\nIt is sunny and 21 C in Paris.<|im_end|>"
    p2, c2 = loop.turn([system, user1, a1, tool1], out2)
    assert c2.reason is None and c2.extends
    assert c2.common_prefix_tokens == c2.held_tokens == len(p1) + len(loop.tok.encode(out1))
    assert p2[: c2.held_tokens] == [*p1, *loop.tok.encode(out1, add_special_tokens=False)]

    # Turn 3: a new user query. Every earlier assistant turn loses its reasoning: the first
    # difference is the first <think> of turn 1's answer, inside what was turn 2's prompt.
    a2 = {"role": "assistant", "content": "It is sunny and 21 C in Paris.", "reasoning_content": "The tool answered."}
    user2 = {"role": "user", "content": "And tomorrow?"}
    out3 = "<think>\nNo forecast tool.\n</think>\n\nI cannot tell.<|im_end|>"
    p3, c3 = loop.turn([system, user1, a1, tool1, a2, user2], out3)
    assert c3.reason == "reasoning_dropped"
    assert c3.common_prefix_tokens == len(p1)  # right where turn 1's output began
    assert loop.decode(p3[len(p1):]).startswith("<tool_call>")

    # Turn 4: the answer of turn 3 is re-rendered without its reasoning, at the end of p3.
    a3 = {"role": "assistant", "content": "I cannot tell.", "reasoning_content": "No forecast tool."}
    user3 = {"role": "user", "content": "Thanks."}
    _, c4 = loop.turn([system, user1, a1, tool1, a2, user2, a3, user3], "<think>\n\n</think>\n\nBye.<|im_end|>")
    assert c4.reason == "reasoning_dropped" and c4.common_prefix_tokens == len(p3)

    # Turn 5: the client edits the system prompt.
    a4 = {"role": "assistant", "content": "Bye."}
    msgs = [{"role": "system", "content": "You are a terse weather bot."}, user1, a1, tool1, a2, user2, a3, user3,
            a4, {"role": "user", "content": "Hi again"}]
    _, c5 = loop.turn(msgs, "Hello.<|im_end|>")
    assert c5.reason == "system_changed"


def test_qwen3_mapping_arguments_are_reserialised():
    """A call whose arguments reach the template as a mapping is re-written by ``tojson``;
    the model wrote them compactly, so the prompt leaves the held sequence inside them."""
    loop = Loop("qwen3", tools=[WEATHER_TOOL])
    user = {"role": "user", "content": "Weather in Paris?"}
    out1 = ('<think>\nCall.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n'
            '</tool_call><|im_end|>')
    p1, _ = loop.turn([user], out1)
    call = {"type": "function", "id": "c1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    a_map = {"role": "assistant", "content": "", "reasoning_content": "Call.", "tool_calls": [call]}
    _, c = loop.turn([user, a_map, tool], "ok<|im_end|>")
    assert c.reason == "tool_arguments_reserialised"
    assert len(p1) < c.common_prefix_tokens < c.held_tokens
    # The same call with the arguments string the model wrote extends the held sequence.
    loop.held = HeldSequence(p1, loop.tok.encode(out1, add_special_tokens=False))
    verbatim = {**call, "function": {**call["function"], "arguments": '{"city":"Paris"}'}}
    _, c_ok = loop.turn([user, {**a_map, "tool_calls": [verbatim]}, tool], "ok<|im_end|>")
    assert c_ok.extends and c_ok.reason is None


def test_qwen3_non_thinking_turn_drops_the_empty_think_block():
    loop = Loop("qwen3", enable_thinking=False)
    user = {"role": "user", "content": "Hi"}
    p1, _ = loop.turn([user], "Hello!<|im_end|>")
    assert loop.decode(p1).endswith("<think>\n\n</think>\n\n")
    _, c = loop.turn([user, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}], "x")
    assert c.reason == "reasoning_dropped"
    assert loop.decode(p1[: c.common_prefix_tokens]).endswith("<|im_start|>assistant\n")


# -- Llama 3.1: keeps history verbatim ---------------------------------------------------------

def test_llama31_turn_by_turn():
    loop = Loop("llama-3.1-instruct")
    system = {"role": "system", "content": "You are terse."}
    user1 = {"role": "user", "content": "Name a colour."}
    p1, _ = loop.turn([system, user1], "Blue.<|eot_id|>")
    a1 = {"role": "assistant", "content": "Blue."}
    user2 = {"role": "user", "content": "Another."}
    p2, c2 = loop.turn([system, user1, a1, user2], "Red.<|eot_id|>")
    assert c2.extends and c2.reason is None
    assert c2.common_prefix_tokens == len(p1) + len(loop.tok.encode("Blue.<|eot_id|>", add_special_tokens=False))
    assert p2[: c2.held_tokens] == [*p1, *loop.tok.encode("Blue.<|eot_id|>", add_special_tokens=False)]

    # The client edits an earlier user message: divergence inside the old prompt.
    a2 = {"role": "assistant", "content": "Red."}
    edited = {"role": "user", "content": "Name a color."}
    _, c3 = loop.turn([system, edited, a1, user2, a2, {"role": "user", "content": "More."}], "Green.<|eot_id|>")
    assert c3.reason == "message_edited"
    assert c3.common_prefix_tokens < len(p1)

    # An answer the template trims (the model ended with a space).
    loop2 = Loop("llama-3.1-instruct")
    q1, _ = loop2.turn([system, user1], "Blue. <|eot_id|>")
    _, c4 = loop2.turn([system, user1, {"role": "assistant", "content": "Blue. "}, user2], "x")
    assert c4.reason in ("answer_rerendered", "retokenised")
    assert c4.common_prefix_tokens >= len(q1)


def test_llama31_tool_call_arguments_tojson():
    """Llama 3.1 can only serialise arguments (``| tojson``): a compact call the model wrote
    is re-spaced in the next prompt; a call written as tojson writes it extends."""
    loop = Loop("llama-3.1-instruct", tools=[WEATHER_TOOL])
    user = {"role": "user", "content": "Weather in Paris?"}
    tool = {"role": "tool", "content": "sunny"}
    for written, expect in (('{"city":"Paris"}', "tool_arguments_reserialised"), ('{"city": "Paris"}', None)):
        loop.held = None
        out = '{"name": "get_weather", "parameters": ' + written + '}<|eot_id|>'
        p1, _ = loop.turn([user], out)
        a = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": json.loads(written)}}]}
        _, c = loop.turn([user, a, tool], "x")
        assert c.reason == expect, (written, c)
        if expect:
            assert len(p1) < c.common_prefix_tokens < c.held_tokens


def test_prompt_shorter_is_not_a_divergence():
    loop = Loop("llama-3.1-instruct")
    user = {"role": "user", "content": "Hi"}
    p1, _ = loop.turn([user], "Hello.<|eot_id|>")
    _, c = loop.turn([user], "Hello.<|eot_id|>")  # a retry of the same turn
    assert c.reason == "prompt_shorter" and c.common_prefix_tokens == len(p1) and not c.extends
    assert c.as_dict()["extends"] is False


def test_retokenised_and_answer_rerendered():
    """Same text split into other tokens (an answer sampled as "H", "i" that the next prompt
    encodes as "Hi") is ``retokenised``; an answer the client changed is ``answer_rerendered``
    (Llama 3.1, which writes the turn verbatim, so nothing else is in the way)."""
    llama = Loop("llama-3.1-instruct")
    user = {"role": "user", "content": "Say hi"}
    q1 = llama.prompt([user])
    h, i, eot = (llama.tok.convert_tokens_to_ids(t) for t in ("H", "i", "<|eot_id|>"))
    assert llama.tok.encode("Hi", add_special_tokens=False) != [h, i]
    nxt = [user, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Again"}]
    c = check(HeldSequence(q1, [h, i, eot]), llama.prompt(nxt), llama.decode)
    assert c.reason == "retokenised" and c.common_prefix_tokens == len(q1)
    edited = [user, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}]
    c = check(HeldSequence(q1, llama.tok.encode("Hi there<|eot_id|>", add_special_tokens=False)),
              llama.prompt(edited), llama.decode)
    assert c.reason == "answer_rerendered" and c.common_prefix_tokens == len(q1)
    assert c.diverged_at_char == len(llama.decode(q1)) + 1  # "H" is common to both answers


def test_reasoning_kept_but_rewritten_is_not_dropped():
    """Qwen3 keeps the reasoning of a tool-loop turn but strips its newlines: the block is in
    both texts, so the break is the answer re-rendered, not reasoning dropped."""
    loop = Loop("qwen3", tools=[WEATHER_TOOL])
    user = {"role": "user", "content": "Weather in Paris?"}
    out = ('<think>\n\nCall it.\n\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
           '\n</tool_call><|im_end|>')
    p1, _ = loop.turn([user], out)
    call = {"type": "function", "id": "c1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    a = {"role": "assistant", "content": "", "reasoning_content": "\nCall it.\n", "tool_calls": [call]}
    _, c = loop.turn([user, a, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "x")
    assert c.reason == "answer_rerendered" and len(p1) < c.common_prefix_tokens < c.held_tokens
