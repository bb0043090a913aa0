"""Exported parser states stay readable across releases.

``parsers_fixtures/states_v1.json`` holds states exported mid-output by the parsers as
they were before the state machines became enum/table driven (captured with that code:
each entry is the spec, the text fed before the export, the state, the rest of the text
and the message the whole output parses into). A stateless-streaming deployment hands
such states from one process to the next, so a rolling upgrade must resume them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parsers.api import OutputParser, ParserSpec, create_parser, message_from_events

STATES = json.loads((Path(__file__).parent / "parsers_fixtures" / "states_v1.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("entry", STATES, ids=[e["id"] for e in STATES])
def test_state_exported_by_earlier_code_resumes(entry):
    spec = ParserSpec.from_dict(entry["spec"])
    parser = create_parser(spec)
    # the earlier code released an open call's start and arguments as they came; today's
    # holds them until the call completes (issue 22), so they are what it had emitted
    head = parser.feed(entry["head"]) + parser.calls.held
    resumed = OutputParser.restore(spec, entry["state"])
    events = head + resumed.feed(entry["rest"]) + resumed.finish()
    msg = message_from_events(events)
    calls = [[c.name, c.arguments, c.id] for c in msg.tool_calls]
    assert [msg.reasoning, msg.content, calls] == entry["expected"]
    # and the resumed parser's own export is accepted again
    again = OutputParser.restore(spec, json.loads(json.dumps(resumed.export_state())))
    assert again.finish() == []
