"""`model.templates._InlineGetattr`: ``x.name`` compiled inline (dict item, string method,
loop field, else ``environment.getattr``) answers what jinja2's own immutable sandbox
answers, for every kind of ``x`` and name, nested, missing, unsafe or shadowed; so does a
string method or ``namespace()`` called at once (`_BoundedSandbox.call`)."""

from __future__ import annotations

import jinja2
import pytest

from render_service.model.templates import _ENV
from test_render_template_attributes import _plain_sandbox

DATA = {
    "m": {"role": "user", "content": "  Hi </think> there ", "startswith": "item wins", "items": "not the method",
          "nested": {"deeper": {"role": "tool"}}, "calls": [{"function": {"name": "f"}}]},
    "s": "abc.def",
    "n": None,
    "xs": [{"role": "a"}, {"role": "b"}, {"content": "c"}],
}
TEMPLATES = [
    "{{ m.role }}|{{ m.content.strip() }}|{{ m.content.split('</think>')[-1].lstrip() }}",
    "{{ m.startswith }}|{{ m.items is defined }}|{{ m.missing is defined }}|{{ m.missing }}|{{ m.keys() | list | length }}",
    "{{ m.nested.deeper.role }}|{{ m.calls[0].function.name }}|{{ m.nested.missing is defined }}",
    "{% for x in xs %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
    "{{ x.role if x.role is defined else x.content }}{{ xs[loop.index0].role }}"
    "{% if not loop.last %}{{ xs[loop.index0 + 1].role }}{% endif %}{% endfor %}",
    "{{ s.upper() }}|{{ s.split('.')[1] }}|{{ s.missing is defined }}|{{ (s ~ '{0}').format(1) }}|{{ s.format is defined }}",
    "{% set ns = namespace(a=1) %}{% for x in xs %}{% set ns.a = ns.a + 1 %}{% endfor %}{{ ns.a }}",
    "{{ n.role is defined }}|{{ (m.role ~ s).upper() }}|{{ [m, m][1].role }}",
    "{% for x in xs %}{% for y in xs %}{{ loop.index }}{{ y.role }}{% endfor %}{{ loop.index }}{% endfor %}",
    # string methods called (`_BoundedSandbox.call`'s shortcut), in and out of loops, with keyword arguments
    "{{ s.split(maxsplit=0) }}|{{ s.replace('.', '-', 1) }}|{{ s.rjust(9, '*') }}|{{ s.startswith(('x', 'a')) }}",
    "{% for x in xs %}{{ (x.role or x.content).upper() }}{{ x.get('role', '').endswith('b') }}{% endfor %}",
    "{{ (s|attr('format'))(1) }}|{{ s.format(1) }}|{{ m.content.strip().split()|join(',') }}",
    "{% set ns = namespace(a=[1], b=s) %}{% for x in xs %}{% set ns2 = namespace(n=loop.index) %}{{ ns2.n }}"
    "{% endfor %}{{ ns.a }}{{ ns.b }}{{ namespace().missing is defined }}",
]


def _answer(env, source: str) -> str:
    try:
        return env.from_string(source).render(**DATA)
    except jinja2.exceptions.TemplateError as exc:  # SecurityError, UndefinedError: the same one
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("source", TEMPLATES + ["{{ s.__class__ }}", "{{ m.__class__.__mro__ }}", "{{ s.mro }}",
                                                "{{ s.format.__globals__ }}", "{{ m.nested.missing.role }}",
                                                "{{ namespace(_x=1) }}", "{% set ns = namespace() %}{% set ns._y = 1 %}"])
def test_inline_getattr_answers_as_the_sandbox(source):
    assert _answer(_ENV, source) == _answer(_plain_sandbox(), source)


def test_attribute_access_compiles_inline():
    code = _ENV.compile("{% for x in xs %}{{ x.role }}{{ loop.last }}{% endfor %}", raw=True)
    assert "is dict and 'role' in _jv0" in code and "is LoopContext" in code
