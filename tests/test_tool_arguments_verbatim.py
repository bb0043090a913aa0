"""Tool-call arguments in the prompt are the text the model generated, where the template allows it.

Issue 15 ("arguments re-serialised in the prompt"): an assistant tool call whose
``arguments`` arrive as a JSON string must reach a template with an ``arguments is string``
branch (Qwen3, Hermes 2 Pro / 3) as that string, so ``{"location":"SF"}``, ``1.50`` and
``\\u00e3`` stay as written; a template that can only serialise (Llama 3.1's ``| tojson``)
gets the parsed mapping. Real render server over HTTP; transformers is the oracle, given
the arguments as each template takes them.
"""

from __future__ import annotations

import json

import httpx
import pytest

from conftest import MODELS, TEMPLATES, needs_shared, render_server

pytestmark = needs_shared
transformers = pytest.importorskip("transformers", reason="oracle for prompt tokens")

TOOLS = [{"type": "function", "function": {"name": "quote", "description": "Price of an item",
                                           "parameters": {"type": "object", "properties": {}}}}]
AS_GENERATED = ['{"location":"SF"}', '{"price": 1.50, "qty": 2}', '{"name": "S\\u00e3o Paulo"}', '{"x": [1,2]}']


def conversation(arguments: list) -> list[dict]:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "quote", "arguments": a}}
             for i, a in enumerate(arguments)]
    return [{"role": "user", "content": "Prices?"}, {"role": "assistant", "content": "", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"} for i in range(len(arguments))),
            {"role": "user", "content": "Thanks"}]


def rendered(url: str, template: str | None = None) -> list[int]:
    body = {"model": None, "messages": conversation(AS_GENERATED), "tools": TOOLS, "tool_choice": "none"}
    if template is not None:
        body["chat_template"] = template
    r = httpx.post(url + "/v1/chat/completions/render", json={k: v for k, v in body.items() if v is not None},
                   timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["token_ids"]


def oracle(tok, arguments: list, template: str | None = None) -> list[int]:
    out = tok.apply_chat_template(conversation(arguments), tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                  chat_template=template)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def test_qwen3_writes_the_generated_arguments_verbatim():
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "qwen3"))
    with render_server(str(MODELS / "qwen3")) as url:
        ids = rendered(url)
    assert ids == oracle(tok, AS_GENERATED)
    text = tok.decode(ids, skip_special_tokens=False)
    for args in AS_GENERATED:
        assert f'"arguments": {args}}}' in text


@pytest.mark.parametrize("name", ["hermes-2-pro-tool-use", "hermes-3-tool-use"])
def test_hermes_writes_the_generated_arguments_verbatim(name):
    source = (TEMPLATES / f"{name}.jinja").read_text()
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "llama-3.1-instruct"))
    with render_server(str(MODELS / "llama-3.1-instruct"), trust_request_chat_template=True) as url:
        ids = rendered(url, source)
    assert ids == oracle(tok, AS_GENERATED, source)
    text = tok.decode(ids, skip_special_tokens=False)
    assert all(args in text for args in AS_GENERATED)


def test_llama31_can_only_serialise_so_gets_the_parsed_arguments():
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / "llama-3.1-instruct"))
    with render_server(str(MODELS / "llama-3.1-instruct")) as url:
        # Llama 3.1 takes one call per turn.
        body = {"messages": conversation(AS_GENERATED[:1]), "tools": TOOLS, "tool_choice": "none"}
        r = httpx.post(url + "/v1/chat/completions/render", json=body, timeout=60)
    assert r.status_code == 200, r.text
    ids = r.json()["token_ids"]
    assert ids == oracle(tok, [json.loads(AS_GENERATED[0])])
    assert '"parameters": {"location": "SF"}' in tok.decode(ids, skip_special_tokens=False)
