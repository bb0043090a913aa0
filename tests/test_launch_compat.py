"""`vllm launch render` command lines on `render-service serve` (issue 11 item 4).

Every option vLLM 0.33's own parser defines (recorded in
``fixtures/vllm/recorded/launch-render-flags.json``) parses; the honoured ones change what the
server does; the rest produce one warning line; nothing is abbreviated; what can be checked
before the model loads fails fast with one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import MODELS, SHARED, free_port, needs_shared
from render_service.serve import cli, flags
from render_service.serve.vllm_flags import VLLM_LAUNCH_RENDER_OPTIONS

RECORDED = Path(__file__).resolve().parent / "fixtures" / "vllm" / "recorded" / "launch-render-flags.json"
VLLM_FLAGS = json.loads(RECORDED.read_text()) if RECORDED.exists() else []

# Values for flags whose type we check (ours or vLLM's choices); everything else gets "4096".
SAMPLES = {"--default-chat-template-kwargs": "{}", "--override-generation-config": "{}",
           "--reasoning-effort-map": "{}", "--limit-mm-per-prompt": "{}", "--port": "8000",
           "--generation-config": "auto", "--max-model-len": "4096", "--lora-modules": "sql=/adapters/sql",
           "--ssl-cert-reqs": "2", "--allowed-origins": '["*"]', "--allowed-methods": '["GET"]',
           "--allowed-headers": '["*"]'}


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="render-service", allow_abbrev=False)
    cli.add_serve_parser(parser.add_subparsers(dest="command"))
    return parser


def _argv(flag: dict) -> list[str]:
    option = flag["options"][0]
    if not flag["takes_value"]:
        return [option]
    value = SAMPLES.get(option) or (flag["choices"][0] if flag["choices"] else "4096")
    return [option] if flag["nargs"] in ("?", "*") else [option, value]


def test_flag_table_is_the_recording():
    assert VLLM_FLAGS, "launch-render-flags.json not recorded"
    recorded = [(tuple(f["options"]), 0 if not f["takes_value"] else (f["nargs"] if f["nargs"] in ("+", "*", "?") else 1))
                for f in VLLM_FLAGS]
    assert recorded == list(VLLM_LAUNCH_RENDER_OPTIONS)


@pytest.mark.parametrize("flag", VLLM_FLAGS, ids=lambda f: f["options"][0])
def test_every_vllm_flag_parses(flag):
    parser = _serve_parser()
    try:
        parser.parse_args(["serve", "some-model", *_argv(flag)])
    except SystemExit:
        pytest.fail(f"`render-service serve {' '.join(_argv(flag))}` is refused")


def test_no_abbreviations():
    parser = _serve_parser()
    args = parser.parse_args(["serve", "m", "--tokenizer", "tok-dir"])
    assert args.tokenizer == "tok-dir" and args.tokenizer_backend == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "m", "--tokenizer-back", "hf"])


def test_vllm_spellings():
    from render_service.serve import command_line

    argv = command_line.normalize_flag_spelling(["serve", "m", "--max_model_len=4k", "--served_model_name", "a_b",
                                                  "--api-key", "k1", "k2", "--api-key", "k3"])
    args = _serve_parser().parse_args(argv)
    assert args.max_model_len == 4096 and args.served_model_name == ["a_b"] and args.api_key == ["k1", "k2", "k3"]


def test_ignored_flags_are_named_once():
    from render_service.serve import vllm_compat

    args = _serve_parser().parse_args(["serve", "m", "--tensor-parallel-size", "2", "--enforce-eager",
                                       "--gpu-memory-utilization", "0.8", "--host", "0.0.0.0"])
    assert vllm_compat.ignored_flags(args) == ["--enforce-eager", "--gpu-memory-utilization",
                                                 "--tensor-parallel-size"]


@pytest.fixture
def fails_fast(capsys, monkeypatch):
    """``run(argv)``: `serve ARGV` exits 2 before the model loads (loading fails the test) → stderr."""
    from render_service.serve import server

    def load_bundle(*_args, **_kwargs):
        raise AssertionError("the check must come before the model loads")

    monkeypatch.setattr(server, "load_bundle", load_bundle)

    def run(argv: list[str]) -> str:
        assert cli.main(["serve", *argv]) == 2
        return capsys.readouterr().err
    return run


@needs_shared
def test_unknown_parser_lists_auto(fails_fast):
    err = fails_fast([str(MODELS / "qwen3"), "--tool-call-parser", "nope", "--port", str(free_port())])
    assert "--tool-call-parser" in err and "'nope'" in err and "choose from auto, " in err


@needs_shared
def test_port_in_use_fails_before_loading(fails_fast):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        err = fails_fast([str(MODELS / "qwen3"), "--host", "127.0.0.1", "--port", str(busy.getsockname()[1])])
    assert "cannot listen on 127.0.0.1" in err


def test_default_host_is_every_interface_as_vllm():
    """`render-service serve` without --host listens on every interface, as `vllm launch render`
    does, so a command line swapped in for vLLM's answers in a pod (127.0.0.2 is loopback too,
    but a server bound to 127.0.0.1 alone never answers there)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "render_service.serve.cli", "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, status = time.monotonic() + 120, None
        while status != 200:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "server did not come up"
            with contextlib.suppress(httpx.TransportError):
                status = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code
            time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.2:{port}/health", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@needs_shared
