"""Segment cache: encoding a prompt in cached segments equals encoding it whole.

Small tokenizers are built here (a byte-level BPE trained in milliseconds) with added
tokens carrying each flag (lstrip, rstrip, single_word, normalized), overlapping
contents, and a position-dependent pre-tokenizer; random strings built from the token
contents, word characters and whitespace must encode identically both ways. A control
test shows that cutting at every added token (the naive splitter) does differ on the
same inputs, so these tests can fail.
"""

from __future__ import annotations

import random
import threading

import pytest
import tokenizers
from tokenizers import AddedToken, models, normalizers, pre_tokenizers, trainers

from conftest import MODELS, hf_tokenizer, needs_shared
from render_service.tokenizer import TextTokenizer
from render_service.tokenizer.backends import HfBackend
from render_service.tokenizer.corpus import chat_like_prompts
from render_service.tokenizer.segments import SegmentCache, SegmentSplitter

_TRAIN = ["hello world foo bar baz the quick brown fox jumps over the lazy dog"] * 50 + ["héllo wörld 123\n\n  x"] * 10


def _bpe(normalizer=None, pre_tokenizer=None) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(_TRAIN, trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet, show_progress=False))
    return tok


def _tok(content: str, **flags) -> AddedToken:
    flags.setdefault("normalized", False)
    flags.setdefault("special", True)
    return AddedToken(content, **flags)


# name -> (added tokens, expected cut contents, extra normalizer)
FLAG_CASES = {
    "lstrip": ([_tok("<mask>", lstrip=True), _tok("[x]"), _tok("[y] ")], {"[x]", "[y] "}, None),
    "rstrip": ([_tok("<mask>", rstrip=True), _tok("[x]"), _tok(" [sp]")], {"[x]"}, None),
    "lstrip+rstrip": ([_tok("<m>", lstrip=True, rstrip=True), _tok("[x]"), _tok("\t[t]\t")], {"[x]"}, None),
    "single_word": ([_tok("zork", single_word=True, special=False), _tok("qqv"), _tok("[x]"), _tok("[y]q")],
                    {"[x]"}, None),
    "overlap": ([_tok("<a>"), _tok("<a>x"), _tok("x<b"), _tok("<b>"), _tok("b>")], {"<a>", "<a>x", "x<b", "<b>", "b>"},
                None),
    "normalized_noop": ([_tok("<n>", normalized=True, special=False), _tok("[x]"), _tok("n>[", normalized=True)],
                        {"<n>", "[x]", "n>["}, normalizers.Sequence([])),
    "normalized_lowercase": ([_tok("ZoRk", normalized=True, special=False), _tok("[X]")], {"[X]"},
                             normalizers.Lowercase()),
    "normalized_nfc": ([_tok("e\u0301", normalized=True, special=False), _tok("[x]")], {"[x]"}, normalizers.NFC()),
}


def _fuzz(contents: list[str], n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = contents + [c.upper() for c in contents] + [
        " ", "  ", "\n", "\t", "a", "é", "e", "\u0301", "_", "1", "x", "<", ">", "[", "]", "hello", " world", "\u00a0"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(n)]


def _segmented(splitter: SegmentSplitter, hf: tokenizers.Tokenizer, text: str) -> list[int]:
    return SegmentCache(0).encode_segments(splitter.split(text), HfBackend(hf).encode_batch)


@pytest.mark.parametrize("case", sorted(FLAG_CASES))
def test_splitter_is_exact_for_added_token_flags(case):
    added, cuts, normalizer = FLAG_CASES[case]
    hf = _bpe(normalizer)
    hf.add_tokens(added)
    splitter = SegmentSplitter(hf)
    assert {hf.id_to_token(i) for i in splitter.cut_token_ids} == cuts
    for text in _fuzz([t.content for t in added], 3000):
        assert _segmented(splitter, hf, text) == hf.encode(text).ids, text


@pytest.mark.parametrize("case", ["lstrip", "rstrip", "lstrip+rstrip", "single_word"])
def test_cutting_at_every_added_token_would_be_wrong(case):
    """Control: the rules above matter; a splitter that cuts at every raw match differs."""
    added, _, normalizer = FLAG_CASES[case]
    hf = _bpe(normalizer)
    hf.add_tokens(added)
    naive = SegmentSplitter(hf)
    naive._raw_cuts = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if not t.normalized}
    wrong = [s for s in _fuzz([t.content for t in added], 3000) if _segmented(naive, hf, s) != hf.encode(s).ids]
    assert wrong, "the naive splitter should have failed on some input"


