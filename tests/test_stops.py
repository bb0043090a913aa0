"""StopMatcher: one Aho-Corasick automaton for all stop strings (issue 14 §2).

Checked against a naive reference (a ``find`` per stop string per piece, the rule of wire
brief §3.2 step 4) piece by piece, for any chunking, protected prefix and state round trip;
then that the work per push is the pushed text only, and the limits.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from render_service.derender import stops as stops_module
from render_service.derender.stops import StopMatcher
from render_service.wire.limits import MAX_STOP_CHARS, MAX_STOP_STRINGS, check_stop_limits


class NaiveStops:
    """The rule spelled out: earliest-ending match after the protected text, ties to the
    earlier list entry; hold the longest suffix that is a proper prefix of a stop."""

    def __init__(self, stops, include):
        self.stops, self.include = [s for s in stops if s], include
        self.held, self.protected, self.stopped = "", 0, None

    def push(self, text, protected=False):
        if self.stopped is not None:
            return ""
        if not self.stops:
            return text
        buf = self.held + text
        guard = len(buf) if protected else self.protected
        best = None
        for end in range(guard + 1, len(buf) + 1):
            for stop in self.stops:
                if buf.endswith(stop, 0, end):
                    best = (end, stop)
                    break
            if best:
                break
        if best:
            end, stop = best
            self.stopped, self.held = stop, ""
            return buf[:end] if self.include else buf[:end - len(stop)]
        keep = next((k for k in range(len(buf), 0, -1)
                     if any(len(s) > k and s.startswith(buf[-k:]) for s in self.stops)), 0)
        cut = len(buf) - keep
        self.held, self.protected = buf[cut:], max(0, guard - cut)
        return buf[:cut]


alphabet = st.sampled_from("ab\nxé")
stop_lists = st.lists(st.text(alphabet, min_size=0, max_size=5), min_size=1, max_size=5)
pieces = st.lists(st.tuples(st.text(alphabet, max_size=6), st.booleans()), max_size=12)


@settings(max_examples=400, deadline=None)
@given(stop_lists, pieces, st.booleans(), st.integers(0, 12))
def test_same_releases_as_the_naive_rule_for_any_chunking(stops, parts, include, resume_at):
    fast, slow = StopMatcher(stops, include), NaiveStops(stops, include)
    for i, (text, protected) in enumerate(parts):
        if i == resume_at:  # a stream moving to another replica mid-way
            fast = StopMatcher(stops, include, state=fast.export_state())
        assert fast.push(text, protected) == slow.push(text, protected)
        assert fast.held == slow.held and fast.stopped == slow.stopped
    if fast.stopped is None:
        assert fast.flush() == slow.held


def test_push_reads_only_the_new_text(monkeypatch):
    """A 999-character held prefix of 64 long stops is not re-read on every 1-character
    push (the quadratic cost that stalled the event loop)."""
    steps = 0
    real_step = stops_module._Automaton.step

    def counting_step(self, node, ch):
        nonlocal steps
        steps += 1
        return real_step(self, node, ch)

    monkeypatch.setattr(stops_module._Automaton, "step", counting_step)
    stops = ["a" * (MAX_STOP_CHARS - 1) + chr(0x100 + i) for i in range(MAX_STOP_STRINGS)]
    matcher = StopMatcher(stops)
    text = "a" * 5000
    released = "".join(matcher.push(ch) for ch in text)
    assert steps == len(text)
    assert released + matcher.held == text and len(matcher.held) == MAX_STOP_CHARS - 1


@pytest.mark.parametrize("stops", [
    ["x"] * (MAX_STOP_STRINGS + 1),
    ["y" * (MAX_STOP_CHARS + 1)],
])
def test_limits_on_number_and_length(stops):
    with pytest.raises(ValueError, match="stop strings|Stop strings"):
        check_stop_limits(stops)
    with pytest.raises(ValueError):
        StopMatcher(stops)


def test_state_with_held_text_longer_than_any_stop_is_refused():
    with pytest.raises(ValueError, match="held"):
        StopMatcher(["ab"], state={"held": "a" * 10, "protected": 0, "stopped": None})
