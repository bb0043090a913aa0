"""Tokenizer backends: the fast backend must equal HF `tokenizers` on every real tokenizer,
and `auto` must fall back to HF (with one log line) wherever that is not proven."""

from __future__ import annotations

import logging
import sys

import pytest
import tokenizers
from tokenizers import AddedToken, models, pre_tokenizers, trainers

from conftest import MODELS, hf_tokenizer, needs_shared
from render_service.tokenizer import DEFAULT_SEGMENT_CACHE_BYTES, TextTokenizer
from render_service.tokenizer.backends import FastokensBackend
from render_service.tokenizer.corpus import large_corpus

MODEL_DIRS = sorted(p.name for p in MODELS.iterdir() if p.is_dir()) if MODELS.is_dir() else []


def _big_corpus(hf: tokenizers.Tokenizer) -> list[str]:
    added = [t.content for _, t in sorted(hf.get_added_tokens_decoder().items())]
    return large_corpus(added, 2500, seed=99, max_len=200)


@needs_shared
@pytest.mark.parametrize("model", MODEL_DIRS)
def test_auto_picks_fast_backend_and_it_equals_hf(model, caplog):
    hf = hf_tokenizer(MODELS / model)
    with caplog.at_level(logging.INFO, logger="render_service.tokenizer"):
        tt = TextTokenizer.from_hf(hf, backend="auto", name=model, segment_cache_bytes=DEFAULT_SEGMENT_CACHE_BYTES)
    assert tt.backend_name == "fastokens", tt.backend_note
    assert tt.cache_stats()["enabled"] == 1
    assert [r.levelname for r in caplog.records] == ["INFO"]
    corpus = _big_corpus(hf)
    assert len(corpus) > 2500
    want = [e.ids for e in hf.encode_batch(corpus, add_special_tokens=False)]
    got = [tt.encode(s) for s in corpus]  # fast backend + segment cache
    bad = [(s, g, w) for s, g, w in zip(corpus, got, want) if g != w]
    assert not bad, f"{len(bad)} differ, first {bad[0]!r}"
    for s in corpus[:300]:
        assert tt.encode(s, add_special_tokens=True) == hf.encode(s, add_special_tokens=True).ids
    assert tt.decode(want[-1], skip_special_tokens=False) == hf.decode(want[-1], skip_special_tokens=False)


def test_segment_cache_defaults_follow_the_backend():
    hf = _metaspace_bpe()
    assert TextTokenizer(hf).cache_stats()["enabled"] == 1  # HF: the cache pays
    assert TextTokenizer(hf, segment_cache_bytes=0).cache_stats()["enabled"] == 0


def test_gguf_built_tokenizer_gets_fast_backend():
    from render_service.model.gguf import embedded_default_gguf, load_gguf

    try:
        data = load_gguf(embedded_default_gguf())
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    tt = TextTokenizer.from_hf(data.tokenizer, name="smollm2-gguf")
    assert tt.backend_name == "fastokens", tt.backend_note
    corpus = _big_corpus(data.tokenizer)[:3000]
    assert [tt.encode(s) for s in corpus] == [e.ids for e in data.tokenizer.encode_batch(corpus, add_special_tokens=False)]


@needs_shared
def test_fast_backend_runs_without_segment_cache_by_default():
    hf = tokenizers.Tokenizer.from_file(str(MODELS / "smollm2-135m-instruct" / "tokenizer.json"))
    tt = TextTokenizer.from_hf(hf, name="smol")
    assert tt.backend_name == "fastokens" and tt.cache_stats()["enabled"] == 0
    text = "<|im_start|>user\n12 apples 🍎<|im_end|>\n"
    assert tt.encode(text) == hf.encode(text).ids and tt.cache_stats()["misses"] == 0