def test_normalized_tokens_stay_inside_segments_under_a_real_normalizer():
    added, _, normalizer = FLAG_CASES["normalized_lowercase"]
    hf = _bpe(normalizer)
    hf.add_tokens(added)
    zork = hf.token_to_id("ZoRk")
    assert zork in hf.encode("a ZORK b").ids  # matched only after lowercasing, in context
    splitter = SegmentSplitter(hf)
    assert splitter.split("a ZORK b[X]") == ["a ZORK b", hf.token_to_id("[X]")]
    assert TextTokenizer(hf).encode("a ZORK b[X]zork") == hf.encode("a ZORK b[X]zork").ids


def test_position_dependent_pre_tokenizer_disables_cutting():
    hf = _bpe(pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="first"))
    hf.add_tokens([_tok("[x]")])
    splitter = SegmentSplitter(hf)
    assert splitter.blockers and "prepend_scheme" in splitter.blockers[0]
    assert splitter.split("a[x]b") == ["a[x]b"]
    # why: the piece after [x] would get a "▁" prefix if encoded alone
    alone = hf.encode("b").ids
    assert hf.encode("a[x]b").ids[-len(alone):] != alone
    tt = TextTokenizer(hf)
    assert tt.cache_stats()["enabled"] == 0
    assert tt.encode("hello [x] world") == hf.encode("hello [x] world").ids


def test_metaspace_always_still_cuts_exactly():
    hf = _bpe(pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="always"))
    hf.add_tokens([_tok("[x]"), _tok("<m>", lstrip=True)])
    splitter = SegmentSplitter(hf)
    assert not splitter.blockers
    for text in _fuzz(["[x]", "<m>"], 1000, seed=3):
        assert _segmented(splitter, hf, text) == hf.encode(text).ids, text


@needs_shared
@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.iterdir() if p.is_dir()) if MODELS.is_dir() else [])
def test_segmented_encoding_equals_whole_for_real_tokenizers(model):
    hf = hf_tokenizer(MODELS / model)
    tt = TextTokenizer(hf, "hf")
    assert tt.cache_stats()["enabled"] == 1, tt.cache_note
    added = [t.content for _, t in sorted(hf.get_added_tokens_decoder().items())]
    prompts = chat_like_prompts(added, 400, seed=11)
    want = [e.ids for e in hf.encode_batch(prompts, add_special_tokens=False)]
    assert [tt.encode(p) for p in prompts] == want  # cold
    assert [tt.encode(p) for p in prompts] == want  # warm: every segment now from the cache
    stats = tt.cache_stats()
    assert stats["hits"] > 0 and stats["misses"] > 0 and stats["bytes"] > 0


def _conversation_turns(k: int) -> tuple[list[str], list[int]]:
    """Prompts of a growing chat, and per turn the length of its two new message texts."""
    prompts, new_chars, text = [], [], ""
    for i in range(k):
        user = f"user\nQuestion {i}: " + "why is the sky blue? " * 20
        assistant = f"assistant\nAnswer {i}: " + "Rayleigh scattering. " * 30
        text += f"<|im_start|>{user}<|im_end|>\n<|im_start|>{assistant}<|im_end|>\n"
        prompts.append(text + "<|im_start|>assistant\n")
        new_chars.append(len(user) + len(assistant))
    return prompts, new_chars


