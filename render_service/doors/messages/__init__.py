"""The Anthropic Messages door: ``POST /v1/messages`` and ``/v1/messages/count_tokens``
(driver and render server), ``/v1/messages/render`` and ``/v1/messages/derender[/pipe]``.

- ``wire.py``   the request models (vLLM 0.33's ``AnthropicMessagesRequest``) and derender bodies
- ``render.py`` a Messages request → the chat conversation → the `GenerateRequest`; count_tokens
- ``events.py`` `AnthropicStream`: chat deltas → Messages stream events; `AnthropicMessage`
"""

from __future__ import annotations

from typing import Any

from ...derender.assemble import response_id
from ..answers import EventAnswer
from ..door import Door
from ..wire import anthropic_error_body, anthropic_stream_error
from .events import AnthropicMessage, AnthropicStream
from .render import count_tokens, in_messages_terms, messages_render_body, messages_to_chat, render_messages
from .wire import (AnthropicCountTokensRequest, AnthropicMessagesRequest, DerenderMessagesRequest,
                   DerenderMessagesStreamRequest, PipeHeader)


def _final(events: list[dict]) -> dict:
    acc = AnthropicMessage()
    for ev in events:
        acc.add(ev)
    return acc.message


def _open_machine(session: Any, request_id: str) -> AnthropicStream:
    return AnthropicStream(response_id(request_id, "chat"), session.model, session.prompt_len)


DOOR = Door(
    name="messages",
    path="/v1/messages",
    render_path="/v1/messages/render",
    derender_path="/v1/messages/derender",
    request=AnthropicMessagesRequest,
    derender_request=DerenderMessagesRequest,
    derender_stream_request=DerenderMessagesStreamRequest,
    pipe_header=PipeHeader,
    answer=EventAnswer,
    request_field="messages_request",
    render=render_messages,
    to_chat=messages_to_chat,
    render_body=messages_render_body,
    in_own_terms=lambda err, req: in_messages_terms(err, req, False),
    open_machine=_open_machine,
    restore_machine=lambda state: AnthropicStream(state=state),
    events=lambda machine, delta, prompt_tokens, output_tokens: machine.step(delta, output_tokens),
    final=_final,
    done_events=frozenset({"message_stop"}),
    stops=lambda req: req.stop_sequences,
    error_body=anthropic_error_body,
    stream_error=anthropic_stream_error,
    count_tokens=count_tokens,
    count_tokens_request=AnthropicCountTokensRequest,
)
