"""The ``developer`` role for templates that do not know it (vLLM 0.33, ``renderers/hf.py``).

OpenAI clients (Codex and the Responses API above all) send ``developer`` messages; most
open-model templates only know ``system``. When a conversation has a ``developer`` message
and the template's source never names that role, vLLM turns each ``developer`` message into
``system`` and merges every system message, in order, into one leading message (contents
joined with a blank line; a list content's text parts joined with a newline). Pure function,
called once, by `render.messages.prepare_messages`, which every door's conversation goes through.
"""

from __future__ import annotations

from typing import Any


def developer_as_system(messages: list[dict], template_source: str | None) -> list[dict]:
    """``messages`` with vLLM's developer→system rule applied (a new list; unchanged when
    no message is ``developer`` or the template handles the role itself)."""
    if not any(isinstance(m, dict) and m.get("role") == "developer" for m in messages):
        return messages
    if template_source and ('"developer"' in template_source or "'developer'" in template_source):
        return messages
    converted = []
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "developer":
            m = {k: v for k, v in m.items() if k != "tools"} | {"role": "system"}
        converted.append(m)
    systems = [i for i, m in enumerate(converted) if isinstance(m, dict) and m.get("role") == "system"]
    if not systems or systems == [0]:
        return converted
    texts = [t for t in (_text(converted[i].get("content")) for i in systems) if t]
    rest = [m for i, m in enumerate(converted) if i not in set(systems)]
    return [{"role": "system", "content": "\n\n".join(texts)}, *rest]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p["text"] if isinstance(p, dict) else p for p in content
                         if isinstance(p, str) or (isinstance(p, dict) and "text" in p))
    return content or ""
