"""A plugin family as an entry point would ship it: data rows only."""

from parsers.formats import ToolFormat
from parsers.reasoning import ReasoningFormat

TOOL_ROW = ToolFormat("acme", "envelope", call_begin=("<<call>>",), call_end=("<</call>>",), families="ACME-1")


def reasoning_row() -> ReasoningFormat:
    return ReasoningFormat("acme_think", start=("<<think>>",), end=("<</think>>",), default_on=False)
