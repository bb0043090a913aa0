"""``tool_choice`` → the output constraint a tokens-only engine enforces, as vLLM 0.33 sends it.

With ``tool_choice: "required"`` or a named tool (and ``parallel_tool_calls: false``, or a
tool marked ``strict``, under ``"auto"``) vLLM's render replaces ``structured_outputs`` with a
*structural tag*: an xgrammar grammar that forces the model's own call syntax — the family's
begin/end markers around arguments that are any JSON value, or the tool's parameter schema
where the tool is ``strict`` (``parser/abstract_parser.py::_apply_structural_tag``,
``tool_parsers/structural_tag_registry.py`` and xgrammar's builtin model tags). Families
without a structural-tag model but whose parser reads a plain JSON answer get a JSON schema
instead (``tool_parsers/utils.py::get_json_schema_from_tools``): an array of
``{name, parameters}`` for ``required``, the tool's parameters for a named tool. Every shape
here is checked against vLLM's own output in ``tests/fixtures/vllm/recorded/structural-tags.json``.

Built here: hermes (``qwen3_json``), longcat, llama (``llama3_json``/``llama4_json``),
qwen_3_coder (``qwen3_xml``/``qwen3_coder``/``step3p5``/``step5``), deepseek_r1 (``deepseek_v3``),
deepseek_v3_1, deepseek_v3_2 / deepseek_v4 / deepseek_v4_1 (DSML), kimi, minimax, mimo, plamo3,
glm_4_7 (``glm45``/``glm47``/``ling3``, which pins argument keys and value types even for
non-strict tools), kimi_k3 (XTML) and harmony (``openai``). Not built: hy_v4. It, and a family
with neither a tag nor a JSON answer (``mistral``, which vLLM constrains only with its own
tokenizer's grammar; several others vLLM leaves unconstrained too), leave the request
unconstrained; `ToolConstraint.note` says so and the render route reports it in the
``X-Tool-Choice-Unconstrained`` header.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable

from parsers.formats import FORMATS

from ..policy import named_tool
from .sampling import structured_outputs_object

# Tool parser name → vLLM's structural-tag model (the tool parser class's `structural_tag_model`).
STRUCTURAL_TAG_MODELS = {
    "hermes": "hermes", "qwen3_json": "hermes", "longcat": "longcat",
    "llama3_json": "llama", "llama4_json": "llama",
    "qwen3_xml": "qwen_3_coder", "qwen3_coder": "qwen_3_coder",
    "deepseek_v3": "deepseek_r1", "deepseek_v31": "deepseek_v3_1",
    "kimi_k2": "kimi", "minimax_m2": "minimax",
    "glm45": "glm_4_7", "glm47": "glm_4_7", "ling3": "glm_4_7", "openai": "harmony",
    "step3p5": "qwen_3_coder", "step5": "qwen_3_coder", "mimo": "mimo",
    "deepseek_v32": "deepseek_v3_2", "deepseek_v4": "deepseek_v4", "deepseek_v41": "deepseek_v4_1",
    "plamo3": "plamo3", "kimi_k3": "kimi_k3", "hy_v4": "hy_v4",
}
# Tool parsers whose output vLLM constrains with a JSON schema for required / named choices.
JSON_SCHEMA_PARSERS = frozenset({
    "pythonic", "llama4_pythonic", "granite", "granite4", "granite-20b-fc", "internlm", "jamba",
    "hunyuan_a13b", "phi4_mini_json", "xlam", "seed_oss", "apertus", "beam", "cohere_command3", "cohere_command4",
    "ernie45", "functiongemma", "gigachat3", "hf", "hy_v3", "lfm2", "minicpm5", "olmo3", "step3",
})
STRICT_LEVELS = ("auto", "function", "parameter")
_THINK = ["<think>", "</think>"]

# Each family's call markers, read from the parsers' table (parsers/formats.py) so the tag
# forces exactly the syntax the parser reads back.
_HERMES, _LONGCAT, _QWEN_XML, _MIMO = FORMATS["hermes"], FORMATS["longcat"], FORMATS["qwen3_coder"], FORMATS["mimo"]
_DEEPSEEK, _DEEPSEEK_V31, _KIMI = FORMATS["deepseek_v3"], FORMATS["deepseek_v31"], FORMATS["kimi_k2"]
_MINIMAX, _GLM = FORMATS["minimax_m2"], FORMATS["glm45"]
_DS_CALLS_BEGIN, _DS_CALLS_END = _DEEPSEEK.section_begin[0], _DEEPSEEK.section_end[0]
_DS_CALL, _DS_SEP, _DS_END = _DEEPSEEK.call_begin[0], _DEEPSEEK_V31.header_end[0], _DEEPSEEK.call_end[0]


@dataclass(frozen=True)
class ToolConstraint:
    """What render puts in ``sampling_params.structured_outputs`` for the request's tools.

    ``structured_outputs``: the object to send, or None for none. ``replaces_request``: the
    request's own ``structured_outputs`` / ``response_format`` are dropped (vLLM clears them).
    ``note``: set when the request asks for a call that nothing enforces (why, for the caller).
    """

    structured_outputs: dict | None
    replaces_request: bool
    note: str | None = None


KEEP = ToolConstraint(None, False)


# ---- xgrammar structural-tag nodes, with the default fields vLLM's model_dump writes ----------

def _json(schema: Any, style: str = "json") -> dict:
    return {"type": "json_schema", "json_schema": schema, "style": style, "any_order": False,
            "max_whitespace_cnt": None, "excludes": []}


def _tag(begin: str, content: dict, end: str) -> dict:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _const(value: str) -> dict:
    return {"type": "const_string", "value": value}


def _seq(*elements: dict) -> dict:
    return {"type": "sequence", "elements": list(elements)}


def _separated(tags: list, separator: str, *, at_least_one: bool, stop_after_first: bool) -> dict:
    return {"type": "tags_with_separator", "tags": tags, "separator": separator,
            "at_least_one": at_least_one, "stop_after_first": stop_after_first}


def _triggered(triggers: list[str], tags: list, *, at_least_one: bool = False, stop_after_first: bool = False,
               excludes: list[str] | None = None) -> dict:
    return {"type": "triggered_tags", "triggers": triggers, "tags": tags, "at_least_one": at_least_one,
            "stop_after_first": stop_after_first, "excludes": list(excludes or [])}


# ---- one builder per structural-tag model: (tools, choice) -> format ---------------------------
# ``tools``: [(name, argument schema or True)], already filtered to the named tool for "forced".
# ``choice``: "auto" | "required" | "forced" (xgrammar's simplified tool choice).

Tools = list[tuple[str, Any]]


def _hermes_style(start: str, end: str) -> Callable[[Tools, str], dict]:
    def build(tools: Tools, choice: str) -> dict:
        tags = [_tag(f"{start}{nl}{{\"name\": \"{name}\", \"arguments\": ", _json(schema), f"}}{nl}{end}")
                for name, schema in tools for nl in ("\n", "")]
        if choice == "auto":
            return _triggered([start], tags)
        return _separated(tags, "", at_least_one=True, stop_after_first=choice == "forced")
    return build


def _single_or_triggered(trigger: str, begin: Callable[[str], str], end: str, style: str,
                         excludes: list[str] = _THINK):
    """xgrammar's builtin shape for llama / qwen_3_coder / mimo: one tag when forced, else triggered tags."""
    def build(tools: Tools, choice: str) -> dict:
        tags = [_tag(begin(name), _json(schema, style), end) for name, schema in tools]
        if choice == "forced":
            return tags[0]
        return _triggered([trigger], tags, at_least_one=choice == "required", excludes=excludes)
    return build


