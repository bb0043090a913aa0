"""Render: a client request → the `GenerateRequest` a tokens-only engine takes. No HTTP.

One small module per front door, over shared steps:

- ``chat.py``        OpenAI chat completions → one `GenerateRequest`
- ``completions.py`` OpenAI legacy completions → one `GenerateRequest` per prompt
- ``messages.py``    OpenAI messages → what a chat template expects (content parts, tool-call arguments)
- ``request.py``     request ids, ``max_tokens``, truncation, the `GenerateRequest` dict
- ``sampling.py``    request fields → vLLM ``sampling_params``

A new request API is a new front-door module here, its request model in ``wire/`` and its
response in ``derender/``.
"""

from .chat import render_chat
from ..doors.completions import render_completion
from .request import new_request_id, resolve_max_tokens

__all__ = ["new_request_id", "render_chat", "render_completion", "resolve_max_tokens"]
