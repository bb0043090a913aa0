"""Incremental tokenization (`segments.PrefixCache`): a prompt that starts like one seen before
reuses its ids, and the result is always exactly the full encoding.

Every case compares `TextTokenizer.encode` (prefix cache on, the default) with the reference
``tokenizers`` encoding of the whole text, and checks through the cache's counters that the
reuse really happened where it should (so the equality is not just the cold path's). Real
tokenizers from ../shared; the boundary cases are the ones plain prefix matching gets wrong:
a turn ending in ``<think>\\n`` that the next turn rewrites, a prompt cut inside an added
token, an earlier message edited, a new system prompt, image placeholders.
"""

from __future__ import annotations

import random

import orjson
import pytest
import tokenizers

from conftest import MODELS, needs_shared
from render_service.tokenizer import TextTokenizer
from render_service.tokenizer.corpus import chat_like_prompts
from render_service.tokenizer.ids_json import IdsJson, TokenIds, dumps_answer, release
from render_service.tokenizer.segments import PrefixCache, common_prefix_length

_CODE = "".join(f"def f{i}(x):\n    return x * {i}  # naïve café 東京 {i ** 3}\n\n" for i in range(400))


def _load(name: str, **kwargs) -> tuple[TextTokenizer, tokenizers.Tokenizer]:
    hf = tokenizers.Tokenizer.from_file(str(MODELS / name / "tokenizer.json"))
    return TextTokenizer.from_hf(hf, name=name, **kwargs), hf


def _check(tt: TextTokenizer, hf: tokenizers.Tokenizer, texts: list[str]) -> int:
    """Each text's ids equal the reference's, and so does their JSON (`ids_json`: a reused
    prompt's kept encoding + the new ids'); returns how many came with a kept encoding. Every
    other answer is serialised and then released as the render route does, so a later prompt
    finds its predecessor's JSON built or not, and its list taken over or copied."""
    kept = 0
    for k, text in enumerate(texts):
        ids, ref = tt.encode(text), hf.encode(text, add_special_tokens=False).ids
        assert ids == ref, f"text {k} differs"
        if k % 2 == 0 or k == len(texts) - 1:
            kept += isinstance(ids, TokenIds) and ids.encoding is not None
            if k % 4 == 2 and isinstance(ids, TokenIds):  # built on its own first, then written into the answer
                assert ids.json() == orjson.dumps(ref), f"text {k}: JSON differs"
            answer = {"request_id": "r\0", "token_ids": ids, "parse_context": {"token_ids": 0}}
            assert dumps_answer(answer) == orjson.dumps({**answer, "token_ids": ref}), f"text {k}: JSON differs"
            release(ids)
    return kept


def _reused(tt: TextTokenizer) -> int:
    return tt.prefix_stats()["reused_tokens"]


@needs_shared
def test_agent_loop_rendered_by_the_template_reuses_every_turn():
    from bench.corpus import TOOLS
    from bench.workloads.render import AgentTrace
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import load_bundle

    bundle = load_bundle(ServeConfig(model=str(MODELS / "qwen3")))
    tt, hf = bundle.tokenizer, bundle.tokenizer.hf
    assert tt.prefix_stats()["enabled"] == 1, tt.prefix_note
    trace = AgentTrace(turns=10, turn_tokens=400)
    texts = [bundle.chat_template.render(messages, tools=TOOLS, add_generation_prompt=True, **bundle.special_tokens)
             for _, messages in trace.conversation(1)]
    assert _check(tt, hf, texts) >= 4  # the serialised later turns brought their kept JSON
    stats = tt.prefix_stats()
    long_turns = sum(len(t) >= PrefixCache.MIN_CHARS for t in texts)
    assert stats["hits"] == long_turns - 1 and stats["misses"] == 1
    # each later turn encoded only about its own new text
    assert stats["encoded_tokens"] < len(tt.encode(texts[-1])) * 1.2
    assert stats["entries"] == 1  # the conversation holds one entry, replaced turn by turn


@needs_shared
def test_boundaries_where_plain_prefix_matching_breaks():
    tt, hf = _load("qwen3")
    base = (f"<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\nFix this:\n{_CODE}"
            "<|im_end|>\n")
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    result = f"<|im_start|>user\n<tool_response>\n{_CODE[:3000]}\n</tool_response><|im_end|>\n"
    texts = [
        base + "<|im_start|>assistant\n<think>\n",  # the generation prompt ends inside reasoning
        base + f"<|im_start|>assistant\n<think>\nRead it first.\n</think>\n\n{call}<|im_end|>\n{result}"
               "<|im_start|>assistant\n<think>\n",
        base + f"<|im_start|>assistant\n{call}<|im_end|>\n{result}<|im_start|>assistant\n",  # reasoning dropped
        base + "<|im_start|>assistant\n<|im_",  # cut inside an added token ...
        base + "<|im_start|>assistant\n<|im_end|><|im_start|>user\nok<|im_end|>\n",  # ... that the next one completes
        base + "<|im_start|>assistant\n</tool_call",
        base + "<|im_start|>assistant\n</tool_call>\n</tool_response>x",
    ]
    before = _reused(tt)
    _check(tt, hf, texts)
    shared = len(hf.encode(base[:base.rindex("<|im_end|>") + len("<|im_end|>")]).ids)  # up to base's last cut
    assert _reused(tt) - before >= 6 * shared  # every later text reused at least the shared part

    edited = texts[2].replace("return x * 200", "return x * -200")  # an earlier message changed
    at = edited.index("-200")
    before = _reused(tt)
    _check(tt, hf, [edited])
    gained = _reused(tt) - before
    assert gained <= len(hf.encode(edited[:at]).ids)  # never reused past the edit

    new_system = texts[2].replace("You are a coding agent.", "You are a careful reviewer.")
    _check(tt, hf, [new_system])