def _dsml(section: str, bar: str, style: str):
    """DeepSeek V3.2 / V4 / V4.1 DSML calls (xgrammar builtins): invokes inside one section."""
    open_, close = f"<{bar}{section}>", f"</{bar}{section}>"

    def build(tools: Tools, choice: str) -> dict:
        tags = [_tag(f'<{bar}invoke name="{name}">\n', _json(schema, style), f"</{bar}invoke>\n")
                for name, schema in tools]
        if choice == "forced":
            return _seq(_const(f"\n\n{open_}\n"), tags[0], _const(close))
        calls = _separated(tags, "", at_least_one=True, stop_after_first=False)
        if choice == "required":
            return _seq(_const(f"\n\n{open_}\n"), calls, _const(close))
        return _triggered([open_], [_tag(f"{open_}\n", calls, close)], excludes=_THINK)
    return build


def _plamo3(tools: Tools, choice: str) -> dict:
    requests = "<|plamo:begin_tool_requests:plamo|>"
    end = ["<|plamo:end_tool_requests:plamo|>", "<|plamo:end_tool_requests:plamo|><|plamo:tag|>"]
    tags = [_tag(f"<|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:plamo|>{name}"
                 "<|plamo:end_tool_name:plamo|><|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>",
                 _json(schema), "<|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>")
            for name, schema in tools]
    section = _tag(requests, _separated(tags, "", at_least_one=True, stop_after_first=choice == "forced"), end)
    if choice == "auto":
        return _triggered([requests], [section])
    return section


