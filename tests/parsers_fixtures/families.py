"""Samples for the families added to reach vLLM 0.33's full registries (issue 15, Coverage).

Each text is written the way the family's published chat template / model card renders an
assistant turn (markers from vLLM 0.33's own parser for that name where no template is
published). They join :data:`parsers_fixtures.samples.SAMPLES`, so every invariant
(every chunking, export/restore at every character, every prefix) runs on them too.
"""

from __future__ import annotations

DSML = "｜DSML｜"


def dsml(section: str, *calls: str, sp: str = "") -> str:
    return f"<{DSML}{sp}{section}>\n" + "".join(calls) + f"</{DSML}{sp}{section}>"


def dsml_invoke(name: str, *params: tuple[str, str, str], sp: str = "") -> str:
    body = "".join(f'<{DSML}{sp}parameter name="{k}" string="{s}">{v}</{DSML}{sp}parameter>\n'
                   for k, s, v in params)
    return f'<{DSML}{sp}invoke name="{name}">\n{body}</{DSML}{sp}invoke>\n'


PARIS = (("city", "true", "Paris"), ("days", "false", "3"))
K3_CALL = ('<|open|>call tool="get_weather" index="1"<|sep|>'
           '<|open|>argument key="city" type="string"<|sep|>Zürich "1"<|close|>argument<|sep|>'
           '<|open|>argument key="days" type="integer"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|>')
K3_TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {'a"b': {"type": "object"}}}}}
MM3 = "]<]minimax[>["
PLAMO = "<|plamo:{}:plamo|>".format
PLAMO_ARGS = PLAMO("begin_tool_arguments") + "<|plamo:constrain|>json<|plamo:msg|>"


def plamo_call(name: str, args: str) -> str:
    return (PLAMO("begin_tool_request") + PLAMO("begin_tool_name") + name + PLAMO("end_tool_name")
            + PLAMO_ARGS + args + PLAMO("end_tool_arguments") + PLAMO("end_tool_request"))


RT_QWEN = {"version": 1, "start_anchor": "<|im_start|>assistant\n", "defaults": {"role": "assistant"},
           "fields": {"thinking": {"open": "<think>", "close": "</think>"},
                      "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json",
                                     "repeats": True, "transform": {"type": "function", "function": "{content}"}},
                      "content": {}}}
RT_PYTHONIC = {"version": 1, "start_anchor": ["<|assistant|>"],
               "fields": {"tool_calls": {"open": "<|tool_call_start|>", "close": "<|tool_call_end|>",
                                         "content": "python-call-list", "transform": "{content}"},
                          "content": {"content_args": {"strip": False}}}}


# issue 22 fixtures: HY V4's Hy4 spelling, a schema-typed tool, a root oneOf with a discriminator
HY4 = ":opensource"


def hy4(name: str, *args: tuple[str, str], sfx: str = HY4) -> str:
    body = "".join(f"<arg_key{sfx}>{k}</arg_key{sfx}><arg_value{sfx}>{v}</arg_value{sfx}>" for k, v in args)
    return f"<tool_call{sfx}>{name}{body}</tool_call{sfx}>"


TYPED_TOOL = {"type": "function", "function": {"name": "typed", "parameters": {"type": "object", "properties": {
    "s": {"type": "string"}, "i": {"type": "integer"}, "b": {"type": "boolean"}, "n": {"type": "number"},
    "arr": {"type": "array"}, "obj": {"type": "object"}, "union": {"type": ["string", "object"]},
    "any_of": {"anyOf": [{"type": "string"}, {"type": "array"}]}, "one_of": {"oneOf": [{"type": "number"}]},
    "bad_int": {"type": "integer"}, "alias_int": {"type": "int"}, "prefix_uint": {"type": "uint32"},
    "alias_list": {"type": "list"}}}}}
ONEOF_TOOL = {"type": "function", "function": {"name": "set", "parameters": {"oneOf": [
    {"type": "object", "properties": {"kind": {"const": "count"}, "value": {"type": "integer"}}},
    {"type": "object", "properties": {"kind": {"const": "label"}, "value": {"type": "string"}}}]}}}
ENUM_TOOL = {"type": "function", "function": {"name": "mode", "parameters": {"type": "object", "properties": {
    "level": {"enum": [1, "auto"]}}}}}
NS_TOOL = {"type": "function", "function": {"name": "web.search", "parameters": {"type": "object", "properties": {
    "q": {"type": "string"}}}}}


def family_markers(spec) -> list[str]:
    """The marker strings of ``spec``'s rows that are special tokens in the family's real
    vocabulary (``<…>`` / ``]<]…[`` spellings without spaces or ``=``), for a tokenizer that
    holds them."""
    from dataclasses import fields, is_dataclass

    from parsers import registry

    rows = [registry.tool_format(spec.tool)] if spec.tool else []
    rows += [registry.reasoning_format(spec.reasoning)] if spec.reasoning else []
    found: set[str] = set()

    def walk(value) -> None:
        if is_dataclass(value):
            for f in fields(value):
                walk(getattr(value, f.name))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
        elif isinstance(value, str) and _special(value):
            found.add(value)

    for row in rows:
        if not isinstance(row, str):
            walk(row)
    return sorted(found)


def _special(m: str) -> bool:
    return len(m) > 3 and m[0] in "<]" and m[-1] in ">[" and not any(c in m for c in " =\n")


def family_samples(spec) -> tuple[list, dict]:
    """``(samples, expected)``; ``spec`` is :func:`parsers_fixtures.samples.spec` (passed in,
    so this module and samples.py do not import each other)."""

    def rt(tool="hf", reasoning="hf", template=RT_QWEN, **kw):
        s = spec(tool, reasoning, **kw)
        return type(s)(**{**s.to_dict(), "response_template": template})

    return _samples(spec, rt), FAMILY_EXPECTED


