"""`vllm launch render` command lines work unchanged on `render-service serve`: vLLM's own
pre-processing before argparse (`expand_command_line`: a ``--config`` YAML file's flags,
``--max_model_len`` spellings, ``-O3``, dotted JSON flags), the checks run before the model
loads (`preflight`), and what the honoured flags switch on (TLS, LoRA, generation config, two
middlewares). The flags themselves are rows of `flags.FLAGS`; the vLLM options without a row
are `vllm_compat`'s."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from .preflight import StartupCheckError, check_port
from .vllm_compat import ignored_flags, refused_flags

log = logging.getLogger("render_service.serve.cli")

GENERATION_CONFIG_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


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
