"""`vllm launch render` command lines work unchanged on `render-service serve`.

Every option vLLM 0.33's parser defines (`vllm_flags.VLLM_LAUNCH_RENDER_OPTIONS`) is parsed, and
each is one of three kinds (the rule, also in the README; `tests/test_launch_compat.py` holds the
whole table to it):

- honoured: `add_arguments` (or ``serve`` itself) defines it; `overrides` turns it into
  `ServeConfig` fields; `server.build_app` and `cli.run_serve` apply them;
- no meaning on a CPU render tier (`vllm_flags.NO_MEANING_HERE`: GPU memory, weights,
  parallelism, KV cache, scheduling…): accepted and named in one start-up warning line;
- meaningful but not served (`vllm_flags.NOT_SERVED`): refused at start-up with one line saying
  why, unless given the value that asks for what render-service does anyway.

Before argparse, a command line goes through vLLM's own pre-processing (`expand_command_line`):
a ``--config`` YAML file's flags, ``--max_model_len`` spellings, ``-O3``, dotted JSON flags.
Everything checkable before the model loads is checked first (`preflight`): parser names
(``auto`` among the choices), plugin files, an unreadable template file, a port in use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..config.serve import ServeConfig
from .preflight import StartupCheckError, check_port
from .vllm_flags import NO_MEANING_HERE, NOT_SERVED, VLLM_LAUNCH_RENDER_OPTIONS

log = logging.getLogger("render_service.serve.cli")

_NOOP_PREFIX = "vllm_noop__"
_REFUSED_PREFIX = "vllm_refused__"
GENERATION_CONFIG_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


def _json_of(value: str, kind: type, what: str):
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(parsed, kind):
        raise argparse.ArgumentTypeError(f"must be {what}")
    return parsed


def json_object(value: str) -> dict:
    """argparse type: a JSON object (flags such as `--override-generation-config`)."""
    return _json_of(value, dict, "a JSON object")


def json_list(value: str) -> list:
    """argparse type: a JSON list (vLLM's CORS flags)."""
    return _json_of(value, list, 'a JSON list, e.g. ["*"]')


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The honoured `vllm launch render` flags ``serve`` lacks, then every other vLLM option:
    parsed into the no-meaning group (`vllm_flags.NO_MEANING_HERE`, see `ignored_flags`) or the
    refused one (`refused_flags`). Call after all of ``serve``'s own arguments are defined."""
    g = p.add_argument_group("vllm launch render compatibility")
    g.add_argument("--tokenizer", default=None,
                   help="tokenizer (and chat template) directory when it differs from MODEL; generation_config "
                        "still comes from MODEL")
    g.add_argument("--generation-config", default=ServeConfig.generation_config,
                   help="auto: MODEL's generation_config.json; vllm: none; or a folder holding one")
    g.add_argument("--override-generation-config", type=json_object, default=None,
                   help='JSON merged over the generation config, e.g. {"temperature": 0.5}')
    g.add_argument("--chat-template-content-format", choices=("auto", "string", "openai"),
                   default=ServeConfig.chat_template_content_format,
                   help="how message content reaches the template; auto detects it from the template")
    g.add_argument("--tool-parser-plugin", default=None,
                   help="Python file imported at start-up that registers a tool-call format "
                        "(parsers.formats.FORMATS[name] = ToolFormat(...))")
    g.add_argument("--reasoning-parser-plugin", default=None,
                   help="Python file imported at start-up that registers a reasoning format "
                        "(parsers.reasoning.FORMATS[name] = ReasoningFormat(...))")
    g.add_argument("--tool-strict-level", choices=("auto", "function", "parameter"), default=None,
                   help="floor for tool-call structural tags: function always constrains the call envelope, "
                        "parameter also pins every argument schema (default: each tool's strict)")
    g.add_argument("--cohere-format", default="cmd4",
                   help="put in every request's template kwargs as cohere_format, as vLLM does")
    g.add_argument("--root-path", default=None, help="ASGI root_path when served behind a path-routing proxy")
    g.add_argument("--disable-uvicorn-access-log", action="store_true", help="no access log line per request")
    g.add_argument("--enable-log-requests", action="store_true", help="log each request (method, path, status, ms)")
    g.add_argument("--max-log-len", type=int, default=None, help="with --enable-log-requests: truncate logged bodies")
    g.add_argument("--enable-prompt-tokens-details", action="store_true",
                   help="derender reports the engine's usage.prompt_tokens_details (cached_tokens), else null")
    g.add_argument("--enable-request-id-headers", action="store_true",
                   help="every response carries X-Request-Id: the request's, else a random one (as vLLM)")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="accepted: this server never runs model code (tokenizers and templates are data)")
    g.add_argument("--anthropic-disabled-thinking-effort", default=ServeConfig.anthropic_disabled_thinking_effort,
                   choices=("auto", "none", "low", "medium", "high", "xhigh", "max"),
                   help="the reasoning_effort Messages' thinking: disabled maps to; auto probes the template")
    g.add_argument("--allowed-origins", type=json_list, default=None,
                   help='CORS: JSON list of origins allowed, e.g. ["https://app.example"] (default: no CORS)')
    g.add_argument("--allowed-methods", type=json_list, default=list(ServeConfig.allowed_methods),
                   help="CORS: JSON list of methods")
    g.add_argument("--allowed-headers", type=json_list, default=list(ServeConfig.allowed_headers),
                   help="CORS: JSON list of headers")
    g.add_argument("--allow-credentials", action=argparse.BooleanOptionalAction, default=False,
                   help="CORS: allow credentials")
    g.add_argument("--download-dir", default=None, help="hub cache directory for a --model hub id (HF_HUB_CACHE)")
    g.add_argument("--hf-token", nargs="?", const=True, default=None,
                   help="Hugging Face token for a --model hub id (without a value: the stored login)")
    g.add_argument("--enable-server-load-tracking", "--disable-server-load-tracking", nargs=0,
                   action=_AlwaysOn, help="accepted: /load always counts the requests in flight here")
    tls = p.add_argument_group("TLS (as uvicorn serves it; plain HTTP is then refused on the port)")
    tls.add_argument("--ssl-keyfile", default=None, help="PEM private key of the server certificate")
    tls.add_argument("--ssl-certfile", default=None, help="PEM server certificate (chain)")
    tls.add_argument("--ssl-ca-certs", default=None, help="PEM CA bundle that client certificates must chain to")
    tls.add_argument("--ssl-cert-reqs", type=int, choices=(0, 1, 2), default=ServeConfig.ssl_cert_reqs,
                     help="client certificates: 0 not asked, 1 optional, 2 required (mTLS; Python's ssl.CERT_*)")
    tls.add_argument("--ssl-ciphers", default=None, help="OpenSSL cipher list (TLS 1.2 and below)")
    g.add_argument("--lora-modules", nargs="+", action=LoraModulesAction, default=None,
                   help="LoRA adapter names served as models: name=path, or JSON "
                        '{"name": N, "path": P, "base_model_name": B} (several); the base model\'s tokenizer and '
                        "template render them, and `model` passes through to the engine")
    g.add_argument("--otlp-traces-endpoint", default=None,
                   help="export an OpenTelemetry trace per request (OTLP/HTTP protobuf, e.g. http://collector:4318; "
                        "continues the caller's traceparent); needs pip install 'render-service[otel]'")
    g.add_argument("--config", default=None, help="a YAML file of flags (read before the command line, as vLLM)")
    known = set(p._option_string_actions)
    noop = p.add_argument_group("vllm launch render flags accepted without effect on a CPU render tier")
    refused = p.add_argument_group("vllm launch render flags refused unless given the value render-service serves")
    for options, arity in VLLM_LAUNCH_RENDER_OPTIONS:
        if any(o in known for o in options):
            continue  # honoured: defined above or by `serve`
        meaningless = options[0] in NO_MEANING_HERE
        dest = (_NOOP_PREFIX if meaningless else _REFUSED_PREFIX) + options[0].lstrip("-").replace("-", "_")
        group = noop if meaningless else refused
        if arity == 0:
            group.add_argument(*options, dest=dest, nargs=0, action=_Given, default=None, help=argparse.SUPPRESS)
        else:
            group.add_argument(*options, dest=dest, nargs=None if arity == 1 else arity, action=_Given, default=None,
                               help=argparse.SUPPRESS)
        known.update(options)


