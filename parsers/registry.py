"""Registry: parser names (vLLM 0.33 spelling, §5.2) -> format rows, plus plugins.

Built-in rows live in :mod:`parsers.reasoning` and :mod:`parsers.formats`. Plugins are
Python entry points: group ``render_service.reasoning_parsers`` maps a name to a
:class:`parsers.reasoning.ReasoningFormat` (or a zero-argument callable returning one),
group ``render_service.tool_parsers`` maps a name to a
:class:`parsers.formats.ToolFormat` (or a callable returning one). A plugin adds a family
as data; it does not add a new state machine.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from . import formats, reasoning

REASONING_GROUP = "render_service.reasoning_parsers"
TOOL_GROUP = "render_service.tool_parsers"
HARMONY = "harmony"   # sentinel: the name is served by parsers.harmony
RESPONSE_TEMPLATE = "response_template"  # sentinel: served by parsers.response_template
# vLLM's parsers driven by the checkpoint's ``response_template`` metadata (``beam`` is the
# same mechanism with Beam's structured-output extras, which do not concern parsing).
RESPONSE_TEMPLATE_NAMES = ("hf", "beam")
MUSE = "muse"         # sentinel: served by parsers.muse (its ATEM call body is the ``muse`` row)
MUSE_NAMES = ("muse", "muse_glimmer", "musespark1x")


def _plugins(group: str) -> dict[str, object]:
    out = {}
    for ep in entry_points(group=group):
        try:
            value = ep.load()
            out[ep.name] = value() if callable(value) and not isinstance(
                value, (reasoning.ReasoningFormat, formats.ToolFormat)) else value
        except Exception:  # a broken plugin must not take the built-ins down
            continue
    return out


def reasoning_parser_names() -> list[str]:
    """Every accepted ``--reasoning-parser`` name (built-ins, aliases, plugins), sorted."""
    names = set(reasoning.FORMATS) | set(reasoning.ALIASES) | set(reasoning.HARMONY_REASONING_NAMES)
    names |= set(RESPONSE_TEMPLATE_NAMES) | set(MUSE_NAMES)
    return sorted(names | set(_plugins(REASONING_GROUP)))


def tool_parser_names() -> list[str]:
    """Every accepted ``--tool-call-parser`` name (built-ins, aliases, plugins), sorted."""
    names = set(formats.FORMATS) | set(formats.ALIASES) | set(formats.HARMONY_TOOL_NAMES)
    names |= set(RESPONSE_TEMPLATE_NAMES) | set(MUSE_NAMES)
    return sorted(names | set(_plugins(TOOL_GROUP)))


def reasoning_format(name: str) -> "reasoning.ReasoningFormat | str":
    """Row for a reasoning parser name, or :data:`HARMONY` / :data:`RESPONSE_TEMPLATE`.
    Raises ``ValueError`` if unknown."""
    if name in reasoning.HARMONY_REASONING_NAMES:
        return HARMONY
    if name in RESPONSE_TEMPLATE_NAMES:
        return RESPONSE_TEMPLATE
    if name in MUSE_NAMES:
        return MUSE
    name = reasoning.ALIASES.get(name, name)
    if name in reasoning.FORMATS:
        return reasoning.FORMATS[name]
    row = _plugins(REASONING_GROUP).get(name)
    if isinstance(row, reasoning.ReasoningFormat):
        return row
    raise ValueError(f"unknown reasoning parser {name!r}; known: {', '.join(reasoning_parser_names())}")


def tool_format(name: str) -> "formats.ToolFormat | str":
    """Row for a tool parser name, or :data:`HARMONY` / :data:`RESPONSE_TEMPLATE`.
    Raises ``ValueError`` if unknown."""
    if name in formats.HARMONY_TOOL_NAMES:
        return HARMONY
    if name in RESPONSE_TEMPLATE_NAMES:
        return RESPONSE_TEMPLATE
    if name in MUSE_NAMES:
        return MUSE
    name = formats.ALIASES.get(name, name)
    if name in formats.FORMATS:
        return formats.FORMATS[name]
    row = _plugins(TOOL_GROUP).get(name)
    if isinstance(row, formats.ToolFormat):
        return row
    raise ValueError(f"unknown tool call parser {name!r}; known: {', '.join(tool_parser_names())}")


__all__ = ["reasoning_parser_names", "tool_parser_names", "reasoning_format", "tool_format",
           "REASONING_GROUP", "TOOL_GROUP", "HARMONY", "RESPONSE_TEMPLATE", "RESPONSE_TEMPLATE_NAMES", "MUSE",
           "MUSE_NAMES"]
