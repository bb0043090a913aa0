"""Tool-call families as data: one :class:`ToolFormat` row per registry name.

Marker spellings come from the vLLM 0.33 wire-protocol brief §5.3 (``../shared/design``)
and the models' published chat templates (``../shared/templates``). The machine that
reads these rows is :mod:`parsers.tools`; Harmony (gpt-oss) has its own machine in
:mod:`parsers.harmony` because its framing is channels, not call markers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class XmlDialect:
    """Markers of an XML-parameter body (see :mod:`parsers.xmlcalls`).

    ``key_begin`` … ``key_end`` frame a parameter name, then ``value_begin`` (if any)
    … ``value_end`` frame its raw value; ``call_end`` closes the call (consumed),
    ``call_end_peek`` also closes it but is left for the framing machine.
    """

    key_begin: str
    key_end: str
    value_end: str
    call_end: tuple[str, ...]
    call_end_peek: tuple[str, ...] = ()
    value_begin: str = ""
    quoted_key: bool = False     # minimax: name="KEY" / name='KEY' / name=KEY
    trim_newline: bool = True    # drop one leading and one trailing newline of a value


@dataclass(frozen=True)
class ToolFormat:
    """One tool-call family. Empty tuples mean "this part does not exist".

    * ``section_begin``/``section_end``: markers around all calls (deepseek, kimi_k2).
    * ``call_begin``: marker opening one call (inside a section if there is one, unless
      ``call_begin_in_text``).
    * ``header_end``/``header_peek``: the text between ``call_begin`` and one of these is
      the call header (consumed / left for the body); ``header`` says how to read it.
    * ``body``: ``envelope`` | ``list`` | ``sequence`` | ``args`` | ``xml`` | ``pythonic``.
    * ``call_end``: marker after the body; ``junk`` lists filler characters allowed
      before it besides whitespace.
    * ``at_start``: first non-blank character of the output → body kind that opens a call
      without a marker.
    * ``list_after_begin``: ``[`` right after ``call_begin`` opens a JSON list (mistral
      before v11) instead of a header.
    * ``strict``: envelopes need ``name`` and ``arguments``/``parameters`` (llama3_json).
    """

    name: str
    body: str
    call_begin: tuple[str, ...] = ()
    section_begin: tuple[str, ...] = ()
    section_end: tuple[str, ...] = ()
    call_begin_in_text: bool = False
    header_end: tuple[str, ...] = ()
    header_peek: tuple[str, ...] = ()
    header: str = "plain"
    call_end: tuple[str, ...] = ()
    junk: str = ""
    at_start: tuple[tuple[str, str], ...] = ()
    list_after_begin: bool = False
    strict: bool = False
    xml: XmlDialect | None = None
    families: str = ""           # human-readable model families (for SUPPORTED.md)

    @property
    def text_markers(self) -> tuple[str, ...]:
        """Markers that leave plain content: section begins, and call begins where allowed.
        They mean "a tool call starts here", so they also end reasoning for some families."""
        if self.section_begin and not self.call_begin_in_text:
            return self.section_begin
        return self.section_begin + self.call_begin


def parse_header(how: str, header: str) -> tuple[str | None, str | None]:
    """Call header text -> ``(name, id)``; ``name`` None when the header is unusable.

    ``plain``: the trimmed text is the name. ``quoted``: a name in optional single or
    double quotes (minimax ``<invoke name="N">``). ``kimi``: ``functions.NAME:IDX`` is the
    id, NAME the name (case 17: whitespace around it is ignored); without ``:IDX`` the
    header is only the name (no id). ``after:SEP``: the text
    after the last SEP is the name (deepseek_v3 ``function<｜tool▁sep｜>NAME``).
    ``blank``: the header is only blanks between two markers (InternLM
    ``<|action_start|> <|plugin|>``); the body names the call (see ``ToolStage``).
    """
    text = header.strip()
    if how == "quoted":
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1].strip()
    elif how == "kimi":
        call_id = text
        if text.startswith("functions."):
            text = text[len("functions."):]
        name, sep, idx = text.rpartition(":")
        if not (sep and idx.strip().isdigit()):
            # no ``:IDX``: the header names the function but is no K2 call id (two such
            # calls would share one); the caller assigns an id, as for id-less formats
            return (text.strip() or None), None
        return (name.strip() or None), call_id
    elif how == "mistral" and "[CALL_ID]" in text:
        name, call_id = text.split("[CALL_ID]", 1)
        return (name.strip() or None), (call_id.strip() or None)
    elif how.startswith("after:"):
        sep = how[len("after:"):]
        if sep not in text:
            return None, None
        text = text.rsplit(sep, 1)[1].strip()
    return (text or None), None


_DS_SECTION = ("<｜tool▁calls▁begin｜>",), ("<｜tool▁calls▁end｜>",)
_DS_CALL, _DS_SEP, _DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"

QWEN_XML = XmlDialect(key_begin="<parameter=", key_end=">", value_end="</parameter>",
                      call_end=("</function>",), call_end_peek=("</tool_call>",))

FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    ToolFormat("hermes", "envelope", call_begin=("<tool_call>",), call_end=("</tool_call>",),
               families="Hermes 2 Pro / Hermes 3, Qwen2.5, Qwen3 (JSON calls), QwQ, SmolLM3"),
    ToolFormat("granite4", "envelope", call_begin=("<tool_call>",), call_end=("</tool_call>",),
               families="Granite 4"),
    ToolFormat("longcat", "envelope", call_begin=("<longcat_tool_call>",),
               call_end=("</longcat_tool_call>",), families="LongCat-Flash"),
    ToolFormat("granite-20b-fc", "envelope", call_begin=("<function_call>",),
               families="Granite 20B function calling"),
    ToolFormat("internlm", "envelope", call_begin=("<|action_start|>",), header_end=("<|plugin|>",),
               header="blank", call_end=("<|action_end|>",), families="InternLM 2.5"),
    ToolFormat("llama3_json", "sequence", strict=True, at_start=(("{", "sequence"),),
               call_begin=("<|python_tag|>", "<|python_start|><|python_end|>", "<|python_start|>"),
               call_end=("<|python_end|>",),
               families="Llama 3.1 / 3.2 / 3.3 (JSON), Llama 4 (JSON)"),
    ToolFormat("granite", "list", call_begin=("<|tool_call|>", "<tool_call>"),
               families="Granite 3.0 / 3.1 / 3.2 / 3.3"),
    ToolFormat("jamba", "list", call_begin=("<tool_calls>",), call_end=("</tool_calls>",),
               families="Jamba 1.5 / 1.6"),
    ToolFormat("hunyuan_a13b", "list", call_begin=("<tool_calls>",), call_end=("</tool_calls>",),
               families="Hunyuan-A13B"),
    ToolFormat("phi4_mini_json", "list", call_begin=("functools",), families="Phi-4-mini"),
    ToolFormat("xlam", "list", at_start=(("[", "list"),), families="xLAM (bare JSON list)"),
    ToolFormat("mistral", "args", call_begin=("[TOOL_CALLS]",), header_end=("[ARGS]",),
               header_peek=("{",), header="mistral", list_after_begin=True,
               families="Mistral 7B v0.3, NeMo, Small 3.x, Devstral, Magistral"),
    ToolFormat("deepseek_v3", "args", call_begin=(_DS_CALL,), section_begin=_DS_SECTION[0],
               section_end=_DS_SECTION[1], header_end=("```json",), header="after:" + _DS_SEP,
               call_end=(_DS_END,), junk="`", families="DeepSeek V3, DeepSeek R1"),
    ToolFormat("deepseek_v31", "args", call_begin=(_DS_CALL,), section_begin=_DS_SECTION[0],
               section_end=_DS_SECTION[1], header_end=(_DS_SEP,), call_end=(_DS_END,),
               families="DeepSeek V3.1 / V3.2"),
    ToolFormat("kimi_k2", "args", call_begin=("<|tool_call_begin|>",),
               section_begin=("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"),
               section_end=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
               header_end=("<|tool_call_argument_begin|>",), header="kimi",
               call_end=("<|tool_call_end|>",), families="Kimi K2 / K2.5"),
    ToolFormat("qwen3_coder", "xml", call_begin=("<function=",), section_begin=("<tool_call>",),
               section_end=("</tool_call>",), call_begin_in_text=True, header_end=(">",),
               xml=QWEN_XML, families="Qwen3-Coder, Qwen3.5 (XML calls)"),
    ToolFormat("seed_oss", "xml", call_begin=("<function=",), section_begin=("<seed:tool_call>",),
               section_end=("</seed:tool_call>",), call_begin_in_text=True, header_end=(">",),
               xml=XmlDialect(key_begin="<parameter=", key_end=">", value_end="</parameter>",
                              call_end=("</function>",), call_end_peek=("</seed:tool_call>",)),
               families="Seed-OSS"),
    ToolFormat("glm45", "xml", call_begin=("<tool_call>",),
               header_peek=("<arg_key>", "</tool_call>"),
               xml=XmlDialect(key_begin="<arg_key>", key_end="</arg_key>",
                              value_begin="<arg_value>", value_end="</arg_value>",
                              call_end=("</tool_call>",), trim_newline=False),
               families="GLM-4.5 / 4.6 / 4.7"),
    ToolFormat("minimax_m2", "xml", call_begin=("<invoke name=",),
               section_begin=("<minimax:tool_call>",), section_end=("</minimax:tool_call>",),
               header_end=(">",), header="quoted",
               xml=XmlDialect(key_begin="<parameter name=", key_end=">", value_end="</parameter>",
                              call_end=("</invoke>",), call_end_peek=("</minimax:tool_call>",),
                              quoted_key=True, trim_newline=False),
               families="MiniMax-M2"),
    ToolFormat("pythonic", "pythonic", at_start=(("[", "pythonic"),),
               families="Llama 3.2 (pythonic), ToolACE"),
    ToolFormat("llama4_pythonic", "pythonic", call_begin=("<|python_start|>",),
               call_end=("<|python_end|>",), at_start=(("[", "pythonic"),),
               families="Llama 4 (pythonic)"),
)}

# Harmony is handled by its own machine; it is listed so the registry knows the name.
HARMONY_TOOL_NAMES = ("openai",)

ALIASES = {"qwen3_xml": "qwen3_coder", "qwen3_json": "hermes", "glm47": "glm45",
           "llama4_json": "llama3_json"}

__all__ = ["ToolFormat", "XmlDialect", "FORMATS", "ALIASES", "HARMONY_TOOL_NAMES", "parse_header"]