@needs_shared
def test_growing_conversation_only_encodes_new_text():
    hf = tokenizers.Tokenizer.from_file(str(MODELS / "qwen3" / "tokenizer.json"))
    tt = TextTokenizer(hf, "hf", prefix_cache_bytes=0)  # the segment cache alone (the prefix cache: test_tokenizer_prefix)
    prev = tt.cache_stats()
    prompts, new_chars = _conversation_turns(6)
    for k, prompt in enumerate(prompts):
        assert tt.encode(prompt) == hf.encode(prompt).ids
        now = tt.cache_stats()
        if k == 0:  # "user\n…", "\n", "assistant\n…", "\n", "assistant\n": all new
            assert now["misses"] == 5
        else:  # only the two new message texts are encoded; the history is all hits
            assert now["misses"] - prev["misses"] == 2
            assert now["miss_chars"] - prev["miss_chars"] == new_chars[k]
            assert now["hits"] - prev["hits"] == 4 * k + 3
        prev = now


def test_cache_evicts_least_recently_used_within_budget():
    hf = _bpe()
    hf.add_tokens([_tok("[x]")])
    tt = TextTokenizer(hf, segment_cache_bytes=60_000)
    texts = [f"segment number {i} " * 2 for i in range(200)]
    for t in texts:
        assert tt.encode(t + "[x]") == hf.encode(t + "[x]").ids
    stats = tt.cache_stats()
    assert 0 < stats["bytes"] <= stats["max_bytes"] == 60_000
    assert stats["evictions"] > 0 and stats["entries"] < 200
    hits = stats["hits"]
    tt.encode(texts[-1])  # most recent: still cached
    assert tt.cache_stats()["hits"] == hits + 1
    tt.encode(texts[0])  # oldest: evicted
    assert tt.cache_stats()["misses"] == stats["misses"] + 1
    tt.clear_cache()
    assert tt.cache_stats()["entries"] == 0 and tt.cache_stats()["bytes"] == 0


def test_segment_larger_than_an_eighth_of_the_budget_is_not_stored():
    hf = _bpe()
    hf.add_tokens([_tok("[x]")])
    tt = TextTokenizer(hf, segment_cache_bytes=8_000)
    big = "hello world " * 200
    assert tt.encode(big + "[x]" + "small") == hf.encode(big + "[x]" + "small").ids
    assert tt.cache_stats()["entries"] == 1


def test_cache_off_with_zero_budget():
    hf = _bpe()
    tt = TextTokenizer(hf, segment_cache_bytes=0)
    assert tt.encode("hello world") == hf.encode("hello world").ids
    assert tt.cache_stats()["enabled"] == 0 and tt.cache_stats()["hits"] == 0


def test_concurrent_encodes_are_exact():
    hf = _bpe()
    hf.add_tokens([_tok("[x]"), _tok("[y]")])
    tt = TextTokenizer(hf, segment_cache_bytes=50_000)
    texts = _fuzz(["[x]", "[y]", "hello world "], 400, seed=5)
    want = [hf.encode(t).ids for t in texts]
    errors = []

    def worker(seed: int) -> None:
        order = list(range(len(texts)))
        random.Random(seed).shuffle(order)
        for i in order:
            if tt.encode(texts[i]) != want[i]:
                errors.append(texts[i])

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert tt.cache_stats()["bytes"] <= 50_000


def test_add_special_tokens_bypasses_cache_and_matches_hf():
    hf = _bpe()
    hf.add_special_tokens([_tok("<s>")])
    hf.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", hf.token_to_id("<s>"))])
    tt = TextTokenizer(hf)
    assert tt.encode("hello", add_special_tokens=True) == hf.encode("hello").ids
    assert tt.encode("hello", add_special_tokens=True)[0] == hf.token_to_id("<s>")
    assert tt.encode("hello") == hf.encode("hello", add_special_tokens=False).ids
