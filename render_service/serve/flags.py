"""The flag table: every option of ``serve`` and ``drive`` (the `vllm launch render` form of
``serve`` included), the config field it fills, and its help; the one place argparse is built.

A row's default is its config field's (`ServeConfig`, `DriverConfig`), stated there once;
reading a parse back into a config is the same loop over the rows (`serve_config`,
`driver_config`), so a flag is added by adding a row (and its field). ``serve`` flag names follow
`vllm launch render` (wire brief §7) so operators can swap one for the other; vLLM's options
that no row defines are parsed too (`vllm_compat`), to be refused or named as ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from operator import not_
from typing import Any, Callable

from ..multimodal.defaults import DEFAULT_LIMIT_PER_PROMPT, HASH_ALGORITHMS
from .flag_types import (AlwaysOn, HelpFormatter, LoraModulesAction, Parser, context_length, json_list, json_object,
                         media_counts, port_type, positive, positive_float)

SERVE, DRIVE = "serve", "drive"
BOTH = (SERVE, DRIVE)
MEDIA = "media (vision-language models)"
VLLM = "vllm launch render compatibility"
TLS = "TLS (as uvicorn serves it; plain HTTP is then refused on the port)"
NOOP = "vllm launch render flags accepted without effect on a CPU render tier"
REFUSED = "vllm launch render flags refused unless given the value render-service serves"


@dataclass(frozen=True)
class Flag:
    """One command-line option.

    Attributes:
        names: its spellings, the canonical one first (a positional: its dest alone).
        help: the ``--help`` text; a ``{}`` in it is the field's default (drive's timeouts).
        field: the config field it fills (also its argparse dest), or None when start-up
            reads it from the parsed arguments itself (log level, hub token, …).
        commands: the subcommands that have it.
        driver: the field is `DriverConfig`'s (else `ServeConfig`'s).
        group: the ``--help`` section; None: the subcommand's own options.
        env: environment variable read when the flag is not given.
        read: parsed value -> field value (default: as parsed; a list becomes a tuple).
        kwargs: the other `add_argument` keywords (type, action, choices, nargs, metavar, dest;
            ``default`` only where no config field holds it).
    """

    names: tuple[str, ...]
    help: str | None = None
    field: str | None = None
    commands: tuple[str, ...] = (SERVE,)
    driver: bool = False
    group: str | None = None
    env: str | None = None
    read: Callable[[Any], Any] | None = None
    kwargs: dict = dataclasses.field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.kwargs.get("dest") or self.field or self.names[0].lstrip("-").replace("-", "_")


def _flag(*names: str, help: str | None = None, field: str | None = None, commands=(SERVE,), driver=False,
          group=None, env=None, read=None, **kwargs) -> Flag:
    return Flag(names, help, field, commands, driver, group, env, read, kwargs)


def _field(*names: str, **kwargs) -> Flag:
    """A row whose field is named after its first spelling (``--max-model-len`` -> max_model_len)."""
    return _flag(*names, field=names[0].lstrip("-").replace("-", "_"), **kwargs)


def _url(value: str | None) -> str | None:
    return (value or "").rstrip("/") or None


def _split_urls(value: str) -> tuple[str, ...]:
    from ..driver.config import split_urls

    return split_urls(value)


FLAGS: tuple[Flag, ...] = (
    _flag("model_positional", nargs="?", metavar="MODEL", help="same as --model (wins over it, as vLLM)"),
    _field("--prefill", commands=(DRIVE,), driver=True, required=True, type=_split_urls, metavar="URL[,URL...]",
           help="tokens-only prefill engine(s), e.g. http://127.0.0.1:8100"),
    _field("--decode", commands=(DRIVE,), driver=True, required=True, type=_split_urls, metavar="URL[,URL...]",
           help="tokens-only decode engine(s)"),
    _field("--render", commands=(DRIVE,), driver=True, metavar="URL", read=_url,
           help="render server to render/derender on (default: in this process with the model flags)"),
    # the model flags: serve, and drive's in-process render
    _field("--model", commands=BOTH,
           help="HF tokenizer dir, .gguf file or hub id (default: embedded SmolLM2-135M-Instruct GGUF)"),
    _field("--served-model-name", commands=BOTH, nargs="+", help="names accepted in `model`; first is reported"),
    _field("--chat-template", commands=BOTH, help="file path or inline Jinja template"),
    _field("--max-model-len", commands=BOTH, type=context_length,
           help="context length in tokens (8k, 1m ok); default from the model"),
    _field("--reasoning-parser", commands=BOTH, help="e.g. qwen3, deepseek_r1, auto"),
    _field("--tool-call-parser", commands=BOTH, help="e.g. hermes, llama3_json, auto"),
    _field("--enable-auto-tool-choice", commands=BOTH, action="store_true",
           help="required for any tool parser to be active"),
    _field("--default-chat-template-kwargs", commands=BOTH, type=json_object,
           help='JSON, e.g. {"enable_thinking": false}'),
    _field("--tokenizer-backend", commands=BOTH, choices=("auto", "hf", "fast"),
           help="auto: the fast backend only where proven equal to HF for this tokenizer"),
    _field("--host", help="listen address (default: every interface, as vLLM; 127.0.0.1: this machine only)"),
    _field("--port", type=port_type, help="listen port"),
    _field("--host", commands=(DRIVE,), driver=True, help="listen address (default {})"),
    _field("--port", commands=(DRIVE,), driver=True, type=port_type, help="listen port (default {})"),
    _field("--timeout", commands=(DRIVE,), driver=True, type=float, metavar="S",
           help="seconds an upstream may stay silent before its hop fails with 504 (default {})"),
    _field("--kv-reuse", commands=(DRIVE,), driver=True, action="store_true",
           help="bidirectional KV for chat conversations (conversation_id / X-Conversation-Id): decode keeps "
                "its answer's KV and the next turn's prefill pulls it, never past the first token where "
                "the new prompt leaves it (engines must support retain_kv, as the reference engine does)"),
    _field("--connect-timeout", commands=(DRIVE,), driver=True, type=float, metavar="S",
           help="seconds to connect to an upstream before trying the next one (default {})"),
    _field("--workers", "--api-server-count", "-asc", type=positive,
           help="server processes sharing the port (vLLM's --api-server-count)"),
    _field("--api-key", nargs="+", action="extend", env="VLLM_API_KEY",
           help="guard /v1, /v2, /inference (several keys, as vLLM's `--api-key K1 K2`, or the flag "
                "repeated; default: env VLLM_API_KEY, as vLLM)"),
    _field("--trust-request-chat-template", action="store_true",
           help="accept `chat_template` in requests (a client-supplied Jinja template runs in the sandbox)"),
    _field("--exclude-tools-when-tool-choice-none", action="store_true",
           help="with tool_choice none, render the prompt without the tools (vLLM's flag)"),
    _field("--token-exact-history", action="store_true",
           help="chat requests with previous_turn render as its exact ids + the new messages "
                "(a request's token_exact_history overrides; docs/guide.md 'Agent loops')"),
    _field("--content-special-tokens", choices=("parse", "text"),
           help="parse: control-token text in messages becomes control tokens (HF parity); "
                "text: it stays plain text (no turn forging)"),
    _field("--stream-state-secret", env="RENDER_SERVICE_STATE_SECRET",
           help="HMAC key sealing derender stream_state, at least 32 characters; give every replica behind "
                "one router the same one (env RENDER_SERVICE_STATE_SECRET; default: a random key per server, "
                "shared by its --workers)"),
    _field("--max-body-bytes", type=positive, help="larger bodies get 413"),
    _field("--max-queue-delay-ms", type=positive,
           help="a request that cannot start on the CPU pool within this delay gets 503 + Retry-After "
                "(keep it under the router's timeout: llm-d's token-producer waits 5 s)"),
    _field("--max-logprobs", type=int, help="top logprobs allowed per token (-1: no limit)"),
    _field("--max-batch-prompts", type=positive, help="most prompts in one completions request (more: 400)"),
    _field("--max-batch-prompt-length", type=positive,
           help="most prompt characters + token ids in one completions request, all prompts together "
                "(more: 400)"),
    _flag("--uvicorn-log-level", "--log-level", commands=BOTH, dest="uvicorn_log_level", default="info",
          type=str.lower, choices=("critical", "error", "warning", "info", "debug", "trace"),
          help="uvicorn's log level (--log-level works too)"),
    # connection hygiene (render_service.http.connections)
    _field("--timeout-keep-alive", commands=BOTH, type=positive,
           help="seconds a connection may go without a complete request head (after accept or a response) "
                "before it is closed; with TLS, also the most its handshake may take"),
    _field("--max-connections", commands=BOTH, type=positive,
           help="open connections per worker process; past it a new connection gets 503 and is closed"),
    _field("--body-read-timeout", commands=BOTH, type=positive_float, metavar="S",
           help="seconds a request body may take after its head, plus one per --body-min-rate bytes "
                "received; a body still incomplete then gets 408 and its connection is closed. An answer "
                "the client reads slower than --body-min-rate for that long (past the write buffer) "
                "resets the connection"),
    _field("--body-min-rate", commands=BOTH, type=positive_float, metavar="BYTES_PER_S",
           help="the slowest body upload, or reading of an answer, that is never cut (see --body-read-timeout)"),
    _field("--graceful-shutdown-timeout", commands=BOTH, type=positive,
           help="seconds to drain in-flight requests after SIGTERM before they are cut"),
    # media
    _field("--allowed-local-media-path", group=MEDIA,
           help="directory file:// media URLs must lie under (default: file:// refused)"),
    _field("--allow-remote-media", group=MEDIA, action="store_true",
           help="fetch http(s) media URLs (off by default: a render tier that fetches any URL is an SSRF hole)"),
    _field("--allowed-media-domains", group=MEDIA, nargs="+", metavar="HOST",
           help="only these hostnames (exact) may be fetched, redirects included; implies remote fetches"),
    _field("--media-fetch-timeout", group=MEDIA, type=float, help="seconds for one remote fetch, connect to last byte"),
    _field("--max-media-bytes", group=MEDIA, type=int, help="largest encoded media item"),
    _field("--media-max-redirects", group=MEDIA, type=int, help="redirects followed on a remote fetch"),
    _field("--max-image-pixels", group=MEDIA, type=int, help="largest decoded image (pixels)"),
    _field("--limit-mm-per-prompt", group=MEDIA, type=media_counts,
           help=f"JSON, most items per modality in one request (default {json.dumps(DEFAULT_LIMIT_PER_PROMPT)})"),
    _field("--mm-processor-cache-gb", group=MEDIA, type=float, help="processor cache size (0 disables)"),
    _field("--mm-hash-model-id", group=MEDIA,
           help="model id mm_hashes are computed with: the model path the engine was started with "
                "(default: --model as given, as vLLM does)"),
    _field("--mm-hasher-algorithm", group=MEDIA, choices=HASH_ALGORITHMS),
    # the `vllm launch render` flags serve honours beyond the above
    _field("--tokenizer", group=VLLM,
           help="tokenizer (and chat template) directory when it differs from MODEL; generation_config "
                "still comes from MODEL"),
    _field("--generation-config", group=VLLM,
           help="auto: MODEL's generation_config.json; vllm: none; or a folder holding one"),
    _field("--override-generation-config", group=VLLM, type=json_object,
           help='JSON merged over the generation config, e.g. {"temperature": 0.5}'),
    _field("--chat-template-content-format", group=VLLM, choices=("auto", "string", "openai"),
           help="how message content reaches the template; auto detects it from the template"),
    _field("--tool-parser-plugin", group=VLLM,
           help="Python file imported at start-up that registers a tool-call format "
                "(parsers.formats.FORMATS[name] = ToolFormat(...))"),
    _field("--reasoning-parser-plugin", group=VLLM,
           help="Python file imported at start-up that registers a reasoning format "
                "(parsers.reasoning.FORMATS[name] = ReasoningFormat(...))"),
    _field("--tool-strict-level", group=VLLM, choices=("auto", "function", "parameter"),
           help="floor for tool-call structural tags: function always constrains the call envelope, "
                "parameter also pins every argument schema (default: each tool's strict)"),
    _flag("--cohere-format", group=VLLM, default="cmd4",
          help="put in every request's template kwargs as cohere_format, as vLLM does"),
    _field("--root-path", group=VLLM, help="ASGI root_path when served behind a path-routing proxy"),
    _flag("--disable-uvicorn-access-log", field="access_log", read=not_, group=VLLM, action="store_true",
          dest="disable_uvicorn_access_log", help="no access log line per request"),
    _field("--enable-log-requests", group=VLLM, action="store_true",
           help="log each request (method, path, status, ms)"),
    _field("--max-log-len", group=VLLM, type=int, help="with --enable-log-requests: most characters of a logged request path (bodies are never logged)"),
    _field("--enable-prompt-tokens-details", group=VLLM, action="store_true",
           help="derender reports the engine's usage.prompt_tokens_details (cached_tokens), else null"),
    _field("--enable-request-id-headers", group=VLLM, action="store_true",
           help="every response carries X-Request-Id: the request's, else a random one (as vLLM)"),
    _flag("--trust-remote-code", group=VLLM, action="store_true",
          help="accepted: this server never runs model code (tokenizers and templates are data)"),
    _field("--anthropic-disabled-thinking-effort", group=VLLM,
           choices=("auto", "none", "low", "medium", "high", "xhigh", "max"),
           help="the reasoning_effort Messages' thinking: disabled maps to; auto probes the template"),
    _field("--allowed-origins", group=VLLM, type=json_list,
           help='CORS: JSON list of origins allowed, e.g. ["https://app.example"] (default: no CORS)'),
    _field("--allowed-methods", group=VLLM, type=json_list, help="CORS: JSON list of methods"),
    _field("--allowed-headers", group=VLLM, type=json_list, help="CORS: JSON list of headers"),
    _field("--allow-credentials", group=VLLM, action=argparse.BooleanOptionalAction, help="CORS: allow credentials"),
    _flag("--download-dir", group=VLLM, help="hub cache directory for a --model hub id (HF_HUB_CACHE)"),
    _flag("--hf-token", group=VLLM, nargs="?", const=True,
          help="Hugging Face token for a --model hub id (without a value: the stored login)"),
    _flag("--enable-server-load-tracking", "--disable-server-load-tracking", group=VLLM, nargs=0, action=AlwaysOn,
          help="accepted: /load always counts the requests in flight here"),
    _field("--ssl-keyfile", group=TLS, help="PEM private key of the server certificate"),
    _field("--ssl-certfile", group=TLS, help="PEM server certificate (chain)"),
    _field("--ssl-ca-certs", group=TLS, help="PEM CA bundle that client certificates must chain to"),
    _field("--ssl-cert-reqs", group=TLS, type=int, choices=(0, 1, 2),
           help="client certificates: 0 not asked, 1 optional, 2 required (mTLS; Python's ssl.CERT_*)"),
    _field("--ssl-ciphers", group=TLS, help="OpenSSL cipher list (TLS 1.2 and below)"),
    _field("--lora-modules", group=VLLM, nargs="+", action=LoraModulesAction,
           help="LoRA adapter names served as models: name=path, or JSON "
                '{"name": N, "path": P, "base_model_name": B} (several); the base model\'s tokenizer and '
                "template render them, and `model` passes through to the engine"),
    _field("--otlp-traces-endpoint", group=VLLM,
           help="export an OpenTelemetry trace per request (OTLP/HTTP protobuf, e.g. http://collector:4318; "
                "continues the caller's traceparent); needs pip install 'render-service[otel]'"),
    _flag("--config", group=VLLM, help="a YAML file of flags (read before the command line, as vLLM)"),
)


def _config_classes():
    from ..config.serve import ServeConfig
    from ..driver.config import DriverConfig

    return ServeConfig, DriverConfig


def _field_default(cls: type, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _shown(default: Any) -> Any:
    """A config default as the parser holds it: empty values as None (so --help shows none, and
    reading back keeps the field's own), tuples as lists (as the flag's values parse)."""
    if default is None or (not isinstance(default, (bool, int, float)) and not default):
        return None
    return list(default) if isinstance(default, tuple) else default


def add_flags(p: argparse.ArgumentParser, command: str) -> None:
    """Every row of ``command``, in table order, in its ``--help`` group; for ``serve`` then every
    other `vllm launch render` option (`vllm_compat`): parsed, to be refused or named as ignored."""
    serve_config, driver_config = _config_classes()
    groups: dict[str | None, Any] = {None: p}
    for flag in FLAGS:
        if command not in flag.commands:
            continue
        if flag.group not in groups:
            groups[flag.group] = p.add_argument_group(flag.group)
        kwargs = dict(flag.kwargs)
        help_text = flag.help
        if flag.field and flag.read is None:
            default = _field_default(driver_config if flag.driver else serve_config, flag.field)
            if kwargs.get("action") != "store_true" and "required" not in kwargs:
                kwargs["default"] = _shown(default)
            if help_text and "{}" in help_text:  # a default the help text states in its own words
                help_text = help_text.format(f"{default:g}" if isinstance(default, float) else default)
        if flag.names[0].startswith("-") and flag.field and "dest" not in kwargs:
            kwargs["dest"] = flag.field
        groups[flag.group].add_argument(*flag.names, help=help_text, **kwargs)
    if command == SERVE:
        _add_unhonoured_vllm_options(p)


def _add_unhonoured_vllm_options(p: argparse.ArgumentParser) -> None:
    from .vllm_compat import Given, unhonoured_options

    noop = p.add_argument_group(NOOP)
    refused = p.add_argument_group(REFUSED)
    for options, dest, arity, meaningless in unhonoured_options(set(p._option_string_actions)):
        nargs = 0 if arity == 0 else None if arity == 1 else arity
        (noop if meaningless else refused).add_argument(*options, dest=dest, nargs=nargs, action=Given, default=None,
                                                        help=argparse.SUPPRESS)


def add_log_level_argument(p: argparse.ArgumentParser, default: str) -> None:
    """``--uvicorn-log-level`` (alias ``--log-level``) → ``args.uvicorn_log_level`` with
    ``default``: the row of the table, for a subcommand outside it (``engine``)."""
    row = next(f for f in FLAGS if f.dest == "uvicorn_log_level")
    p.add_argument(*row.names, help=row.help, **{**row.kwargs, "default": default})


def command_parser(version: str) -> tuple[Parser, argparse._SubParsersAction]:
    """``render-service`` with ``--version`` and its subcommand slots (``serve`` added by the caller)."""
    parser = Parser(prog="render-service", description="CPU front tier for disaggregated LLM serving",
                    allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"render-service {version}")
    return parser, parser.add_subparsers(dest="command", required=True)


def serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``serve`` subcommand's parser, every flag added."""
    p = subparsers.add_parser(
        "serve", help="run the render/derender server",
        description="Serve render (OpenAI request -> prompt token ids) and derender (engine token ids -> "
                    "OpenAI response). Flag names follow `vllm launch render`.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # `--tokenizer` must never be read as `--tokenizer-backend`
    )
    add_flags(p, SERVE)
    return p