def _metaspace_bpe() -> tokenizers.Tokenizer:
    """A SentencePiece-style BPE (Metaspace pre-tokenizer) that fastokens 0.3 does not load."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tok.train_from_iterator(["hello world, the quick brown fox"] * 20,
                            trainers.BpeTrainer(special_tokens=["<unk>"], show_progress=False))
    tok.add_special_tokens([AddedToken("<s>", normalized=False, special=True)])
    return tok


def test_auto_falls_back_to_hf_when_fast_cannot_load(caplog):
    hf = _metaspace_bpe()
    with caplog.at_level(logging.INFO, logger="render_service.tokenizer"):
        tt = TextTokenizer.from_hf(hf, backend="auto", name="spm")
    assert tt.backend_name == "hf"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "spm: tokenizer backend falls back to HF" in warnings[0]
    assert "Metaspace" in warnings[0]  # says why
    assert tt.encode("hello world<s>fox") == hf.encode("hello world<s>fox").ids
    with pytest.raises(ValueError, match="backend 'fast' refused.*Metaspace"):
        TextTokenizer.from_hf(hf, backend="fast", name="spm")


@needs_shared
def test_auto_falls_back_to_hf_when_self_check_finds_a_difference(monkeypatch, caplog):
    real = FastokensBackend.encode_batch

    def off_by_one_on_digits(self, texts):  # a fast backend that is wrong on digits
        return [[i + 1 for i in ids] if any(c.isdigit() for c in t) else ids for t, ids in zip(texts, real(self, texts))]

    monkeypatch.setattr(FastokensBackend, "encode_batch", off_by_one_on_digits)
    hf = tokenizers.Tokenizer.from_file(str(MODELS / "smollm2-135m-instruct" / "tokenizer.json"))
    with caplog.at_level(logging.WARNING, logger="render_service.tokenizer"):
        tt = TextTokenizer.from_hf(hf, backend="auto", name="smol")
    assert tt.backend_name == "hf"
    assert len(caplog.records) == 1 and "fastokens differs from hf on" in caplog.records[0].getMessage()
    with pytest.raises(ValueError, match="fastokens differs from hf"):
        TextTokenizer.from_hf(hf, backend="fast")


def test_auto_without_fastokens_installed(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "fastokens", None)  # import fails
    hf = _metaspace_bpe()
    with caplog.at_level(logging.WARNING, logger="render_service.tokenizer"):
        tt = TextTokenizer.from_hf(hf, name="x")
    assert tt.backend_name == "hf" and "fastokens is not installed" in caplog.records[0].getMessage()


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown tokenizer backend 'turbo'"):
        TextTokenizer.from_hf(_metaspace_bpe(), backend="turbo")


@needs_shared
def test_interface_calls_use_the_reference_tokenizer():
    hf = tokenizers.Tokenizer.from_file(str(MODELS / "qwen3" / "tokenizer.json"))
    tt = TextTokenizer.from_hf(hf, backend="fast", name="qwen3")
    assert tt.vocab_size == 151669
    assert tt.encode("Hello, world!") == [9707, 11, 1879, 0]  # fixture README's known ids
    assert tt.token_to_id("<think>") == 151667 and tt.id_to_token(151667) == "<think>"
    assert tt.is_special(151645) and not tt.is_special(151667) and not tt.is_special(9707)
    ids = tt.encode("<|im_start|>user\nhi<|im_end|>")
    assert tt.decode(ids) == "user\nhi" and tt.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|>"
    assert tt.id_to_token(10**9) is None


@needs_shared
def test_background_build_serves_hf_until_fastokens_is_proven():
    """Start-up path (background=True): encodes at once (HF, equal by definition), then the
    fast backend takes over once built and checked; answers are the same throughout."""
    hf = tokenizers.Tokenizer.from_file(str(MODELS / "qwen3" / "tokenizer.json"))
    text = "<|im_start|>user\nnaïve café 東京 12345 def f(x): return x<|im_end|>\n" * 40
    tt = TextTokenizer.from_hf(hf, backend="auto", name="qwen3", background=True)
    assert tt.encode(text) == hf.encode(text).ids
    assert tt.wait_fast(300) and tt.backend_name == "fastokens", tt.backend_note
    assert tt.encode(text) == hf.encode(text).ids
    assert tt.cache_stats()["enabled"] == 0 and tt.prefix_stats()["enabled"] == 1


@needs_shared
def test_deferred_background_build_waits_for_its_start():
    """The server's path (build_now=False): HF encodes, and no build runs, until
    `start_fast_build`; then fastokens takes over."""
    hf = tokenizers.Tokenizer.from_file(str(MODELS / "qwen3" / "tokenizer.json"))
    text = "<|im_start|>user\nnaïve café 東京 12345 def f(x): return x<|im_end|>\n" * 40
    tt = TextTokenizer.from_hf(hf, backend="auto", name="qwen3", background=True, build_now=False)
    assert tt.encode(text) == hf.encode(text).ids
    assert not tt.wait_fast(0.5) and tt.backend_name == "hf"  # not started: nothing to wait for yet
    assert "max_token_chars" not in vars(tt)  # not computed yet either
    tt.start_fast_build()
    tt.start_fast_build()  # a second call starts nothing more
    assert tt.wait_fast(300) and tt.backend_name == "fastokens", tt.backend_note
    assert tt.encode(text) == hf.encode(text).ids
    # the build also measured the longest token (the prompt-length check's bound), off the first request's path
    assert vars(tt)["max_token_chars"] == max(len(t) for t in hf.get_vocab()) == 128


@needs_shared
def test_fingerprint_is_the_same_made_before_or_after_the_background_build():
    """`ModelBundle.fingerprint` (stream_state's key and check: replicas of any version must agree)
    is SHA-256 over SHA-256(hf.to_str()) and the template text, whether the first request makes
    it or the background build has serialized the tokenizer first."""
    import hashlib

    from render_service.model import load_model

    early = load_model(str(MODELS / "qwen3"), fast_build_now=False)
    first = early.fingerprint  # before any build
    early.tokenizer.start_fast_build()
    assert early.tokenizer.wait_fast(300)
    late = load_model(str(MODELS / "qwen3"))
    assert late.tokenizer.wait_fast(300) and late.tokenizer.backend_name == "fastokens"
    hf = late.tokenizer.hf
    want = hashlib.sha256(hashlib.sha256(hf.to_str().encode()).digest()
                          + late.chat_template.source.encode()).hexdigest()[:32]
    assert first == late.fingerprint == want
