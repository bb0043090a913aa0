"""Tokenizer directories without tokenizer.json (vocab.json + merges.txt, as Qwen3-VL ships).

The rebuilt tokenizer must be transformers' own: the recording (tests/fixtures/tokenizers/
record_vocab_merges.py, transformers 5.20.2) holds the sha256 of the tokenizer transformers
serializes for the directory and its ids for the load-time self-check corpus and 300 random
strings. The model loader then runs the usual backend self-check on it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import MODELS, needs_shared
from render_service.model.bundle import ModelLoadError, load_model
from render_service.tokenizer.vocab_merges import UnsupportedTokenizerClass, from_vocab_merges, read_merges

QWEN3_VL = MODELS / "qwen3-vl-4b-instruct"
RECORDED = json.loads((Path(__file__).parent / "fixtures" / "tokenizers" / "vocab_merges_qwen3-vl-4b-instruct.json").read_text())
pytestmark = [needs_shared, pytest.mark.skipif(not QWEN3_VL.is_dir(), reason="../shared/models/qwen3-vl-4b-instruct not present")]


def _config() -> dict:
    return json.loads((QWEN3_VL / "tokenizer_config.json").read_text())


def test_rebuild_serializes_exactly_as_transformers():
    tok = from_vocab_merges(QWEN3_VL, _config())
    assert hashlib.sha256(tok.to_str().encode()).hexdigest() == RECORDED["tokenizer_json_sha256"]


def test_loaded_model_encodes_as_transformers():
    bundle = load_model(str(QWEN3_VL))
    assert bundle.tokenizer.vocab_size == 151669
    for text, plain, with_special in RECORDED["samples"]:
        assert bundle.tokenizer.encode(text) == plain, text
        assert bundle.tokenizer.encode(text, add_special_tokens=True) == with_special, text
    assert bundle.tokenizer.encode("Describe this image.") == [74785, 419, 2168, 13]


def test_merges_starting_with_hash_are_merges(tmp_path):
    (tmp_path / "merges.txt").write_text("#version: 0.2\n# #\n## ##\n", encoding="utf-8")
    assert read_merges(tmp_path / "merges.txt") == [("#", "#"), ("##", "##")]
    assert read_merges(QWEN3_VL / "merges.txt")[309] == ("#", "#")


def test_unknown_tokenizer_class_is_a_clear_load_error(tmp_path):
    for name in ("vocab.json", "merges.txt", "config.json"):
        shutil.copy(QWEN3_VL / name, tmp_path / name)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**_config(), "tokenizer_class": "MysteryTokenizer"}))
    with pytest.raises(ModelLoadError, match="MysteryTokenizer.*Qwen2Tokenizer"):
        load_model(str(tmp_path))
    with pytest.raises(UnsupportedTokenizerClass):
        from_vocab_merges(tmp_path, {"tokenizer_class": "MysteryTokenizer"})
