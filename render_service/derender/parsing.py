"""The seam between derender and `parsers/`: build a parser, restore one, read the prompt.

`ParserKit` is the four calls derender makes into the parsers package (ARCHITECTURE.md,
"Parsers"). `DefaultParserKit` binds them to ``parsers.api``; tests may pass another kit
with the same calls. Imports are lazy so that a server without parsers still derenders
plain text.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import bad_request


class ParserKit(Protocol):
    """What derender needs from a parsers package.

    ``spec(**fields)`` builds a ``ParserSpec`` (fields: reasoning, tool, tools,
    tool_choice, starts_in_reasoning, chat_template_kwargs); ``create(spec)`` and
    ``restore(spec, state)`` give an ``OutputParser`` (``feed``/``finish``/``export_state``);
    ``starts_in_reasoning(reasoning_name, prompt_tail_text, chat_template_kwargs)`` reads
    the rendered prompt (shared cases 23, 25).
    """

    def spec(self, **fields: Any) -> Any: ...
    def create(self, spec: Any) -> Any: ...
    def restore(self, spec: Any, state: dict) -> Any: ...
    def starts_in_reasoning(self, reasoning: str, prompt_text: str, chat_template_kwargs: dict) -> bool: ...


class DefaultParserKit:
    """`ParserKit` over ``parsers.api`` (``ParserSpec``, ``create_parser``,
    ``OutputParser.restore``, ``prompt_starts_in_reasoning``)."""

    def _api(self) -> Any:
        try:
            from parsers import api
        except ImportError as exc:  # the package is optional until a parser is configured
            raise bad_request(f"A parser is configured but the parsers package is unavailable: {exc}") from None
        return api

    def spec(self, **fields: Any) -> Any:
        return self._api().ParserSpec(**fields)

    def create(self, spec: Any) -> Any:
        return self._api().create_parser(spec)

    def restore(self, spec: Any, state: dict) -> Any:
        parser = self._api().create_parser(spec)
        return type(parser).restore(spec, state)

    def starts_in_reasoning(self, reasoning: str, prompt_text: str, chat_template_kwargs: dict) -> bool:
        return bool(self._api().prompt_starts_in_reasoning(reasoning, prompt_text, chat_template_kwargs))
