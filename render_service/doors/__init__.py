"""The request APIs ("doors"), one module or package each, and the one table of them.

Each exports a `Door` (door.py): its request model, its routes, how it maps onto the shared
chat plan, its streaming event machine and its error shape. http/ and driver/ build their
routes from `DOORS`; render/ and derender/ keep the shared mechanism.

- ``chat.py``        OpenAI chat completions (the chat plan itself)
- ``completions.py`` OpenAI legacy completions (one `GenerateRequest` per prompt)
- ``responses/``     OpenAI Responses (→ the chat conversation)
- ``messages/``      Anthropic Messages (→ the chat conversation)
- ``answers.py``   what each door's stream answers (OpenAI chunks, or the door's events)
- ``session.py``, ``pipe.py``  the one derender stream session of every door (chat deltas
  → the door's answer), stateless and piped
- ``wire.py``        what those doors share on the wire, and each API's error shape

A new API: a module here exporting ``DOOR`` and one row below.
"""

from __future__ import annotations

from typing import Callable

from ..errors import OpenAIError
from .chat import DOOR as CHAT
from .completions import DOOR as COMPLETIONS
from .door import Door
from .messages import DOOR as MESSAGES
from .responses import DOOR as RESPONSES

DOORS: dict[str, Door] = {door.name: door for door in (CHAT, COMPLETIONS, RESPONSES, MESSAGES)}
# the doors that convert to the chat plan and answer through their own event machine
OVER_CHAT: dict[str, Door] = {name: door for name, door in DOORS.items() if door.over_chat}



def error_body_for(path: str) -> Callable[[OpenAIError], dict]:
    """The error body maker of the route at ``path``: the door's that owns it
    (`Door.owns_errors`), else OpenAI's (every route that is no door's)."""
    path = path.rstrip("/")
    for door in DOORS.values():
        if door.owns_errors(path):
            return door.error_body
    return OpenAIError.body


__all__ = ["DOORS", "Door", "OVER_CHAT", "error_body_for"]