def _deepseek(call_begin: Callable[[str], str], call_end: str, separator: str):
    calls_begin, calls_end = _DS_CALLS_BEGIN, _DS_CALLS_END

    def build(tools: Tools, choice: str) -> dict:
        if choice == "forced":
            name, schema = tools[0]
            return _tag(calls_begin + call_begin(name), _json(schema), call_end + calls_end)
        section = _tag(calls_begin, _separated([_tag(call_begin(n), _json(s), call_end) for n, s in tools],
                                               separator, at_least_one=True, stop_after_first=False), calls_end)
        if choice == "required":
            return section
        return _triggered([calls_begin], [section], excludes=_THINK)
    return build


def _kimi(tools: Tools, choice: str) -> dict:
    section_begin, section_end = _KIMI.section_begin[0], _KIMI.section_end[0]
    tags = [_tag(f"{_KIMI.call_begin[0]}functions.{name}:",
                 _seq({"type": "regex", "pattern": "\\d+"}, _const(_KIMI.header_end[0]), _json(schema)),
                 _KIMI.call_end[0]) for name, schema in tools]
    if choice == "forced":
        return _seq(_const(section_begin), tags[0], _const(section_end))
    calls = _separated(tags, "", at_least_one=True, stop_after_first=False)
    if choice == "required":
        return _seq(_const(section_begin), calls, _const(section_end))
    return _triggered([section_begin], [_tag(section_begin, calls, section_end)],
                      excludes=[*_THINK, _KIMI.call_begin[0]])


def _minimax(tools: Tools, choice: str) -> dict:
    begin, end = _MINIMAX.section_begin[0], _MINIMAX.section_end[0]
    tags = [_tag(f'{_MINIMAX.call_begin[0]}"{name}">\n', _json(schema, "minimax_xml"), f"{_MINIMAX.xml.call_end[0]}\n")
            for name, schema in tools]
    calls = _separated(tags, "", at_least_one=True, stop_after_first=choice == "forced")
    if choice == "auto":
        return _triggered([begin], [_tag(f"{begin}\n", calls, end)], excludes=_THINK)
    return _seq(_const(f"\n{begin}\n"), calls, _const(end))


# ---- GLM-4.7 (vLLM-owned builder): non-strict tools pin keys and basic value types ------------
_GLM_CALL, _GLM_END, _GLM_XML = _GLM.call_begin[0], _GLM.xml.call_end[0], _GLM.xml
_GLM_EXCLUDES = [*_THINK, _GLM_CALL, _GLM_END, _GLM_XML.key_begin, _GLM_XML.key_end, _GLM_XML.value_begin,
                 _GLM_XML.value_end]


