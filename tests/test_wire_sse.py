"""The one SSE codec (render_service.wire.sse): what the writer frames, the reader gets
back whole, in any split of the bytes."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from render_service.wire import sse

EVENTS = [{"a": 1}, {"text": "multi\nline? no: JSON escapes it"}, {"error": {"message": "x"}}]
STREAM = b"".join(sse.event(e) for e in EVENTS) + sse.comment("server-timing total;dur=1") + sse.DONE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_payloads(cuts):
    reader = sse.SSEReader()
    bounds = [0, *sorted(cuts), len(STREAM)]
    payloads = [p for lo, hi in zip(bounds, bounds[1:]) for p in reader.feed(STREAM[lo:hi])] + reader.close()
    assert [orjson.loads(p) for p in payloads[:-1]] == EVENTS
    assert sse.is_done(payloads[-1]) and len(payloads) == len(EVENTS) + 1


def test_spec_details():
    reader = sse.SSEReader()
    raw = b"event: x\r\nid: 7\r\ndata: one\r\ndata:two\r\n\r\n: comment\n\ndata: [DONE]"
    assert reader.feed(raw) == [b"one\ntwo"]
    assert reader.close() == [b"[DONE]"]  # an event left without its blank line is still delivered
    assert sse.SSEReader().close() == []


def test_overlong_line_is_an_error():
    reader = sse.SSEReader(max_line_bytes=8)
    assert reader.feed(b"data: 1234\n\n") == [b"1234"]
    with pytest.raises(sse.SSEError):
        reader.feed(b"data: " + b"x" * 20)


def test_writer_frames():
    assert sse.event({"a": 1}) == b'data: {"a":1}\n\n'
    assert sse.event(b"[DONE]") == sse.DONE == b"data: [DONE]\n\n"
    assert sse.comment("hi") == b": hi\n\n"
