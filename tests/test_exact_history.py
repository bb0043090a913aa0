"""Token-exact history on real templates: each turn's prompt starts with the previous
prompt + output exactly, and — where the template keeps history verbatim (Llama 3.1) —
equals what the template alone renders (transformers ``apply_chat_template`` as oracle)."""

from __future__ import annotations

import unicodedata

import pytest

from conftest import MODELS, needs_shared
from render_service.continuity import HeldSequence
from render_service.render.exact_history import HistoryError, exact_prompt, remaining_close

pytestmark = needs_shared
transformers = pytest.importorskip("transformers", reason="oracle for prompts")


def tools_for(tok, **kwargs):
    def render(messages, add_generation_prompt):
        return tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs)

    def encode(text):
        return tok.encode(text, add_special_tokens=False)

    def decode(ids):
        return tok.decode(list(ids), skip_special_tokens=False)

    return render, encode, decode


def template_ids(tok, messages, **kwargs) -> list[int]:
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("model,outputs", [
    ("qwen3", ["<think>\nGreeting.\n</think>\n\nHello!<|im_end|>",
               '<think>\nTool.\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {"x":1}}\n</tool_call><|im_end|>',
               "<think>\nDone.\n</think>\n\nIt is 1.<|im_end|>",
               "Cut off by len"]),
    ("llama-3.1-instruct", ["Hello!<|eot_id|>", "Sure, x is 1.<|eot_id|>", "It is 1.<|eot_id|>", "Cut off by len"]),
])
def test_every_prompt_extends_the_last(model, outputs):
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / model))
    render, encode, decode = tools_for(tok)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    held = HeldSequence(template_ids(tok, messages), encode(outputs[0]))
    follow_ups = [{"role": "user", "content": "What is x?"}, {"role": "user", "content": "Sure?"},
                  {"role": "user", "content": "Go on."}]
    for out, user in zip(outputs[1:], follow_ups):
        messages = [*messages, {"role": "assistant", "content": decode(held.output_token_ids)}, user]
        prompt, _ = exact_prompt(held, messages, render, encode, decode)
        assert prompt[: len(held.token_ids)] == held.token_ids
        assert decode(prompt).endswith(render([user], True)[-20:])
        held = HeldSequence(prompt, encode(out))


def test_llama31_exact_history_equals_the_template():
    """Llama 3.1 keeps history verbatim: the token-exact prompt is the template's prompt."""
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "llama-3.1-instruct"))
    render, encode, decode = tools_for(tok)
    messages = [{"role": "user", "content": "Name a colour."}]
    held = HeldSequence(template_ids(tok, messages), encode("Blue.<|eot_id|>"))
    messages += [{"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another."}]
    prompt, appended = exact_prompt(held, messages, render, encode, decode)
    assert prompt == template_ids(tok, messages)
    assert appended.startswith("<|start_header_id|>user")


def test_qwen3_keeps_past_reasoning():
    """Where Qwen3's template drops the past reasoning, token-exact history keeps it; the
    prompts differ by exactly that block."""
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    render, encode, decode = tools_for(tok)
    messages = [{"role": "user", "content": "Hi"}]
    out = "<think>\nGreeting.\n</think>\n\nHello!<|im_end|>"
    held = HeldSequence(template_ids(tok, messages), encode(out))
    messages += [{"role": "assistant", "content": "Hello!", "reasoning_content": "Greeting."},
                 {"role": "user", "content": "Bye"}]
    prompt, _ = exact_prompt(held, messages, render, encode, decode)
    template_text = decode(template_ids(tok, messages))
    assert "<think>\nGreeting.\n</think>" not in template_text
    kept = "assistant\n<think>\nGreeting.\n</think>\n\nHello!"
    assert decode(prompt) == template_text.replace("assistant\nHello!", kept)


def test_refusals_and_close():
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    render, encode, decode = tools_for(tok)
    held = HeldSequence([1, 2], [3])
    with pytest.raises(HistoryError):
        exact_prompt(held, [{"role": "user", "content": "x"}], render, encode, decode)
    with pytest.raises(HistoryError):
        exact_prompt(held, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], render, encode,
                     decode)
    assert remaining_close("Hello<|im_end|>", "<|im_end|>\n") == "\n"
    assert remaining_close("Hello", "<|im_end|>\n") == "<|im_end|>\n"


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

# Text that decodes back to itself: Qwen's normalizer is NFC (U+F900 豈 comes back as U+8C48),
# so text NFC changes cannot satisfy decode(encode(x)) == x on any server, ours or vLLM's.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00<>"), min_size=1,
               max_size=40).filter(lambda s: unicodedata.normalize("NFC", s) == s)


@pytest.mark.parametrize("model,eos", [("qwen3", "<|im_end|>"), ("llama-3.1-instruct", "<|eot_id|>")])
def test_prefix_property_on_random_loops(model, eos):
    """Any loop of turns — any text, answers that end with the stop token or are cut off —
    gives prompts that each start with the previous prompt + output, and whose appended
    part is exactly the template's text for the new message (after the closing text)."""
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / model))
    render, encode, decode = tools_for(tok)
    gen_tail = render([{"role": "user", "content": "QQQ"}], True).split("QQQ")[-1]  # end of turn + generation prompt

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.tuples(TEXT, TEXT, st.booleans()), min_size=1, max_size=4))
    def run(turns):
        messages = [{"role": "user", "content": "Start."}]
        held = HeldSequence(template_ids(tok, messages), [])
        for answer, user, stopped in turns:
            held = HeldSequence(held.prompt_token_ids, encode(answer + (eos if stopped else "")))
            messages = [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": user}]
            prompt, appended = exact_prompt(held, messages, render, encode, decode)
            assert prompt[: len(held.token_ids)] == held.token_ids
            assert decode(prompt[len(held.token_ids):]) == appended
            assert user.strip() in appended and appended.endswith(gen_tail)  # Llama trims content
            assert appended.startswith(eos) != stopped  # the stop token is added exactly when the answer lacked it
            held = HeldSequence(prompt, [])

    run()
