"""Token parity with the oracle: transformers `apply_chat_template(..., tokenize=True)`.

For every tokenizer in ../shared/models and every template in ../shared/templates (paired
with a tokenizer), a conversation suite goes through a real render server over HTTP; the
`token_ids` must equal what transformers gives for the same conversation, or — where the
real template refuses the conversation — the server must answer 400.
"""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from conftest import MODELS, TEMPLATES, needs_shared, render_server

pytestmark = needs_shared

transformers = pytest.importorskip("transformers", reason="transformers is the parity oracle (dev extra)")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "c"})}}

# name -> (request body fields, oracle overrides)
CONVERSATIONS: dict[str, dict] = {
    "plain": {"messages": [{"role": "user", "content": "Hello! What's 12345 + 678?"}]},
    "system": {"messages": [{"role": "system", "content": "You are terse."},
                            {"role": "user", "content": "Name three colours.\n  Indented line\tand tab."}]},
    "multi_turn": {"messages": [{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello! How can I help?"},
                                {"role": "user", "content": "Tell me a joke about caf\u00e9s \u2615 and \u65e5\u672c."}]},
    "tools": {"messages": [{"role": "system", "content": "Use tools when useful."},
                           {"role": "user", "content": "Weather in Paris?"},
                           {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
                           {"role": "user", "content": "And tomorrow?"}],
              "tools": TOOLS, "tool_choice": "none"},
    "tools_only_declared": {"messages": [{"role": "user", "content": "Weather in Rome?"}], "tools": TOOLS,
                            "tool_choice": "none"},
    "content_parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "What's in this text?"},
                                                                {"type": "text", "text": "Please explain."}]}]},
    "reasoning_history": {"messages": [{"role": "user", "content": "2+2?"},
                                       {"role": "assistant", "content": "4", "reasoning_content": "Add two and two."},
                                       {"role": "user", "content": "3+3?"}]},
    "thinking_on": {"messages": [{"role": "user", "content": "Think about it."}],
                    "chat_template_kwargs": {"enable_thinking": True}},
    "thinking_off": {"messages": [{"role": "user", "content": "Answer directly."}],
                     "chat_template_kwargs": {"enable_thinking": False}},
    "continue_final": {"messages": [{"role": "user", "content": "Write a haiku."},
                                    {"role": "assistant", "content": "Autumn moonlight\u2014"}],
                       "add_generation_prompt": False, "continue_final_message": True},
}

# Which real tokenizer each published template is paired with.
TEMPLATE_TOKENIZER = {
    "llama-3.1-instruct": "llama-3.1-instruct", "llama-3.2-instruct": "llama-3.2-instruct",
    "llama-3.3-instruct": "llama-3.1-instruct", "llama-4": "llama-4-scout-instruct",
    "deepseek-r1": "deepseek-r1", "deepseek-r1-distill": "deepseek-r1", "deepseek-v3": "deepseek-r1",
    "deepseek-v3.1": "deepseek-v3.1", "gpt-oss": "gpt-oss",
}


# Real templates that refuse an OpenAI-format tool conversation under HF semantics (so a
# 400 is the right answer); any other refusal of a tool conversation is a failure.
KNOWN_TOOL_REFUSALS = {
    "command-r-plus-tool-use": "reads Cohere's tool schema (tool.description at top level), not OpenAI's",
    "kimi-k2-instruct-0905": "calls list.append, which HF's immutable sandbox forbids (vLLM refuses too)",
    "mistral-nemo": "requires strict user/assistant alternation around tool results",
    "mistral-small-3.2": "requires strict user/assistant alternation around tool results",
}