def _any_text(excludes: list[str] | None = None) -> dict:
    return {"type": "any_text", "excludes": list(excludes or []), "max_tokens": None, "max_chars": None}


def _or(elements: list[dict]) -> dict:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def _glm_value(prop: dict) -> dict:
    if "enum" in prop:
        return _or([_const(v if isinstance(v, str) else json.dumps(v)) for v in prop["enum"]])
    kind = prop.get("type")
    if isinstance(kind, list):
        values = [_glm_value({"type": t}) for t in kind if t != "string"]
        if "string" in kind:
            values.append(_any_text(_GLM_EXCLUDES))
        return _or(values)
    if kind in (None, "string"):
        return _any_text(_GLM_EXCLUDES)
    return _json({"type": kind})


def _glm_plain_properties(params: dict) -> dict | None:
    properties = params.get("properties")
    if (not isinstance(properties, dict) or not properties or params.get("additionalProperties") is True
            or any(k in params for k in ("$ref", "allOf", "anyOf", "oneOf", "patternProperties"))):
        return None
    return properties


def _glm_tag(name: str, schema: Any, params: dict | None) -> dict:
    begin = f"{_GLM_CALL}{name}"
    if schema is not True:  # strict: the whole argument schema, GLM's XML style
        return _tag(begin, _json(schema, "glm_xml"), _GLM_END)
    properties = _glm_plain_properties(params or {})
    if properties is None:
        return _tag(begin, _json(True, "glm_xml"), _GLM_END)
    x = _GLM_XML
    pairs = [_seq(_const(f"{x.key_begin}{key}{x.key_end}{x.value_begin}"), _glm_value(prop), _const(x.value_end))
             for key, prop in properties.items()]
    return _tag(begin, {"type": "star", "content": _or(pairs)}, _GLM_END)


def _glm(tools: Tools, choice: str, params: dict[str, dict | None]) -> dict:
    tags = [_glm_tag(name, schema, params.get(name)) for name, schema in tools]
    if tools and all(schema is not True for _, schema in tools):
        # every tool strict: xgrammar's builtin glm_4_7 tag
        if choice == "forced":
            return tags[0]
        return _triggered([_GLM_CALL], tags, at_least_one=choice == "required",
                          excludes=[e for e in _GLM_EXCLUDES if e != _GLM_CALL])
    if choice == "auto":
        return _triggered([_GLM_CALL], tags, excludes=[e for e in _GLM_EXCLUDES if e != _GLM_CALL])
    return _separated(tags, "", at_least_one=True, stop_after_first=choice == "forced")


# ---- Harmony (gpt-oss; vLLM-owned builder in parser/harmony.py) ---------------------------------
_HARMONY_END = ["<|end|>", ""]   # <|return|>/<|call|> are stop tokens, written as "" for xgrammar
_HARMONY_CHANNELS = ["<|channel|>commentary", "<|channel|>analysis", "<|channel|>final"]
_HARMONY_CONSTRAINS = [" json", " <|constrain|>json"]
_HARMONY_BEGINS = [" to=functions.{name}{channel}{constrain}<|message|>",
                   "{channel} to=functions.{name}{constrain}<|message|>"]


def _harmony(tools: Tools, choice: str) -> dict:
    tags = [_tag(pattern.format(name=name, channel=channel, constrain=constrain), _json(schema), _HARMONY_END)
            for name, schema in tools for pattern in _HARMONY_BEGINS for constrain in _HARMONY_CONSTRAINS
            for channel in _HARMONY_CHANNELS]
    if choice == "auto":
        tags += [_tag(f"<|channel|>final{constrain}<|message|>", _any_text(), _HARMONY_END)
                 for constrain in [*_HARMONY_CONSTRAINS, ""]]

    def preamble(channel: str) -> dict:
        return {"type": "optional", "content": _seq(_tag(f"<|channel|>{channel}<|message|>", _any_text(), "<|end|>"),
                                                    _const("<|start|>assistant"))}
    return _seq(preamble("analysis"), preamble("commentary"), {"type": "or", "elements": tags})