class _Given(argparse.Action):
    """Records a vLLM flag we do not honour as ``(option string as typed, value)``; a switch's
    value is True, or False for its negative spelling (``--no-x``, ``--disable-x`` of an
    ``--enable-x`` row, …), as vLLM's parser reads it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.nargs == 0:
            values = not _negative(option_string, self.option_strings[0])
        setattr(namespace, self.dest, (option_string, values))


class LoraModulesAction(argparse.Action):
    """``--lora-modules`` as vLLM 0.33's `LoRAParserAction` reads it: each value ``name=path``
    (when it has ``=`` and no ``,``), else a JSON object ``{"name", "path", "base_model_name"?,
    "is_3d_lora_weight"?}`` (vLLM's `LoRAModulePath`; a JSON list is refused there too, whatever
    its help says). Stores a list of ``{"name", "path", "base_model_name"}`` dicts. A malformed
    value is argparse's error (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        modules = []
        for item in values or []:
            if not item:
                continue
            if "=" in item and "," not in item:
                name, _, path = item.partition("=")
                modules.append({"name": name, "path": path, "base_model_name": None})
                continue
            try:
                entry = json.loads(item)
            except ValueError:
                parser.error(f"Invalid JSON format for --lora-modules: {item}")
            fields = {"name", "path", "base_model_name", "is_3d_lora_weight"}
            if not isinstance(entry, dict) or set(entry) - fields or not {"name", "path"} <= set(entry):
                parser.error(f"Invalid fields for --lora-modules: {item} (a JSON object with name, path and "
                             "optionally base_model_name)")
            modules.append({"name": entry["name"], "path": entry["path"],
                            "base_model_name": entry.get("base_model_name")})
        setattr(namespace, self.dest, modules)


