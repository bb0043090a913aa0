"""Tool-call families as data: one :class:`ToolFormat` row per registry name.

Marker spellings come from the vLLM 0.33 wire-protocol brief §5.3 (``../shared/design``)
and the models' published chat templates (``../shared/templates``). The machine that
reads these rows is :mod:`parsers.tools`; Harmony (gpt-oss) has its own machine in
:mod:`parsers.harmony` because its framing is channels, not call markers.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from functools import cached_property

from .framing import FRAMINGS, NONE, Framing


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
    # (attribute, value): an attribute after the quoted key that types the value itself —
    # equal to ``value`` ⇒ a verbatim string, any other value ⇒ JSON text (a string if it
    # does not parse); absent ⇒ the tool's schema decides. DSML ``string="true"``,
    # Kimi K3 ``type="string"``.
    string_attr: tuple[str, str] = ()
    cdata: bool = False          # a value may be wrapped in <![CDATA[ … ]]>: the wrapper is not the value


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
    * ``detect``: needle sets for ``--tool-call-parser auto``: a chat template holding every
      needle of one set renders this family's calls (:mod:`parsers.detect`).
    * ``name_keys``/``arg_keys``: envelope keys holding the name / the arguments
      (Cohere ``tool_name``, Inkling ``args``); empty means the defaults of
      :class:`parsers.jsoncalls.JsonCall`.
    * ``drop``: framing markers of content blocks (Inkling's block kinds, GigaChat's
      ``<|message_sep|>``); they are removed from content, never shown.
    * ``framing``: the family's response framing (:mod:`parsers.framing`), shared with its
      reasoning row, applied whatever parser is active (Kimi K3, Command, Hunyuan-A13B,
      PLaMo 3).
    * ``label_begin``/``label_end``: a drop marker after which text up to one of the
      ``label_end`` markers is the block's label, metadata never shown (Inkling's function
      name between ``<|message_model|>`` and the block-kind marker). Held until the end
      marker comes; with none before the end of output, it is content.
    * ``variants``: ``(chat-template kwarg, value, row)`` triples; when the request's
      effective kwargs set that value, the other row is used (K2 Horizon's
      ``tool_call_format: json`` writes JSON envelopes in the same IFM framing).
    * ``spellings``: rows of the same family whose markers are spelled otherwise (HY V4's
      ``<tool_call:opensource>`` tokens beside the unsuffixed ones); the framing machine
      looks for every spelling's markers and reads a section or call by the row whose
      marker opened it.
    * ``alt_bodies``: a second syntax of the call body, told by its first characters (blanks
      skipped): DSML's ``invoke`` with a JSON object body (``{`` → ``args``), LFM2's JSON list
      of envelopes in its Python-call markers (``[{`` → ``list``). After such a body the
      XML dialect's call end is awaited.
    * ``section_body``: a JSON object right inside a section is a call of this body kind
      (dots: ``<dots_function_call>{"name", "arguments"}</dots_function_call>``).
      Any XML-dialect row also reads a self-closing ``<invoke name="f"/>`` as a call
      without arguments.
    * ``doubled_names``: an emitted ``H.H`` names the registered tool ``H`` (Muse: the chat
      template renders a bare tool name as recipient ``H.*``, so the model writes ``H.H``).
    * ``quote``: string delimiter of a key:value call body (Gemma 4 ``<|"|>``,
      FunctionGemma ``<escape>``; see :mod:`parsers.gemmacalls`).
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
    name_keys: tuple[str, ...] = ()
    arg_keys: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    framing: Framing = NONE
    label_begin: tuple[str, ...] = ()
    label_end: tuple[str, ...] = ()
    quote: str = ""
    variants: tuple = ()         # ((kwarg, value, ToolFormat), …): the row a template kwarg selects
    spellings: tuple = ()        # (ToolFormat, …): the same family with other marker spellings
    alt_bodies: tuple[tuple[str, str], ...] = ()  # (first characters, body kind): a second body syntax
    section_body: str = ""       # body kind of a JSON object standing right inside a section
    doubled_names: bool = False  # "f.f" names the registered tool "f" (Muse's bare-name form)
    detect: tuple[tuple[str, ...], ...] = ()  # template needles for ``auto`` (parsers.detect)
    families: str = ""           # human-readable model families (for SUPPORTED.md)

    @cached_property  # derived from the frozen row: computed once per row, not per parser
    def content_framing(self) -> Framing:
        """Everything this row removes from content: its ``drop`` markers and its framing."""
        return Framing(self.drop) + self.framing

    @cached_property
    def all_text_markers(self) -> tuple[str, ...]:
        """:attr:`text_markers` of this row and of its other ``spellings``."""
        return self.text_markers + tuple(m for row in self.spellings for m in row.text_markers)

    @cached_property
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
    ``between:A<TAB>B``: the text between A and B (PLaMo 3 ``<|plamo:begin_tool_name:plamo|>``).
    ``attr:NAME``: the value of attribute NAME, XML-unescaped (Kimi K3 ``call tool="f"``).
    ``blank``: the header is only blanks between two markers (InternLM
    ``<|action_start|> <|plugin|>``); the body names the call (see ``ToolStage``).
    ``strip:P1<TAB>P2``: the text without the first of these prefixes it starts with (Gemma 4
    ``call:NAME``, and the bare ``:NAME`` some checkpoints write).
    """
    text = header.strip()
    if how.startswith("strip:"):
        for prefix in how[len("strip:"):].split("\t"):
            if text.startswith(prefix):
                return (text[len(prefix):].strip() or None), None
        return (text or None), None
    if how.startswith("between:"):
        begin, end = how[len("between:"):].split("\t", 1)
        i, j = text.find(begin), text.rfind(end)
        if i < 0 or j < i + len(begin):
            return None, None
        text = text[i + len(begin):j].strip()
    elif how.startswith("attr:"):
        value = attributes(text).get(how[len("attr:"):])
        return (value.strip() or None) if value is not None else None, None
    elif how == "quoted":
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


