"""GGUF tokenizer loading: the rebuilt tokenizer must equal the model's real tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest
import tokenizers

from conftest import MODELS, needs_shared
from render_service.model.gguf import (
    PRE_TOKENIZERS,
    GgufTokenizerError,
    build_tokenizer,
    embedded_default_gguf,
    load_gguf,
)
from render_service.tokenizer.corpus import large_corpus


def _added(tok: tokenizers.Tokenizer) -> list[str]:
    return [t.content for _, t in sorted(tok.get_added_tokens_decoder().items())]


def _corpus(tok: tokenizers.Tokenizer, n_random: int) -> list[str]:
    return large_corpus(_added(tok), n_random)


def assert_same_tokenizer(ours: tokenizers.Tokenizer, ref: tokenizers.Tokenizer, corpus: list[str]) -> None:
    """Encode (with and without post-processing) and decode every string identically."""
    for add_special in (False, True):
        got = [e.ids for e in ours.encode_batch(corpus, add_special_tokens=add_special)]
        want = [e.ids for e in ref.encode_batch(corpus, add_special_tokens=add_special)]
        bad = [(s, g, w) for s, g, w in zip(corpus, got, want) if g != w]
        assert not bad, f"{len(bad)} of {len(corpus)} strings differ, first: {bad[0]!r}"
    ids = [e.ids for e in ref.encode_batch(corpus, add_special_tokens=False)]
    for skip in (False, True):
        assert ours.decode_batch(ids, skip_special_tokens=skip) == ref.decode_batch(ids, skip_special_tokens=skip)


@pytest.fixture(scope="module")
def smollm():
    try:
        path = embedded_default_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return load_gguf(path)


@needs_shared
def test_embedded_smollm2_gguf_equals_fixture_tokenizer(smollm):
    fixture = MODELS / "smollm2-135m-instruct"
    ref = tokenizers.Tokenizer.from_file(str(fixture / "tokenizer.json"))
    assert smollm.tokenizer.get_vocab_size(with_added_tokens=True) == ref.get_vocab_size(with_added_tokens=True)
    assert smollm.tokenizer.get_added_tokens_decoder() == ref.get_added_tokens_decoder()
    assert_same_tokenizer(smollm.tokenizer, ref, _corpus(ref, 3000))


@needs_shared
def test_embedded_smollm2_gguf_metadata_matches_fixture_config(smollm):
    fixture = MODELS / "smollm2-135m-instruct"
    config = json.loads((fixture / "tokenizer_config.json").read_text())
    generation = json.loads((fixture / "generation_config.json").read_text())
    assert smollm.chat_template == config["chat_template"]
    assert smollm.bos_token == config["bos_token"] == "<|im_start|>"
    assert smollm.eos_token == config["eos_token"]
    assert smollm.unk_token == config["unk_token"]
    assert smollm.pad_token == config["pad_token"]
    assert smollm.eos_token_ids == [generation["eos_token_id"]]
    assert smollm.context_length == config["model_max_length"] == 8192
    assert smollm.add_bos_token is False and smollm.add_eos_token is False
    assert smollm.tokenizer.encode("hi", add_special_tokens=True).ids == smollm.tokenizer.encode("hi").ids
    assert "SmolLM2" in smollm.model_name or "Smollm2" in smollm.model_name


def _fields_from_tokenizer_json(path: Path, pre: str) -> dict:
    """The tokenizer keys llama.cpp's convert_hf_to_gguf.py writes for a byte-level BPE model."""
    spec = json.loads(path.read_text())
    vocab: dict[str, int] = dict(spec["model"]["vocab"])
    types: dict[int, int] = {}
    for tok in spec["added_tokens"]:
        vocab[tok["content"]] = tok["id"]
        types[tok["id"]] = 3 if tok["special"] else 4
    tokens = [""] * (max(vocab.values()) + 1)
    for piece, i in vocab.items():
        tokens[i] = piece
    assert all(tokens), "fixture ids have holes"
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": [types.get(i, 1) for i in range(len(tokens))],
        "tokenizer.ggml.add_bos_token": False,
    }


# Every pre-type name maps to a fixture: each row is the proof that the mapping is right.
PRE_TYPE_FIXTURES = sorted({(name, pre.checked_against) for name, pre in PRE_TOKENIZERS.items()})


@needs_shared
@pytest.mark.parametrize(("pre", "fixture"), PRE_TYPE_FIXTURES)
def test_pre_type_rebuilds_fixture_tokenizer(pre, fixture):
    path = MODELS / fixture / "tokenizer.json"
    ref = tokenizers.Tokenizer.from_file(str(path))
    ours, add_bos, _ = build_tokenizer(_fields_from_tokenizer_json(path, pre))
    assert add_bos is False
    corpus = _corpus(ref, 800)
    # compare without post-processing: the fixture's BOS rule is a config choice, tested below
    got = [e.ids for e in ours.encode_batch(corpus, add_special_tokens=False)]
    want = [e.ids for e in ref.encode_batch(corpus, add_special_tokens=False)]
    bad = [(s, g, w) for s, g, w in zip(corpus, got, want) if g != w]
    assert not bad, f"{pre} vs {fixture}: {len(bad)} of {len(corpus)} differ, first: {bad[0]!r}"
    for skip in (False, True):
        assert ours.decode_batch(want, skip_special_tokens=skip) == ref.decode_batch(want, skip_special_tokens=skip)