def test_unreadable_template_fails_before_loading(tmp_path, fails_fast):
    err = fails_fast([str(MODELS / "qwen3"), "--chat-template", str(tmp_path / "missing.jinja"),
                       "--port", str(free_port())])
    assert "--chat-template" in err and "missing.jinja" in err


def test_missing_plugin_fails(tmp_path, fails_fast):
    err = fails_fast(["--tool-parser-plugin", str(tmp_path / "nope.py"), "--port", str(free_port())])
    assert "--tool-parser-plugin" in err


def _serve(*argv: str, scheme: str = "http", **client_options):
    """`render-service serve ARGV` as a subprocess on a free port; yields (client, process)."""
    from cli_server import serve

    return serve(*argv, scheme=scheme, **client_options)


def _stderr(proc) -> str:
    proc.terminate()
    return proc.stderr.read()


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@needs_shared
def test_vllm_command_line_starts_and_honours_flags(tmp_path):
    plugin = tmp_path / "my_parser.py"
    plugin.write_text("from parsers import formats\nformats.FORMATS['my_hermes'] = formats.FORMATS['hermes']\n")
    with _serve(str(MODELS / "llama-3.1-instruct"), "--tokenizer", str(MODELS / "qwen3"),
                "--override-generation-config", '{"temperature": 0.25}', "--tool-parser-plugin", str(plugin),
                "--tool-call-parser", "my_hermes", "--enable-auto-tool-choice", "--trust-remote-code",
                "--tensor-parallel-size", "2", "--enforce-eager", "--enable-log-requests",
                "--disable-log-stats") as (client, proc):
        out = client.post("/v1/chat/completions/render", json=CHAT).json()
        call = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
        ids = client.post("/tokenize", json={"prompt": call, "add_special_tokens": False}).json()["tokens"]
        parsed = client.post("/v1/chat/completions/derender", json={
            "generate_response": {"request_id": "r", "choices": [{"index": 0, "token_ids": ids}]},
            "chat_request": {"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]}}).json()
        models = client.get("/v1/models").json()
        err = _stderr(proc)
    # --tokenizer: Qwen3's ids; generation config from MODEL (Llama: top_p 0.9) under the override
    assert out["token_ids"][:3] == [151644, 872, 198]
    assert out["sampling_params"]["temperature"] == 0.25 and out["sampling_params"]["top_p"] == 0.9
    assert models["data"][0]["id"] == str(MODELS / "llama-3.1-instruct")
    # the plugin's parser reads the call
    assert parsed["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"
    ignored = [line for line in err.splitlines() if "no effect on a CPU render tier" in line]
    assert len(ignored) == 1 and "--tensor-parallel-size" in ignored[0] and "--enforce-eager" in ignored[0]
    assert "--disable-log-stats" in ignored[0]
    assert "request POST /v1/chat/completions/render -> 200" in err


@needs_shared
def test_generation_config_vllm_drops_the_models_defaults():
    with _serve(str(MODELS / "qwen3"), "--generation-config", "vllm", "--disable-uvicorn-access-log",
                "--root-path", "/render", "--enable-request-id-headers") as (client, proc):
        sp = client.post("/v1/chat/completions/render", json=CHAT).json()["sampling_params"]
        echoed = client.get("/v1/models", headers={"X-Request-Id": "abc"}).headers.get("x-request-id")
        fresh = client.get("/v1/models").headers.get("x-request-id")
        err = _stderr(proc)
    assert sp["temperature"] == 1.0 and sp["top_p"] == 1.0 and "top_k" not in sp
    assert echoed == "abc" and fresh and len(fresh) == 32
    assert '"POST /v1/chat/completions/render' not in err  # no access log line


def test_prompt_tokens_details_only_when_enabled():
    from render_service.config.serve import ServeConfig
    from render_service.derender.service import Derenderer
    from render_service.model import load_model
    from render_service.wire.derender import DerenderChatRequest

    bundle = load_model(None)
    body = {"generate_response": {"request_id": "r", "usage": {
        "prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 4}},
        "choices": [{"index": 0, "token_ids": [28]}]}}
    req = DerenderChatRequest.model_validate(body)
    plain = Derenderer(bundle, ServeConfig()).chat(req)["usage"]
    enabled = Derenderer(bundle, ServeConfig(enable_prompt_tokens_details=True)).chat(req)["usage"]
    assert plain["prompt_tokens_details"] is None
    assert enabled["prompt_tokens_details"] == {"cached_tokens": 4}


# --- vLLM's parser pre-processing: --config YAML, -O, dotted JSON flags, the positional MODEL ---

def _config(argv: list[str], monkeypatch):
    """The `ServeConfig` and namespace `render-service serve ARGV` would run with (nothing is started)."""
    seen = {}
    monkeypatch.setattr(cli, "run_serve", lambda args: seen.update(args=args, config=flags.serve_config(args)))
    assert cli.main(["serve", *argv]) == 0
    return seen["config"], seen["args"]


def test_config_file_sets_flags_and_the_command_line_wins(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("port: 8003\nmax_model_len: 4k\nenable-auto-tool-choice: true\nserved-model-name: [a, b]\n"
                   "default-chat-template-kwargs:\n  enable_thinking: false\ntrust-remote-code: false\n")
    config, _ = _config(["m", "--config", str(cfg)], monkeypatch)
    assert (config.port, config.max_model_len, config.enable_auto_tool_choice) == (8003, 4096, True)
    assert config.served_model_name == ("a", "b") and config.default_chat_template_kwargs["enable_thinking"] is False
    for argv in (["m", "--port", "9000", f"--config={cfg}"], ["m", "--config", str(cfg), "--port", "9000"]):
        assert _config(argv, monkeypatch)[0].port == 9000
    model_in_file = tmp_path / "model.yml"
    model_in_file.write_text("model: from-file\n")
    assert _config(["--config", str(model_in_file)], monkeypatch)[0].model == "from-file"


@pytest.mark.parametrize("name, text, message", [
    ("cfg.json", '{"port": 8003}', "must be YAML"), ("cfg.yaml", "- port\n", "mapping"),
    ("missing.yaml", None, "cannot read")])
def test_bad_config_file_is_one_line(tmp_path, capsys, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "m", "--config", str(path)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["-O3"], ["-O", "3"], ["-O=2"], ["-Odecode"]])
def test_optimization_level_shorthand(argv, monkeypatch):
    from render_service.serve import vllm_compat

    _, args = _config(["m", *argv], monkeypatch)
    assert vllm_compat.ignored_flags(args) == ["--optimization-level"]


def test_dotted_json_flags(monkeypatch):
    from render_service.serve import vllm_compat

    config, args = _config(["m", "--limit-mm-per-prompt.image", "0", "--limit_mm_per_prompt.video=1",
                            "--compilation-config.level", "3", "--compilation_config.pass_config.fuse_norm", "true",
                            "--default-chat-template-kwargs.enable_thinking", "false",
                            "--override-generation-config.temperature=0.5", "--media-fetch-timeout", "-1.5"],
                           monkeypatch)
    assert config.limit_mm_per_prompt == {"image": 0, "video": 1}
    assert config.default_chat_template_kwargs["enable_thinking"] is False
    assert config.override_generation_config == {"temperature": 0.5}
    assert vllm_compat.ignored_flags(args) == ["--compilation-config"]
    assert json.loads(args.vllm_noop__compilation_config[1]) == {"level": 3, "pass_config": {"fuse_norm": True}}
    assert config.media_fetch_timeout == -1.5


def test_positional_model_wins_over_model_flag(monkeypatch):
    assert _config(["--model", "A", "B"], monkeypatch)[0].model == "B"
    assert _config(["--model", "A"], monkeypatch)[0].model == "A"


# --- the rule: every vLLM flag is honoured, has no meaning here, or is refused at start-up ---

def _kind(parser: argparse.ArgumentParser, option: str) -> str:
    dest = parser._subparsers._group_actions[0].choices["serve"]._option_string_actions[option].dest
    return "no-meaning" if dest.startswith("vllm_noop__") else "refused" if dest.startswith("vllm_refused__") else "honoured"


def test_every_vllm_flag_is_honoured_meaningless_here_or_refused():
    """The README's rule over the whole table: a flag we parse but do not honour is either one
    with no meaning on a CPU render tier (listed, with what it configures) or one refused at
    start-up (listed, with why); never both, never neither."""
    from render_service.serve.vllm_flags import NO_MEANING_HERE, NOT_SERVED

    parser = _serve_parser()
    firsts = {options[0] for options, _ in VLLM_LAUNCH_RENDER_OPTIONS}
    assert not set(NO_MEANING_HERE) & set(NOT_SERVED)
    assert set(NO_MEANING_HERE) <= firsts and set(NOT_SERVED) <= firsts, "entries for flags vLLM does not have"
    for options, _ in VLLM_LAUNCH_RENDER_OPTIONS:
        kind = _kind(parser, options[0])
        listed = ("no-meaning" if options[0] in NO_MEANING_HERE else "refused" if options[0] in NOT_SERVED
                  else "honoured")
        assert kind == listed, f"{options[0]} is {kind} but listed as {listed}"


def _not_served_argv(flag: dict) -> list[str]:
    from render_service.serve.vllm_flags import NOT_SERVED

    accepted = NOT_SERVED[flag["options"][0]][1]
    if not flag["takes_value"]:
        return [flag["options"][0] if True not in accepted else flag["options"][-1]]
    return [flag["options"][0], "not-what-we-serve"]


@pytest.mark.parametrize("flag", [f for f in VLLM_FLAGS if f["options"][0] in __import__(
    "render_service.serve.vllm_flags", fromlist=["NOT_SERVED"]).NOT_SERVED], ids=lambda f: f["options"][0])
def test_a_flag_we_do_not_serve_is_refused_with_one_line(flag):
    from render_service.serve import vllm_compat

    argv = _not_served_argv(flag)
    lines = vllm_compat.refused_flags(_serve_parser().parse_args(["serve", "m", *argv]))
    assert len(lines) == 1 and lines[0].startswith(argv[0]) and "not served by render-service (" in lines[0]


def test_refused_flags_accept_the_value_we_serve():
    """vLLM's default (or the spelling that asks for what we do) is not refused: a command line
    that spells the defaults out still starts."""
    from render_service.serve import vllm_compat

    argv = ["serve", "m", "--no-trust-request-mm-kwargs", "--response-role", "assistant", "--runner", "generate",
            "--enable-log-deltas", "--hf-overrides", "{}", "--ssl-cert-reqs", "0", "--disable-fastapi-docs",
            "--shutdown-timeout", "0.0", "--h11-max-header-count", "256"]
    assert vllm_compat.refused_flags(_serve_parser().parse_args(argv)) == []
    refused = vllm_compat.refused_flags(_serve_parser().parse_args(["serve", "m", "--enable-fastapi-docs",
                                                                      "--disable-log-deltas"]))
    assert [line.split(":")[0] for line in refused] == ["--enable-fastapi-docs", "--disable-log-deltas"]


def test_refused_flag_stops_start_up_before_the_model_loads(fails_fast):
    err = fails_fast(["--grpc", "--port", str(free_port())])
    assert "--grpc: not served by render-service (render-service serves HTTP only)" in err


def test_every_honoured_vllm_flag_is_in_the_flag_docs():
    readme = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text()
    parser = _serve_parser()
    missing = [o[0] for o, _ in VLLM_LAUNCH_RENDER_OPTIONS
               if _kind(parser, o[0]) == "honoured" and f"`{o[0]}" not in readme]
    assert not missing, f"honoured vLLM flags docs/serve.md does not name: {missing}"


def test_cors_flags_are_served(monkeypatch):
    from starlette.testclient import TestClient

    from render_service.serve.server import build_app

    config, _ = _config(["--allowed-origins", '["https://app.example"]', "--allow-credentials"], monkeypatch)
    app, _, _ = build_app(config)
    with TestClient(app) as client:
        ok = client.options("/v1/models", headers={"Origin": "https://app.example",
                                                   "Access-Control-Request-Method": "GET"})
        other = client.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert ok.headers["access-control-allow-origin"] == "https://app.example"
    assert ok.headers["access-control-allow-credentials"] == "true"
    assert "access-control-allow-origin" not in other.headers


def test_anthropic_disabled_thinking_effort_names_the_effort(monkeypatch):
    from render_service.model import load_model
    from render_service.doors.messages.render import disabled_thinking_effort

    config, _ = _config(["--anthropic-disabled-thinking-effort", "medium"], monkeypatch)
    assert disabled_thinking_effort(load_model(None), config) == "medium"


def test_hub_flags_reach_the_hub_client(monkeypatch, tmp_path):

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    _, args = _config(["org/model", "--download-dir", str(tmp_path), "--hf-token", "hf_x"], monkeypatch)
    cli.apply_environment(args)
    import os

    assert os.environ["HF_HUB_CACHE"] == str(tmp_path) and os.environ["HF_TOKEN"] == "hf_x"
    _, args = _config(["org/model", "--hf-token"], monkeypatch)  # no value: the stored login, as vLLM
    assert args.hf_token is True



# --- TLS and mTLS (issue 26) ---

def _tls_context(pki, cert=None):
    import ssl

    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        context.load_cert_chain(*map(str, cert))
    return context


def test_tls_is_served_and_plain_http_is_refused(tmp_path):
    from certs import make_pki

    pki = make_pki(tmp_path)
    with _serve("--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key),
                scheme="https", verify=_tls_context(pki)) as (client, _):
        assert client.get("/v1/models").status_code == 200
        url = str(client.base_url).rstrip("/") + "/v1/models"
        with pytest.raises(httpx.TransportError):
            httpx.get(url.replace("https://", "http://"), timeout=10)
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA
            httpx.get(url, timeout=10)


def test_mtls_requires_a_client_certificate_from_the_ca(tmp_path):
    from certs import make_pki

    pki = make_pki(tmp_path)
    server = ("--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key),
              "--ssl-ca-certs", str(pki.ca), "--ssl-cert-reqs", "2")
    with _serve(*server, scheme="https", verify=_tls_context(pki, (pki.client_cert, pki.client_key))) as (client, _):
        assert client.post("/tokenize", json={"prompt": "hi"}).status_code == 200
        url = str(client.base_url).rstrip("/") + "/tokenize"
        for context in (_tls_context(pki), _tls_context(pki, (pki.other_client_cert, pki.other_client_key))):
            with pytest.raises(httpx.TransportError):
                httpx.post(url, json={"prompt": "hi"}, verify=context, timeout=10).raise_for_status()


@pytest.mark.parametrize("case", ["missing-key", "unreadable-cert", "key-not-cert", "mtls-without-ca",
                                  "only-cert", "bad-ciphers"])
def test_bad_tls_flags_stop_start_up_with_one_line(tmp_path, fails_fast, case):
    from certs import make_pki

    pki = make_pki(tmp_path)
    cert, key = ["--ssl-certfile", str(pki.server_cert)], ["--ssl-keyfile", str(pki.server_key)]
    argv, expected = {
        "missing-key": (cert + ["--ssl-keyfile", str(tmp_path / "nope.key")], "--ssl-keyfile"),
        "unreadable-cert": (["--ssl-certfile", str(tmp_path)] + key, "--ssl-certfile"),
        "key-not-cert": (["--ssl-certfile", str(pki.client_cert)] + key, "not a certificate and its key"),
        "mtls-without-ca": (cert + key + ["--ssl-cert-reqs", "2"], "--ssl-ca-certs"),
        "only-cert": (cert, "both --ssl-certfile and --ssl-keyfile"),
        "bad-ciphers": (cert + key + ["--ssl-ciphers", "NOT-A-CIPHER"], "--ssl-ciphers"),
    }[case]
    err = fails_fast([*argv, "--port", str(free_port())])
    assert expected in err and err.count("\n") == 1


# --- --lora-modules: adapter names served as models (issue 26) ---

def _adapter(folder: Path, name: str, **files: str) -> Path:
    path = folder / name
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    for file, text in files.items():
        (path / file).write_text(text)
    return path


def test_lora_modules_in_every_form_vllm_reads(tmp_path, monkeypatch):
    a, b, c = (_adapter(tmp_path, n) for n in "abc")
    config, _ = _config(["m", "--served-model-name", "base", "--lora-modules", f"sql={a}",
                         json.dumps({"name": "chat", "path": str(b), "base_model_name": "base"}),
                         json.dumps({"name": "x", "path": str(c), "is_3d_lora_weight": True}), ""], monkeypatch)
    assert [(m["name"], m["path"], m["base_model_name"]) for m in config.lora_modules] == [
        ("sql", str(a), None), ("chat", str(b), "base"), ("x", str(c), None)]


@pytest.mark.parametrize("value", ['{"name": "x"}', '{"name": "x", "path": "p", "rank": 8}', "{not json",
                                   '[{"name": "x", "path": "p"}]'])  # a list: vLLM 0.33 refuses it too
def test_malformed_lora_modules_are_argparse_errors(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "m", "--lora-modules", value])
    assert exit_.value.code == 2 and "--lora-modules" in capsys.readouterr().err


def test_lora_names_render_as_the_base_model_and_are_listed(tmp_path, monkeypatch):
    from starlette.testclient import TestClient

    from render_service.serve.server import build_app

    sql = _adapter(tmp_path, "sql-lora")
    config, _ = _config(["--served-model-name", "base", "--lora-modules", f"sql={sql}",
                         json.dumps({"name": "other", "path": str(sql), "base_model_name": "base-alias"})], monkeypatch)
    app, _, _ = build_app(config)
    with TestClient(app) as client:
        base = client.post("/v1/chat/completions/render", json={**CHAT, "model": "base"}).json()
        lora = client.post("/v1/chat/completions/render", json={**CHAT, "model": "sql"}).json()
        cmpl = client.post("/v1/completions/render", json={"prompt": "hi", "model": "sql"}).json()
        tokenized = client.post("/tokenize", json={"prompt": "hi", "model": "other"})
        unknown = client.post("/v1/chat/completions/render", json={**CHAT, "model": "nope"})
        models = client.get("/v1/models").json()["data"]
    assert lora["token_ids"] == base["token_ids"] and lora["model"] == "sql"  # the engine picks the adapter by name
    assert lora["sampling_params"] == base["sampling_params"]
    assert cmpl[0]["model"] == "sql" and tokenized.status_code == 200
    assert unknown.status_code == 404
    assert [(m["id"], m["parent"], m["root"]) for m in models] == [
        ("base", None, models[0]["root"]), ("sql", "base", str(sql)), ("other", "base-alias", str(sql))]
    assert models[1]["max_model_len"] is None and models[1]["object"] == "model"


@needs_shared
def test_an_adapter_may_ship_a_copy_of_the_base_tokenizer(tmp_path):
    from render_service.serve import lora
    from render_service.config.serve import ServeConfig

    copy = _adapter(tmp_path, "copy", **{"tokenizer.json": (MODELS / "qwen3" / "tokenizer.json").read_text()})
    lora.check_lora_modules(ServeConfig(model=str(MODELS / "qwen3"), lora_modules=(
        {"name": "x", "path": str(copy), "base_model_name": None},)))


@pytest.mark.parametrize("case", ["missing", "own-tokenizer", "name-taken"])
def test_bad_lora_modules_stop_start_up(tmp_path, fails_fast, case):
    own = _adapter(tmp_path, "own", **{"tokenizer.json": '{"model": {"vocab": {"a": 0}}}'})
    value = {"missing": f"x={tmp_path / 'nope'}", "own-tokenizer": f"x={own}",
             "name-taken": f"base={_adapter(tmp_path, 'ok')}"}[case]
    err = fails_fast(["--served-model-name", "base", "--lora-modules", value, "--port", str(free_port())])
    assert "--lora-modules" in err and {"missing": "adapter_config.json", "own-tokenizer": "its own tokenizer",
                                        "name-taken": "already a served model name"}[case] in err