@needs_shared
def test_image_placeholders():
    tt, hf = _load("qwen2.5-vl-instruct")
    image = "<|vision_start|>" + "<|image_pad|>" * 64 + "<|vision_end|>"
    turn = f"<|im_start|>user\n{image}What is in this picture? {_CODE[:2500]}<|im_end|>\n<|im_start|>assistant\n"
    texts = [turn]
    for k in range(4):
        texts.append(texts[-1] + f"It shows {k} cats.<|im_end|>\n" + turn.replace("picture", f"picture {k}"))
    before = _reused(tt)
    _check(tt, hf, texts)
    assert _reused(tt) > before


@needs_shared
@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.iterdir() if (p / "tokenizer.json").is_file())
                         if MODELS.is_dir() else [])
def test_every_shared_tokenizer_growing_and_diverging_prompts(model):
    tt, hf = _load(model)
    added = [t.content for _, t in sorted(hf.get_added_tokens_decoder().items()) if t.content]
    rng = random.Random(11)
    pieces = chat_like_prompts(added, 60, seed=3)
    text = "".join(pieces[:12])
    texts = []
    for _ in range(25):
        r = rng.random()
        if r < 0.6:  # the next turn extends the last
            text = text + rng.choice(pieces)
        elif r < 0.8:  # it rewrites the end of the last
            text = text[:rng.randrange(len(text) // 2, len(text))] + rng.choice(pieces)
        else:  # it changes a character anywhere
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(added + ["x", " ", "\n"]) + text[at + 1:]
        texts.append(text)
    _check(tt, hf, texts)
    if tt.prefix_stats()["enabled"]:
        assert tt.prefix_stats()["hits"] > 0


@needs_shared
def test_memory_is_bounded_and_counted():
    tt, hf = _load("qwen3", prefix_cache_bytes=4_000_000)
    texts = [f"<|im_start|>user\nTicket {k}\n{_CODE[:8000]}<|im_end|>\n<|im_start|>assistant\n" for k in range(12)]
    _check(tt, hf, texts)  # one-shot prompts: they share an eighth of the budget
    stats = tt.prefix_stats()
    assert stats["bytes"] <= 4_000_000 // 8 and stats["evictions"] > 0 and 0 < stats["entries"] < 12
    for k in range(6):  # a conversation that keeps extending stays, in one entry, beyond that share
        texts.append(texts[-1] + f"Step {k}.<|im_end|>\n<|im_start|>user\n{_CODE[k * 3000:(k + 1) * 3000]}<|im_end|>\n")
        _check(tt, hf, texts[-1:])
    assert tt.prefix_stats()["hits"] == 6
    off, _ = _load("qwen3", prefix_cache_bytes=0)
    assert off.prefix_stats()["enabled"] == 0 and off.encode(texts[0]) == hf.encode(texts[0]).ids


def _turns(n: int) -> list[str]:
    """A first prompt and ``n`` turns, each extending the last."""
    texts = [f"<|im_start|>user\n{_CODE[:6000]}<|im_end|>\n<|im_start|>assistant\n"]
    for k in range(n):
        texts.append(texts[-1] + f"Step {k}.<|im_end|>\n<|im_start|>user\n{_CODE[k * 900:(k + 1) * 900]}<|im_end|>\n")
    return texts


@needs_shared
def test_a_changed_ids_list_is_neither_sent_nor_reused():
    tt, hf = _load("qwen3")
    texts = _turns(11)
    _check(tt, hf, texts[:1])
    changes = [lambda ids: ids.append(7), lambda ids: ids.__setitem__(0, 9), lambda ids: ids.sort(),
               lambda ids: ids.__delitem__(slice(-3, None)), lambda ids: ids.__iadd__([1, 2])]
    for k, change in enumerate(changes):
        ids = tt.encode(texts[1 + 2 * k])
        assert isinstance(ids, TokenIds) and ids.encoding is not None
        change(ids)  # the caller changes the list the cache shares with it
        assert ids.encoding is None and dumps_answer({"token_ids": ids}) == orjson.dumps({"token_ids": list(ids)})
        before = tt.prefix_stats()
        _check(tt, hf, [texts[2 + 2 * k]])  # the changed entry is dropped, not extended
        after = tt.prefix_stats()
        assert after["evictions"] == before["evictions"] + 1 and after["misses"] == before["misses"] + 1


@needs_shared
def test_a_released_list_becomes_the_next_turns():
    tt, hf = _load("qwen3")
    texts = _turns(4)
    _check(tt, hf, texts[:1])
    first = tt.encode(texts[1])
    kept = tt.encode(texts[2])  # not released: the next turn copies it
    assert kept is not first and kept == hf.encode(texts[2]).ids
    release(kept)
    assert tt.prefix_stats()["taken_over"] == 0
    taken = tt.encode(texts[3])  # released: the next turn takes the list over
    assert taken is kept and taken == hf.encode(texts[3]).ids and tt.prefix_stats()["taken_over"] == 1
    assert taken.json() == orjson.dumps(hf.encode(texts[3]).ids)
    release(taken)
    assert tt.encode(texts[3]) is taken  # the same prompt again: taken over once more
    before = tt.prefix_stats()["hits"]
    _check(tt, hf, texts[1:2])  # the older entry was replaced by its extension, not left to be changed
    assert tt.prefix_stats()["hits"] == before + 1


@needs_shared
def test_a_list_taken_over_while_read_is_not_used(monkeypatch):
    tt, hf = _load("qwen3")
    texts = [f"<|im_start|>user\n{_CODE[:6000]}<|im_end|>\n<|im_start|>assistant\n"]
    texts += [texts[0] + "Step.<|im_end|>\n<|im_start|>user\nok<|im_end|>\n"]
    texts += [texts[1] + "Done.<|im_end|>\n"]
    _check(tt, hf, texts[:2])
    cache = tt._prefix

    def taken_meanwhile(prompt):  # another request claims the list just as this one reads it
        prompt.claimed = True
        list.__delitem__(prompt.ids, slice(len(prompt.ids) // 2, None))
        list.extend(prompt.ids, [0] * 50)
        return None

    monkeypatch.setattr(cache, "_claim", taken_meanwhile)
    assert tt.encode(texts[2]) == hf.encode(texts[2]).ids


def test_ids_json_heads_and_tails():
    rng = random.Random(3)
    for _ in range(300):
        ids = [rng.choice([0, 7, 42, 151_643, 99_999, 100_000]) for _ in range(rng.randrange(0, 40))]
        enc = IdsJson(b"[", tuple(ids))
        assert enc.bytes() == orjson.dumps(ids)
        n = rng.randrange(0, len(ids) + 1)
        tail = [rng.randrange(0, 200_000) for _ in range(rng.randrange(0, 5))]
        grown = TokenIds(ids[:n] + tail, IdsJson(enc.head(ids, n), tail))
        answer = {"request_id": "a\0b", "token_ids": grown, "n": None}
        assert dumps_answer(answer) == orjson.dumps({**answer, "token_ids": ids[:n] + tail})  # written in place
        m = rng.randrange(0, len(grown) + 1)  # the next turn's head, from the answer's bytes
        assert IdsJson(grown.encoding.head(grown, m), [1]).bytes() == orjson.dumps(grown[:m] + [1])
        assert grown.json() == orjson.dumps(ids[:n] + tail)


def test_common_prefix_length():
    rng = random.Random(5)
    for _ in range(300):
        a = "".join(rng.choice("ab") for _ in range(rng.randrange(0, 20000)))
        k = rng.randrange(0, len(a) + 1)
        b = a[:k] + "c" + a[k:]
        assert common_prefix_length(a, b) == k and common_prefix_length(a, a) == len(a)


@needs_shared
def test_an_encode_over_the_event_loops_budget_stops_before_it_changes_anything():
    """`tokenizer.budget`: under a budget (a render running on the event loop) an encode of
    more new text than it allows raises `OverBudget` before the prefix cache changes; what
    fits (a short text, or the few new characters of a prompt extending a cached one) is
    encoded, equal to the reference."""
    from render_service.tokenizer.budget import ENCODE_BUDGET, OverBudget

    tt, hf = _load("qwen3")

    def ref(text: str) -> list[int]:
        return hf.encode(text, add_special_tokens=False).ids

    token = ENCODE_BUDGET.set(5000)
    try:
        with pytest.raises(OverBudget):
            tt.encode(_CODE)  # cold and long
        with pytest.raises(OverBudget):
            tt.encode(_CODE, add_special_tokens=True)
        assert tt.prefix_stats()["entries"] == 0
        assert tt.encode("A short question?") == ref("A short question?")
    finally:
        ENCODE_BUDGET.reset(token)
    history = "".join(f"<|im_start|>{role}\n{_CODE[k * 3000:(k + 1) * 3000]}<|im_end|>\n"
                      for k, role in enumerate(["user", "assistant"] * 3))
    assert tt.encode(history) == ref(history)  # off the loop: no bound
    entries = tt.prefix_stats()["entries"]
    token = ENCODE_BUDGET.set(5000)
    try:
        turn = history + "<|im_start|>user\nAnd now?<|im_end|>\n"
        assert tt.encode(turn) == ref(turn) and _reused(tt) > 0  # a few new characters: fits
        with pytest.raises(OverBudget):
            tt.encode(turn + _CODE[:9000])
        assert tt.prefix_stats()["entries"] == entries
    finally:
        ENCODE_BUDGET.reset(token)