class _AlwaysOn(argparse.Action):
    """A switch whose every spelling leaves render-service doing what it always does."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True)


def _negative(option: str, first: str) -> bool:
    """True for a switch's spelling that turns it off."""
    if option.startswith("--no-"):
        return True
    for on, off in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
        if first.startswith(on) and option.startswith(off):
            return True
    return False


def _accepted(value: Any, accepted: tuple) -> bool:
    for ok in accepted:
        if value == ok:
            return True
        if isinstance(value, str) and isinstance(ok, str):
            for read in (float, json.loads):
                try:
                    if read(value) == read(ok):
                        return True
                except (ValueError, TypeError):
                    pass
    return False


def refused_flags(args: argparse.Namespace) -> list[str]:
    """One line per vLLM flag on this command line that render-service does not serve
    (`vllm_flags.NOT_SERVED`) and that asks for something other than what it does."""
    lines = []
    for key, given in sorted(vars(args).items()):
        if not key.startswith(_REFUSED_PREFIX) or given is None:
            continue
        option, value = given
        first = "--" + key[len(_REFUSED_PREFIX):].replace("_", "-")
        reason, accepted = NOT_SERVED.get(first, ("render-service does not serve it", ()))
        if not _accepted(value, accepted):
            typed = " ".join(value) if isinstance(value, list) else value
            shown = option if isinstance(value, bool) else f"{option} {typed}"
            lines.append(f"{shown}: not served by render-service ({reason})")
    return lines


