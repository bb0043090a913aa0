"""Render: a client request → the `GenerateRequest` a tokens-only engine takes. No HTTP.

The shared mechanism every door (``render_service/doors/``) renders through:

- ``chat.py``        the chat plan: a chat request → one `GenerateRequest` (Responses and
                     Messages convert to it first)
- ``messages.py``    OpenAI messages → what a chat template expects (content parts, tool-call arguments)
- ``request.py``     request ids, ``max_tokens``, truncation, the `GenerateRequest` dict
- ``sampling.py``    request fields → vLLM ``sampling_params``

A new request API is a module in ``render_service/doors/`` and a row in its table, not a
module here.
"""

from .chat import render_chat
from .request import new_request_id, resolve_max_tokens

__all__ = ["new_request_id", "render_chat", "resolve_max_tokens"]
