"""The `vllm launch render` options render-service does not honour: parsed, then named.

Every option of vLLM 0.33's parser (`vllm_flags.VLLM_LAUNCH_RENDER_OPTIONS`) that the flag
table (`flags.FLAGS`) does not define is one of two kinds (the rule, also in the README;
`tests/test_launch_compat.py` holds the whole table to it):

- no meaning on a CPU render tier (`vllm_flags.NO_MEANING_HERE`: GPU memory, weights,
  parallelism, KV cache, scheduling…): accepted and named in one start-up warning line
  (`ignored_flags`);
- meaningful but not served (`vllm_flags.NOT_SERVED`): refused at start-up with one line saying
  why, unless given the value that asks for what render-service does anyway (`refused_flags`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

from .vllm_flags import NO_MEANING_HERE, NOT_SERVED, VLLM_LAUNCH_RENDER_OPTIONS

_NOOP_PREFIX = "vllm_noop__"
_REFUSED_PREFIX = "vllm_refused__"


def unhonoured_options(known: set[str]) -> Iterator[tuple[tuple[str, ...], str, int, bool]]:
    """``(option strings, dest, arity, no meaning here?)`` for every vLLM option none of whose
    spellings is in ``known`` (the options already defined)."""
    for options, arity in VLLM_LAUNCH_RENDER_OPTIONS:
        if any(o in known for o in options):
            continue  # honoured: in the flag table
        meaningless = options[0] in NO_MEANING_HERE
        known.update(options)
        yield options, (_NOOP_PREFIX if meaningless else _REFUSED_PREFIX) + options[0].lstrip("-").replace("-", "_"), \
            arity, meaningless


class Given(argparse.Action):
    """Records a vLLM flag we do not honour as ``(option string as typed, value)``; a switch's
    value is True, or False for its negative spelling (``--no-x``, ``--disable-x`` of an
    ``--enable-x`` row, …), as vLLM's parser reads it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.nargs == 0:
            values = not _negative(option_string, self.option_strings[0])
        setattr(namespace, self.dest, (option_string, values))


def _negative(option: str, first: str) -> bool:
    """True for a switch's spelling that turns it off."""
    if option.startswith("--no-"):
        return True
    for on, off in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
        if first.startswith(on) and option.startswith(off):
            return True
    return False


def _accepted(value: Any, accepted: tuple) -> bool:
    for ok in accepted:
        if value == ok:
            return True
        if isinstance(value, str) and isinstance(ok, str):
            for read in (float, json.loads):
                try:
                    if read(value) == read(ok):
                        return True
                except (ValueError, TypeError):
                    pass
    return False


def refused_flags(args: argparse.Namespace) -> list[str]:
    """One line per vLLM flag on this command line that render-service does not serve
    (`vllm_flags.NOT_SERVED`) and that asks for something other than what it does."""
    lines = []
    for key, given in sorted(vars(args).items()):
        if not key.startswith(_REFUSED_PREFIX) or given is None:
            continue
        option, value = given
        first = "--" + key[len(_REFUSED_PREFIX):].replace("_", "-")
        reason, accepted = NOT_SERVED.get(first, ("render-service does not serve it", ()))
        if not _accepted(value, accepted):
            typed = " ".join(value) if isinstance(value, list) else value
            shown = option if isinstance(value, bool) else f"{option} {typed}"
            lines.append(f"{shown}: not served by render-service ({reason})")
    return lines


def ignored_flags(args: argparse.Namespace) -> list[str]:
    """The vLLM flags on this command line that have no meaning here (`vllm_flags.NO_MEANING_HERE`),
    as ``--name``."""
    return sorted("--" + k[len(_NOOP_PREFIX):].replace("_", "-") for k, v in vars(args).items()
                  if k.startswith(_NOOP_PREFIX) and v is not None)