# ---- Kimi K3 (vLLM-owned builder): XTML channels; strict tools get typed arguments -------------
_K3_OPEN, _K3_CLOSE, _K3_SEP = "<|open|>", "<|close|>", "<|sep|>"
_K3_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
             "object": "object", "array": "array"}


def _k3_attr(value: str) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _k3_any_argument() -> dict:
    """An ``argument`` tag with any attributes and a raw value (untyped or loose schemas)."""
    return _tag(_K3_OPEN + "argument ", _seq({"type": "regex", "pattern": "[^<]*" + _K3_SEP.replace("|", "\\|")},
                                             _any_text([_K3_CLOSE])), f"{_K3_CLOSE}argument{_K3_SEP}")


def _k3_argument(key: str, prop: Any, defs: dict) -> dict:
    prop = prop if isinstance(prop, dict) else {}
    kind = _K3_TYPES.get(prop.get("type")) if isinstance(prop.get("type"), str) else None
    if kind is None:
        return _k3_any_argument()
    begin = f'{_K3_OPEN}argument key="{_k3_attr(key)}" type="{kind}"{_K3_SEP}'
    if kind == "string":
        values = prop.get("enum")
        if values is None and isinstance(prop.get("const"), str):
            values = [prop["const"]]
        max_len, min_len = prop.get("maxLength"), prop.get("minLength", 0)
        if (isinstance(values, list) and values and len(values) <= 256 and all(isinstance(v, str) for v in values)
                and not any("<|" in v for v in values)):
            content = _or([_const(v) for v in values])
        elif isinstance(max_len, int) and 0 <= max_len <= 4096:
            if not isinstance(min_len, int) or min_len < 0 or min_len > max_len:
                min_len = 0
            content = {"type": "regex", "pattern": "(?:[^<]|<[^|])" + f"{{{min_len},{max_len}}}"}
        else:
            content = _any_text([_K3_CLOSE])
    else:
        content = _json({**prop, **{k: v for k, v in defs.items() if k not in prop}} if defs else prop)
    return _tag(begin, content, f"{_K3_CLOSE}argument{_K3_SEP}")


def _k3_arguments(params: Any) -> dict:
    props = params.get("properties") if isinstance(params, dict) else None
    if not isinstance(props, dict) or not props:
        return {"type": "star", "content": _k3_any_argument()}
    defs = {k: params[k] for k in ("$defs", "definitions") if isinstance(params.get(k), dict)}
    inner = _or([_k3_argument(key, prop, defs) for key, prop in props.items()])
    required = params.get("required")
    return {"type": "plus" if isinstance(required, list) and required else "star", "content": inner}


def _kimi_k3(tools: Tools, choice: str) -> dict:
    calls = [_tag(f'{_K3_OPEN}call tool="{_k3_attr(name)}" index="',
                  _seq({"type": "regex", "pattern": "[0-9]+"}, _const(f'"{_K3_SEP}'), _k3_arguments(schema)),
                  f"{_K3_CLOSE}call{_K3_SEP}") for name, schema in (tools[:1] if choice == "forced" else tools)]
    channel = _tag(f"{_K3_OPEN}tools{_K3_SEP}", _separated(calls, "", at_least_one=True, stop_after_first=False),
                   f"{_K3_CLOSE}tools{_K3_SEP}")
    response = [{"type": "optional", "content": _const(f"{_K3_OPEN}response{_K3_SEP}")},
                _tag("", _any_text([_K3_OPEN, _K3_CLOSE, "<|end_of_msg|>"]), f"{_K3_CLOSE}response{_K3_SEP}")]
    tools_part = {"type": "optional", "content": channel} if choice == "auto" else channel
    return _seq(*response, tools_part, {"type": "optional", "content": _const(f"{_K3_CLOSE}message{_K3_SEP}")})


