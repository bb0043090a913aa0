"""What to do with one request's output, decided once from the request and the server config.

`Plan` is frozen and holds no per-choice progress; `ChoiceStream` (choice.py) applies it.
Rules follow wire brief §3.1 (decode parameters), §3.2 steps 2, 4, 6, 7 and §3.5, with
two deliberate departures: stop strings are applied while streaming (vLLM: 400), and
``prompt_token_ids`` is the one prompt source for both decoding and the parser (§8 item 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config.serve import ServeConfig
from ..errors import bad_request
from .. import policy
from ..policy import model_skips_special_tokens, skip_special_tokens
from ..wire.derender import ChatRequestFields, ParseContext, ParseSource
from ..wire.generate import SamplingParams
from ..wire.openai import stop_list
from ..wire.limits import check_stop_limits

MAX_CHOICES = 16384  # vLLM's VLLM_MAX_N_SEQUENCES


@dataclass(frozen=True)
class Plan:
    """Per-request derender decisions.

    ``top_logprobs``: how many engine candidates to keep per position (None = all).
    ``reasoning``/``tool``: parser registry names (both None = no parser). ``named_tool``:
    ``tool_choice`` names one function (finish_reason stays ``stop``, content ``""``).
    """

    kind: str                                  # "chat" | "completion"
    skip_special_tokens: bool = True
    stops: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    eos_token_ids: frozenset[int] = frozenset()
    tokenizer_eos_id: int | None = None
    ignore_eos: bool = False
    reasoning: str | None = None
    tool: str | None = None
    tools: list[dict] | None = None
    tool_choice: Any = policy.effective_tool_choice(None, None)  # the default of a request without tools
    chat_template_kwargs: dict = field(default_factory=dict)
    include_reasoning: bool = True
    parallel_tool_calls: bool = True
    named_tool: bool = False
    starts_in_reasoning: bool | None = None    # from render's parse_context; None: judge from the prompt ids
    response_template: dict | None = None     # the checkpoint's, for the hf/beam parsers
    top_logprobs: int | None = None
    return_token_ids: bool = False
    n: int | None = None                       # choices the body says were asked for (indexes 0..n-1); None: not said

    @property
    def has_parser(self) -> bool:
        return self.reasoning is not None or self.tool is not None

    @property
    def keeps_logprobs(self) -> bool:
        """§3.2 step 8: logprobs are dropped with a parser and ``include_reasoning:false``."""
        return not (self.has_parser and not self.include_reasoning)


def _stop_list(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = tuple(stop_list(stop))
    if any(not s for s in stops):
        raise bad_request("Stop strings must be non-empty strings.", param="stop")
    try:
        check_stop_limits(stops)
    except ValueError as exc:
        raise bad_request(str(exc), param="stop") from None
    return stops


def chat_plan(bundle: Any, config: ServeConfig, chat: ChatRequestFields | None, ctx: ParseContext | None,
              sampling: SamplingParams | None) -> Plan:
    """Plan for chat derender.

    Parser source: ``chat_request`` (vLLM) or the slim ``parse_context``; when a parser is
    configured one of them is required (400), as in vLLM. Stop/EOS/logprob settings come
    from ``chat_request``, else from ``sampling_params``.

    Raises:
        OpenAIError: 400 for a missing parse source, a named tool not in ``tools``, bad stops.
    """
    src: ParseSource | None = chat if chat is not None else ctx
    if policy.parser_configured(config) and src is None:
        raise bad_request("This server runs a reasoning/tool-call parser: send `chat_request` "
                          "(or the slim `parse_context` from render) with every derender call.",
                          param="chat_request")
    tools = (src.tools if src is not None else None) or None
    tool_choice = policy.effective_tool_choice(src.tool_choice if src is not None else None, tools)
    try:
        policy.check_tool_choice(tool_choice, tools, requires_tools=False)
    except ValueError as exc:
        raise bad_request(f"{exc}.", param="tool_choice") from None
    if chat is not None:
        kwargs = policy.template_kwargs(config, chat.chat_template_kwargs or {}, chat.reasoning_effort)
    else:
        kwargs = dict((ctx.chat_template_kwargs if ctx is not None else None) or {})

    reasoning = config.reasoning_parser
    tool = policy.tool_parser_for(config, tool_choice, tools)
    has_parser = src is not None and (reasoning is not None or tool is not None)

    s = chat if chat is not None else sampling
    skip = skip_special_tokens(s.skip_special_tokens if s is not None else None, has_parser,
                               default=model_skips_special_tokens(bundle))
    top: int | None = None
    if chat is not None and chat.logprobs:
        top = None if chat.top_logprobs == -1 or chat.logprob_token_ids else (chat.top_logprobs or 0)
    return Plan(
        kind="chat",
        skip_special_tokens=skip,
        **_stop_fields(bundle, s),
        reasoning=reasoning if has_parser else None,
        tool=tool if has_parser else None,
        tools=tools,
        tool_choice=tool_choice,
        chat_template_kwargs=kwargs,
        include_reasoning=src.include_reasoning if src is not None else True,
        parallel_tool_calls=src.parallel_tool_calls is not False if src is not None else True,
        named_tool=isinstance(tool_choice, dict),
        starts_in_reasoning=ctx.starts_in_reasoning if chat is None and ctx is not None else None,
        top_logprobs=top,
        return_token_ids=bool(chat.return_token_ids) if chat is not None else False,
        response_template=getattr(bundle, "response_template", None),
        n=_choice_count(chat, sampling),
    )


def completion_plan(bundle: Any, req: ChatRequestFields | None, sampling: SamplingParams | None) -> Plan:
    """Plan for completions derender: never a parser (§1.7); logprobs keep ``logprobs + 1``
    candidates (all for -1 or unset)."""
    s = req if req is not None else sampling
    skip = skip_special_tokens(s.skip_special_tokens if s is not None else None, parser_active=False,
                               default=model_skips_special_tokens(bundle))
    top = None
    if req is not None and isinstance(req.logprobs, int) and not isinstance(req.logprobs, bool) and req.logprobs >= 0:
        top = req.logprobs + 1
    return Plan(kind="completion", skip_special_tokens=skip, **_stop_fields(bundle, s), top_logprobs=top,
                return_token_ids=bool(req.return_token_ids) if req is not None else False,
                n=_choice_count(req, sampling))


def _choice_count(req: ChatRequestFields | None, sampling: SamplingParams | None) -> int | None:
    """The ``n`` the body states: the client request's, else the engine request's
    ``sampling_params.n``; None when it states neither (a router may send a partial client
    request: its engine choices are then taken as they come)."""
    if req is not None and req.n is not None:
        return req.n
    return sampling.n if sampling is not None and "n" in sampling.model_fields_set else None


def _stop_fields(bundle: Any, s: ChatRequestFields | SamplingParams | None) -> dict:
    eos_name = (getattr(bundle, "special_tokens", None) or {}).get("eos_token")
    tok_eos = bundle.tokenizer.token_to_id(eos_name) if eos_name else None
    return dict(
        stops=_stop_list(s.stop) if s is not None else (),
        include_stop_str_in_output=bool(s.include_stop_str_in_output) if s is not None else False,
        min_tokens=s.min_tokens if s is not None else 0,
        stop_token_ids=frozenset((s.stop_token_ids or []) if s is not None else []),
        eos_token_ids=frozenset(bundle.eos_token_ids or []),
        tokenizer_eos_id=tok_eos,
        ignore_eos=bool(s.ignore_eos) if s is not None else False,
    )