def normalize_flag_spelling(argv: list[str]) -> list[str]:
    """``--max_model_len`` → ``--max-model-len`` (vLLM's parser accepts underscores in flag names,
    up to the first ``.`` of a dotted flag; keys after it and values are left alone); ``-O3``,
    ``-O=3`` and ``-O 3`` → ``--optimization-level 3`` (vLLM's ``-O`` shorthand)."""
    out = []
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            head, dot, keys = name.partition(".")
            out.append(head.replace("_", "-") + dot + keys + sep + value)
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and argv[i + 1:i + 2] and argv[i + 1] in ("0", "1", "2", "3"):
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def _dotted_value(text: str) -> Any:
    """A dotted flag's value as vLLM reads it: JSON, else a human-readable integer (``1k`` = 1000,
    ``1K`` = 1024), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text.strip())
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if number.isdigit():
            return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
    try:
        return int(text)
    except ValueError:
        return text


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def fold_dotted_flags(argv: list[str]) -> list[str]:
    """vLLM's dotted JSON flags: ``--limit-mm-per-prompt.image 0 --limit-mm-per-prompt.video=1``
    → ``--limit-mm-per-prompt '{"image": 0, "video": 1}'`` (appended at the end, as vLLM does);
    ``--x.key+ a,b`` makes a list. Run after `normalize_flag_spelling`."""
    out: list[str] = []
    folded: dict[str, dict] = {}
    args = iter(argv)
    for arg in args:
        if not (arg.startswith("-") and "." in arg.partition("=")[0]) or re.match(r"-\.?\d", arg):  # -1.5 is a value
            out.append(arg)
            continue
        name, sep, text = arg.partition("=")
        if not sep:
            text = next(args, None)
            if text is None:
                out.append(arg)  # argparse names the missing value
                continue
        value: Any = _dotted_value(text)
        if name.endswith("+"):
            name, value = name[:-1], text.split(",")
        flag, *keys = name.split(".")
        for key in reversed(keys):
            value = {key: value}
        _merge(folded.setdefault(flag, {}), value)
    for flag, value in folded.items():
        out += [flag, json.dumps(value)]
    return out


def _config_flags(path: str, known: set[str]) -> list[str]:
    """A ``--config`` YAML file as flags, by vLLM's rules: ``key: true`` → ``--key``; ``false`` →
    ``--no-key`` where that flag exists, else nothing; a list → ``--key a b``; a mapping → ``--key``
    and its JSON; anything else → ``--key value``.

    Raises:
        ValueError: not a .yaml/.yml file, unreadable, or not a mapping of keys.
    """
    import yaml

    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise ValueError(f"--config {path}: the file must be YAML (.yaml or .yml), as vLLM's")
    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path}: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values")
    flags: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                flags.append(f"--{key}")
            elif f"--no-{key}" in known:
                flags.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                flags += [f"--{key}", *map(str, value)]
        elif isinstance(value, dict):
            flags += [f"--{key}", json.dumps(value)]
        else:
            flags += [f"--{key}", str(value)]
    return flags


def pull_config_file(argv: list[str], known: set[str]) -> list[str]:
    """``serve [MODEL] --config FILE …`` → the file's flags inserted right after ``serve`` and the
    positional MODEL, so flags on the command line win over the file (vLLM 0.33's
    ``FlexibleArgumentParser._pull_args_from_config`` for ``vllm serve``; ``--config=FILE`` too).

    Raises:
        ValueError: ``--config`` given twice or without a file, or a bad file (`_config_flags`).
    """
    at = [i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")]
    if not at:
        return argv
    if len(at) > 1:
        raise ValueError("--config given more than once")
    i = at[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise ValueError("--config needs a YAML file")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    else:
        path, rest = argv[i].partition("=")[2], argv[:i] + argv[i + 1:]
    head = 2 if len(rest) > 1 and not rest[1].startswith("-") else 1
    return rest[:head] + _config_flags(path, known) + rest[head:]


def expand_command_line(argv: list[str], known: set[str]) -> list[str]:
    """A ``serve …`` command line as vLLM 0.33's parser sees it before argparse: the ``--config``
    file's flags pulled in, vLLM's spellings (`normalize_flag_spelling`), dotted flags folded
    into JSON (`fold_dotted_flags`). ``known``: the option strings of the serve parser.

    Raises:
        ValueError: a bad ``--config`` (the message names it).
    """
    return fold_dotted_flags(normalize_flag_spelling(pull_config_file(argv, known)))


def apply_environment(args: argparse.Namespace) -> None:
    """``--download-dir`` and ``--hf-token`` as the Hugging Face hub client reads them (environment,
    inherited by ``--workers``), for a ``--model`` hub id."""
    if args.download_dir:
        os.environ["HF_HUB_CACHE"] = args.download_dir
    if isinstance(args.hf_token, str):
        os.environ["HF_TOKEN"] = args.hf_token


def ignored_flags(args: argparse.Namespace) -> list[str]:
    """The vLLM flags on this command line that have no meaning here (`vllm_flags.NO_MEANING_HERE`),
    as ``--name``."""
    return sorted("--" + k[len(_NOOP_PREFIX):].replace("_", "-") for k, v in vars(args).items()
                  if k.startswith(_NOOP_PREFIX) and v is not None)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """`ServeConfig` fields of the honoured flags."""
    kwargs = dict(args.default_chat_template_kwargs or {})
    if args.cohere_format:
        kwargs.setdefault("cohere_format", args.cohere_format)  # vLLM folds it into the defaults
    return {
        "tokenizer": args.tokenizer,
        "generation_config": args.generation_config,
        "override_generation_config": args.override_generation_config or {},
        "chat_template_content_format": args.chat_template_content_format,
        "tool_parser_plugin": args.tool_parser_plugin,
        "reasoning_parser_plugin": args.reasoning_parser_plugin,
        "tool_strict_level": args.tool_strict_level,
        "default_chat_template_kwargs": kwargs,
        "root_path": args.root_path or "",
        "access_log": not args.disable_uvicorn_access_log,
        "enable_log_requests": args.enable_log_requests,
        "max_log_len": args.max_log_len,
        "enable_prompt_tokens_details": args.enable_prompt_tokens_details,
        "enable_request_id_headers": args.enable_request_id_headers,
        "anthropic_disabled_thinking_effort": args.anthropic_disabled_thinking_effort,
        "allowed_origins": tuple(args.allowed_origins or ()),
        "allowed_methods": tuple(args.allowed_methods),
        "allowed_headers": tuple(args.allowed_headers),
        "allow_credentials": args.allow_credentials,
        "ssl_keyfile": args.ssl_keyfile,
        "ssl_certfile": args.ssl_certfile,
        "ssl_ca_certs": args.ssl_ca_certs,
        "ssl_cert_reqs": args.ssl_cert_reqs,
        "ssl_ciphers": args.ssl_ciphers,
        "lora_modules": tuple(args.lora_modules or ()),
        "otlp_traces_endpoint": args.otlp_traces_endpoint,
    }


def load_plugin(path: str | None, flag: str) -> None:
    """Import a parser plugin file (vLLM's ``--*-parser-plugin``): it registers its format on import.

    Raises:
        StartupCheckError: the file is missing or fails to import.
    """
    if not path:
        return
    file = Path(path)
    if not file.is_file():
        raise StartupCheckError(f"{flag} {path}: no such file")
    name = f"render_service_plugin_{file.stem}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of the plugin is the operator's to fix
        sys.modules.pop(name, None)
        raise StartupCheckError(f"{flag} {path} failed to import: {type(exc).__name__}: {exc}") from None


def check_parser_names(reasoning: str | None, tool: str | None) -> None:
    """Raises `StartupCheckError` for an unknown name, listing the choices (``auto`` first)."""
    from parsers import api as parsers_api

    for flag, name, known in (("--reasoning-parser", reasoning, parsers_api.reasoning_parser_names()),
                              ("--tool-call-parser", tool, parsers_api.tool_parser_names())):
        if name and name != "auto" and name not in known:
            raise StartupCheckError(f"invalid choice for {flag}: {name!r} (choose from auto, {', '.join(known)})")


def check_tool_parser_flags(tool: str | None, auto_tool_choice: bool) -> None:
    """``--enable-auto-tool-choice`` needs a ``--tool-call-parser`` (refused here, before the model
    loads); a parser without ``--enable-auto-tool-choice`` starts but reads only the requests that
    force a call, which is rarely what an operator meant: one warning line says so.

    Raises:
        StartupCheckError: ``--enable-auto-tool-choice`` without ``--tool-call-parser``.
    """
    if auto_tool_choice and not tool:
        raise StartupCheckError("--enable-auto-tool-choice requires --tool-call-parser NAME (or auto)")
    if tool and not auto_tool_choice:
        log.warning("--tool-call-parser %s without --enable-auto-tool-choice: tool calls are parsed only for "
                    "requests with tool_choice \"required\" or a named function; tool_choice \"auto\" (the default "
                    "when a request sends tools) is refused with 400, as in vLLM. Add --enable-auto-tool-choice to "
                    "parse the calls a model makes on its own.", tool)


def check_chat_template(value: str | None) -> None:
    """A ``--chat-template`` that is not inline Jinja must be a readable file."""
    if not value or "{{" in value or "{%" in value:
        return
    try:
        Path(value).read_text()
    except OSError as exc:
        raise StartupCheckError(f"--chat-template {value}: cannot read it ({exc.strerror or exc}); give a readable "
                                "file or an inline Jinja template") from None


def check_tls(config) -> None:
    """The TLS flags as uvicorn will use them: both key and certificate or neither, every file
    readable, the key matching the certificate, the CA bundle and cipher list valid, mTLS
    (``--ssl-cert-reqs`` 1 or 2) only with a CA bundle to check clients against.

    Raises:
        StartupCheckError: the first problem, naming the flag and file.
    """
    import ssl

    files = {"--ssl-keyfile": config.ssl_keyfile, "--ssl-certfile": config.ssl_certfile,
             "--ssl-ca-certs": config.ssl_ca_certs}
    if not any(files.values()):
        if config.ssl_cert_reqs or config.ssl_ciphers:
            raise StartupCheckError("--ssl-cert-reqs / --ssl-ciphers need --ssl-certfile and --ssl-keyfile")
        return
    if not (config.ssl_keyfile and config.ssl_certfile):
        raise StartupCheckError("TLS needs both --ssl-certfile and --ssl-keyfile")
    for flag, path in files.items():
        if path:
            try:
                Path(path).read_bytes()
            except OSError as exc:
                raise StartupCheckError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except ssl.SSLError as exc:
        raise StartupCheckError(f"--ssl-certfile {config.ssl_certfile} / --ssl-keyfile {config.ssl_keyfile}: "
                                f"not a certificate and its key ({exc.reason or exc})") from None
    if config.ssl_ca_certs:
        try:
            context.load_verify_locations(config.ssl_ca_certs)
        except ssl.SSLError as exc:
            raise StartupCheckError(f"--ssl-ca-certs {config.ssl_ca_certs}: not a PEM CA bundle "
                                    f"({exc.reason or exc})") from None
    elif config.ssl_cert_reqs:
        raise StartupCheckError(f"--ssl-cert-reqs {config.ssl_cert_reqs} asks for client certificates: give "
                                "--ssl-ca-certs, the CA they must chain to")
    if config.ssl_ciphers:
        try:
            context.set_ciphers(config.ssl_ciphers)
        except ssl.SSLError:
            raise StartupCheckError(f"--ssl-ciphers {config.ssl_ciphers!r}: no cipher OpenSSL knows") from None


def tls_context(config):
    """The server's ``ssl.SSLContext`` for the TLS flags, made as uvicorn makes it
    (``uvicorn.config.create_ssl_context``), or None without ``--ssl-certfile``. The connection
    protocol (`render_service.http.connections.HardenedProtocol`, from ``app.state.tls``) does
    the handshake itself, under the connection bounds; uvicorn is not given the flags."""
    if not config.ssl_certfile:
        return None
    import ssl

    from uvicorn.config import create_ssl_context

    return create_ssl_context(config.ssl_certfile, config.ssl_keyfile, None, ssl.PROTOCOL_TLS_SERVER,
                              config.ssl_cert_reqs, config.ssl_ca_certs, config.ssl_ciphers)


_VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")


def _same_file(a: Path, b: Path) -> bool:
    if a.read_bytes() == b.read_bytes():
        return True
    try:
        return json.loads(a.read_text()) == json.loads(b.read_text())
    except (ValueError, UnicodeDecodeError):
        return False


def check_lora_modules(config) -> None:
    """Each ``--lora-modules`` entry names a readable adapter directory (its
    ``adapter_config.json``, as vLLM loads it at start-up) under a name no other model has.
    Adapters render with the base model's tokenizer and template (vLLM 0.33 has no per-adapter
    tokenizer either); an adapter that ships vocabulary files must ship the base model's own
    (a copy, as PEFT saves them), since one with another vocabulary needs its own render-service.

    Raises:
        StartupCheckError: the first bad entry, named.
    """
    names = set(config.served_model_name) or {config.model}
    base = Path(config.tokenizer or config.model or "")
    for module in config.lora_modules:
        name, path = module["name"], module["path"]
        where = f"--lora-modules {name}={path}"
        if not name or not path:
            raise StartupCheckError(f"{where}: an adapter needs a name and a path")
        if name in names:
            raise StartupCheckError(f"{where}: {name!r} is already a served model name")
        names.add(name)
        try:
            json.loads((Path(path) / "adapter_config.json").read_text())
        except OSError as exc:
            raise StartupCheckError(f"{where}: cannot read {path}/adapter_config.json "
                                    f"({exc.strerror or exc})") from None
        except ValueError:
            raise StartupCheckError(f"{where}: {path}/adapter_config.json is not JSON") from None
        for file in _VOCABULARY_FILES:
            own = Path(path) / file
            if own.is_file() and not (base.is_dir() and (base / file).is_file() and _same_file(own, base / file)):
                raise StartupCheckError(
                    f"{where}: the adapter ships its own tokenizer ({file}, not the base model's); this server "
                    f"renders adapters with the base model's, so serve this one with its own render-service "
                    f"(--model {path})")


def preflight(args: argparse.Namespace, config) -> None:
    """Every check that needs no model, before the model loads; then the one warning line for
    flags that have no effect here.

    Raises:
        StartupCheckError: the first problem found.
    """
    load_plugin(config.tool_parser_plugin, "--tool-parser-plugin")
    load_plugin(config.reasoning_parser_plugin, "--reasoning-parser-plugin")
    check_parser_names(config.reasoning_parser, config.tool_call_parser)
    check_tool_parser_flags(config.tool_call_parser, config.enable_auto_tool_choice)
    check_chat_template(config.chat_template)
    if config.generation_config not in ("auto", "vllm") and not Path(config.generation_config).is_dir():
        raise StartupCheckError(f"--generation-config {config.generation_config}: expected auto, vllm or a folder")
    refused = refused_flags(args)
    if refused:
        raise StartupCheckError("; ".join(refused))
    check_tls(config)
    check_lora_modules(config)
    from ..telemetry import tracing

    try:
        tracing.setup(config.otlp_traces_endpoint)
    except tracing.TracingUnavailable as exc:
        raise StartupCheckError(str(exc)) from None
    check_port(config.host, config.port)
    ignored = ignored_flags(args)
    if ignored:
        log.warning("no effect on a CPU render tier (accepted for `vllm launch render` compatibility): %s",
                    " ".join(ignored))
    if getattr(args, "trust_remote_code", False):
        log.info("--trust-remote-code: accepted; this server never runs model code")


def generation_config(model_config: dict, config) -> dict:
    """The generation defaults for sampling: the model's (``auto``), none (``vllm``) or a folder's
    ``generation_config.json``, with ``--override-generation-config`` on top (vLLM's rule)."""
    if config.generation_config == "auto":
        base = dict(model_config)
    elif config.generation_config == "vllm":
        base = {k: v for k, v in model_config.items() if k not in GENERATION_CONFIG_KEYS}
    else:
        path = Path(config.generation_config) / "generation_config.json"
        base = {**model_config, **(json.loads(path.read_text()) if path.is_file() else {})}
    return {**base, **(config.override_generation_config or {})}


class RequestIdHeaderMiddleware:
    """``--enable-request-id-headers``: each response carries ``X-Request-Id`` (the request's own,
    else a random uuid4 hex), as vLLM's `XRequestIdMiddleware`."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import uuid

        from ..wire.limits import MAX_REQUEST_ID_CHARS

        given = dict(scope.get("headers") or []).get(b"x-request-id")
        # one too long to echo is refused by the app (http.admission); its 400 does not repeat it
        request_id = given if given and len(given) <= MAX_REQUEST_ID_CHARS else uuid.uuid4().hex.encode()

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", request_id)]}
            await send(message)

        await self.app(scope, receive, send_with_id)


class RequestLogMiddleware:
    """``--enable-log-requests``: one log line per request (method, path, status, milliseconds)."""

    def __init__(self, app, max_log_len: int | None = None) -> None:
        self.app = app
        self.max_log_len = max_log_len

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import time

        start = time.perf_counter()
        status = [0]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope.get("path", "")
            if self.max_log_len is not None:
                path = path[: self.max_log_len]
            log.info("request %s %s -> %d in %.1f ms", scope.get("method"), path, status[0],
                     (time.perf_counter() - start) * 1000)