@needs_shared
def test_add_bos_token_matches_llama3_post_processor():
    path = MODELS / "llama-3.1-instruct" / "tokenizer.json"
    ref = tokenizers.Tokenizer.from_file(str(path))
    fields = _fields_from_tokenizer_json(path, "llama-bpe")
    fields["tokenizer.ggml.bos_token_id"] = 128000
    del fields["tokenizer.ggml.add_bos_token"]  # llama.cpp's default for llama-bpe is True
    ours, add_bos, add_eos = build_tokenizer(fields)
    assert (add_bos, add_eos) == (True, False)
    for text in ("This is a test sentence.", "", "<|eot_id|>x"):
        assert ours.encode(text, add_special_tokens=True).ids == ref.encode(text, add_special_tokens=True).ids
    assert ours.encode("Hi", "there").ids == ref.encode("Hi", "there").ids  # pair template too
    assert ours.encode("This is a test sentence.", add_special_tokens=True).ids == [
        128000, 2028, 374, 264, 1296, 11914, 13]  # Meta's published test ids


def _write_gguf(path: Path, kv: dict) -> Path:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    for key, value in kv.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


_TINY = {
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": "smollm",
    "tokenizer.ggml.tokens": ["<s>", "</s>", "a", "b", "ab", "Ġ", "Ġa"],
    "tokenizer.ggml.token_type": [3, 3, 1, 1, 1, 1, 1],
    "tokenizer.ggml.merges": ["a b", "Ġ a"],
    "tokenizer.ggml.bos_token_id": 0,
    "tokenizer.ggml.eos_token_id": 1,
    "tokenizer.ggml.add_bos_token": True,
    "llama.context_length": 4096,
    "tokenizer.chat_template": "{{ messages[0]['content'] }}",
}


def test_tiny_gguf_round_trip(tmp_path):
    data = load_gguf(_write_gguf(tmp_path / "tiny.gguf", _TINY))
    assert data.tokenizer.encode("ab a</s>", add_special_tokens=True).ids == [0, 4, 6, 1]
    assert data.tokenizer.encode("ab a", add_special_tokens=False).ids == [4, 6]
    assert (data.bos_token, data.eos_token, data.unk_token, data.pad_token) == ("<s>", "</s>", None, None)
    assert data.eos_token_ids == [1] and data.context_length == 4096 and data.add_bos_token is True
    assert data.chat_template == "{{ messages[0]['content'] }}"
    assert data.tokenizer.decode([0, 4, 6, 1], skip_special_tokens=True) == "ab a"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tokenizer.ggml.model": "llama"}, "tokenizer model 'llama' is not supported"),
        ({"tokenizer.ggml.pre": "starcoder"}, "pre-tokenizer type 'starcoder' is not supported"),
        ({"tokenizer.ggml.model": None}, "no tokenizer in this GGUF"),
        ({"tokenizer.ggml.token_type": [1, 1]}, "2 token types for 7 tokens"),
        ({"tokenizer.ggml.bos_token_id": None}, "tokenizer.ggml.bos_token_id is missing"),
    ],
)
def test_unsupported_or_broken_gguf_names_the_problem(tmp_path, change, message):
    kv = {k: v for k, v in {**_TINY, **change}.items() if v is not None}
    with pytest.raises(GgufTokenizerError, match=message):
        load_gguf(_write_gguf(tmp_path / "bad.gguf", kv))


def test_not_a_gguf_file(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(GgufTokenizerError, match="not a readable GGUF"):
        load_gguf(junk)
    with pytest.raises(FileNotFoundError):
        load_gguf(tmp_path / "missing.gguf")


def _gguf_py_fields(path: Path) -> dict:
    reader = gguf.GGUFReader(path)
    return {name: field.contents() for name, field in reader.fields.items()}


def test_metadata_reader_equals_gguf_py(tmp_path):
    """Our metadata reader (model/gguf.py `_read_fields`) gives what gguf-py's GGUFReader gives,
    for every value type, arrays of each and nested arrays, in both byte orders, and
    for the embedded model's file when installed."""
    from render_service.model.gguf import _read_fields

    T = gguf.GGUFValueType
    values = [("u8", 200, T.UINT8), ("i8", -100, T.INT8), ("u16", 60000, T.UINT16), ("i16", -30000, T.INT16),
              ("u32", 4_000_000_000, T.UINT32), ("i32", -2_000_000_000, T.INT32), ("f32", 0.1, T.FLOAT32),
              ("b", True, T.BOOL), ("s", "naïve 東京 <|im_end|>", T.STRING), ("u64", 2**63 + 5, T.UINT64),
              ("i64", -(2**62), T.INT64), ("f64", 1e-300, T.FLOAT64)]
    for endian in (gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG):
        path = tmp_path / f"all-{endian.name}.gguf"
        writer = gguf.GGUFWriter(str(path), arch="llama", endianess=endian)
        for name, value, vtype in values:
            writer.add_key_value(f"scalar.{name}", value, vtype)
            writer.add_key_value(f"array.{name}", [value, value], T.ARRAY, sub_type=vtype)
        writer.add_key_value("array.nested", [[1, 2], [3]], T.ARRAY)
        writer.add_key_value("array.nested_strings", [["a", "b"], ["c"]], T.ARRAY)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        ours, want = _read_fields(path), _gguf_py_fields(path)
        assert list(ours) == list(want) and ours == want
        assert [type(v) for v in ours.values()] == [type(v) for v in want.values()]
    try:
        embedded = embedded_default_gguf()
    except FileNotFoundError:
        return
    assert _read_fields(embedded) == _gguf_py_fields(embedded)


def test_truncated_gguf_is_not_readable(tmp_path):
    whole = _write_gguf(tmp_path / "tiny.gguf", _TINY).read_bytes()
    for cut in (6, 30, len(whole) // 2):
        (tmp_path / "cut.gguf").write_bytes(whole[:cut])
        with pytest.raises(GgufTokenizerError, match="not a readable GGUF"):
            load_gguf(tmp_path / "cut.gguf")
