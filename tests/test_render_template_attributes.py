"""The template sandbox's shortcuts (`model.templates._BoundedSandbox.getattr`: a message's
fields, a string's methods, a loop's fields handed out without jinja2's per-access checks)
render every published template exactly as jinja2's own immutable sandbox does, and leave
``str.format`` / ``format_map`` sandboxed.
"""

from __future__ import annotations

import json

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import TEMPLATES, needs_shared
from render_service.model import templates
from render_service.model.templates import ChatTemplate, TemplateRenderError

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                          "required": ["path"]}}}]
FLAT_TOOLS = [{"name": "read_file", "description": "Read a file",  # Command R's own tool shape
               "parameter_definitions": {"path": {"type": "str", "description": "the path", "required": True}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}
CONVERSATIONS = [
    [{"role": "system", "content": "  You are terse.\n"}, {"role": "user", "content": "Hi <b>there</b>\n\n"}],
    [{"role": "user", "content": "Read a.py"},
     {"role": "assistant", "content": "<think>\nFirst look.\n</think>\n\nReading.", "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call_1", "content": "<tool_response>def f(): pass</tool_response>"},
     {"role": "assistant", "content": "Done.", "reasoning_content": "It is short."},
     {"role": "user", "content": "Thanks"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": " Hi.\n"},
     {"role": "user", "content": "Bye"}],
    [{"role": "user", "content": "Read it", "name": None},  # null fields left out, null content kept
     {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning": "Look first.", "thinking": None},
     {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}],
]


def _plain_sandbox() -> ImmutableSandboxedEnvironment:
    """jinja2's sandbox with the same globals and filters, none of our shortcuts."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[templates._GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = templates._tojson
    env.globals.update(raise_exception=templates._raise_exception, strftime_now=templates._strftime_now,
                       namespace=templates._SafeNamespace)
    return env


def _both(source: str, messages: list[dict], **kwargs) -> tuple[str, str]:
    ours = ChatTemplate(source).render(json.loads(json.dumps(messages)), **kwargs)
    chat = [templates._alias_reasoning({k: v for k, v in m.items() if v is not None or k == "content"})
            for m in json.loads(json.dumps(messages))]
    theirs = _plain_sandbox().from_string(source).render(messages=chat, **kwargs)
    return ours, theirs


@needs_shared
@pytest.mark.parametrize("name", sorted(p.name for p in TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else [])
def test_every_template_renders_as_jinja2s_own_sandbox(name):
    source = (TEMPLATES / name).read_text()
    rendered = 0
    for messages in CONVERSATIONS:
        for tools in (None, TOOLS, FLAT_TOOLS):
            try:
                ours, theirs = _both(source, messages, tools=tools, add_generation_prompt=True,
                                     bos_token="<s>", eos_token="</s>")
            except (TemplateRenderError, jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError):
                continue  # this template refuses this conversation (checked elsewhere)
            assert ours == theirs
            rendered += 1
    assert rendered, f"{name} rendered none of the conversations"


def test_string_methods_and_loop_fields():
    source = ("{% for m in messages %}{{ loop.index0 }}/{{ loop.length }}{{ '!' if loop.last }}{{ loop.revindex }}"
              "{{ m.content.strip().upper().split('B') | join('|') }}{{ m.content.startswith('<') }}"
              "{{ loop.cycle('a', 'b') }}{{ m.content.lstrip('\\n').replace('T', 't') }}{% endfor %}"
              "{% set ns = namespace(n=0, f='<{}>'.format) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
              "{% endfor %}{{ ns.n }}{{ ns.f(ns.n) }}[{{ ns.missing }}]{{ ns.missing is defined }}")
    ours, theirs = _both(source, CONVERSATIONS[1])
    assert ours == theirs and "!" in ours and "<5>[]False" in ours


@pytest.mark.parametrize("source", ["{{ '{0.__class__.__mro__}'.format(messages[0].content) }}",
                                    "{% set ns = namespace(f='{0.__class__}'.format) %}{{ ns.f(messages) }}",
                                    "{{ '{x.__class__}'.format_map({'x': messages}) }}",
                                    "{{ messages[0].content.__class__ }}",
                                    "{% set ns = namespace(a='secret') %}{{ ns._Namespace__attrs }}",
                                    "{% for m in messages %}{{ loop._after }}{% endfor %}"])
def test_what_stays_sandboxed(source):
    try:
        out = ChatTemplate(source).render([{"role": "user", "content": "hi"}])
    except TemplateRenderError:
        return
    assert "class" not in out and "after" not in out.lower() and "secret" not in out, out
