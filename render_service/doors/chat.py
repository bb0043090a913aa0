"""The OpenAI chat completions door: ``POST /v1/chat/completions`` (driver),
``/v1/chat/completions/render`` and ``/v1/chat/completions/derender[/pipe]`` (render server).

Chat is the shared plan every other door converts to, so its mechanism is render/ and
derender/ themselves (`render.chat.render_chat`, `derender.plan.chat_plan`); its stream
answers OpenAI chunks (`answers.ChatAnswer`).
"""

from __future__ import annotations

from ..errors import OpenAIError
from ..render.chat import render_chat
from ..render.known_history import KNOWN
from ..wire.derender import DerenderChatRequest, DerenderChatStreamRequest, PipeHeader
from ..wire.openai import ChatCompletionRequest
from .answers import ChatAnswer
from .door import Door

DOOR = Door(
    name="chat",
    path="/v1/chat/completions",
    render_path="/v1/chat/completions/render",
    derender_path="/v1/chat/completions/derender",
    request=ChatCompletionRequest,
    render=render_chat,
    error_body=OpenAIError.body,
    derender_request=DerenderChatRequest,
    derender_stream_request=DerenderChatStreamRequest,
    pipe_header=PipeHeader,
    request_field="chat_request",
    answer=ChatAnswer,
    render_aliases=("/render",),
    render_loads=KNOWN.parse,  # an agent's history: parsed once
    forced_tools=lambda req: (req.tools, req.effective_tool_choice),
    derender_aliases=("/derender",),
)
