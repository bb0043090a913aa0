"""`Door`: one request API over the shared chat plan, as data.

Every door derenders through one session (`doors.session.StreamSession`) whose output its
``answer`` builds (`doors.answers`): OpenAI chunks for chat and completions, the door's own
events for the others. A door that is not chat itself (Responses, Anthropic Messages)
converts its request to the chat conversation render renders (``to_chat``), and turns the
chat derender's deltas into its own events with an event machine (``open_machine`` /
``restore_machine``). Everything the HTTP routes, the driver and the session need to know
about an API is a field here, so adding an API is one module in ``doors/`` and one row in
``doors.DOORS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import OpenAIError


@dataclass(frozen=True)
class Door:
    """One request API.

    Paths (vLLM 0.33's names; the render and derender routes are ours for these APIs):
        path: the client route the driver serves (``/v1/responses``).
        render_path, derender_path: the render server's routes (``…/render``, ``…/derender``;
            the pipe is ``derender_path + "/pipe"``).

    Request models (pydantic): ``request`` the client body; ``derender_request`` /
    ``derender_stream_request`` the derender bodies; ``pipe_header`` the pipe's first line.
    ``request_field`` names the client body inside those (``chat_request``,
    ``responses_request``).
    ``answer``: the answer builder class of a stream (`doors.answers`: plan, per-choice
    output, stateless answer, pipe SSE).

    Behaviour:
        render(bundle, config, req, request_id, media) -> the GenerateRequest dict (a list of
            them for completions).
        to_chat(req) -> the chat request dict the chat plan renders and derender plans from.
        render_body(bundle, config, req) -> the chat body ``render`` renders (``to_chat`` under
            this server's template and flags), made once by the render route, which loads the
            media from it and passes it on: ``render(..., media, body=...)``.
        in_own_terms(err, req) -> the error with ``param`` named in this API's fields.
        open_machine(session, request_id) -> the event machine of a new stream;
            restore_machine(state) -> one from ``export_state()``.
        events(machine, delta, prompt_tokens, output_tokens) -> this API's events for a delta.
        final(events) -> the whole answer a finished event list describes.
        done_events: event types that end a stream.
        stops(req) -> the request's stop strings (the driver cuts decode on them).
        error_body(err) -> the non-streaming error body; stream_error(err, sequence_number)
            -> the last event of a failed stream. The door's routes that answer in its shape:
            `owns_errors` (its client route, ``count_tokens`` and derender routes; the render
            route is vLLM's, OpenAI-shaped).
        count_tokens(bundle, config, req, media) -> ``{"input_tokens"}`` of
            ``count_tokens_request`` (served at ``path + "/count_tokens"``), or None.

    The render route (`http.render_routes`, one builder for every door):
        render_aliases: more paths of the render route (chat: vLLM's ``/render``).
        render_loads(bytes) -> (body, bytes parsed anew): the body parse of a door whose
            requests carry a conversation parsed before (chat: `render.known_history.KNOWN`);
            with it, a request that brings little new renders on the event loop. None: orjson.
        takes_media: the render loads the request's images (completions: none).
        forced_tools(req) -> (tools, effective tool_choice), read for the
            ``X-Tool-Choice-Unconstrained`` header (chat), or None: no such header.
    """

    name: str
    path: str
    render_path: str
    derender_path: str
    request: type
    render: Callable[..., Any]
    error_body: Callable[[OpenAIError], dict]
    derender_request: type
    derender_stream_request: type
    pipe_header: type
    request_field: str
    answer: type
    # the chat plan's own doors (chat, completions) leave the rest unset: render/ and derender/ are theirs
    to_chat: Callable[[Any], dict] | None = None
    in_own_terms: Callable[[OpenAIError, Any], OpenAIError] | None = None
    open_machine: Callable[[Any, str], Any] | None = None
    restore_machine: Callable[[dict], Any] | None = None
    events: Callable[[Any, Any, int, int], list[dict]] | None = None
    final: Callable[[list[dict]], dict] | None = None
    done_events: frozenset[str] = frozenset()
    stops: Callable[[Any], list[str] | None] | None = None
    stream_error: Callable[[OpenAIError, int], dict] | None = None
    render_body: Callable[[Any, Any, Any], dict] | None = None
    count_tokens: Callable[..., dict] | None = None
    render_aliases: tuple[str, ...] = ()
    render_loads: Callable[[bytes], tuple[Any, int]] | None = None
    takes_media: bool = True
    forced_tools: Callable[[Any], tuple[list | None, str | dict]] | None = None
    derender_aliases: tuple[str, ...] = ()  # more paths of the derender route (chat: vLLM's ``/derender``)
    conversation: bool = True  # requests are turns of a conversation (the driver's KV reuse keys them)
    count_tokens_request: type | None = None

    @property
    def count_tokens_path(self) -> str | None:
        """``path + "/count_tokens"`` for a door that counts tokens, else None."""
        return self.path + "/count_tokens" if self.count_tokens is not None else None

    def owns_errors(self, path: str) -> bool:
        """``path`` (no trailing slash) is a route of this door that answers in its error shape."""
        return path == self.path or path == self.count_tokens_path or path.startswith(self.derender_path)

    @property
    def over_chat(self) -> bool:
        """True for a door that converts to the chat plan (Responses, Messages)."""
        return self.to_chat is not None