def _samples(spec, rt) -> list:
    return [
    # DeepSeek DSML: V3.2 function_calls, V4 tool_calls, V4.1 spaced
    ("dsml-v32", spec("deepseek_v32"), "Let me check.\n\n" + dsml("function_calls", dsml_invoke("get_weather", *PARIS))),
    ("dsml-v32-two", spec("deepseek_v32"),
     dsml("function_calls", dsml_invoke("get_weather", *PARIS),
          dsml_invoke("search", ("query", "true", "a<b>c"), ("filters", "false", '{"k": [1, 2]}'),
                      ("limit", "false", "not json")))),
    ("dsml-v4-thinking", spec("deepseek_v4", "deepseek_v4", thinking=True),
     "Need the weather.</think>\n\n" + dsml("tool_calls", dsml_invoke("get_weather", *PARIS))),
    ("dsml-v4-no-string-attr", spec("deepseek_v4"),
     dsml("tool_calls", f'<{DSML}invoke name="get_weather">\n<{DSML}parameter name="days">4</{DSML}parameter>\n'
                        f'</{DSML}invoke>\n')),
    ("dsml-v41", spec("deepseek_v41", "deepseek_v41", enable_thinking=False),
     "Sure." + dsml("calls", dsml_invoke("get_weather", *PARIS, sp=" "), sp=" ")),
    ("dsml-cut", spec("deepseek_v32"),
     dsml("function_calls", dsml_invoke("get_weather", *PARIS))[:-60]),
    ("dsml-unknown", spec("deepseek_v32"), dsml("function_calls", dsml_invoke("rm_rf", *PARIS))),
    # Kimi K3 (XTML)
    ("kimi-k3", spec("kimi_k3", "kimi_k3"),
     "<|open|>think<|sep|>Weather first.<|close|>think<|sep|><|open|>response<|sep|>On it.<|close|>response<|sep|>"
     "<|open|>tools<|sep|>" + K3_CALL + "<|close|>tools<|sep|>"),
    ("kimi-k3-escaped-key", spec("kimi_k3", tools=[K3_TOOL]),
     '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a&quot;b" type="object"<|sep|>'
     '{"x": null}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'),
    # <invoke name=…> / <parameter name=…> relatives
    ("dots", spec("dots"), "Checking.\n<dots_function_call>\n<invoke name=\"get_weather\">\n"
                           "<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">2</parameter>\n"
                           "</invoke>\n</dots_function_call>"),
    ("minicpm5", spec("minicpm5"), "<function name=\"search\"><param name=\"query\">x y</param>"
                                   "<param name=\"limit\">1.5</param></function>"),
    ("muse", spec("muse", "muse"),
     "<|start|>assistant to=self<|message|>Look it up.<|eom|><|start|>assistant to=commentary<|message|>One sec."
     "<|eom|><|start|>assistant to=web.search<|message|><atem:function_calls>\n<atem:invoke name=\"search\">\n"
     "<atem:parameter name=\"query\">café</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>"),
    ("muse-quoted-call", spec("muse", "muse"),
     " to=self<|message|>Maybe <atem:invoke name=\"noop\"></atem:invoke>?<|eom|><|start|>assistant to=user"
     "<|message|>Write <atem:function_calls><atem:invoke name=\"noop\"></atem:invoke></atem:function_calls>.<|eot|>"),
    ("muse-developer-dropped", spec("muse", "muse"),
     "<|start|>assistant to=developer<|message|>internal<|eom|><|start|>assistant to=user<|message|>Hi.<|eot|>"),
    ("step3", spec("step3", "step3", thinking=True),
     "Plan.</think>\n<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"get_weather\">"
     "<steptml:parameter name=\"city\">Paris</steptml:parameter><steptml:parameter name=\"metric\">true"
     "</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>"),
    # <arg_key>/<arg_value> relatives
    ("hy-v3", spec("hy_v3"), "<tool_calls><tool_call>get_weather<tool_sep><arg_key>city</arg_key>"
                             "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>5</arg_value>"
                             "</tool_call></tool_calls>"),
    ("k2-horizon", spec("k2_horizon", "k2_horizon", thinking=True),
     "think</ifm|think><ifm|tool_calls><ifm|tool_call>search<ifm|arg_key>query</ifm|arg_key>"
     "<ifm|arg_value>q</ifm|arg_value><ifm|arg_key>limit</ifm|arg_key><ifm|arg_value>3</ifm|arg_value>"
     "</ifm|tool_call></ifm|tool_calls>"),
    ("k2-horizon-typed", spec("k2_horizon", tool_call_format="xml_typed"),
     "<ifm|tool_calls><ifm|tool_call>search<ifm|arg_key>query</ifm|arg_key><ifm|arg_type>string</ifm|arg_type>"
     "<ifm|arg_value>q</ifm|arg_value></ifm|tool_call></ifm|tool_calls>"),
    ("ling3-glm", spec("ling3", "ling3"),
     "<think>hm</think><tool_call>noop</tool_call>"),
    ("poolside-glm", spec("poolside_v1", "poolside_v1", thinking=False),
     "<tool_call>get_weather<arg_key>days</arg_key><arg_value>7</arg_value></tool_call>"),
    # Qwen3 XML relatives
    ("mimo", spec("mimo", "mimo", thinking=True),
     "Think.</think>\n<tool_call>\n<function=search>\n<parameter=query>\nkeep\n</parameter>\n</function>\n</tool_call>"),
    ("step3p5", spec("step3p5", "step3p5", thinking=True),
     "Reason.\n</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
     "</function>\n</tool_call>"),
    ("nemotron-v3-reasoning", spec("hermes", "nemotron_v3", thinking=True), "Reasoning here.\n\n</think>\nAnswer."),
    # JSON envelopes and lists
    ("ernie45", spec("ernie45", "ernie45", thinking=True),
     'Thoughts</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'),
    ("gigachat3", spec("gigachat3"), 'I will call it.<|function_call|>{"name": "search", "arguments": {"query": "x"}}'),
    ("inkling", spec("inkling", "inkling"),
     "<|message_model|><|content_thinking|>why<|end_message|><|message_model|><|content_text|>Calling.<|end_message|>"
     '<|message_model|><|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": "Lima"}}<|end_message|>'),
    ("cohere4", spec("cohere_command4", "cohere_command4"),
     "<|START_THINKING|>Use the tool.<|END_THINKING|><|START_RESPONSE|>Sure.<|END_RESPONSE|><|START_ACTION|>[\n"
     '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},\n'
     '    {"tool_call_id": "1", "tool_name": "noop", "parameters": {}}\n]<|END_ACTION|>'),
    ("cohere3-text-only", spec("cohere_command3", "cohere_command3"),
     "<|START_RESPONSE|>Plain answer.<|END_RESPONSE|>"),
    ("plamo3", spec("plamo3", "plamo3", thinking=True),
     "Think." + PLAMO("end_think") + PLAMO("begin_tool_requests")
     + plamo_call("get_weather", '{"city": "Kyoto"}') + plamo_call("noop", "{}") + PLAMO("end_tool_requests")),
    ("apertus", spec("apertus"), 'Calling. <|tools_prefix|>[{"get_weather": {"city": "Paris"}}, {"rm_rf": {}}, '
                                 '{"noop": {}}]<|tools_suffix|>'),
    ("apertus-not-calls", spec("apertus"), "<|tools_prefix|>[1, 2]<|tools_suffix|> tail"),
    # Python-call bodies
    ("lfm2", spec("lfm2"), '<|tool_call_start|>[get_weather(city="Paris", days=2)]<|tool_call_end|>Checking now.'),
    ("lfm2-cut", spec("lfm2"), '<|tool_call_start|>[get_weather(city="Par'),
    ("olmo3", spec("olmo3", "olmo3", thinking=True),
     'Plan.</think><function_calls>get_weather(city="Paris", metric=true)\nsearch(query="x", filters=null)'
     "</function_calls>"),
    ("olmo3-prose", spec("olmo3"), "<function_calls>not a call at all</function_calls> ok"),
    # Gemma key:value bodies
    ("gemma4", spec("gemma4", "gemma4"),
     '<|channel>thought\nNeed weather.<channel|>Sure.<|tool_call>call:get_weather{city:<|"|>Paris, {FR}<|"|>,'
     'days:3,metric:true}<tool_call|>'),
    ("gemma4-nested", spec("gemma4"),
     '<|tool_call>call:search{query:<|"|>a:b<|"|>,filters:{tags:[<|"|>x<|"|>,2],deep:{k:null}},limit:2.5}<tool_call|>'
     '<|tool_call>call:noop{}<tool_call|>'),
    ("gemma4-bare-opener", spec("gemma4"), '<|tool_call>:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>'),
    ("gemma4-cut", spec("gemma4"), '<|tool_call>call:get_weather{city:<|"|>Par'),
    ('gemma4-blank-in-key', spec('gemma4'), '<|tool_call>call:search{que ry :<|"|>x<|"|>, lim it:2}<tool_call|>'),
    ('gemma4-mismatched-closer', spec('gemma4'), '<|tool_call>call:search{query:[},limit:1}<tool_call|>'),
    # issue 40: streamed string values with quotes, backslashes, newlines, braces; cuts in nested and bare values
    ('gemma4-streamed', spec('gemma4'), '<|tool_call>call:search{query:<|"|>say "hi", then \\ and\nnewline } ,<|"|>,filters:{tags:[<|"|>a]b<|"|>,1],k:<|"|>{x}<|"|>},limit:2}<tool_call|>'),
    ('gemma4-cut-nested', spec('gemma4'), '<|tool_call>call:search{query:<|"|>q<|"|>,filters:{tags:[<|"|>a'),
    ('gemma4-cut-bare', spec('gemma4'), '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:1'),
    ('functiongemma-streamed', spec('functiongemma'), '<start_function_call>call:search{query:<escape>x, y}<escape>,limit:1.5}<end_function_call>'),
    ("functiongemma", spec("functiongemma"),
     "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:2}<end_function_call>"),
    # MiniMax M3 nested elements
    ("minimax-m3", spec("minimax_m3", "minimax_m3", thinking=True, thinking_mode="enabled"),
     f"Plan</mm:think>\n{MM3}<tool_call>\n{MM3}<invoke name=\"search\">\n{MM3}<query>hi</q>{MM3}</query>\n"
     f"{MM3}<filters>{MM3}<tags>{MM3}<item>a{MM3}</item>{MM3}</tags>{MM3}</filters>\n{MM3}<limit>5{MM3}</limit>\n"
     f"{MM3}</invoke>\n{MM3}</tool_call>"),
    ("minimax-m3-cut", spec("minimax_m3"), f"{MM3}<tool_call>{MM3}<invoke name=\"noop\">{MM3}<a>1"),
    # reasoning-only rows
    ("gemma4-reasoning-only", spec(None, "gemma4"), "<|channel>thought\nhmm<channel|>Answer."),
    ("kimi-k3-reasoning", spec(None, "kimi_k3"), "<|open|>think<|sep|>r<|close|>think<|sep|>c"),
    ("minimax-m3-reasoning", spec(None, "minimax_m3"), "<mm:think>plan</mm:think>Done."),
    ("plamo3-reasoning", spec(None, "plamo3", thinking=True), "Thinking" + PLAMO("end_think") + "Answer"),
    ("k2-horizon-fast", spec(None, "k2_horizon", thinking=True, reasoning_effort="medium"),
     "<ifm|think_fast>quick</ifm|think_fast>Done"),
    ("hunyuan-a13b", spec("hunyuan_a13b", "hunyuan_a13b"), "<think>\nx\n</think>\n<answer>\ny\n</answer>"),
    ("hy-v3-effort", spec(None, "hy_v3", thinking=True, reasoning_effort="high"), "r</think>c"),
    ("hy-v3-no-effort", spec(None, "hy_v3"), "r</think>c"),
    ("hy-v3-no-think", spec(None, "hy_v3", reasoning_effort="no_think"), "r</think>c"),
    ("dsml-v4-effort-none", spec("deepseek_v4", "deepseek_v4", reasoning_effort="none"),
     "Direct." + dsml("tool_calls", dsml_invoke("noop"))),
    ("hy-v4-reasoning", spec("hy_v4", "hy_v4", thinking=True),
     "r</think><tool_calls><tool_call>noop<tool_sep></tool_call></tool_calls>"),
    ("granite-thinking", spec(None, "granite_thinking_parser", thinking=True), "r\n</think>\nc"),
    ("minicpmv", spec(None, "minicpmv"), "<think>r</think>c"),
    ("cohere-reasoning", spec(None, "cohere_command4"), "<|START_THINKING|>r<|END_THINKING|>c"),
    ("ernie45-reasoning", spec("ernie45", "ernie45", thinking=True), "r</think>\n\n<response>\nc\n</response>"),
    ("muse-glimmer", spec(None, "muse_glimmer"), "<|start|>assistant to=self<|message|>r<|eom|>c"),
    # hf: the checkpoint's response_template
    ("hf-qwen", rt(thinking=True),
     'Plan.\n</think>\n\nCalling.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}'
     '\n</tool_call>\n<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>'),
    ("hf-text", rt(), "<think>r</think>  Just text.  "),
    ("hf-bad-json", rt(), 'A <tool_call>{"name": "search", oops}</tool_call> B'),
    ("hf-unknown-tool", rt(), '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'),
    ("hf-cut", rt(), '<tool_call>{"name": "search", "arguments": {"query": "x'),
    ("hf-tools-off", rt(choice="none"), '<tool_call>{"name": "noop", "arguments": {}}</tool_call>'),
    ("hf-pythonic", rt(reasoning=None, template=RT_PYTHONIC),
     ' Sure <|tool_call_start|>[get_weather(city="Paris", metric=true), noop()]<|tool_call_end|> done'),
    ("beam-as-hf", rt("beam", "beam"), "<think>x</think>y"),
    ("step5-text-before", spec("step5"),
     "Let me look.\n\n<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>"),
    ("step3p5-text-after", spec("step3p5"),
     "<tool_call>\n<function=noop>\n</function>\n</tool_call>\nDone."),
    ("ling3-text", spec("ling3", "ling3", thinking=True), "Think.</think>Answer only."),
    ("gigachat3-message-sep", spec("gigachat3"),
     'Sure.<|message_sep|>function call<|role_sep|>\n{"name": "noop", "arguments": {}}'),
    ("inkling-named-header", spec("inkling"),
     '<|message_model|>get_weather<|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": "Oslo"}}'
     "<|end_message|><|message_model|><|content_invoke_tool_text|>raw call text<|end_message|>"),
    # a label is a name: text with blanks after <|message_model|> stays content
    ("inkling-label-not-a-name", spec("inkling", "inkling"),
     "<|message_model|><|content_thinking|>hm<|end_message|>Hi <|message_model|>not a name<|content_text|>there"),
    ("hf-unknown-in-list", rt(reasoning=None, template=RT_PYTHONIC),
     "<|tool_call_start|>[rm_rf(), noop()]<|tool_call_end|>"),
    ("olmo3-unknown-in-list", spec("olmo3"), "<function_calls>rm_rf()\nnoop()</function_calls>"),
    # more of each framing, for the comparison with vLLM 0.33's own parsers
    ("dsml-v4-two", spec("deepseek_v4", "deepseek_v4", thinking=True),
     "Two lookups.</think>" + dsml("tool_calls", dsml_invoke("get_weather", ("city", "true", "東京")),
                                   dsml_invoke("noop"))),
    ("kimi-k3-two", spec("kimi_k3", "kimi_k3", enable_thinking=False),
     "<|open|>tools<|sep|>" + K3_CALL + '<|open|>call tool="noop" index="2"<|sep|><|close|>call<|sep|>'
     "<|close|>tools<|sep|>"),
    ("dots-two", spec("dots"), "<dots_function_call>\n<invoke name=\"noop\">\n</invoke>\n"
                               "<invoke name=\"search\">\n<parameter name=\"query\">a\nb</parameter>\n</invoke>\n"
                               "</dots_function_call>"),
    ("step3-two", spec("step3"),
     "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"noop\"></steptml:invoke>"
     "<｜tool_call_end｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"search\">"
     "<steptml:parameter name=\"limit\">4</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>"),
    ("hy-v3-two", spec("hy_v3"), "Sure.<tool_calls><tool_call>noop<tool_sep></tool_call><tool_call>search<tool_sep>"
                                 "<arg_key>query</arg_key><arg_value>ü</arg_value></tool_call></tool_calls>"),
    ("ernie45-two", spec("ernie45"), '<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>\n'
                                     '<tool_call>\n{"name": "search", "arguments": {"limit": 1}}\n</tool_call>'),
    ("inkling-two", spec("inkling"),
     '<|message_model|><|content_invoke_tool_json|>{"name": "noop", "args": {}}<|end_message|>'
     '<|message_model|><|content_invoke_tool_json|>{"name": "search", "args": {"query": "q"}}<|end_message|>'),
    ("plamo3-text", spec("plamo3", "plamo3", thinking=True), "Hm." + PLAMO("end_think") + "Just an answer."),
    ("lfm2-two-text-before", spec("lfm2"),
     'Let me check.<|tool_call_start|>[get_weather(city="Paris"), search(query="x")]<|tool_call_end|>'),
    ("olmo3-one", spec("olmo3"), '<function_calls>search(query="x", limit=2)</function_calls>'),
    ("gemma4-text-after", spec("gemma4"), '<|tool_call>call:noop{}<tool_call|>All done.'),
    ("functiongemma-two", spec("functiongemma"),
     "<start_function_call>call:noop{}<end_function_call><start_function_call>call:search{query:<escape>a,b<escape>}"
     "<end_function_call>"),
    ("minimax-m3-two", spec("minimax_m3"),
     f"{MM3}<tool_call>{MM3}<invoke name=\"noop\">{MM3}</invoke>{MM3}<invoke name=\"get_weather\">"
     f"{MM3}<city>Rome{MM3}</city>{MM3}<days>2{MM3}</days>{MM3}</invoke>{MM3}</tool_call>"),
    ("apertus-one", spec("apertus"), '<|tools_prefix|>[{"search": {"query": "x", "limit": 3}}]<|tools_suffix|>'),
    ("gigachat3-role-sep", spec("gigachat3"),
     'function call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}'),
    ("minicpm5-two", spec("minicpm5"), "<function name=\"noop\"></function><function name=\"get_weather\">"
                                       "<param name=\"days\">3</param></function>"),
    ("mimo-two", spec("mimo"), "<tool_call>\n<function=noop>\n</function>\n</tool_call>\n<tool_call>\n"
                               "<function=search>\n<parameter=limit>\n2\n</parameter>\n</function>\n</tool_call>"),
    ("k2-horizon-json", spec("k2_horizon", "k2_horizon", thinking=True, tool_call_format="json"),
     '<ifm|think>plan</ifm|think><ifm|tool_calls><ifm|tool_call>{"name": "search", "arguments": {"query": "q", '
     '"limit": 3}}</ifm|tool_call><ifm|tool_call>{"name": "noop", "arguments": {}}</ifm|tool_call></ifm|tool_calls>'),
    ("k2-horizon-json-cut", spec("k2_horizon", tool_call_format="json"),
     '<ifm|tool_calls><ifm|tool_call>{"name": "get_weather", "arguments": {"city": "Li'),
    # read-whole lists cut off: Apertus as the JSON lists, OLMo 3 as the Python call lists
    ("apertus-cut", spec("apertus"),
     '<|tools_prefix|>[{"noop": {}}, {"get_weather": {"city": "Par'),
    ("olmo3-cut", spec("olmo3"), '<function_calls>noop()\nget_weather(city="Par'),
    ("k2-horizon-two", spec("k2_horizon"),
     "<ifm|tool_calls><ifm|tool_call>noop</ifm|tool_call><ifm|tool_call>get_weather<ifm|arg_key>city</ifm|arg_key>"
     "<ifm|arg_value>Lima</ifm|arg_value></ifm|tool_call></ifm|tool_calls>"),
    # A call written inside an open think block (SUPPORTED.md: per family, from its template):
    # Gemma 4, DeepSeek V4 and Ling 3 write calls after the closed block, so it is reasoning;
    # PLaMo 3's tool-requests block ends its reasoning.
    ("gemma4-call-in-thought", spec("gemma4", "gemma4"),
     '<|channel>thought\nMaybe <|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|> no.<channel|>Answer.'),
    ("dsml-v4-call-in-thinking", spec("deepseek_v4", "deepseek_v4", thinking=True),
     "Maybe:\n" + dsml("tool_calls", dsml_invoke("get_weather", *PARIS)) + "no.</think>Answer."),
    ("ling3-call-in-think", spec("ling3", "ling3"),
     "<think>maybe <tool_call>noop</tool_call> no</think>Answer."),
    ("plamo3-call-in-thinking", spec("plamo3", "plamo3", thinking=True),
     "Think." + PLAMO("begin_tool_requests") + plamo_call("noop", "{}") + PLAMO("end_tool_requests")),
    *_issue22(spec),
    ]


