"""IncrementalDetokenizer: every chunking of every id sequence decodes to `tokenizer.decode`.

Real byte-level BPE tokenizers from ../shared/models, plus a small SentencePiece-style
tokenizer with byte fallback built here (Llama-2/Mistral layout: Metaspace ``▁``,
``<0xNN>`` byte pieces, decoder Replace → ByteFallback → Fuse → Strip), for shared case 32
and the Metaspace leading-space rule (wire brief §4.3).
"""

from __future__ import annotations

import random

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, decoders, models, normalizers

from conftest import MODELS, needs_shared
from render_service.derender.detokenize import IncrementalDetokenizer, token_bytes
from render_service.tokenizer import TextTokenizer

BYTE_LEVEL = ["qwen3", "smollm2-135m-instruct", "llama-3.1-instruct", "gpt-oss", "deepseek-r1"]
PIECES = ["中文", "héllo", " world", "😀", "\n\n", " ", "x", "ü", "<think>", "\ufffd", "한국어", "<|im_end|>",
          "  indented", "🇫🇷", "e\u0301", "ä¸", "Ń", "\t"]

_cache: dict[str, TextTokenizer] = {}


def real(name: str) -> TextTokenizer:
    if name not in _cache:
        _cache[name] = TextTokenizer(tokenizers.Tokenizer.from_file(str(MODELS / name / "tokenizer.json")))
    return _cache[name]


