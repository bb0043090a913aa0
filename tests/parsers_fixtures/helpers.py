"""Drive parsers the way derender does: pieces in, events out, state exported in between."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import tokenizers

from parsers.api import OutputParser, ParserSpec, create_parser
from parsers.api import merge_events as coalesce
from parsers.events import ToolCallArguments, ToolCallEnd, ToolCallStart
from parsers.jsonstream import JsonValue


def pieces_of(text: str, size: int | None) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (``None``: one piece)."""
    if not size:
        return [text]
    return [text[i:i + size] for i in range(0, len(text), size)]


def run(spec: ParserSpec, pieces: list[str]) -> list:
    """Feed ``pieces`` to one parser, then finish; all events in order."""
    parser = create_parser(spec)
    events = []
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.finish()


def run_restoring(spec: ParserSpec, pieces: list[str]) -> list:
    """Like :func:`run`, but the parser is exported to JSON and restored before every piece."""
    parser = create_parser(spec)
    events = []
    for piece in pieces:
        state = json.loads(json.dumps(parser.export_state()))
        parser = OutputParser.restore(spec, state)
        events += parser.feed(piece)
    state = json.loads(json.dumps(parser.export_state()))
    return events + OutputParser.restore(spec, state).finish()


def check_call_events(events: list) -> None:
    """Start, Arguments…, End per call; indexes count from 0; every complete call's arguments
    are a JSON object, a cut-off call's (``ToolCallEnd.complete`` false) the start of one
    (the text the model wrote, nothing invented; XML families may close the translation
    of whole values)."""
    open_index = None
    next_index = 0
    args: dict[int, str] = {}
    cut: set[int] = set()
    for ev in events:
        if isinstance(ev, ToolCallStart):
            assert open_index is None, f"call {ev.index} started inside call {open_index}"
            assert ev.index == next_index
            open_index, args[ev.index] = ev.index, ""
        elif isinstance(ev, ToolCallArguments):
            assert ev.index == open_index, "arguments outside their call"
            args[ev.index] += ev.text
        elif isinstance(ev, ToolCallEnd):
            assert ev.index == open_index
            if not ev.complete:
                cut.add(ev.index)
            open_index = None
            next_index += 1
    assert open_index is None, "a call was left open after finish()"
    for index, text in args.items():
        if index in cut:
            value = JsonValue(require="{")
            end, _ = value.feed(text)
            assert end == len(text) and not value.error, \
                f"cut-off call {index} arguments are not the start of a JSON object: {text!r}"
            continue
        assert isinstance(json.loads(text), dict), f"call {index} arguments are not a JSON object: {text!r}"


def assert_chunking_invariant(spec: ParserSpec, text: str, extra_splits: list[list[str]] = ()) -> list:
    """One feed, 1-char feeds, 2/3/7-char feeds and ``extra_splits`` all give the same events.

    Returns the coalesced events of the whole-text run.
    """
    whole = coalesce(run(spec, [text]))
    check_call_events(whole)
    for size in (1, 2, 3, 7):
        got = coalesce(run(spec, pieces_of(text, size)))
        assert got == whole, f"chunk size {size} differs"
    for pieces in extra_splits:
        assert coalesce(run(spec, pieces)) == whole, f"split {pieces!r} differs"
    return whole


def assert_restore_invariant(spec: ParserSpec, text: str) -> None:
    """Export/restore before every character, and a two-piece split at every position."""
    whole = coalesce(run(spec, [text]))
    assert coalesce(run_restoring(spec, pieces_of(text, 1))) == whole
    for k in range(len(text) + 1):
        assert coalesce(run_restoring(spec, [text[:k], text[k:]])) == whole, f"restore at {k} differs"


@lru_cache(maxsize=None)
def _tokenizer(path: str) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(path)


def token_pieces(tokenizer_json: Path, text: str) -> list[str]:
    """``text`` cut the way a streaming detokenizer delivers it: encode with the real
    tokenizer, decode growing prefixes (specials kept), one piece per token (a token that
    ends inside a UTF-8 sequence waits for the next one)."""
    tok = _tokenizer(str(tokenizer_json))
    ids = tok.encode(text, add_special_tokens=False).ids
    pieces, done = [], ""
    for k in range(1, len(ids) + 1):
        now = tok.decode(ids[:k], skip_special_tokens=False)
        if now.endswith("\ufffd"):
            continue
        pieces.append(now[len(done):])
        done = now
    return pieces


__all__ = ["pieces_of", "run", "run_restoring", "check_call_events", "assert_chunking_invariant",
           "assert_restore_invariant", "coalesce", "token_pieces"]