def _values(args: argparse.Namespace, command: str, driver: bool) -> dict[str, Any]:
    """The config fields of ``command``'s rows (`DriverConfig`'s or `ServeConfig`'s) in ``args``."""
    serve_config, driver_config = _config_classes()
    cls = driver_config if driver else serve_config
    out: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.field is None or flag.driver != driver or command not in flag.commands:
            continue
        value = getattr(args, flag.dest, None)
        if value is None and flag.env:
            value = os.environ.get(flag.env) or None
        if flag.read is not None:
            value = flag.read(value)
        if value is None:
            continue  # the field's own default
        if isinstance(_field_default(cls, flag.field), tuple) and not isinstance(value, tuple):
            value = tuple(value) if isinstance(value, list) else (value,)
        out[flag.field] = value
    return out


def serve_config(args: argparse.Namespace, command: str = SERVE):
    """`ServeConfig` of a parsed ``serve`` command line (or ``drive``'s: its model and connection
    flags): the positional MODEL wins over ``--model`` and ``--cohere-format`` joins the template
    kwargs, as in vLLM."""
    from ..config.serve import ServeConfig

    values = _values(args, command, driver=False)
    if getattr(args, "model_positional", None):
        values["model"] = args.model_positional
    if getattr(args, "cohere_format", None):
        values["default_chat_template_kwargs"] = {**values.get("default_chat_template_kwargs", {})}
        values["default_chat_template_kwargs"].setdefault("cohere_format", args.cohere_format)
    return ServeConfig(**values)


def driver_config(args: argparse.Namespace):
    """`DriverConfig` of a parsed ``drive`` command line.

    Raises:
        ValueError: bad URLs or timeouts (`DriverConfig`'s checks).
    """
    from ..driver.config import DriverConfig

    return DriverConfig(**_values(args, DRIVE, driver=True), serve=serve_config(args, DRIVE))
