"""The ``developer`` role reaches the template as vLLM 0.33 passes it, through every door.

vLLM (``renderers/hf.py``) maps ``developer`` → ``system`` and merges the system messages
into one leading message only when the template's source never names the role. So:
- gpt-oss's template knows ``developer``: the prompt is transformers' for the messages as sent;
- Qwen3's does not (transformers would silently drop the message): the prompt is transformers'
  for the mapped conversation, the developer text included;
- the rule follows the template that actually renders, a request's own ``chat_template`` too.
"""

from __future__ import annotations

import httpx
import pytest

from conftest import MODELS, needs_shared, render_server

pytestmark = needs_shared

transformers = pytest.importorskip("transformers", reason="transformers is the prompt oracle (dev extra)")

DEVELOPER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
             {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
             {"role": "user", "content": "Name a colour."}]
MAPPED = [{"role": "system", "content": "You are terse.\n\nAnswer in French."}, {"role": "user", "content": "Hi"},
          {"role": "user", "content": "Name a colour."}]


def _oracle(model: str, messages: list[dict], **kwargs) -> list[int]:
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / model))
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs)
    return list(out)


def _render(url: str, route: str, body: dict) -> dict:
    resp = httpx.post(f"{url}/v1/{route}/render", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_template_that_knows_developer_gets_it_as_sent():
    with render_server(str(MODELS / "gpt-oss")) as url:
        ids = _render(url, "chat/completions", {"messages": DEVELOPER})["token_ids"]
    assert ids == _oracle("gpt-oss", DEVELOPER)


def test_template_without_developer_gets_one_merged_system_message():
    assert _oracle("qwen3", DEVELOPER) != _oracle("qwen3", MAPPED)  # Qwen3's template drops developer
    with render_server(str(MODELS / "qwen3"), trust_request_chat_template=True) as url:
        chat = _render(url, "chat/completions", {"messages": DEVELOPER})["token_ids"]
        responses = _render(url, "responses", {"instructions": "You are terse.", "input": [
            {"role": "user", "content": "Hi"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Answer in French."}]},
            {"role": "user", "content": "Name a colour."}]})["token_ids"]
        # a request template naming the role gets developer messages as they are
        own = "{% for m in messages %}{{ m.role }}: {{ m.content if m.content is string else m.content[0].text }}\n" \
              "{% endfor %}{# 'developer' #}"
        text = httpx.post(f"{url}/v1/chat/completions/render", timeout=60, json={
            "messages": DEVELOPER, "chat_template": own, "add_generation_prompt": False})
    assert text.status_code == 200, text.text
    assert chat == _oracle("qwen3", MAPPED)
    assert responses == chat
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    assert tok.decode(text.json()["token_ids"]).splitlines()[2] == "developer: Answer in French."
