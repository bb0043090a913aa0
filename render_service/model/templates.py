"""Chat templates with Hugging Face semantics.

A chat template is Jinja source shipped with a model. `transformers` renders it in a
sandboxed environment with a few additions, and prompts only match what the model was
trained on if we render exactly the same way (wire parity with `apply_chat_template`):

- `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the
  `loopcontrols` extension (`{% break %}`, `{% continue %}`; case 09);
- a `{% generation %}…{% endgeneration %}` tag that renders its body unchanged (it only
  marks assistant spans for training masks; SmolLM3's template uses it, case 09);
- `tojson` = `json.dumps(x, ensure_ascii=False, …)` returning a plain `str`: Jinja's stock
  filter returns `Markup`, which HTML-escapes quotes it is concatenated with (case 07);
- globals `raise_exception(msg)` (raises `TemplateError`, surfaced as HTTP 400, case 08)
  and `strftime_now(fmt)`;
- messages with ``None`` values have those keys dropped (transformers 5 behaviour) — except
  ``content``: OpenAI clients send ``content: null`` on every assistant tool-call turn, and
  templates test for it (DeepSeek-V3 writes the calls only when ``content is none``; Qwen3
  fails on a missing key), so it stays null as in transformers 4 and vLLM;
- reasoning is aliased under ``reasoning_content``/``thinking``/``reasoning`` (the one place
  where OpenAI's ``reasoning`` and older clients' ``reasoning_content`` meet);
- `continue_final_message` cuts the render right after the final message's text.

Source: `transformers/utils/chat_template_utils.py` (5.x), read for behaviour, not copied.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.compiler
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_TESTS_CONTENT_FOR_NONE = re.compile(r"""(?:\.content|\[['"]content['"]\])\s+is\s+(?:not\s+)?none""")
_ARGUMENTS_STRING_BRANCH = re.compile(r"""arguments['"]?\]?\s+is\s+string""")


class TemplateError(ValueError):
    """This template cannot render this conversation. ``param`` names the request field at
    fault; render turns it into the client's 400 (this module knows nothing of HTTP)."""

    param = "messages"


class TemplateRenderError(TemplateError):
    """The template refused the conversation (`raise_exception`) or failed while rendering."""


class ConversationError(TemplateError):
    """The conversation does not fit the render options (``continue_final_message`` without
    a final message text)."""


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}body{% endgeneration %}` renders ``body`` unchanged."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


# Private-use characters around each {% generation %} body when rendering for assistant spans.
_SPAN_START, _SPAN_END = "\ue000", "\ue001"
_GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' test for the tag


class _MarkedGenerationTag(_GenerationTag):
    """`{% generation %}body{% endgeneration %}` renders ``body`` between `_SPAN_START` and
    `_SPAN_END`, so `ChatTemplate.generation_spans` can find where assistant text is."""

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        mark = [jinja2.nodes.Output([jinja2.nodes.TemplateData(c)]) for c in (_SPAN_START, _SPAN_END)]
        return jinja2.nodes.Scope([mark[0], *body, mark[1]]).set_lineno(lineno)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _SafeNamespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore attributes (no route to interpreter internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _SafeNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _SafeNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is not allowed")


MAX_INT_BITS = 4096
"""Largest integer a template's ``**`` or ``*`` may produce (``9**(9**8)`` held the process 65 s)."""
MAX_REPEAT = 1 << 20
"""Longest string or list a template's ``*`` may build (``'a' * 10**10`` was a MemoryError)."""


_DICT_ATTRIBUTES = frozenset(dir(dict))
# Attributes the sandbox would hand out as they are, whatever the object (`_BoundedSandbox.getattr`):
# a string's methods but ``format``/``format_map`` (which it wraps), a loop's public fields.
_PLAIN_ATTRIBUTES: dict[type, frozenset[str]] = {
    str: frozenset(n for n in dir(str) if not n.startswith("_") and n not in ("format", "format_map")),
    jinja2.runtime.LoopContext: frozenset(n for n in dir(jinja2.runtime.LoopContext) if not n.startswith("_")),
}


_BUILTIN_METHOD = type("".startswith)
_STR_METHODS = _PLAIN_ATTRIBUTES[str]
_DATA_TYPES = frozenset({str, int, float, bool, type(None), list, dict, tuple})  # never a str.format to wrap


class _InlineGetattr(jinja2.compiler.CodeGenerator):
    """Compiles ``x.name`` to `_BoundedSandbox.getattr`'s fast paths written inline — a plain
    dict holding ``name`` (when ``dict`` has no such attribute), a string's plain method, a
    loop's field — and to ``environment.getattr`` for everything else, so each answer is
    the method's own, without its call: an agent's 80-message history made ~1,400 such
    calls per render. Each ``x`` is evaluated once, into a temporary named by nesting depth."""

    _depth = 0

    @jinja2.compiler.optimizeconst
    def visit_Getattr(self, node: jinja2.nodes.Getattr, frame: jinja2.compiler.Frame) -> None:
        attr = node.attr
        as_item = attr not in _DICT_ATTRIBUTES
        as_str = attr in _PLAIN_ATTRIBUTES[str]
        as_loop = attr in _PLAIN_ATTRIBUTES[jinja2.runtime.LoopContext]
        if self.environment.is_async or not (as_item or as_str or as_loop):
            return super().visit_Getattr(node, frame)
        value, kind = f"_jv{self._depth}", f"_jt{self._depth}"
        branches = []
        if as_item:
            branches.append((f"{value}[{attr!r}]", f"dict and {attr!r} in {value}"))
        if as_str:
            branches.append((f"{value}.{attr}", "str"))
        if as_loop:
            branches.append((f"{value}.{attr}", "LoopContext"))
        # (V['a'] if (K := type(V := x)) is dict and 'a' in V else V.a if K is str else environment.getattr(V, 'a'))
        self.write(f"({branches[0][0]} if ({kind} := type({value} := ")
        self._depth += 1
        self.visit(node.node, frame)
        self._depth -= 1
        self.write(f")) is {branches[0][1]} else ")
        for result, test in branches[1:]:
            self.write(f"{result} if {kind} is {test} else ")
        self.write(f"environment.getattr({value}, {attr!r}))")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox with arithmetic and repetition limits. Intercepted operators are also
    never folded at compile time, so a bomb in a literal cannot stall compilation.

    Faster, same answers: ``message.content`` on a plain dict is looked up as an item at
    once, and a missing one is undefined at once (a dict has an attribute only if ``dict``
    itself does, so Jinja's attribute-first try would fail), a string's methods and a loop's fields (``content.startswith``,
    ``loop.last``: always safe, never a wrapped ``format``) and a ``namespace()``'s fields
    (safe unless the name starts with ``_``) are handed out at once, and the safety verdict
    of an attribute is remembered per (type, name), the only things jinja2's checks read
    (``is_internal_attribute``, ``modifies_known_mutable``). Together they were most of a
    long agent prompt's render time."""

    intercepted_binops = frozenset(["**", "*"])
    code_generator_class = _InlineGetattr
    _verdicts: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:  # jinja2's answer, without its failed attribute lookup first
                return self.undefined(obj=obj, name=attribute)
        elif attribute in _PLAIN_ATTRIBUTES.get(kind, ()):
            return getattr(obj, attribute)
        elif kind is _SafeNamespace and attribute[:1] != "_":  # its fields are all safe to read
            try:
                # from jinja2's dict of the fields, not through Namespace.__getattribute__ (Qwen3 reads
                # `ns.multi_step_tool` once per message); plain data needs no str.format wrapping
                value = object.__getattribute__(obj, "_Namespace__attrs")[attribute]
            except (AttributeError, KeyError):  # not a field (or a jinja2 that keeps them elsewhere)
                try:
                    value = getattr(obj, attribute)
                except AttributeError:
                    return super().getattr(obj, attribute)
            return value if value.__class__ in _DATA_TYPES else (self.wrap_str_format(value) or value)
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        key = (type(obj), attr)
        safe = self._verdicts.get(key)
        if safe is None:
            safe = super().is_safe_attribute(obj, attr, value)
            if len(self._verdicts) < 1 << 14:
                self._verdicts[key] = safe
        return safe

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        # A string's own method (``content.startswith(...)``: most of a chat template's calls) and
        # ``namespace(...)`` are called at once; the sandbox's answer would be the same: safe (never a
        # raw ``format`` or ``format_map``, which `getattr` hands out wrapped), and they take no
        # context (its checks of that raised and caught four AttributeErrors for ``namespace``).
        if (type(__obj) is _BUILTIN_METHOD and type(__obj.__self__) is str and __obj.__name__ in _STR_METHODS
                or __obj is _SafeNamespace):
            kwargs.pop("_loop_vars", None)
            kwargs.pop("_block_vars", None)
            return __obj(*args, **kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and _is_int(left) and _is_int(right) and abs(left) > 1:
            if right > 0 and right * abs(left).bit_length() > MAX_INT_BITS:
                raise jinja2.exceptions.SecurityError(f"'**' result past {MAX_INT_BITS} bits")
        elif operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and _is_int(times) and len(seq) * max(times, 0) > MAX_REPEAT:
                    raise jinja2.exceptions.SecurityError(f"'*' repetition past {MAX_REPEAT} items")
            if _is_int(left) and _is_int(right) and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS:
                raise jinja2.exceptions.SecurityError(f"'*' result past {MAX_INT_BITS} bits")
        return super().call_binop(context, operator, left, right)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _environment(generation: type = _GenerationTag) -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _SafeNamespace
    return env


_ENV = _environment()
_MARKING_ENV = _environment(_MarkedGenerationTag)


class ChatTemplate:
    """A compiled chat template.

    Args:
        source: the Jinja text (e.g. ``tokenizer_config.json["chat_template"]``).

    Raises:
        ValueError: the source is not valid Jinja (reported at load, not per request).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        try:
            self._template = _ENV.from_string(source)
            # jinja2 copies a template's globals into every render's context, and iterates a
            # ChainMap key by key; the environment's globals are fixed, so one plain dict serves
            self._template.globals = dict(self._template.globals)
            ast = _ENV.parse(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"chat template does not compile: {exc}") from None
        literals = {n.data for n in ast.find_all(jinja2.nodes.TemplateData)}
        literals |= {n.value for n in ast.find_all(jinja2.nodes.Const) if isinstance(n.value, str)}
        # Every literal string the template can write, NUL-joined so a search can't match across two.
        self.literal_text = "\0".join(sorted(literals))
        self.content_format = _detect_content_format(ast)
        self.arguments_form = _detect_arguments_form(source)
        # Templates that test `content is none` (DeepSeek-V3/R1 write tool calls only then) get
        # OpenAI's null; the rest read content as text, where null crashes (Qwen3: `'x' in content`).
        self.null_content = "none" if _TESTS_CONTENT_FOR_NONE.search(source) else "empty"
        # `{% generation %}` blocks mark assistant text (return_assistant_tokens_mask).
        self.has_generation_tags = bool(_GENERATION_BLOCK.search(source))
        self._marking: jinja2.Template | None = None

    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        **kwargs: Any,
    ) -> str:
        """Render a conversation to the prompt string, as `apply_chat_template(tokenize=False)`.

        ``messages`` must already be plain JSON data (see `render_service.render.messages`). Extra
        ``kwargs`` (special-token strings, ``enable_thinking``, …) become template variables.

        Raises:
            TemplateRenderError: the template raised (`raise_exception`) or failed.
            ConversationError: ``continue_final_message`` without a final text to continue.
        """
        chat = [_template_message(m) for m in messages]
        final_text = None
        if continue_final_message:
            chat, final_text = _tag_final_message(chat)
        try:
            text = self._template.render(
                messages=chat,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **kwargs,
            )
        except jinja2.TemplateError as exc:
            raise TemplateRenderError(str(exc)) from None
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as exc:
            raise TemplateRenderError(f"{type(exc).__name__}: {exc}") from None
        if final_text is not None:
            text = _cut_after_final_message(text, final_text)
        return text

    def generation_spans(self, messages: list[dict], **kwargs: Any) -> tuple[str, list[tuple[int, int]]] | None:
        """The render of `render` (same arguments, no ``continue_final_message``) and the
        ``[start, end)`` character spans its ``{% generation %}`` blocks wrote (transformers'
        ``return_assistant_tokens_mask``); None for a template without such blocks.

        Raises:
            TemplateRenderError: as `render`.
        """
        if not self.has_generation_tags:
            return None
        if self._marking is None:
            self._marking = _MARKING_ENV.from_string(self.source)
        chat = [_template_message(m) for m in messages]
        try:
            marked = self._marking.render(messages=chat, **kwargs)
        except jinja2.TemplateError as exc:
            raise TemplateRenderError(str(exc)) from None
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as exc:
            raise TemplateRenderError(f"{type(exc).__name__}: {exc}") from None
        parts: list[str] = []
        spans: list[tuple[int, int]] = []
        size, start = 0, None
        for piece in re.split(f"([{_SPAN_START}{_SPAN_END}])", marked):
            if piece == _SPAN_START:
                start = size
            elif piece == _SPAN_END:
                if start is not None and size > start:
                    spans.append((start, size))
                start = None
            else:
                parts.append(piece)
                size += len(piece)
        return "".join(parts), spans


@lru_cache(maxsize=16)
def compile_template(source: str) -> ChatTemplate:
    """`ChatTemplate(source)`, cached by source text (per-request templates reuse compilations)."""
    return ChatTemplate(source)


def _template_message(message: dict) -> dict:
    """A copy of ``message`` as templates read it: fields that are null left out (but
    ``content``), past reasoning under every name (`_alias_reasoning`)."""
    if None in message.values():
        message = {k: v for k, v in message.items() if v is not None or k == "content"}
    else:
        message = dict(message)
    if "reasoning" in message or "reasoning_content" in message or "thinking" in message:
        return _alias_reasoning(message)
    return message


def _alias_reasoning(message: dict) -> dict:
    """A past turn's reasoning under every name templates read: OpenAI's ``reasoning``
    (older clients send ``reasoning_content``; ``reasoning`` wins when both are given), and
    ``reasoning_content``/``thinking`` for templates written against other clients."""
    if message.get("reasoning") is None and message.get("reasoning_content") is not None:
        message = {**message, "reasoning": message["reasoning_content"]}
        del message["reasoning_content"]
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def _tag_final_message(chat: list[dict]) -> tuple[list[dict], str]:
    """Append a tag to the final message's text so the render can be cut right after it."""
    if not chat:
        raise ConversationError("continue_final_message is set but the conversation is empty.")
    last = dict(chat[-1])
    content = last.get("content")
    if isinstance(content, str):
        last["content"] = content + _CONTINUE_TAG
        final = content
    elif isinstance(content, list):
        parts = [dict(p) if isinstance(p, dict) else p for p in content]
        for part in reversed(parts):
            if isinstance(part, dict) and "text" in part:
                final = part["text"]
                part["text"] = final + _CONTINUE_TAG
                break
        else:
            raise ConversationError("continue_final_message is set but the final message has no text.")
        last["content"] = parts
    else:
        raise ConversationError("continue_final_message is set but the final message has no content.")
    return chat[:-1] + [last], final


def _cut_after_final_message(text: str, final: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise TemplateRenderError(
            "continue_final_message is set but the template does not render the final message's text"
        )
    at = text.rindex(tag)
    if text[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()


def _detect_content_format(ast: jinja2.nodes.Template) -> str:
    """``"openai"`` when the template loops over ``message['content']`` (list of parts), else ``"string"``.

    Same rule as vLLM's content-format auto-detection: a text-only template that concatenates
    ``content`` must get a string (case 03), a multimodal-aware one gets the parts.
    """
    for loop in ast.find_all(jinja2.nodes.For):
        target = loop.iter
        while isinstance(target, jinja2.nodes.Filter):
            target = target.node
        if isinstance(target, jinja2.nodes.Getitem) and isinstance(target.arg, jinja2.nodes.Const):
            if target.arg.value == "content":
                return "openai"
        if isinstance(target, jinja2.nodes.Getattr) and target.attr == "content":
            return "openai"
    return "string"


def _detect_arguments_form(source: str) -> str:
    """How the template wants assistant ``tool_calls[].function.arguments``:
    ``"verbatim"``, ``"mapping"`` or ``"string"``.

    OpenAI clients send arguments as a JSON string: the text the model generated. Templates
    with an ``arguments is string`` branch (Qwen3, Hermes 2 Pro / 3, Kimi K2) write a string
    verbatim and serialise anything else: they get the arguments as sent, so the prompt
    holds the tokens the model wrote (parsing and re-serialising would turn
    ``{"a":1.50}`` into ``{"a": 1.5}``; issue 15). Templates that can only serialise
    (``tojson`` / ``items()``: Llama 3.x) get a mapping — a string there is double-encoded
    (case 01). A few (DeepSeek-R1) concatenate the arguments as text and crash on a mapping.
    """
    if _ARGUMENTS_STRING_BRANCH.search(source):
        return "verbatim"
    compact = "".join(source.split())
    concatenates = ("['arguments']+", "+tool['function']['arguments']", ".arguments+", "+tool_call.arguments")
    return "string" if any(sign in compact for sign in concatenates) else "mapping"
