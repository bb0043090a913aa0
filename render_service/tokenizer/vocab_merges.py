"""A fast tokenizer rebuilt from ``vocab.json`` + ``merges.txt`` (directories without ``tokenizer.json``).

Some models ship only the "slow" files (Qwen3-VL: ``vocab.json``, ``merges.txt``,
``tokenizer_config.json``). transformers builds its tokenizer from them with a fixed pipeline
per ``tokenizer_class``; this module builds the same `tokenizers.Tokenizer` for the classes in
`PIPELINES`, so render and derender run unchanged (and the usual load-time backend self-check
applies). Any other class is refused with a message, never guessed.

Source: transformers 5.20.2 ``models/qwen2/tokenization_qwen2.py`` (``Qwen2Tokenizer``: BPE with
no unk / prefix / suffix, NFC, the Qwen split regex then byte-level without its own regex,
byte-level decoder) and ``tokenization_utils_tokenizers.py`` (added tokens from
``added_tokens_decoder`` in id order). Equality with transformers is checked in
tests/test_tokenizer_vocab_merges.py on recorded transformers encodings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

__all__ = ["PIPELINES", "UnsupportedTokenizerClass", "from_vocab_merges"]

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


class UnsupportedTokenizerClass(ValueError):
    """The directory's ``tokenizer_class`` has no known vocab+merges pipeline."""


def _qwen2(tok: tokenizers.Tokenizer, config: dict) -> None:
    prefix = bool(config.get("add_prefix_space") or False)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()


# tokenizer_config.json "tokenizer_class" (with or without "Fast") -> pipeline setter
PIPELINES: dict[str, Callable[[tokenizers.Tokenizer, dict], None]] = {
    "Qwen2Tokenizer": _qwen2,
}


def read_merges(path: Path) -> list[tuple[str, str]]:
    """Merge pairs of ``merges.txt`` in rank order; a leading ``#version`` line is a header.

    Other lines that start with ``#`` are merges (``# #``, ``# include``), as in the tokenizer.json
    transformers writes for the same files.
    """
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    pairs = []
    for line in lines:
        if not line.strip():
            continue
        left, sep, right = line.rstrip("\r").partition(" ")
        if not sep:
            raise ValueError(f"{path}: not a merge pair: {line[:60]!r}")
        pairs.append((left, right))
    return pairs


def _token_content(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _post_processor(config: dict) -> processors.TemplateProcessing:
    """BOS/EOS as ``add_bos_token`` / ``add_eos_token`` ask (transformers' ``update_post_processor``)."""
    bos = _token_content(config.get("bos_token")) if config.get("add_bos_token") else None
    eos = _token_content(config.get("eos_token")) if config.get("add_eos_token") else None
    ids = {int(i): t.get("content") for i, t in (config.get("added_tokens_decoder") or {}).items()}
    by_content = {c: i for i, c in ids.items()}
    pre, post = ([f"{bos}:0"] if bos else []), ([f"{eos}:0"] if eos else [])
    single = " ".join(pre + ["$A:0"] + post)
    pair = " ".join(pre + ["$A:0"] + post + [p.replace(":0", ":1") for p in pre] + ["$B:1"] + [p.replace(":0", ":1") for p in post])
    special = [(t, by_content[t]) for t in (bos, eos) if t and t in by_content]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)


def from_vocab_merges(path: Path, config: dict) -> tokenizers.Tokenizer:
    """The tokenizer transformers builds from ``path/vocab.json`` + ``path/merges.txt``.

    ``config`` is the directory's ``tokenizer_config.json`` (``tokenizer_class``,
    ``added_tokens_decoder``, ``add_prefix_space``).

    Raises:
        UnsupportedTokenizerClass: ``tokenizer_class`` is not in `PIPELINES`.
        OSError / ValueError: unreadable or malformed files.
    """
    cls = str(config.get("tokenizer_class") or "")
    setup = PIPELINES.get(cls.removesuffix("Fast"))
    if setup is None:
        raise UnsupportedTokenizerClass(
            f"{path} has vocab.json + merges.txt but no tokenizer.json, and its tokenizer_class {cls or '(none)'!r} "
            f"is not one render-service can rebuild ({', '.join(PIPELINES)}); save a tokenizer.json with "
            "transformers: AutoTokenizer.from_pretrained(dir).save_pretrained(dir)")
    vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    bpe = models.BPE(vocab=vocab, merges=read_merges(path / "merges.txt"), dropout=None, unk_token=None,
                     continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False)
    tok = tokenizers.Tokenizer(bpe)
    setup(tok, config)
    tok.post_processor = _post_processor(config)
    added = sorted(((int(i), t) for i, t in (config.get("added_tokens_decoder") or {}).items()), key=lambda x: x[0])
    for index, spec in added:
        token = AddedToken(spec["content"], single_word=spec.get("single_word", False), lstrip=spec.get("lstrip", False),
                           rstrip=spec.get("rstrip", False), normalized=spec.get("normalized", not spec.get("special")),
                           special=spec.get("special", False))
        tok.add_tokens([token])
        if tok.token_to_id(spec["content"]) != index:
            raise ValueError(f"{path}: added token {spec['content']!r} got id {tok.token_to_id(spec['content'])}, "
                             f"tokenizer_config.json says {index}")
    return tok