def spm_byte_fallback() -> tuple[TextTokenizer, dict[str, int]]:
    """A tiny SentencePiece-like BPE with byte fallback (no merges needed for the test)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for w in ["▁", "▁Hello", "▁world", "H", "e", "l", "o", "▁the", "a", "b"]:
        vocab.setdefault(w, len(vocab))
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    return TextTokenizer(tok), vocab


def stream(tok: TextTokenizer, ids: list[int], cuts: list[int], skip: bool, tail: list[int] | None = None) -> list[str]:
    d = IncrementalDetokenizer(tok, skip, tail)
    out, start = [], 0
    for cut in sorted(set(cuts)) + [len(ids)]:
        out.append(d.push(ids[start:cut]))
        start = max(start, cut)
    out.append(d.flush())
    return out


@needs_shared
@pytest.mark.parametrize("name", BYTE_LEVEL)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_chunking_equals_full_decode(name, data):
    tok = real(name)
    if data.draw(st.booleans(), label="random ids"):
        ids = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), min_size=1, max_size=40))
    else:
        ids = tok.encode("".join(data.draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=25))))
    cuts = data.draw(st.lists(st.integers(0, len(ids)), max_size=len(ids)))
    skip = data.draw(st.booleans())
    assert "".join(stream(tok, ids, cuts, skip)) == tok.decode(ids, skip_special_tokens=skip)


@needs_shared
def test_one_token_at_a_time_never_emits_half_characters():
    tok = real("qwen3")
    text = "中文 😀🇫🇷 한국어 " * 20
    ids = tok.encode(text)
    pieces = stream(tok, ids, list(range(len(ids))), True)
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


@needs_shared
def test_real_replacement_character_is_emitted_at_once():
    tok = real("qwen3")
    ids = tok.encode("a\ufffdb")
    d = IncrementalDetokenizer(tok, True)
    out = [d.push([i]) for i in ids]
    fffd_token = next(i for i, t in enumerate(ids) if "\ufffd" in tok.decode(ids[: i + 1]))
    assert "\ufffd" in "".join(out[: fffd_token + 1])  # not waiting for the next token


def test_case32_byte_fallback_cjk_emitted_once_each():
    tok, vocab = spm_byte_fallback()
    pieces = ["▁Hello", "<0xE4>", "<0xB8>", "<0xAD>", "<0xE6>", "<0x96>", "<0x87>"]
    ids = [vocab[p] for p in pieces]
    d = IncrementalDetokenizer(tok, True)
    out = [d.push([i]) for i in ids] + [d.flush()]
    assert out == ["Hello", "", "", "中", "", "", "文", ""]
    assert "".join(out) == tok.decode(ids) == "Hello中文"


def test_byte_fallback_real_fffd_and_garbage_bytes():
    tok, vocab = spm_byte_fallback()
    byte = lambda b: vocab[f"<0x{b:02X}>"]  # noqa: E731
    real_fffd = [vocab["▁Hello"], byte(0xEF), byte(0xBF), byte(0xBD), vocab["▁world"]]
    d = IncrementalDetokenizer(tok, True)
    assert [d.push([i]) for i in real_fffd] == ["Hello", "", "", "\ufffd", " world"]
    rnd = random.Random(7)
    for _ in range(300):  # valid text through byte fallback, specials in between
        ids = []
        for _ in range(rnd.randint(1, 8)):
            text = "".join(rnd.choice(["中", "文", "😀", "Hello", " world", "a", "é", "\ufffd", " "]) for _ in range(3))
            ids += tok.encode(text) + ([1] if rnd.random() < 0.3 else [])
        cuts = [rnd.randint(0, len(ids)) for _ in range(rnd.randint(0, len(ids)))]
        for skip in (True, False):
            assert "".join(stream(tok, ids, cuts, skip)) == tok.decode(ids, skip_special_tokens=skip), ids


def test_byte_fallback_invalid_run_is_decoded_per_character():
    """Documented limit: `tokenizers`' ByteFallback turns a whole *invalid* byte run into
    U+FFFD per byte, even its valid bytes, which no incremental decoder can know in
    advance. We emit the valid characters (`A`) as soon as they are complete and one
    U+FFFD per invalid byte — i.e. the run decoded per character."""
    tok, vocab = spm_byte_fallback()
    ids = [vocab["<0x41>"], vocab["<0xE4>"], vocab["a"]]
    assert tok.decode(ids) == "\ufffd\ufffda"
    assert "".join(stream(tok, ids, [1, 2], True)) == "A\ufffda"


def test_metaspace_first_token_keeps_space_with_prompt_tail():
    tok, vocab = spm_byte_fallback()
    ids = [vocab["▁Hello"], vocab["▁world"]]
    assert "".join(stream(tok, ids, [1], True)) == "Hello world"            # no context: decode() strips it
    tail = [vocab["▁the"]]
    assert "".join(stream(tok, ids, [1], True, tail)) == " Hello world"     # in context: the space is real
    full, pre = tok.decode(tail + ids), tok.decode(tail)
    assert "".join(stream(tok, ids, [], True, tail)) == full[len(pre):]


@needs_shared
def test_state_is_bounded_and_round_trips():
    tok = real("qwen3")
    ids = tok.encode("The quick brown fox jumps over the lazy dog. 中文! " * 300)
    assert len(ids) > 3000
    d = IncrementalDetokenizer(tok, True, tok.encode("<|im_start|>assistant\n"))
    out, sizes = [], []
    for i in ids:
        out.append(d.push([i]))
        state = d.export_state()
        sizes.append(len(state["ids"]))
        d = IncrementalDetokenizer.restore(tok, True, state)  # resume from plain data every step
    out.append(d.flush())
    assert "".join(out) == tok.decode(ids)
    assert max(sizes) <= 8


@needs_shared
@pytest.mark.parametrize("state", [{"ids": [-1], "read": 0}, {"ids": [1, 2], "read": 3}, {"ids": "x", "read": 0},
                                   {"ids": [10**9], "read": 0}, {}])
def test_restore_rejects_malformed_state(state):
    with pytest.raises(ValueError):
        IncrementalDetokenizer.restore(real("qwen3"), True, state)


@needs_shared
def test_token_bytes_match_decode_for_byte_level_pieces():
    tok = real("qwen3")
    tb = token_bytes(tok)
    ids = tok.encode("héllo 中文 😀 world")
    assert b"".join(tb.of(i) for i in ids) == "héllo 中文 😀 world".encode()


@needs_shared
@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_ascii_pieces_join_to_what_decode_gives(name):
    """The lone-ByteLevel fast path (TokenBytes.ascii_text): ids of ASCII pieces, no added
    token, decode to their texts joined, with or without skip_special_tokens; and a stream of
    such ids is emitted without calling the tokenizer's decode at all."""
    tok = real(name)
    tb = token_bytes(tok)
    assert tb.plain_byte_level
    rnd = random.Random(7)
    pool = [i for i in rnd.sample(range(tok.vocab_size), 20000) if tb.ascii_text(i) is not None]
    assert len(pool) > 5000 and not any(tb.ascii_text(i) is not None for i in tok.hf.get_added_tokens_decoder())
    for _ in range(2000):
        ids = [rnd.choice(pool) for _ in range(rnd.randint(1, 9))]
        for skip in (True, False):
            assert "".join(tb.ascii_text(i) for i in ids) == tok.decode(ids, skip_special_tokens=skip)
    ids = [rnd.choice(pool) for _ in range(30)]
    d = IncrementalDetokenizer(tok, False, [rnd.choice(pool) for _ in range(7)])
    calls = []
    d._tok = type("Counting", (), {"decode": lambda self, *a, **k: calls.append(a) or tok.decode(*a, **k),
                                   "is_special": lambda self, i: tok.is_special(i)})()
    assert "".join(d.push([i]) for i in ids) + d.flush() == tok.decode(ids, skip_special_tokens=False)
    assert calls == []
