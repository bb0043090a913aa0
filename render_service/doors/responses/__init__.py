"""The OpenAI Responses door: ``POST /v1/responses`` (driver), ``/v1/responses/render`` and
``/v1/responses/derender[/pipe]`` (render server).

- ``wire.py``   the request models (vLLM 0.33's ``ResponsesRequest``) and derender bodies
- ``render.py`` a Responses request → the chat conversation → the `GenerateRequest`
- ``events.py`` `ResponsesStream`: chat deltas → Responses stream events / the ``Response``
"""

from __future__ import annotations

from typing import Any

from ...derender.assemble import response_id
from ...errors import OpenAIError
from ..answers import EventAnswer
from ..door import Door
from ..wire import openai_stream_error
from .events import ResponsesStream, response_envelope
from .render import in_input_terms, render_responses, responses_render_body, responses_to_chat
from .wire import DerenderResponsesRequest, DerenderResponsesStreamRequest, PipeHeader, ResponsesRequest


def _sampling(generation_config: dict, req: Any) -> dict:
    """The effective ``temperature``, ``top_p`` and ``max_tokens`` the ``Response`` echoes."""
    pick = lambda name: getattr(req, name) if getattr(req, name) is not None else generation_config.get(name, 1.0)  # noqa: E731
    return {"temperature": pick("temperature"), "top_p": pick("top_p"), "max_tokens": req.max_output_tokens}


def _open_machine(session: Any, request_id: str) -> ResponsesStream:
    rid = response_id(request_id, "chat")
    if not rid.startswith("resp_"):
        rid = "resp_" + rid.removeprefix("chatcmpl-")
    env = response_envelope(session.request, response_id=rid, created_at=session.created, model=session.model,
                            sampling=_sampling(session.d.bundle.generation_config, session.request))
    return ResponsesStream(env)


DOOR = Door(
    name="responses",
    path="/v1/responses",
    render_path="/v1/responses/render",
    derender_path="/v1/responses/derender",
    request=ResponsesRequest,
    derender_request=DerenderResponsesRequest,
    derender_stream_request=DerenderResponsesStreamRequest,
    pipe_header=PipeHeader,
    answer=EventAnswer,
    request_field="responses_request",
    render=lambda bundle, config, req, request_id, media=None, body=None: render_responses(bundle, config, req, media,
                                                                                          body),
    to_chat=responses_to_chat,
    render_body=responses_render_body,
    in_own_terms=in_input_terms,
    open_machine=_open_machine,
    restore_machine=lambda state: ResponsesStream(state=state),
    events=lambda machine, delta, prompt_tokens, output_tokens: machine.step(
        delta, {"input_tokens": prompt_tokens, "output_tokens": output_tokens}),
    final=lambda events: events[-1]["response"],
    done_events=frozenset({"response.completed", "response.incomplete"}),
    stops=lambda req: req.stop,
    error_body=OpenAIError.body,
    stream_error=openai_stream_error,
)
