"""``return_assistant_tokens_mask`` (vLLM main): the render response's ``assistant_tokens_mask``
is transformers' ``assistant_masks`` for the same conversation — 1 for tokens inside the
template's ``{% generation %}`` blocks — and null where the template has none.

Real render server over HTTP; SmolLM3's published template (it marks assistant turns with
``{% generation %}``) served as ``--chat-template`` on the Qwen3 tokenizer (same ChatML
markers); transformers as oracle.
"""

from __future__ import annotations

import httpx
import pytest

from conftest import MODELS, TEMPLATES, needs_shared, render_server

pytestmark = needs_shared
transformers = pytest.importorskip("transformers", reason="oracle for the mask")

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "A joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
            {"role": "user", "content": "Why?"}]


@pytest.fixture(scope="module")
def server():
    with render_server(str(MODELS / "qwen3"), chat_template=str(TEMPLATES / "smollm3.jinja")) as url:
        yield url


@pytest.fixture(scope="module")
def qwen3_server():
    with render_server(str(MODELS / "qwen3")) as url:
        yield url


def render(url: str, **body) -> dict:
    r = httpx.post(url + "/v1/chat/completions/render", json={"messages": MESSAGES, **body}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_mask_equals_transformers_for_a_template_with_generation_blocks(server):
    source = (TEMPLATES / "smollm3.jinja").read_text()
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    oracle = tok.apply_chat_template(MESSAGES, chat_template=source, add_generation_prompt=True, tokenize=True,
                                     return_dict=True, return_assistant_tokens_mask=True)
    body = render(server, return_assistant_tokens_mask=True)
    assert body["token_ids"] == list(oracle["input_ids"])
    assert body["assistant_tokens_mask"] == list(oracle["assistant_masks"])
    assert 0 < sum(body["assistant_tokens_mask"]) < len(body["token_ids"])
    marked = tok.decode([t for t, m in zip(body["token_ids"], body["assistant_tokens_mask"]) if m])
    assert "Hello! How can I help?" in marked and "A joke." not in marked

    cut = render(server, return_assistant_tokens_mask=True, truncate_prompt_tokens=12)
    assert cut["token_ids"] == list(oracle["input_ids"])[-12:]
    assert cut["assistant_tokens_mask"] == list(oracle["assistant_masks"])[-12:]


def test_null_without_generation_blocks_and_absent_unless_asked(qwen3_server, server):
    body = render(qwen3_server, return_assistant_tokens_mask=True)  # Qwen3's own template has no such blocks
    assert "assistant_tokens_mask" in body and body["assistant_tokens_mask"] is None
    assert "assistant_tokens_mask" not in render(server)