def _issue22(spec) -> list:
    """Issue 22: each family's real output as the model writes it (one group per cause)."""
    k3 = ("<|open|>think<|sep|>Plan.<|close|>think<|sep|><|open|>response<|sep|>Hi.<|close|>response<|sep|>"
          '<|open|>tools<|sep|><|open|>call tool="noop" index="1"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'
          "<|close|>message<|sep|>")
    typed = [spec("hy_v4", tools=[TYPED_TOOL])]
    return [
    # 1. HY V4: the Hy4 :opensource spelling and the unsuffixed one, no <tool_sep>; typed values
    ("hy-v4-opensource", spec("hy_v4", "hy_v4", thinking=True),
     f"Plan.</think{HY4}>Sure.<tool_calls{HY4}>" + hy4("get_weather", ("city", "Paris"), ("days", "3"))
     + hy4("noop") + f"</tool_calls{HY4}>"),
    ("hy-v4-unsuffixed", spec("hy_v4"),
     "<tool_calls>" + hy4("get_weather", ("city", "北京"), ("days", "x"), sfx="") + hy4("noop", sfx="") + "</tool_calls>"),
    ("hy-v4-typed", typed[0],
     f"<tool_calls{HY4}>" + hy4("typed", ("s", "Beijing"), ("i", "-7"), ("b", "True"), ("n", "1e3"), ("arr", '["a", "b"]'),
                               ("obj", '{"k": 1}'), ("union", "plain"), ("any_of", '["x"]'), ("one_of", "2.5"),
                               ("bad_int", "notanint"), ("alias_int", "7"), ("prefix_uint", "42"),
                               ("alias_list", "[1]")) + f"</tool_calls{HY4}>"),
    ("hy-v4-duplicate-key", spec("hy_v4"),
     f"<tool_calls{HY4}>" + hy4("get_weather", ("city", "Paris"), ("city", "Berlin")) + f"</tool_calls{HY4}>"),
    ("hy-v4-cut", spec("hy_v4"),
     f"<tool_calls{HY4}>" + hy4("get_weather", ("city", "Paris"))[:-len(f"</tool_call{HY4}>")]
     + f"<arg_key{HY4}>days</arg_key{HY4}><arg_value{HY4}>2"),
    # 2. response framing is the model's, whichever parser is active
    ("kimi-k3-reasoning-only-framing", spec(None, "kimi_k3", thinking=True), k3),
    ("kimi-k3-tool-choice-none", spec("kimi_k3", "kimi_k3", choice="none", thinking=True), k3),
    ("cohere4-reasoning-only-framing", spec(None, "cohere_command4", thinking=True),
     "<|START_THINKING|>Plan.<|END_THINKING|><|START_RESPONSE|>Hi.<|END_RESPONSE|>"),
    ("cohere3-tool-choice-none", spec("cohere_command3", "cohere_command3", choice="none"),
     "<|START_RESPONSE|>Hi.<|END_RESPONSE|>"),
    ("hunyuan-a13b-reasoning-only", spec(None, "hunyuan_a13b"), "<think>\nx\n</think>\n<answer>\ny\n</answer>"),
    # 3. PLaMo 3 ends its message with <|plamo:tag|>
    ("plamo3-tag-ends-message", spec(None, "plamo3", thinking=True),
     "Plan." + PLAMO("end_think") + "Answer.<|plamo:tag|>ignored"),
    ("plamo3-tag-with-tools", spec("plamo3", "plamo3", thinking=True),
     "Plan." + PLAMO("end_think") + "Answer.<|plamo:tag|>" + PLAMO("begin_tool_requests") + plamo_call("noop", "{}")),
    # 4. call bodies in a second syntax
    ("dsml-json-body", spec("deepseek_v32"),
     dsml("function_calls", f'<{DSML}invoke name="get_weather">\n{{"city": "Paris", "days": 3}}\n</{DSML}invoke>\n')),
    ("dsml-self-closing", spec("deepseek_v4"),
     dsml("tool_calls", f'<{DSML}invoke name="noop"/>\n', dsml_invoke("get_weather", ("city", "true", "Oslo")))),
    # issue 40: a JSON envelope after text in the section is text, whatever the chunking
    ('dots-text-before-json', spec('dots'), '<dots_function_call>note {"name": "noop", "arguments": {}}</dots_function_call> ok'),
    ("dots-json-envelope", spec("dots"),
     '<dots_function_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</dots_function_call>'),
    ("lfm2-json-list", spec("lfm2"),
     '<|tool_call_start|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
     '{"name": "noop", "arguments": {}}]<|tool_call_end|>Checking.'),
    ("muse-dotted-name", spec("muse", "muse", tools=[NS_TOOL]),
     '<|start|>assistant to=web.search<|message|><atem:function_calls>\n<atem:invoke name="web.search">\n'
     '<atem:parameter name="q">x</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>'),
    ("muse-doubled-bare-name", spec("muse", "muse"),
     '<|start|>assistant to=noop.noop<|message|><atem:function_calls>\n<atem:invoke name="noop.noop">\n'
     "</atem:invoke>\n</atem:function_calls><|eom|>"),
    # 5. schema typing: a oneOf branch chosen by its const discriminator; an enum member spelled 1.0
    ("oneof-discriminator", spec("qwen3_coder", tools=[ONEOF_TOOL]),
     "<tool_call>\n<function=set>\n<parameter=kind>\nlabel\n</parameter>\n<parameter=value>\n5\n</parameter>\n"
     "</function>\n</tool_call>"),
    ("oneof-discriminator-count", spec("qwen3_coder", tools=[ONEOF_TOOL]),
     "<tool_call>\n<function=set>\n<parameter=kind>\ncount\n</parameter>\n<parameter=value>\n5\n</parameter>\n"
     "</function>\n</tool_call>"),
    ("enum-number-spelling", spec("qwen3_coder", tools=[ENUM_TOOL]),
     "<tool_call>\n<function=mode>\n<parameter=level>\n1.0\n</parameter>\n</function>\n</tool_call>"),
    # 6. calls inside an open think block, per family (SUPPORTED.md)
    ("k2-horizon-call-in-think", spec("k2_horizon", "k2_horizon", thinking=True),
     "plan<ifm|tool_calls><ifm|tool_call>noop</ifm|tool_call></ifm|tool_calls>"),
    ("cohere4-skips-thinking", spec("cohere_command4", "cohere_command4", thinking=True),
     "<|START_TEXT|>Answer.<|END_TEXT|>"),
    ("cohere4-skips-thinking-action", spec("cohere_command4", "cohere_command4", thinking=True),
     '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "noop", "parameters": {}}]<|END_ACTION|>'),
    ("seed-oss-call-in-think", spec("seed_oss", "seed_oss"),
     "<seed:think>maybe <seed:tool_call>\n<function=noop>\n</function>\n</seed:tool_call> no</seed:think>Answer."),
    ("seed-oss-call-after-think", spec("seed_oss", "seed_oss"),
     "<seed:think>plan</seed:think><seed:tool_call>\n<function=noop>\n</function>\n</seed:tool_call>"),
    # 7. value bugs
    ("minicpm5-cdata", spec("minicpm5"),
     '<function name="search"><param name="query"><![CDATA[a <b> ]] c]]></param><param name="limit">2</param></function>'),
    ("minimax-m3-repeated", spec("minimax_m3"),
     f'{MM3}<tool_call>{MM3}<invoke name="search">{MM3}<filters>{MM3}<tag>a{MM3}</tag>{MM3}<tag>b{MM3}</tag>'
     f"{MM3}</filters>{MM3}<query>x{MM3}</query>{MM3}<query>y{MM3}</query>{MM3}</invoke>{MM3}</tool_call>"),
    ("olmo3-bad-sibling", spec("olmo3"), '<function_calls>noop()\nnot a call\nsearch(query="x")</function_calls>'),
    ("olmo3-infinity", spec("olmo3"), '<function_calls>search(limit=1e999)\nnoop()</function_calls>'),
    # 8. a call cut off by max_tokens inside its arguments is content, every family
    ("hermes-cut-in-arguments", spec("hermes"), '<tool_call>{"name": "get_weather", "arguments": {"city": "Par'),
    ("llama3-json-cut-in-arguments", spec("llama3_json"), '{"name": "get_weather", "parameters": {"city": "Par'),
    ("deepseek-v31-cut-in-arguments", spec("deepseek_v31"),
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Par"),
    ("openai-cut-in-arguments", spec("openai", "openai_gptoss"),
     '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Par'),
    ]

FAMILY_EXPECTED = {
    'dsml-v32': (None, 'Let me check.\n\n', [('get_weather', '{"city": "Paris", "days": 3}')]),
    'dsml-v32-two': (None, None, [('get_weather', '{"city": "Paris", "days": 3}'), ('search', '{"query": "a<b>c", "filters": {"k": [1, 2]}, "limit": "not json"}')]),
    'dsml-v4-thinking': ('Need the weather.', None, [('get_weather', '{"city": "Paris", "days": 3}')]),
    'dsml-v4-no-string-attr': (None, None, [('get_weather', '{"days": 4}')]),
    'dsml-v41': (None, 'Sure.', [('get_weather', '{"city": "Paris", "days": 3}')]),
    'dsml-cut': (None, None, [('get_weather', '{"city": "Paris"}')]),
    'dsml-unknown': (None, '<｜DSML｜function_calls>\n<｜DSML｜invoke name="rm_rf">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>', []),
    'kimi-k3': ('Weather first.', 'On it.', [('get_weather', '{"city": "Zürich \\"1\\"", "days": 2}')]),
    'kimi-k3-escaped-key': (None, None, [('f', '{"a\\"b": {"x": null}}')]),
    'dots-text-before-json': (None, '<dots_function_call>note {"name": "noop", "arguments": {}}</dots_function_call> ok', []),
    'dots': (None, 'Checking.\n', [('get_weather', '{"city": "Paris", "days": 2}')]),
    'minicpm5': (None, None, [('search', '{"query": "x y", "limit": 1.5}')]),
    'muse': ('Look it up.', 'One sec.', [('search', '{"query": "café"}')]),
    'step3': ('Plan.', None, [('get_weather', '{"city": "Paris", "metric": true}')]),
    'hy-v3': (None, None, [('get_weather', '{"city": "Paris", "days": 5}')]),
    'k2-horizon': ('think', None, [('search', '{"query": "q", "limit": 3}')]),
    'ling3-glm': ('hm', None, [('noop', '{}')]),
    'poolside-glm': (None, None, [('get_weather', '{"days": 7}')]),
    'mimo': ('Think.', None, [('search', '{"query": "\\nkeep\\n"}')]),
    'step3p5': ('Reason.', None, [('get_weather', '{"city": "Oslo"}')]),
    'nemotron-v3-reasoning': ('Reasoning here.', '\nAnswer.', []),
    'ernie45': ('Thoughts', None, [('get_weather', '{"city": "Rome"}')]),
    'gigachat3': (None, 'I will call it.', [('search', '{"query": "x"}')]),
    'inkling': ('why', 'Calling.', [('get_weather', '{"city": "Lima"}')]),
    'cohere4': ('Use the tool.', 'Sure.', [('get_weather', '{"city": "Paris"}'), ('noop', '{}')]),
    'cohere3-text-only': (None, 'Plain answer.', []),
    'plamo3': ('Think.', None, [('get_weather', '{"city": "Kyoto"}'), ('noop', '{}')]),
    'apertus': (None, 'Calling. ', [('get_weather', '{"city": "Paris"}'), ('rm_rf', '{}'), ('noop', '{}')]),
    'apertus-not-calls': (None, '<|tools_prefix|>[1, 2]<|tools_suffix|> tail', []),
    'lfm2': (None, 'Checking now.', [('get_weather', '{"city": "Paris", "days": 2}')]),
    'lfm2-cut': (None, None, [('get_weather', '{"city": "Par')]),
    'olmo3': ('Plan.', None, [('get_weather', '{"city": "Paris", "metric": true}'), ('search', '{"query": "x", "filters": null}')]),
    'olmo3-prose': (None, '<function_calls>not a call at all</function_calls> ok', []),
    'gemma4': ('Need weather.', 'Sure.', [('get_weather', '{"city": "Paris, {FR}", "days": 3, "metric": true}')]),
    'gemma4-nested': (None, None, [('search', '{"query": "a:b", "filters": {"tags": ["x", "2"], "deep": {"k": "null"}}, "limit": 2.5}'), ('noop', '{}')]),
    'gemma4-streamed': (None, None, [('search', '{"query": "say \\"hi\\", then \\\\ and\\nnewline } ,", "filters": {"tags": ["a]b", "1"], "k": "{x}"}, "limit": 2}')]),
    'gemma4-cut-nested': (None, None, [('search', '{"query": "q"}')]),
    'gemma4-cut-bare': (None, None, [('get_weather', '{"city": "Oslo"}')]),
    'functiongemma-streamed': (None, None, [('search', '{"query": "x, y}", "limit": 1.5}')]),
    'gemma4-blank-in-key': (None, None, [('search', '{"que ry": "x", "lim it": "2"}')]),
    'gemma4-mismatched-closer': (None, None, [('search', '{"query": [], "limit": 1}')]),
    'gemma4-cut': (None, None, [('get_weather', '{"city": "Par')]),
    'functiongemma': (None, None, [('get_weather', '{"city": "Paris", "days": 2}')]),
    'minimax-m3': ('Plan', None, [('search', '{"query": "hi</q>", "filters": {"tags": {"item": "a"}}, "limit": 5}')]),
    'minimax-m3-cut': (None, None, [('noop', '{}')]),
    'gemma4-reasoning-only': ('hmm', 'Answer.', []),
    'kimi-k3-reasoning': ('r', 'c', []),
    'minimax-m3-reasoning': ('plan', 'Done.', []),
    'plamo3-reasoning': ('Thinking', 'Answer', []),
    'k2-horizon-fast': ('quick', 'Done', []),
    'hunyuan-a13b': ('x', 'y', []),
    'hy-v3-effort': ('r', 'c', []),
    'hy-v3-no-effort': (None, 'r</think>c', []),
    'hy-v4-reasoning': ('r', None, [('noop', '{}')]),
    'k2-horizon-typed': (None, None, [('search', '{"query": "q"}')]),
    'granite-thinking': ('r', 'c', []),
    'minicpmv': ('r', 'c', []),
    'cohere-reasoning': ('r', 'c', []),
    'ernie45-reasoning': ('r', '\nc\n', []),
    'muse-glimmer': ('r', 'c', []),
    'hf-qwen': ('Plan.\n', '\n\nCalling.\n\n', [('get_weather', '{"city": "Paris", "days": 3}'), ('noop', '{}')]),
    'hf-text': ('r', '  Just text.  ', []),
    'hf-bad-json': (None, 'A <tool_call>{"name": "search", oops}</tool_call> B', []),
    'hf-unknown-tool': (None, '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', []),
    'hf-cut': (None, '<tool_call>{"name": "search", "arguments": {"query": "x', []),
    'hf-tools-off': (None, '<tool_call>{"name": "noop", "arguments": {}}</tool_call>', []),
    'hf-pythonic': (None, ' Sure  done', [('get_weather', '{"city": "Paris", "metric": true}'), ('noop', '{}')]),
    'beam-as-hf': ('x', 'y', []),
    'dsml-v4-two': ('Two lookups.', None, [('get_weather', '{"city": "東京"}'), ('noop', '{}')]),
    'kimi-k3-two': (None, None, [('get_weather', '{"city": "Zürich \\"1\\"", "days": 2}'), ('noop', '{}')]),
    'dots-two': (None, None, [('noop', '{}'), ('search', '{"query": "a\\nb"}')]),
    'step3-two': (None, None, [('noop', '{}'), ('search', '{"limit": 4}')]),
    'hy-v3-two': (None, 'Sure.', [('noop', '{}'), ('search', '{"query": "ü"}')]),
    'ernie45-two': (None, None, [('noop', '{}'), ('search', '{"limit": 1}')]),
    'inkling-two': (None, None, [('noop', '{}'), ('search', '{"query": "q"}')]),
    'plamo3-text': ('Hm.', 'Just an answer.', []),
    'lfm2-two-text-before': (None, 'Let me check.', [('get_weather', '{"city": "Paris"}'), ('search', '{"query": "x"}')]),
    'olmo3-one': (None, None, [('search', '{"query": "x", "limit": 2}')]),
    'gemma4-text-after': (None, 'All done.', [('noop', '{}')]),
    'functiongemma-two': (None, None, [('noop', '{}'), ('search', '{"query": "a,b"}')]),
    'minimax-m3-two': (None, None, [('noop', '{}'), ('get_weather', '{"city": "Rome", "days": 2}')]),
    'apertus-one': (None, None, [('search', '{"query": "x", "limit": 3}')]),
    'gigachat3-role-sep': (None, None, [('get_weather', '{"city": "Oslo"}')]),
    'minicpm5-two': (None, None, [('noop', '{}'), ('get_weather', '{"days": 3}')]),
    'mimo-two': (None, None, [('noop', '{}'), ('search', '{"limit": 2}')]),
    'k2-horizon-two': (None, None, [('noop', '{}'), ('get_weather', '{"city": "Lima"}')]),
    'apertus-cut': (None, '{"get_weather": {"city": "Par', [('noop', '{}')]),
    'olmo3-cut': (None, 'get_weather(city="Par', [('noop', '{}')]),
    'k2-horizon-json': ('plan', None, [('search', '{"query": "q", "limit": 3}'), ('noop', '{}')]),
    'k2-horizon-json-cut': (None, None, [('get_weather', '{"city": "Li')]),
    'muse-quoted-call': ('Maybe <atem:invoke name="noop"></atem:invoke>?', 'Write <atem:function_calls><atem:invoke name="noop"></atem:invoke></atem:function_calls>.', []),
    'muse-developer-dropped': (None, 'Hi.', []),
    'hy-v3-no-think': (None, 'r</think>c', []),
    'dsml-v4-effort-none': (None, 'Direct.', [('noop', '{}')]),
    'gemma4-bare-opener': (None, None, [('get_weather', '{"city": "Oslo"}')]),
    'hf-unknown-in-list': (None, None, [('rm_rf', '{}'), ('noop', '{}')]),
    'olmo3-unknown-in-list': (None, None, [('rm_rf', '{}'), ('noop', '{}')]),
    'step5-text-before': (None, 'Let me look.\n\n', [('search', '{"query": "x"}')]),
    'step3p5-text-after': (None, '\nDone.', [('noop', '{}')]),
    'ling3-text': ('Think.', 'Answer only.', []),
    'gigachat3-message-sep': (None, 'Sure.', [('noop', '{}')]),
    'inkling-named-header': (None, 'raw call text', [('get_weather', '{"city": "Oslo"}')]),
    'inkling-label-not-a-name': ('hm', 'Hi not a namethere', []),
    'gemma4-call-in-thought': ('Maybe <|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|> no.',
                               'Answer.', []),
    'dsml-v4-call-in-thinking': ('Maybe:\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                                 '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                                 '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
                                 '</｜DSML｜invoke>\n</｜DSML｜tool_calls>no.', 'Answer.', []),
    'ling3-call-in-think': ('maybe <tool_call>noop</tool_call> no', 'Answer.', []),
    'plamo3-call-in-thinking': ('Think.', None, [('noop', '{}')]),
    # issue 22
    'hy-v4-opensource': ('Plan.', 'Sure.', [('get_weather', '{"city": "Paris", "days": 3}'), ('noop', '{}')]),
    'hy-v4-unsuffixed': (None, None, [('get_weather', '{"city": "北京", "days": "x"}'), ('noop', '{}')]),
    'hy-v4-typed': (None, None, [('typed', '{"s": "Beijing", "i": -7, "b": true, "n": 1000.0, "arr": ["a", "b"], "obj": {"k": 1}, "union": "plain", "any_of": ["x"], "one_of": 2.5, "bad_int": "notanint", "alias_int": 7, "prefix_uint": 42, "alias_list": [1]}')]),
    'hy-v4-duplicate-key': (None, None, [('get_weather', '{"city": "Paris", "city": "Berlin"}')]),
    'hy-v4-cut': (None, None, [('get_weather', '{"city": "Paris", "days": 2')]),
    'kimi-k3-reasoning-only-framing': ('Plan.', 'Hi.', []),
    'kimi-k3-tool-choice-none': ('Plan.', 'Hi.', []),
    'cohere4-reasoning-only-framing': ('Plan.', 'Hi.', []),
    'cohere3-tool-choice-none': (None, 'Hi.', []),
    'hunyuan-a13b-reasoning-only': ('x', 'y', []),
    'plamo3-tag-ends-message': ('Plan.', 'Answer.', []),
    'plamo3-tag-with-tools': ('Plan.', 'Answer.', []),
    'dsml-json-body': (None, None, [('get_weather', '{"city": "Paris", "days": 3}')]),
    'dsml-self-closing': (None, None, [('noop', '{}'), ('get_weather', '{"city": "Oslo"}')]),
    'dots-json-envelope': (None, None, [('get_weather', '{"city": "Paris"}')]),
    'lfm2-json-list': (None, 'Checking.', [('get_weather', '{"city": "Paris"}'), ('noop', '{}')]),
    'muse-dotted-name': (None, None, [('web.search', '{"q": "x"}')]),
    'muse-doubled-bare-name': (None, None, [('noop', '{}')]),
    'oneof-discriminator': (None, None, [('set', '{"kind": "label", "value": "5"}')]),
    'oneof-discriminator-count': (None, None, [('set', '{"kind": "count", "value": 5}')]),
    'enum-number-spelling': (None, None, [('mode', '{"level": 1}')]),
    'k2-horizon-call-in-think': ('plan', None, [('noop', '{}')]),
    'cohere4-skips-thinking': (None, 'Answer.', []),
    'cohere4-skips-thinking-action': (None, None, [('noop', '{}')]),
    'seed-oss-call-in-think': ('maybe <seed:tool_call>\n<function=noop>\n</function>\n</seed:tool_call> no', 'Answer.', []),
    'seed-oss-call-after-think': ('plan', None, [('noop', '{}')]),
    'minicpm5-cdata': (None, None, [('search', '{"query": "a <b> ]] c", "limit": 2}')]),
    'minimax-m3-repeated': (None, None, [('search', '{"filters": {"tag": ["a", "b"]}, "query": ["x", "y"]}')]),
    'olmo3-bad-sibling': (None, 'not a call\n', [('noop', '{}'), ('search', '{"query": "x"}')]),
    'olmo3-infinity': (None, 'search(limit=1e999)\n', [('noop', '{}')]),
    'hermes-cut-in-arguments': (None, None, [('get_weather', '{"city": "Par')]),
    'llama3-json-cut-in-arguments': (None, None, [('get_weather', '{"city": "Par')]),
    'deepseek-v31-cut-in-arguments': (None, None, [('get_weather', '{"city": "Par')]),
    'openai-cut-in-arguments': (None, None, [('get_weather', '{"city": "Par')]),
}