BUILDERS: dict[str, Callable[[Tools, str], dict]] = {
    "hermes": _hermes_style(_HERMES.call_begin[0], _HERMES.call_end[0]),
    "longcat": _hermes_style(_LONGCAT.call_begin[0], _LONGCAT.call_end[0]),
    "llama": _single_or_triggered('{"name": ', lambda n: f'{{"name": "{n}", "parameters": ', "}", "json"),
    "qwen_3_coder": _single_or_triggered(f"{_QWEN_XML.section_begin[0]}\n{_QWEN_XML.call_begin[0]}",
                                         lambda n: f"{_QWEN_XML.section_begin[0]}\n{_QWEN_XML.call_begin[0]}{n}>\n",
                                         f"\n{_QWEN_XML.xml.call_end[0]}\n{_QWEN_XML.section_end[0]}", "qwen_xml"),
    "deepseek_r1": _deepseek(lambda n: f"{_DS_CALL}function{_DS_SEP}{n}\n```json\n", f"\n```{_DS_END}", "\n"),
    "deepseek_v3_1": _deepseek(lambda n: f"{_DS_CALL}{n}{_DS_SEP}", _DS_END, ""),
    "kimi": _kimi,
    "minimax": _minimax,
    "harmony": _harmony,
    "mimo": _single_or_triggered(_MIMO.section_begin[0], lambda n: f"{_MIMO.section_begin[0]}{_MIMO.call_begin[0]}{n}>",
                                 f"{_MIMO.xml.call_end[0]}{_MIMO.section_end[0]}", "qwen_xml",
                                 excludes=[*_THINK, _MIMO.section_end[0], _MIMO.call_begin[0]]),
    "deepseek_v3_2": _dsml("function_calls", "｜DSML｜", "deepseek_xml"),
    "deepseek_v4": _dsml("tool_calls", "｜DSML｜", "deepseek_xml"),
    "deepseek_v4_1": _dsml("calls", "｜DSML｜ ", "deepseek_v4_1_xml"),
    "plamo3": _plamo3,
    "kimi_k3": _kimi_k3,
}
# Builders that also read each tool's parameter schema when the tool is not strict.
SCHEMA_BUILDERS = {"glm_4_7": _glm}
# Tool parsers whose vLLM class raises the strictness floor (`default_tool_strict_level`).
DEFAULT_STRICT_LEVEL = {"glm45": 1, "glm47": 1}


def limit_to_single_call(node: Any) -> Any:
    """``parallel_tool_calls: false``: every call list in the tag stops after its first call
    (vLLM's `limit_to_single_tool_call`)."""
    if isinstance(node, dict):
        if node.get("type") in ("triggered_tags", "tags_with_separator"):
            node["stop_after_first"] = True
        for value in node.values():
            limit_to_single_call(value)
    elif isinstance(node, list):
        for item in node:
            limit_to_single_call(item)
    return node


def _has_own_constraint(req) -> bool:
    so = {k: v for k, v in (req.structured_outputs or {}).items() if v is not None}
    return bool(so) or (req.response_format or {}).get("type") in ("json_object", "json_schema", "structural_tag")


def unenforced(parser: str | None, tools: list | None, tool_choice: str | dict) -> str | None:
    """Why a forced call (``required`` / named) reaches the engine with nothing enforcing it, or
    None when it is enforced (or not forced). Cheap: builds no tag."""
    if parser is None or not tools or not (tool_choice == "required" or named_tool(tool_choice) is not None):
        return None
    choice = "named" if named_tool(tool_choice) is not None else "required"
    model = STRUCTURAL_TAG_MODELS.get(parser)
    if model is None:
        if parser in JSON_SCHEMA_PARSERS:
            return None
        return f"{parser} has no fixed call syntax to enforce; tool_choice {choice} is passed unconstrained"
    if model not in BUILDERS and model not in SCHEMA_BUILDERS:
        return f"the {model} structural tag is not built by this server; tool_choice {choice} is passed unconstrained"
    return None


