"""Reasoning and tool-call parsers: sans-IO state machines, text in, events out.

Public API: :mod:`parsers.api` (re-exported here). Vocabulary: :mod:`parsers.events`.
"""

from .api import (
    OutputParser,
    ParsedMessage,
    ParsedToolCall,
    ParserSpec,
    create_parser,
    detect_parsers,
    message_from_events,
    parse_complete,
    prompt_ends_reasoning,
    prompt_starts_in_reasoning,
    reasoning_parser_names,
    tool_parser_names,
)
from .events import Content, Event, Reasoning, ToolCallArguments, ToolCallEnd, ToolCallStart

__all__ = ["OutputParser", "ParsedMessage", "ParsedToolCall", "ParserSpec", "create_parser", "detect_parsers",
           "message_from_events", "parse_complete", "prompt_ends_reasoning", "prompt_starts_in_reasoning", "reasoning_parser_names",
           "tool_parser_names", "Content", "Event", "Reasoning", "ToolCallArguments", "ToolCallEnd", "ToolCallStart"]