_ATTR = re.compile(r"""([\w:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")


def attributes(text: str) -> dict[str, str]:
    """``tool="f" index="1"`` -> ``{"tool": "f", "index": "1"}`` (values XML-unescaped)."""
    return {m.group(1): html.unescape(next(g for g in m.groups()[1:] if g is not None))
            for m in _ATTR.finditer(text)}


_DS_SECTION = ("<｜tool▁calls▁begin｜>",), ("<｜tool▁calls▁end｜>",)
_DS_CALL, _DS_SEP, _DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"

QWEN_XML = XmlDialect(key_begin="<parameter=", key_end=">", value_end="</parameter>",
                      call_end=("</function>",), call_end_peek=("</tool_call>",))

FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    ToolFormat("hermes", "envelope", call_begin=("<tool_call>",), call_end=("</tool_call>",),
               detect=(("<tool_call>",),),
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
               detect=(("<|python_tag|>",), ("<|start_header_id|>", '"parameters"')),
               families="Llama 3.1 / 3.2 / 3.3 (JSON), Llama 4 (JSON)"),
    ToolFormat("granite", "list", call_begin=("<|tool_call|>", "<tool_call>"),
               detect=(("<|tool_call|>",),),
               families="Granite 3.0 / 3.1 / 3.2 / 3.3"),
    ToolFormat("jamba", "list", call_begin=("<tool_calls>",), call_end=("</tool_calls>",),
               families="Jamba 1.5 / 1.6"),
    ToolFormat("hunyuan_a13b", "list", call_begin=("<tool_calls>",), call_end=("</tool_calls>",),
               framing=FRAMINGS["hunyuan_a13b"], families="Hunyuan-A13B"),
    ToolFormat("phi4_mini_json", "list", call_begin=("functools",), detect=(("functools",), ("<|tool|>", "<|/tool|>")),
               families="Phi-4-mini"),
    ToolFormat("xlam", "list", at_start=(("[", "list"),), families="xLAM (bare JSON list)"),
    ToolFormat("mistral", "args", call_begin=("[TOOL_CALLS]",), header_end=("[ARGS]",),
               header_peek=("{",), header="mistral", list_after_begin=True,
               detect=(("[TOOL_CALLS]",),),
               families="Mistral 7B v0.3, NeMo, Small 3.x, Devstral, Magistral"),
    ToolFormat("deepseek_v3", "args", call_begin=(_DS_CALL,), section_begin=_DS_SECTION[0],
               section_end=_DS_SECTION[1], header_end=("```json",), header="after:" + _DS_SEP,
               call_end=(_DS_END,), junk="`", detect=((_DS_SECTION[0][0], "```json"),),
               families="DeepSeek V3, DeepSeek R1"),
    ToolFormat("deepseek_v31", "args", call_begin=(_DS_CALL,), section_begin=_DS_SECTION[0],
               section_end=_DS_SECTION[1], header_end=(_DS_SEP,), call_end=(_DS_END,),
               detect=((_DS_SECTION[0][0],),),
               families="DeepSeek V3.1 / V3.2"),
    ToolFormat("kimi_k2", "args", call_begin=("<|tool_call_begin|>",),
               section_begin=("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"),
               section_end=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
               header_end=("<|tool_call_argument_begin|>",), header="kimi",
               call_end=("<|tool_call_end|>",), detect=(("<|tool_calls_section_begin|>",),),
               families="Kimi K2 / K2.5"),
    ToolFormat("qwen3_coder", "xml", call_begin=("<function=",), section_begin=("<tool_call>",),
               section_end=("</tool_call>",), call_begin_in_text=True, header_end=(">",),
               xml=QWEN_XML, detect=(("<function=", "<parameter="),),
               families="Qwen3-Coder, Qwen3.5 (XML calls)"),
    ToolFormat("seed_oss", "xml", call_begin=("<function=",), section_begin=("<seed:tool_call>",),
               section_end=("</seed:tool_call>",), call_begin_in_text=True, header_end=(">",),
               xml=XmlDialect(key_begin="<parameter=", key_end=">", value_end="</parameter>",
                              call_end=("</function>",), call_end_peek=("</seed:tool_call>",)),
               detect=(("<seed:tool_call>",),),
               families="Seed-OSS"),
    ToolFormat("glm45", "xml", call_begin=("<tool_call>",),
               header_peek=("<arg_key>", "</tool_call>"),
               xml=XmlDialect(key_begin="<arg_key>", key_end="</arg_key>",
                              value_begin="<arg_value>", value_end="</arg_value>",
                              call_end=("</tool_call>",), trim_newline=False),
               detect=(("<tool_call>", "<arg_key>"),),
               families="GLM-4.5 / 4.6 / 4.7"),
    ToolFormat("minimax_m2", "xml", call_begin=("<invoke name=",),
               section_begin=("<minimax:tool_call>",), section_end=("</minimax:tool_call>",),
               header_end=(">",), header="quoted",
               xml=XmlDialect(key_begin="<parameter name=", key_end=">", value_end="</parameter>",
                              call_end=("</invoke>",), call_end_peek=("</minimax:tool_call>",),
                              quoted_key=True, trim_newline=False),
               detect=(("<minimax:tool_call>",),),
               families="MiniMax-M2"),
    ToolFormat("pythonic", "pythonic", at_start=(("[", "pythonic"),),
               families="Llama 3.2 (pythonic), ToolACE"),
    ToolFormat("llama4_pythonic", "pythonic", call_begin=("<|python_start|>",),
               call_end=("<|python_end|>",), at_start=(("[", "pythonic"),),
               detect=(("<|python_start|>",),),
               families="Llama 4 (pythonic)"),
)}

_DSML = "｜DSML｜"


def _dsml(name: str, begins: tuple[str, ...], end: str, sp: str = "", families: str = "") -> ToolFormat:
    """DeepSeek's DSML calls: ``<｜DSML｜invoke name="f"><｜DSML｜parameter name="k"
    string="true|false">V</｜DSML｜parameter></｜DSML｜invoke>`` inside a wrapper; ``sp`` is
    the space V4.1 writes after the DSML bar."""
    tag = f"<{_DSML}{sp}"
    return ToolFormat(name, "xml", call_begin=(f"{tag}invoke name=",), section_begin=begins,
                      section_end=(end,), call_begin_in_text=True, header_end=(">",),
                      header="quoted",
                      xml=XmlDialect(key_begin=f"{tag}parameter name=", key_end=">",
                                     value_end=f"</{_DSML}{sp}parameter>",
                                     call_end=(f"</{_DSML}{sp}invoke>",), call_end_peek=(end,),
                                     quoted_key=True, trim_newline=False,
                                     string_attr=("string", "true")),
                      alt_bodies=(("{", "args"),), families=families)


def _attr_xml(prefix: str, param: str, invoke: str, peek: tuple[str, ...] = ()) -> XmlDialect:
    """``<{prefix}{param} name="K">V</{prefix}{param}>`` parameters closed by ``</{prefix}{invoke}>``."""
    return XmlDialect(key_begin=f"<{prefix}{param} name=", key_end=">",
                      value_end=f"</{prefix}{param}>", call_end=(f"</{prefix}{invoke}>",),
                      call_end_peek=peek, quoted_key=True, trim_newline=False)


def _hy_v4(sfx: str, spellings: tuple = ()) -> ToolFormat:
    """HY V4: every structural token carries the checkpoint's suffix (``<tool_call:opensource>``,
    the Hy4 checkpoint's) or none; the name ends at the first ``<arg_key>`` or at the call's
    end (no ``<tool_sep>``, though one is accepted as HY V3 writes it)."""
    return ToolFormat("hy_v4", "xml", call_begin=(f"<tool_call{sfx}>",), section_begin=(f"<tool_calls{sfx}>",),
                      section_end=(f"</tool_calls{sfx}>",), header_end=("<tool_sep>",),
                      header_peek=(f"<arg_key{sfx}>", f"</tool_call{sfx}>"),
                      xml=XmlDialect(key_begin=f"<arg_key{sfx}>", key_end=f"</arg_key{sfx}>",
                                     value_begin=f"<arg_value{sfx}>", value_end=f"</arg_value{sfx}>",
                                     call_end=(f"</tool_call{sfx}>",), trim_newline=False),
                      spellings=spellings, families="Hunyuan (HY) V4 (suffixed or unsuffixed tokens)")


def _arg_key_xml(t: str, end: str) -> XmlDialect:
    """GLM-style ``<arg_key>K</arg_key><arg_value>V</arg_value>`` with tag spelling ``t``
    (``arg_key`` → ``<{t}arg_key>``); anything between key and value (K2 Horizon's
    ``<ifm|arg_type>``) is skipped: the tool's schema types the value."""
    return XmlDialect(key_begin=f"<{t}arg_key>", key_end=f"</{t}arg_key>",
                      value_begin=f"<{t}arg_value>", value_end=f"</{t}arg_value>",
                      call_end=(end,), trim_newline=False)


_PLAMO = "<|plamo:{}:plamo|>".format
_MM3 = "]<]minimax[>["

# Families added for vLLM 0.33's remaining names (``tests/fixtures/vllm/parser_names.json``).
FORMATS.update({f.name: f for f in (
    _dsml("deepseek_v32", (f"<{_DSML}function_calls>",), f"</{_DSML}function_calls>",
          families="DeepSeek V3.2 (DSML)"),
    _dsml("deepseek_v4", (f"<{_DSML}tool_calls>", f"<{_DSML}toolcalls>", f"<{_DSML}tool>"),
          f"</{_DSML}tool_calls>", families="DeepSeek V4 (DSML)"),
    _dsml("deepseek_v41", (f"<{_DSML} calls>",), f"</{_DSML} calls>", sp=" ",
          families="DeepSeek V4.1 (spaced DSML)"),
    ToolFormat("kimi_k3", "xml", call_begin=("<|open|>call ",),
               section_begin=("<|open|>tools<|sep|>",), section_end=("<|close|>tools<|sep|>",),
               header_end=("<|sep|>",), header="attr:tool",
               xml=XmlDialect(key_begin="<|open|>argument key=", key_end="<|sep|>",
                              value_end="<|close|>argument<|sep|>", call_end=("<|close|>call<|sep|>",),
                              call_end_peek=("<|close|>tools<|sep|>",), quoted_key=True,
                              trim_newline=False, string_attr=("type", "string")),
               framing=FRAMINGS["kimi_k3"], families="Kimi K3 (XTML channels)"),
    ToolFormat("dots", "xml", call_begin=("<invoke name=",),
               section_begin=("<dots_function_call>",), section_end=("</dots_function_call>",),
               header_end=(">",), header="quoted",
               xml=_attr_xml("", "parameter", "invoke", ("</dots_function_call>",)), section_body="envelope",
               families="dots.llm"),
    ToolFormat("minicpm5", "xml", call_begin=("<function name=",), header_end=(">",),
               header="quoted", xml=replace(_attr_xml("", "param", "function"), cdata=True), families="MiniCPM 5"),
    ToolFormat("muse", "xml", call_begin=("<atem:invoke name=",),
               section_begin=("<atem:function_calls>",), section_end=("</atem:function_calls>",),
               header_end=(">",), header="quoted",
               xml=_attr_xml("atem:", "parameter", "invoke", ("</atem:function_calls>",)), doubled_names=True,
               families="Muse Spark, Muse Glimmer (ATEM calls; messages routed by parsers.muse)"),
    ToolFormat("step3", "xml", call_begin=("<｜tool_call_begin｜>",),
               section_begin=("<｜tool_calls_begin｜>",), section_end=("<｜tool_calls_end｜>",),
               header_end=('">',), header='after:name="', call_end=("<｜tool_call_end｜>",),
               xml=_attr_xml("steptml:", "parameter", "invoke"), families="Step-3 (steptml)"),
    ToolFormat("hy_v3", "xml", call_begin=("<tool_call>",), section_begin=("<tool_calls>",),
               section_end=("</tool_calls>",), header_end=("<tool_sep>",),
               xml=_arg_key_xml("", "</tool_call>"), families="Hunyuan (HY) V3"),
    _hy_v4("", spellings=(_hy_v4(":opensource"),)),
    ToolFormat("k2_horizon", "xml", call_begin=("<ifm|tool_call>",),
               section_begin=("<ifm|tool_calls>",), section_end=("</ifm|tool_calls>",),
               header_peek=("<ifm|arg_key>", "</ifm|tool_call>"),
               xml=_arg_key_xml("ifm|", "</ifm|tool_call>"),
               variants=(("tool_call_format", "json", ToolFormat(
                   "k2_horizon", "envelope", call_begin=("<ifm|tool_call>",), section_begin=("<ifm|tool_calls>",),
                   section_end=("</ifm|tool_calls>",), call_end=("</ifm|tool_call>",),
                   families="K2 Horizon (IFM, tool_call_format json)")),),
               families="K2 Horizon (IFM XML; JSON envelopes with tool_call_format json)"),
    ToolFormat("mimo", "xml", call_begin=("<function=",), section_begin=("<tool_call>",),
               section_end=("</tool_call>",), call_begin_in_text=True, header_end=(">",),
               xml=XmlDialect(key_begin="<parameter=", key_end=">", value_end="</parameter>",
                              call_end=("</function>",), call_end_peek=("</tool_call>",),
                              trim_newline=False),
               families="MiMo (Qwen3 XML, values verbatim)"),
    ToolFormat("ernie45", "envelope", call_begin=("<tool_call>",), call_end=("</tool_call>",),
               drop=("</response>",), families="ERNIE 4.5"),
    ToolFormat("gigachat3", "envelope", call_begin=("<|function_call|>", "function call<|role_sep|>\n"),
               drop=("<|message_sep|>",), families="GigaChat 3"),
    ToolFormat("inkling", "envelope", call_begin=("<|content_invoke_tool_json|>",),
               call_end=("<|end_message|>",), arg_keys=("args",),
               drop=("<|message_model|>", "<|content_text|>", "<|end_message|>",
                     "<|content_model_end_sampling|>", "<|content_invoke_tool_text|>",
                     "<|content_tool_error|>"),
               label_begin=("<|message_model|>",),
               label_end=("<|content_text|>", "<|content_thinking|>", "<|content_invoke_tool_json|>",
                          "<|content_invoke_tool_text|>", "<|content_tool_error|>", "<|end_message|>",
                          "<|content_model_end_sampling|>", "<|message_model|>"),
               families="Inkling (typed content blocks)"),
    ToolFormat("cohere_command4", "list", call_begin=("<|START_ACTION|>",), call_end=("<|END_ACTION|>",),
               name_keys=("tool_name",), arg_keys=("parameters",), framing=FRAMINGS["cohere"],
               families="Command A (Command 4)"),
    ToolFormat("cohere_command3", "list", call_begin=("<|START_ACTION|>",), call_end=("<|END_ACTION|>",),
               name_keys=("tool_name",), arg_keys=("parameters",), framing=FRAMINGS["cohere"],
               families="Command R7B / Command R+ 08-2024 (Command 3)"),
    ToolFormat("plamo3", "args", call_begin=(_PLAMO("begin_tool_request"),),
               section_begin=(_PLAMO("begin_tool_requests"),), section_end=(_PLAMO("end_tool_requests"),),
               header_end=(_PLAMO("begin_tool_arguments") + "<|plamo:constrain|>json<|plamo:msg|>",),
               header=f"between:{_PLAMO('begin_tool_name')}\t{_PLAMO('end_tool_name')}",
               call_end=(_PLAMO("end_tool_arguments") + _PLAMO("end_tool_request"),
                         _PLAMO("end_tool_arguments")),
               framing=FRAMINGS["plamo3"], families="PLaMo 3"),
    ToolFormat("gemma4", "gemma", call_begin=("<|tool_call>",), header_end=("{",), header="strip:call:\t:",
               call_end=("<tool_call|>",), quote='<|"|>', families="Gemma 4"),
    ToolFormat("functiongemma", "gemma", call_begin=("<start_function_call>",), header_end=("{",),
               header="after:call:", call_end=("<end_function_call>",), quote="<escape>",
               families="FunctionGemma"),
    ToolFormat("apertus", "keyed", call_begin=("<|tools_prefix|>",), call_end=("<|tools_suffix|>",),
               families="Apertus"),
    ToolFormat("olmo3", "pylines", call_begin=("<function_calls>",), call_end=("</function_calls>",),
               families="OLMo 3"),
    ToolFormat("minimax_m3", "nested_xml", call_begin=(f"{_MM3}<invoke name=",),
               section_begin=(f"{_MM3}<tool_call>",), section_end=(f"{_MM3}</tool_call>",),
               header_end=(">",), header="quoted", families="MiniMax M3"),
    ToolFormat("lfm2", "pythonic", call_begin=("<|tool_call_start|>",), call_end=("<|tool_call_end|>",),
               alt_bodies=(("[{", "list"),), families="LFM2 / LFM2.5"),
)})

# Harmony is handled by its own machine; it is listed so the registry knows the name.
HARMONY_TOOL_NAMES = ("openai",)

ALIASES = {"qwen3_xml": "qwen3_coder", "qwen3_json": "hermes", "glm47": "glm45",
           "llama4_json": "llama3_json",
           # same markers as the target (vLLM 0.33 maps these to the same grammar)
           "step3p5": "qwen3_coder", "step5": "qwen3_coder", "poolside_v1": "glm45", "ling3": "glm45"}

__all__ = ["ToolFormat", "XmlDialect", "FORMATS", "ALIASES", "HARMONY_TOOL_NAMES", "parse_header"]