def tool_constraint(parser: str | None, req, tool_choice: str | dict, strict_level: str | None = None) -> ToolConstraint:
    """The constraint for a chat request's ``tools`` / ``tool_choice`` under tool parser ``parser``.

    Args:
        parser: the active tool parser's name (None: no tool parser, nothing to constrain).
        req: the validated `ChatCompletionRequest`.
        tool_choice: the effective choice (``auto`` when tools are given without one).
        strict_level: ``--tool-strict-level``: ``auto`` (each tool's ``strict``), ``function``
            (always constrain the call envelope), ``parameter`` (also pin every argument schema);
            None: the parser's own floor (``function`` for glm45/glm47, else ``auto``), as vLLM.

    Returns:
        `KEEP` when the request's own ``structured_outputs`` stand.
    """
    if parser is None or not req.tools or tool_choice == "none":
        return KEEP
    forced = named_tool(tool_choice)
    choice = "forced" if forced is not None else tool_choice
    if choice not in ("auto", "required", "forced"):
        return KEEP
    model = STRUCTURAL_TAG_MODELS.get(parser)
    if model is None:
        if parser in JSON_SCHEMA_PARSERS and choice != "auto":
            return ToolConstraint(structured_outputs_object(json=_json_schema(req.tools, forced, req.parallel_tool_calls)),
                                  True)
        return ToolConstraint(None, False, unenforced(parser, req.tools, tool_choice))
    single_call = req.parallel_tool_calls is False
    level = STRICT_LEVELS.index(strict_level) if strict_level else DEFAULT_STRICT_LEVEL.get(parser, 0)
    own = _has_own_constraint(req)
    if single_call and not (choice == "auto" and own):
        level = max(level, 1)
    tools = [t for t in req.tools if forced is None or (t.get("function") or {}).get("name") == forced]
    if choice == "auto" and level == 0 and not any((t.get("function") or {}).get("strict") is True for t in tools):
        return KEEP
    if choice == "auto" and own:
        # vLLM would join the call tag and the request's constraint into one `or` tag; we keep
        # the request's constraint (what vLLM also does when no tool is strict).
        return KEEP
    builder = BUILDERS.get(model)
    if model in SCHEMA_BUILDERS:
        params = {(t.get("function") or {})["name"]: (t.get("function") or {}).get("parameters") for t in tools}
        builder = functools.partial(SCHEMA_BUILDERS[model], params=params)
    if builder is None:
        return ToolConstraint(None, False, unenforced(parser, req.tools, tool_choice))
    args = [((t.get("function") or {})["name"], _argument_schema(t, level)) for t in tools]
    fmt = builder(args, choice)
    if single_call:
        limit_to_single_call(fmt)
    tag = json.dumps({"type": "structural_tag", "format": fmt})
    return ToolConstraint(structured_outputs_object(structural_tag=tag), True)


def _argument_schema(tool: dict, level: int) -> Any:
    """The tool's parameter schema when it is strict (or the level pins parameters), else any JSON."""
    function = tool.get("function") or {}
    strict = level >= 2 or function.get("strict") is True
    if not strict:
        return True
    return function.get("parameters") if function.get("parameters") is not None else True


def _params_or_empty(params: dict | None) -> dict:
    return params if params else {"type": "object", "properties": {}}


def _json_schema(tools: list[dict], forced: str | None, parallel_tool_calls: bool) -> dict:
    """vLLM's `get_json_schema_from_tools` for a named tool or ``required``."""
    functions = [t.get("function") or {} for t in tools]
    if forced is not None:
        return _params_or_empty(next(f for f in functions if f.get("name") == forced).get("parameters"))
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [
        {"properties": {"name": {"type": "string", "enum": [f["name"]]},
                        "parameters": _params_or_empty(f.get("parameters"))},
         "required": ["name", "parameters"]} for f in functions]}}
    if parallel_tool_calls is False:
        schema["maxItems"] = 1
    defs: dict = {}
    for f in functions:
        defs.update((f.get("parameters") or {}).get("$defs") or {})
    if defs:
        schema["$defs"] = defs
    return schema
