"""The argparse pieces the flag table (`flags.FLAGS`) is made of: value types, actions, the
one-line-error parser and the help formatter. Each type raises ``argparse.ArgumentTypeError``
with a message argparse prints as ``PROG: error: argument --FLAG: MESSAGE`` (exit 2)."""

from __future__ import annotations

import argparse
import json


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``PROG: error: MESSAGE``, exit 2), like
    the start-up checks' refusals: the 70-line usage of ``serve`` buried the message. The
    subcommands' parsers are of this class too (argparse makes them of their parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: …)`` only for real values: not for flags that are off, nor for
    options whose default the help text already explains (``--model``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def context_length(value: str) -> int:
    """``8192``, ``8k``, ``1m`` (vLLM accepts k/m/g suffixes)."""
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3}
    v = value.strip().lower()
    try:
        number = int(float(v[:-1]) * scale[v[-1]]) if v and v[-1] in scale else int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a context length: {value!r}") from None
    if number < 2:
        raise argparse.ArgumentTypeError(f"a context length must be at least 2 tokens, got {number}")
    if number > MAX_CONTEXT_LENGTH:  # past int64 every JSON answer that names it (/v1/models, limits) fails
        raise argparse.ArgumentTypeError(f"a context length must be at most {MAX_CONTEXT_LENGTH} tokens, got {value}")
    return number


MAX_CONTEXT_LENGTH = 2**63 - 1
"""The largest ``--max-model-len``: a 64-bit signed integer, as the JSON answers carry it (and vLLM's int)."""


def _read(value: str, kind: type, what: str):
    try:
        return kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {value!r}") from None


def positive_float(value: str) -> float:
    """A finite number above 0."""
    number = _read(value, float, "a number")
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {value}")
    return number


def positive(value: str) -> int:
    """A whole number, at least 1."""
    number = _read(value, int, "a whole number")
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def port_type(value: str) -> int:
    """A TCP port, 1-65535."""
    number = positive(value)
    if number > 65535:
        raise argparse.ArgumentTypeError(f"ports go up to 65535, got {number}")
    return number


def _json_of(value: str, kind: type, what: str):
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(parsed, kind):
        raise argparse.ArgumentTypeError(f"must be {what}")
    return parsed


def json_object(value: str) -> dict:
    """A JSON object (flags such as ``--override-generation-config``)."""
    return _json_of(value, dict, "a JSON object")


def json_list(value: str) -> list:
    """A JSON list (vLLM's CORS flags)."""
    return _json_of(value, list, 'a JSON list, e.g. ["*"]')


def media_counts(value: str) -> dict:
    """``--limit-mm-per-prompt``: a JSON object of non-negative counts per modality."""
    parsed = _json_of(value, dict, 'a JSON object of counts, e.g. {"image": 4, "video": 1}')
    if not all(isinstance(v, int) and v >= 0 for v in parsed.values()):
        raise argparse.ArgumentTypeError('must be a JSON object of counts, e.g. {"image": 4, "video": 1}')
    return parsed


class LoraModulesAction(argparse.Action):
    """``--lora-modules`` as vLLM 0.33's `LoRAParserAction` reads it: each value ``name=path``
    (when it has ``=`` and no ``,``), else a JSON object ``{"name", "path", "base_model_name"?,
    "is_3d_lora_weight"?}`` (vLLM's `LoRAModulePath`; a JSON list is refused there too, whatever
    its help says). Stores a list of ``{"name", "path", "base_model_name"}`` dicts. A malformed
    value is argparse's error (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        modules = []
        for item in values or []:
            if not item:
                continue
            if "=" in item and "," not in item:
                name, _, path = item.partition("=")
                modules.append({"name": name, "path": path, "base_model_name": None})
                continue
            try:
                entry = json.loads(item)
            except ValueError:
                parser.error(f"Invalid JSON format for --lora-modules: {item}")
            fields = {"name", "path", "base_model_name", "is_3d_lora_weight"}
            if not isinstance(entry, dict) or set(entry) - fields or not {"name", "path"} <= set(entry):
                parser.error(f"Invalid fields for --lora-modules: {item} (a JSON object with name, path and "
                             "optionally base_model_name)")
            modules.append({"name": entry["name"], "path": entry["path"],
                            "base_model_name": entry.get("base_model_name")})
        setattr(namespace, self.dest, modules)


class AlwaysOn(argparse.Action):
    """A switch whose every spelling leaves render-service doing what it always does."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True)
