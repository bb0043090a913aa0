"""A ``serve …`` command line as vLLM 0.33's parser pre-processes it before argparse reads
it: a ``--config`` YAML file's flags pulled in, ``--max_model_len`` spellings, ``-O3``, dotted
JSON flags (`expand_command_line`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def normalize_flag_spelling(argv: list[str]) -> list[str]:
    """``--max_model_len`` → ``--max-model-len`` (vLLM's parser accepts underscores in flag names,
    up to the first ``.`` of a dotted flag; keys after it and values are left alone); ``-O3``,
    ``-O=3`` and ``-O 3`` → ``--optimization-level 3`` (vLLM's ``-O`` shorthand)."""
    out = []
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            head, dot, keys = name.partition(".")
            out.append(head.replace("_", "-") + dot + keys + sep + value)
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and argv[i + 1:i + 2] and argv[i + 1] in ("0", "1", "2", "3"):
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def _dotted_value(text: str) -> Any:
    """A dotted flag's value as vLLM reads it: JSON, else a human-readable integer (``1k`` = 1000,
    ``1K`` = 1024), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text.strip())
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if number.isdigit():
            return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
    try:
        return int(text)
    except ValueError:
        return text


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def fold_dotted_flags(argv: list[str]) -> list[str]:
    """vLLM's dotted JSON flags: ``--limit-mm-per-prompt.image 0 --limit-mm-per-prompt.video=1``
    → ``--limit-mm-per-prompt '{"image": 0, "video": 1}'`` (appended at the end, as vLLM does);
    ``--x.key+ a,b`` makes a list. Run after `normalize_flag_spelling`."""
    out: list[str] = []
    folded: dict[str, dict] = {}
    args = iter(argv)
    for arg in args:
        if not (arg.startswith("-") and "." in arg.partition("=")[0]) or re.match(r"-\.?\d", arg):  # -1.5 is a value
            out.append(arg)
            continue
        name, sep, text = arg.partition("=")
        if not sep:
            text = next(args, None)
            if text is None:
                out.append(arg)  # argparse names the missing value
                continue
        value: Any = _dotted_value(text)
        if name.endswith("+"):
            name, value = name[:-1], text.split(",")
        flag, *keys = name.split(".")
        for key in reversed(keys):
            value = {key: value}
        _merge(folded.setdefault(flag, {}), value)
    for flag, value in folded.items():
        out += [flag, json.dumps(value)]
    return out


def _config_flags(path: str, known: set[str]) -> list[str]:
    """A ``--config`` YAML file as flags, by vLLM's rules: ``key: true`` → ``--key``; ``false`` →
    ``--no-key`` where that flag exists, else nothing; a list → ``--key a b``; a mapping → ``--key``
    and its JSON; anything else → ``--key value``.

    Raises:
        ValueError: not a .yaml/.yml file, unreadable, or not a mapping of keys.
    """
    import yaml

    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise ValueError(f"--config {path}: the file must be YAML (.yaml or .yml), as vLLM's")
    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path}: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values")
    flags: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                flags.append(f"--{key}")
            elif f"--no-{key}" in known:
                flags.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                flags += [f"--{key}", *map(str, value)]
        elif isinstance(value, dict):
            flags += [f"--{key}", json.dumps(value)]
        else:
            flags += [f"--{key}", str(value)]
    return flags


def pull_config_file(argv: list[str], known: set[str]) -> list[str]:
    """``serve [MODEL] --config FILE …`` → the file's flags inserted right after ``serve`` and the
    positional MODEL, so flags on the command line win over the file (vLLM 0.33's
    ``FlexibleArgumentParser._pull_args_from_config`` for ``vllm serve``; ``--config=FILE`` too).

    Raises:
        ValueError: ``--config`` given twice or without a file, or a bad file (`_config_flags`).
    """
    at = [i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")]
    if not at:
        return argv
    if len(at) > 1:
        raise ValueError("--config given more than once")
    i = at[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise ValueError("--config needs a YAML file")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    else:
        path, rest = argv[i].partition("=")[2], argv[:i] + argv[i + 1:]
    head = 2 if len(rest) > 1 and not rest[1].startswith("-") else 1
    return rest[:head] + _config_flags(path, known) + rest[head:]


def expand_command_line(argv: list[str], known: set[str]) -> list[str]:
    """A ``serve …`` command line as vLLM 0.33's parser sees it before argparse: the ``--config``
    file's flags pulled in, vLLM's spellings (`normalize_flag_spelling`), dotted flags folded
    into JSON (`fold_dotted_flags`). ``known``: the option strings of the serve parser.

    Raises:
        ValueError: a bad ``--config`` (the message names it).
    """
    return fold_dotted_flags(normalize_flag_spelling(pull_config_file(argv, known)))
