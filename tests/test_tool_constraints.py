"""``tool_choice`` constraints: the shapes vLLM 0.33 sends, and text they allow parses back.

`tests/fixtures/vllm/recorded/structural-tags.json` holds what vLLM's own parsers put in
``structured_outputs`` for each tool parser and each ``tool_choice`` form (recorded from
vLLM's Python by `fixtures/vllm/record_vllm_python.py`). For every family we build a tag for,
ours must equal it; and text that satisfies the tag — its begin, a value valid for the
argument schema, its end — must parse back through our own parser to the same call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parsers import api as parsers_api
from render_service.render.tool_constraints import (
    BUILDERS, JSON_SCHEMA_PARSERS, SCHEMA_BUILDERS, STRUCTURAL_TAG_MODELS, tool_constraint,
)
from render_service.wire.openai import ChatCompletionRequest

RECORDED = Path(__file__).resolve().parent / "fixtures" / "vllm" / "recorded" / "structural-tags.json"
VLLM = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}

# Tag models whose builder is not written yet: render says the request is unconstrained.
NOT_BUILT = {m for m in set(STRUCTURAL_TAG_MODELS.values()) if m not in BUILDERS and m not in SCHEMA_BUILDERS}


def _cases():
    for parser in parsers_api.tool_parser_names():  # every name we accept, as vLLM constrains it
        for form, entry in (VLLM.get(parser) or {}).get("forms", {}).items():
            if "error" not in entry:
                yield pytest.param(parser, form, entry, id=f"{parser}-{form}")


def _effective_choice(req: ChatCompletionRequest):
    return req.tool_choice if req.tool_choice is not None else ("auto" if req.tools else "none")


def _ours(parser: str, body: dict, strict_level: str | None = None) -> dict | None:
    req = ChatCompletionRequest.model_validate(body)
    return tool_constraint(parser, req, _effective_choice(req), strict_level)


def _comparable(so: dict | None) -> dict | None:
    if so is None:
        return None
    out = {k: v for k, v in so.items() if not k.startswith("_")}
    if out.get("structural_tag"):
        out["structural_tag"] = json.loads(out["structural_tag"])
    return out


@pytest.mark.skipif(not VLLM, reason="vLLM structural tags not recorded")
@pytest.mark.parametrize("parser,form,entry", list(_cases()))
def test_constraint_equals_vllms(parser, form, entry):
    model = STRUCTURAL_TAG_MODELS.get(parser)
    ours = _ours(parser, entry["request"], entry.get("strict_level"))  # --tool-strict-level for "form@level"
    if model in NOT_BUILT and entry["structured_outputs"] is not None:
        assert ours.structured_outputs is None, "an unbuilt tag must be reported, not faked"
        assert ours.note or form.startswith("auto"), "a forced call nothing enforces must be reported"
        pytest.skip(f"{model} structural tag not built here (render reports the request unconstrained)")
    assert _comparable(ours.structured_outputs) == _comparable(entry["structured_outputs"])
    if ours.structured_outputs is not None:
        assert ours.structured_outputs["disable_any_whitespace"] is False
        assert ours.structured_outputs["disable_additional_properties"] is False


# ---- text that satisfies a tag ----------------------------------------------------------------

CALLS = [("get_weather", {"city": "Zürich \"old town\"", "days": 3}), ("search", {"query": "a < b"})]


def _value_text(args: dict, style: str) -> str:
    if style == "json":
        return json.dumps(args, ensure_ascii=False)
    if style == "qwen_xml":  # xgrammar: <parameter=key>value</parameter>
        return "".join(f"<parameter={k}>{v if isinstance(v, str) else json.dumps(v)}</parameter>"
                       for k, v in args.items())
    if style in ("deepseek_xml", "deepseek_v4_1_xml"):  # <｜DSML｜parameter name="k" string="true|false">v</…>
        bar = "｜DSML｜" + (" " if style == "deepseek_v4_1_xml" else "")
        return "".join(f'<{bar}parameter name="{k}" string="{str(isinstance(v, str)).lower()}">'
                       f'{v if isinstance(v, str) else json.dumps(v)}</{bar}parameter>' for k, v in args.items())
    if style == "minimax_xml":
        return "".join(f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>\n'
                       for k, v in args.items())
    raise AssertionError(f"no sample writer for style {style}")


def _tag_name(tag: dict) -> str:
    begin = tag["begin"]
    return next(name for name, _ in CALLS if name in begin)


def satisfy(node: dict, calls: list[tuple[str, dict]]) -> str:
    """One text the format accepts, making ``calls`` (in order) where it has a choice."""
    kind = node["type"]
    if kind == "const_string":
        return node["value"]
    if kind == "regex":
        assert node["pattern"] in ("\\d+", "[0-9]+")
        return "0"
    if kind == "sequence":
        return "".join(satisfy(e, calls) for e in node["elements"])
    if kind == "json_schema":
        if node["style"] == "json" and node["json_schema"] not in (True,) and node["json_schema"].get("type") != "object":
            return json.dumps(calls[0][1])  # one GLM value (the caller passes the value itself)
        return _value_text(calls[0][1], node["style"])
    if kind == "any_text":
        value = calls[0][1]
        return value if isinstance(value, str) else json.dumps(value)
    if kind in ("star", "plus") and node["content"]["type"] == "tag":  # Kimi K3 XTML arguments
        types = {str: "string", int: "number", float: "number", bool: "boolean"}
        return "".join(f'<|open|>argument key="{k}" type="{types[type(v)]}"<|sep|>'
                       f'{v if isinstance(v, str) else json.dumps(v)}<|close|>argument<|sep|>'
                       for k, v in calls[0][1].items())
    if kind == "star":  # GLM's argument pairs: one per argument of the call
        pairs = node["content"]["elements"] if node["content"]["type"] == "or" else [node["content"]]
        out = []
        for key, value in calls[0][1].items():
            pair = next(p for p in pairs if f"<arg_key>{key}</arg_key>" in p["elements"][0]["value"])
            out.append(pair["elements"][0]["value"] + satisfy(pair["elements"][1], [(calls[0][0], value)])
                       + pair["elements"][2]["value"])
        return "".join(out)
    if kind == "optional":
        return ""
    if kind == "or":  # a call: the element for this tool, in the commentary channel where there is one
        named = [e for e in node["elements"] if calls[0][0] in e.get("begin", "")]
        pick = next((e for e in named if e["begin"].startswith("<|channel|>commentary")), (named or node["elements"])[0])
        return satisfy(pick, calls)
    if kind == "tag":
        end = node["end"][0] if isinstance(node["end"], list) else node["end"]
        if node["begin"] == "" and node["content"]["type"] == "any_text":  # Kimi K3's (empty) response channel
            return end
        return node["begin"] + satisfy(node["content"], calls) + end
    if kind in ("tags_with_separator", "triggered_tags"):
        wanted = calls[:1] if node["stop_after_first"] else calls
        parts = []
        for name, args in wanted:
            tag = next(t for t in node["tags"] if t["type"] != "tag" or _tag_name_or_none(t) in (name, None))
            parts.append(satisfy(tag, [(name, args)] + [c for c in calls if c[0] != name]))
        return node.get("separator", "").join(parts)
    raise AssertionError(f"no sample writer for {kind}")


def _tag_name_or_none(tag: dict) -> str | None:
    names = [name for name, _ in CALLS if name in tag["begin"]]
    return names[0] if names else None


def _families():
    for parser, model in sorted(STRUCTURAL_TAG_MODELS.items()):
        if model not in NOT_BUILT:
            for choice in ("required", "named", "required-noparallel"):
                yield pytest.param(parser, choice, id=f"{parser}-{choice}")


@pytest.mark.parametrize("parser,choice", list(_families()))
def test_text_satisfying_the_tag_parses_back_to_the_same_calls(parser, choice):
    tools = [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {k: {"type": "integer" if isinstance(v, int) else "string"}
                                         for k, v in a.items()}}}} for n, a in CALLS]
    body = {"messages": [{"role": "user", "content": "x"}], "tools": tools,
            "tool_choice": ({"type": "function", "function": {"name": "get_weather"}}
                            if choice == "named" else "required"),
            "parallel_tool_calls": choice != "required-noparallel"}
    constraint = _ours(parser, body)
    fmt = json.loads(constraint.structured_outputs["structural_tag"])["format"]
    # Harmony's tag allows one call (one message to one recipient); the others take a list.
    calls = CALLS[:1] if choice != "required" or parser == "openai" else CALLS
    text = satisfy(fmt, calls)
    parsed = parsers_api.parse_complete(parsers_api.ParserSpec(tool=parser, tools=tools, tool_choice=body["tool_choice"]),
                                        text)
    got = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
    assert got == calls, f"{text!r} parsed to {parsed}"
