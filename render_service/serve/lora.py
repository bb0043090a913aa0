"""``--lora-modules``: adapter names served as models, rendered with the base model's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from .startup_check import StartupCheckError

_VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")


def _same_file(a: Path, b: Path) -> bool:
    if a.read_bytes() == b.read_bytes():
        return True
    try:
        return json.loads(a.read_text()) == json.loads(b.read_text())
    except (ValueError, UnicodeDecodeError):
        return False


def check_lora_modules(config) -> None:
    """Each ``--lora-modules`` entry names a readable adapter directory (its
    ``adapter_config.json``, as vLLM loads it at start-up) under a name no other model has.
    Adapters render with the base model's tokenizer and template (vLLM 0.33 has no per-adapter
    tokenizer either); an adapter that ships vocabulary files must ship the base model's own
    (a copy, as PEFT saves them), since one with another vocabulary needs its own render-service.

    Raises:
        StartupCheckError: the first bad entry, named.
    """
    names = set(config.served_model_name) or {config.model}
    base = Path(config.tokenizer or config.model or "")
    for module in config.lora_modules:
        name, path = module["name"], module["path"]
        where = f"--lora-modules {name}={path}"
        if not name or not path:
            raise StartupCheckError(f"{where}: an adapter needs a name and a path")
        if name in names:
            raise StartupCheckError(f"{where}: {name!r} is already a served model name")
        names.add(name)
        try:
            json.loads((Path(path) / "adapter_config.json").read_text())
        except OSError as exc:
            raise StartupCheckError(f"{where}: cannot read {path}/adapter_config.json "
                                    f"({exc.strerror or exc})") from None
        except ValueError:
            raise StartupCheckError(f"{where}: {path}/adapter_config.json is not JSON") from None
        for file in _VOCABULARY_FILES:
            own = Path(path) / file
            if own.is_file() and not (base.is_dir() and (base / file).is_file() and _same_file(own, base / file)):
                raise StartupCheckError(
                    f"{where}: the adapter ships its own tokenizer ({file}, not the base model's); this server "
                    f"renders adapters with the base model's, so serve this one with its own render-service "
                    f"(--model {path})")