def _oracle_ids(tok, body: dict, template: str | None) -> list[int] | None:
    """transformers' ids for ``body``, or None when the template refuses the conversation."""
    from render_service.render.messages import prepare_messages
    from render_service.model.templates import ChatTemplate

    source = template or tok.chat_template
    # The oracle gets the conversation in the form a careful user gives that template
    # (string content for text-only templates, arguments as the template wants them).
    messages = prepare_messages(copy.deepcopy(body["messages"]), ChatTemplate(source))
    for m in messages:  # transformers reads `reasoning_content`; vLLM renames it `reasoning`
        if "reasoning" in m:
            m["reasoning_content"] = m["reasoning"]
    options = dict(
        tools=body.get("tools"),
        chat_template=source,
        add_generation_prompt=body.get("add_generation_prompt", True),
        continue_final_message=body.get("continue_final_message", False),
    )
    try:
        if any("content" in m and m["content"] is None for m in messages):
            # apply_chat_template (transformers 5) drops `content: null`, which OpenAI clients
            # send on every tool-call turn and templates test for; render with transformers'
            # own renderer on the messages as sent (transformers 4 / vLLM behaviour), then encode.
            from transformers.utils.chat_template_utils import render_jinja_template

            rendered, _ = render_jinja_template(
                conversations=[messages], **options, **{**tok.special_tokens_map, **body.get("chat_template_kwargs", {})}
            )
            return list(tok(rendered[0], add_special_tokens=False)["input_ids"])
        out = tok.apply_chat_template(messages, tokenize=True, **options, **body.get("chat_template_kwargs", {}))
    except Exception:  # noqa: BLE001 - any refusal by the real template counts as a refusal
        return None
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


def _check_suite(url: str, tok, template: str | None, name_of_template: str = "") -> list[str]:
    """Failures of the whole suite; tool conversations must render where the template knows tools."""
    failures = []
    knows_tools = "tool" in (template or tok.chat_template) and name_of_template not in KNOWN_TOOL_REFUSALS
    with httpx.Client(base_url=url, timeout=60) as client:
        for name, conv in CONVERSATIONS.items():
            body = copy.deepcopy(conv)
            if template is not None:
                body["chat_template"] = template
            resp = client.post("/v1/chat/completions/render", json=body)
            expected = _oracle_ids(tok, conv, template)
            if expected is None:
                if knows_tools and name.startswith("tools"):
                    failures.append(f"{name}: a tool-aware template must render an OpenAI tool-call conversation")
                if resp.status_code != 400 or "error" not in resp.json():
                    failures.append(f"{name}: oracle refused, server said {resp.status_code}")
                continue
            if resp.status_code != 200:
                failures.append(f"{name}: server said {resp.status_code} {resp.text[:300]}")
                continue
            got = resp.json()["token_ids"]
            if got != expected:
                at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                failures.append(f"{name}: ids differ at {at}: got {got[at:at+8]} want {expected[at:at+8]}")
    return failures


MODEL_DIRS = sorted(p.name for p in MODELS.iterdir() if p.is_dir()) if MODELS.is_dir() else []


def _oracle_tokenizer(path):
    """transformers' tokenizer for ``path``. A repository whose tokenizer class is its own code
    (``auto_map``: MiniCPM-V's ``MiniCPMVTokenizerFast``) is loaded as the transformers class that
    code extends (``LlamaTokenizerFast``; it adds image-token properties only), since this project
    never executes model code, not even in tests."""
    config = json.loads((path / "tokenizer_config.json").read_text())
    if "AutoTokenizer" in (config.get("auto_map") or {}):
        return transformers.LlamaTokenizerFast.from_pretrained(str(path))
    return transformers.AutoTokenizer.from_pretrained(str(path))


@pytest.mark.parametrize("model", MODEL_DIRS)
def test_model_template_parity(model):
    """Each fixture's own template, the whole suite, equal ids or the same refusal."""
    tok = _oracle_tokenizer(MODELS / model)
    with render_server(str(MODELS / model)) as url:
        failures = _check_suite(url, tok, None)
    assert not failures, "\n".join(failures)


TEMPLATE_FILES = sorted(p.stem for p in TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else []


@pytest.mark.parametrize("tokenizer_dir", sorted(set(TEMPLATE_TOKENIZER.values()) | {"qwen3"}))
def test_published_templates_parity(tokenizer_dir):
    """Every published template, paired with a tokenizer, through per-request templates."""
    names = [t for t in TEMPLATE_FILES if TEMPLATE_TOKENIZER.get(t, "qwen3") == tokenizer_dir]
    if not names:
        pytest.skip(f"no template pairs with {tokenizer_dir}")
    tok = transformers.AutoTokenizer.from_pretrained(str(MODELS / tokenizer_dir))
    failures = []
    with render_server(str(MODELS / tokenizer_dir), trust_request_chat_template=True) as url:
        for name in names:
            source = (TEMPLATES / f"{name}.jinja").read_text()
            failures += [f"{name}/{f}" for f in _check_suite(url, tok, source, name)]
    assert not failures, "\n".join(failures)
