"""Differential tests against vLLM 0.33 itself, and vLLM's own JSON Schemas as the contract.

The corpus (`fixtures/vllm/corpus.py`) was sent to a real `vllm launch render` by
`fixtures/vllm/record.py`; its answers are in `fixtures/vllm/recorded/`. Here each request
goes to a real `render-service serve` (a subprocess, same flags) on loopback, and:

- every field of our answer equals vLLM's, or is covered by one entry of the deliberate
  difference list (`fixtures/vllm/differences.py`, also in docs/vllm.md);
- every body we emit that vLLM defines validates against vLLM's JSON Schema
  (`../shared/design/vllm-0.33-schemas`, plus response models recorded from vLLM's Python in
  `recorded/schemas`): render outputs, derender responses and stream chunks, error bodies;
- every derender request that is valid for vLLM's request schema and that vLLM accepted is
  accepted by ours.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import MODELS, SHARED, free_port, vllm_differences

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
RECORDED = FIXTURES / "recorded"
SCHEMAS = SHARED / "design" / "vllm-0.33-schemas"

pytestmark = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (models, vLLM schemas) not present")


differences = vllm_differences()


def _recordings() -> dict[str, dict]:
    out = {}
    for path in sorted(RECORDED.glob("*.json")):
        if path.name in ("structural-tags.json",):
            continue
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "render" in data:
            out[data["server"]] = data
    return out


RECORDINGS = _recordings()


# ----------------------------------------------------------------------------------------------
# schemas

def _validator(path: Path):
    import jsonschema

    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema)


_VALIDATORS: dict[str, object] = {}


def schema_errors(name: str, body) -> list[str]:
    """Messages of every violation of vLLM's schema ``name`` by ``body`` (empty = valid)."""
    if name not in _VALIDATORS:
        path = SCHEMAS / f"{name}.json"
        if not path.exists():
            path = RECORDED / "schemas" / f"{name}.json"
        if not path.exists():
            pytest.skip(f"vLLM schema {name}.json not recorded")
        _VALIDATORS[name] = _validator(path)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
            for e in _VALIDATORS[name].iter_errors(body)]


# ----------------------------------------------------------------------------------------------
# our server, started like vLLM's

# Templates that print today's date (Llama 3.2, gpt-oss: strftime_now) rendered on the day vLLM
# answered: our server runs with that day as its template clock (the time of day stays real).
_AT_DAY = ("import datetime, sys\n"
           "import render_service.model.templates as templates\n"
           "day = datetime.date.fromisoformat('{day}')\n"
           "templates._strftime_now = lambda fmt: datetime.datetime.combine(day, datetime.datetime.now().time())"
           ".strftime(fmt)\n"
           "templates._ENV.globals['strftime_now'] = templates._strftime_now\n"
           "from render_service.serve.cli import main\n"
           "sys.exit(main(sys.argv[1:]))\n")


def recording_day(recording: dict) -> str | None:
    """The local date vLLM rendered ``recording`` on: its ``recorded_on`` (record.py writes it),
    else the day of the first derender answer's ``created`` timestamp; None when neither is known."""
    if recording.get("recorded_on"):
        return recording["recorded_on"]
    for case in recording.get("derender", []):
        created = (case.get("response") or {}).get("created") if isinstance(case.get("response"), dict) else None
        if isinstance(created, int):
            return datetime.date.fromtimestamp(created).isoformat()
    return None


class OurServer:
    """`render-service serve MODEL --host 127.0.0.1 --port P <the recorded vLLM flags>` as a subprocess."""

    def __init__(self, recording: dict) -> None:
        day = recording_day(recording)
        exe = shutil.which("render-service")
        cmd = [exe] if exe and day is None else [sys.executable, "-c", _AT_DAY.format(day=day)] if day else \
            [sys.executable, "-m", "render_service.serve.cli"]
        self.port = free_port()
        self.proc = subprocess.Popen(
            [*cmd, "serve", str(MODELS / recording["model"]), "--host", "127.0.0.1", "--port", str(self.port),
             *recording["flags"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"render-service serve exited: {self.proc.stderr.read()[-3000:]}")
            try:
                if self.client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("render-service serve did not come up in 180 s")
            time.sleep(0.2)

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def ours():
    """Our servers, started on first use and stopped when this module's tests are done."""
    started: dict[str, OurServer] = {}

    def get(server: str) -> httpx.Client:
        if server not in started:
            started[server] = OurServer(RECORDINGS[server])
        return started[server].client

    yield get
    for srv in started.values():
        srv.close()


def _post(client: httpx.Client, route: str, case: dict) -> httpx.Response:
    headers = dict(case.get("headers") or {})
    if case.get("raw") is not None:
        return client.post(route, content=case["raw"].encode(), headers=headers)
    return client.post(route, json=case.get("body"), headers=headers)


# ----------------------------------------------------------------------------------------------
# field-by-field comparison

_TOOL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]+$")
_IGNORED_KEYS = {"created"}  # wall-clock time of the answer


def _normalise(value):
    if isinstance(value, dict):
        return {k: ("<created>" if k in _IGNORED_KEYS else _normalise(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, str) and _TOOL_ID.match(value):
        return "chatcmpl-tool-<random>"
    return value


def diff(expected, actual, path: str = "") -> list[tuple[str, object, object]]:
    """Leaf paths where ``actual`` differs from ``expected`` (lists of different length: the list path)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in dict.fromkeys([*expected, *actual]):
            sub = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append((sub, expected[key], "<absent>"))
            elif key not in expected:
                out.append((sub, "<absent>", actual[key]))
            else:
                out += diff(expected[key], actual[key], sub)
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += diff(e, a, f"{path}.{i}" if path else str(i))
        return out
    if expected == actual and type(expected) is type(actual) or (
            isinstance(expected, (int, float)) and isinstance(actual, (int, float))
            and not isinstance(expected, bool) and not isinstance(actual, bool) and expected == actual):
        return []
    return [(path, expected, actual)]


def _path_matches(pattern: str, path: str) -> bool:
    """Glob over the dotted path (``*`` also crosses dots)."""
    return fnmatch.fnmatchcase(path, pattern.replace("**", "*"))


USED_DIFFERENCES: set[int] = set()
RAN: set[tuple] = set()  # corpus cases compared in this session (see test_no_stale_differences)


def _declared(scope: str, server: str, case_id: str, path: str) -> int | None:
    """Index of the deliberate difference covering this field, or None."""
    return next((i for i, d in enumerate(differences.DIFFERENCES)
                 if d.scope == scope and (_path_matches(d.path, path) if d.path else not path)
                 and any(fnmatch.fnmatchcase(case_id, c) for c in d.cases)
                 and any(fnmatch.fnmatchcase(server, s) for s in d.servers)), None)


def undeclared(scope: str, server: str, case_id: str, found: list[tuple[str, object, object]]) -> list[str]:
    """The differences in ``found`` that no deliberate-difference entry covers (as report lines)."""
    out = []
    for path, expected, actual in found:
        hit = _declared(scope, server, case_id, path)
        if hit is None:
            out.append(f"{path}: vLLM {json.dumps(expected, ensure_ascii=False)[:400]} "
                       f"!= ours {json.dumps(actual, ensure_ascii=False)[:400]}")
        else:
            USED_DIFFERENCES.add(hit)
    return out


def compare_answer(scope: str, server: str, case_id: str, recorded: dict, resp: httpx.Response) -> list[str]:
    """Status, then every field; error bodies are compared under scope ``error``."""
    problems = []
    if resp.status_code != recorded["status"]:
        hit = _declared("status", server, case_id, "")
        if hit is None:
            problems.append(f"status: vLLM {recorded['status']} != ours {resp.status_code}: {resp.text[:500]}")
        else:
            USED_DIFFERENCES.add(hit)
        return problems
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    expected = recorded["response"]
    if recorded["status"] >= 400:
        problems += undeclared("error", server, case_id, diff(_normalise(expected), _normalise(body)))
        problems += [f"error body vs vLLM ErrorResponse: {e}" for e in schema_errors("ErrorResponse", body)]
    else:
        problems += undeclared(scope, server, case_id, diff(_normalise(expected), _normalise(body)))
    return problems


# ----------------------------------------------------------------------------------------------
# render

def _param(server: str, key: str, *values):
    gap = differences.KNOWN_GAPS.get((server, key))
    marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
    return pytest.param(server, *values, id=f"{server}/{key}", marks=marks)


def _render_params():
    return [_param(server, f"render/{case['id']}", case) for server, rec in RECORDINGS.items() for case in rec["render"]]


@pytest.mark.parametrize("server,case", _render_params())
def test_render_matches_vllm(ours, server, case):
    RAN.add(("render", server, case["id"]))
    resp = _post(ours(server), case["route"], case)
    problems = compare_answer("render", server, case["id"], case, resp)
    if resp.status_code == 200 and case["route"].endswith("/render"):
        out = resp.json()
        for item in out if isinstance(out, list) else [out]:
            problems += [f"GenerateRequest schema: {e}" for e in schema_errors("GenerateRequest", item)]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------
# derender

_RESPONSE_SCHEMA = {"chat": "ChatCompletionResponse", "completion": "CompletionResponse",
                    "chat-stream": "DerenderChatStreamResponse", "completion-stream": "DerenderCompletionStreamResponse"}
_REQUEST_SCHEMA = {"chat": "DerenderChatRequest", "completion": "DerenderCompletionRequest",
                   "chat-stream": "DerenderChatStreamRequest", "completion-stream": "DerenderCompletionStreamRequest"}


def _derender_params():
    return [_param(server, f"{case['kind']}/{case['id']}", case)
            for server, rec in RECORDINGS.items() for case in rec["derender"]]


@pytest.mark.parametrize("server,case", _derender_params())
def test_derender_matches_vllm(ours, server, case):
    RAN.add((case["kind"], server, case["id"]))
    client = ours(server)
    problems: list[str] = []
    if "calls" not in case:
        resp = client.post(case["route"], json=case["body"])
        problems += compare_answer("derender", server, case["id"], case, resp)
        if resp.status_code == 200:
            kind = case["kind"] if case["kind"] != "bad" else ("chat-stream" if case["body"].get("stream") else "chat")
            problems += [f"schema: {e}" for e in schema_errors(_RESPONSE_SCHEMA[kind], resp.json())]
    else:
        state = None
        theirs, mine = StreamText(), StreamText()
        for i, call in enumerate(case["calls"]):
            body = {**call["body"], "stream_state": state}
            resp = client.post(case["route"], json=body)
            recorded = call
            if resp.status_code == 200 == call["status"]:
                # Deltas are compared as the text they add up to (see StreamText); every other field per call.
                out = resp.json()
                recorded = {**call, "response": theirs.take(call["response"])}
                resp = httpx.Response(200, json=mine.take(out))
                problems += [f"call {i} schema: {e}" for e in schema_errors(_RESPONSE_SCHEMA[case["kind"]], out)]
                state = out["stream_state"]
            problems += [f"call {i}: {p}" for p in compare_answer("derender-stream", server, case["id"], recorded, resp)]
            if resp.status_code != 200:
                break
        problems += [f"streamed text: {p}" for p in undeclared("derender-stream", server, case["id"],
                                                                diff(theirs.result(), mine.result()))]
    assert not problems, "\n".join(problems)


class StreamText:
    """What a client assembles from a derender stream: per choice, the concatenated ``content``,
    ``reasoning`` and ``text`` deltas and, per tool-call index, the id's presence, name and
    concatenated arguments. `take` strips those deltas from one response so the rest of the
    chunk is compared field by field."""

    def __init__(self) -> None:
        self.choices: dict[int, dict] = {}

    def take(self, response: dict) -> dict:
        response = json.loads(json.dumps(response))
        for choice in response.get("chunk", {}).get("choices") or []:
            acc = self.choices.setdefault(choice["index"], {"content": "", "reasoning": "", "text": "", "calls": {}})
            if "text" in choice:
                acc["text"] += choice.pop("text") or ""
            delta = choice.pop("delta", None) or {}
            for key in ("content", "reasoning"):
                acc[key] += delta.get(key) or ""
            if delta.get("role") is not None:
                acc["role"] = delta["role"]
            for call in delta.get("tool_calls") or []:
                entry = acc["calls"].setdefault(call["index"], {"has_id": False, "type": None, "name": "",
                                                                "arguments": ""})
                entry["has_id"] |= bool(call.get("id"))
                entry["type"] = call.get("type") or entry["type"]
                function = call.get("function") or {}
                entry["name"] += function.get("name") or ""
                entry["arguments"] += function.get("arguments") or ""
        return response

    def result(self) -> dict:
        return {str(i): {**acc, "calls": {str(k): v for k, v in acc["calls"].items()}}
                for i, acc in sorted(self.choices.items())}


def _accepted_params():
    out = []
    for server, rec in RECORDINGS.items():
        for case in rec["derender"]:
            calls = case.get("calls") or [case]
            if case["kind"] in _REQUEST_SCHEMA and calls[0]["status"] == 200:
                out.append(pytest.param(server, case["kind"], case["route"], calls[0]["body"],
                                        id=f"{server}/{case['kind']}/{case['id']}"))
    return out


@pytest.mark.parametrize("server,kind,route,body", _accepted_params())
def test_schema_valid_derender_request_accepted(ours, server, kind, route, body):
    assert not schema_errors(_REQUEST_SCHEMA[kind], body), "corpus request is not valid for vLLM's schema"
    resp = ours(server).post(route, json=body)
    assert resp.status_code == 200, resp.text


MINIMAL_DERENDER = [
    ("DerenderChatRequest", "/v1/chat/completions/derender",
     {"generate_response": {"request_id": "r", "choices": [{"index": 0, "token_ids": [9707, 0]}]},
      "chat_request": {"messages": []}}),
    ("DerenderChatRequest", "/v1/chat/completions/derender",
     {"stream": False, "model": None, "prompt_tokens": None, "prompt_token_ids": None,
      "generate_response": {"request_id": "r", "model": None, "created": None, "usage": None,
                            "prompt_logprobs": None, "prompt_token_id_logprobs": None, "prompt_token_ids": None,
                            "mm_placeholders": None, "metrics": None, "kv_transfer_params": None,
                            "ec_transfer_params": None, "output_mode": "tokens",
                            "choices": [{"index": 0, "finish_reason": None, "stop_reason": None,
                                         "token_ids": [9707], "routed_experts": None, "sampling_mask": None,
                                         "weight_versions": None, "logprobs": None}]},
      "chat_request": {"messages": [{"role": "user", "content": "hi"}], "tools": None}}),
    ("DerenderChatStreamRequest", "/v1/chat/completions/derender",
     {"stream": True, "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": [9707]}]},
      "prompt_token_ids": [9707], "chat_request": {"messages": []}}),
    ("DerenderChatStreamRequest", "/v1/chat/completions/derender",
     {"stream": True, "generate_chunk": {"request_id": "r", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                                         "choices": []},
      "prompt_token_ids": [9707], "chat_request": {"messages": []}}),
    ("DerenderCompletionRequest", "/v1/completions/derender",
     {"generate_responses": [{"request_id": "r", "choices": [{"index": 0, "token_ids": [11, 1879]}]}]}),
    ("DerenderCompletionStreamRequest", "/v1/completions/derender",
     {"stream": True, "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": [11]}]}}),
]


@pytest.mark.skipif("qwen3-hermes" not in RECORDINGS, reason="vLLM answers not recorded")
@pytest.mark.parametrize("schema,route,body", MINIMAL_DERENDER, ids=lambda v: v if isinstance(v, str) else "")
def test_minimal_schema_valid_derender_accepted(ours, schema, route, body):
    assert not schema_errors(schema, body)
    resp = ours("qwen3-hermes").post(route, json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    name = {"DerenderChatRequest": "ChatCompletionResponse", "DerenderCompletionRequest": "CompletionResponse",
            "DerenderChatStreamRequest": "DerenderChatStreamResponse",
            "DerenderCompletionStreamRequest": "DerenderCompletionStreamResponse"}[schema]
    assert not schema_errors(name, out)


# ----------------------------------------------------------------------------------------------
# the other render routes: Responses and Anthropic Messages (their parity corpus is issue 12's)

FRONT_DOOR_CASES = FIXTURES / "responses_messages" / "cases.json"


def _front_door_params():
    if not FRONT_DOOR_CASES.exists() or "qwen3-hermes" not in RECORDINGS:
        return []
    cases = json.loads(FRONT_DOOR_CASES.read_text())["cases"]
    return [pytest.param(c, id=c["name"]) for c in cases]


@pytest.mark.parametrize("case", _front_door_params())
def test_front_door_render_outputs_are_valid_for_vllm(ours, case):
    body = json.loads(json.dumps(case["body"]).replace('"$MODEL"', '"qwen3-hermes"'))
    resp = ours("qwen3-hermes").post(f"/v1/{case['route']}/render", json=body,
                                     headers={"X-Request-Id": case["name"]})
    assert resp.status_code < 500, resp.text
    if resp.status_code == 200:
        assert not schema_errors("GenerateRequest", resp.json())


# ----------------------------------------------------------------------------------------------
# the small routes routers and probes call

def _info_params():
    rec = RECORDINGS.get("qwen3-hermes") or {}
    return [pytest.param(x, id=f"{x['method']} {x['route']}") for x in rec.get("info", []) if x["route"] != "/metrics"]


@pytest.mark.parametrize("recorded", _info_params())
def test_info_routes_match_vllm(ours, recorded):
    RAN.add(("info", recorded["method"], recorded["route"]))
    resp = ours("qwen3-hermes").request(recorded["method"], recorded["route"])
    problems = compare_answer("info", "qwen3-hermes", recorded["route"], recorded,
                              httpx.Response(resp.status_code, content=resp.content, headers=resp.headers)
                              if resp.content else httpx.Response(resp.status_code, text=""))
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------
# the list itself

def test_known_gaps_name_recorded_cases():
    ids = {(server, f"render/{c['id']}") for server, rec in RECORDINGS.items() for c in rec["render"]}
    ids |= {(server, f"{c['kind']}/{c['id']}") for server, rec in RECORDINGS.items() for c in rec["derender"]}
    if FRONT_DOOR_CASES.exists():
        ids |= {("front-door", c["name"]) for c in json.loads(FRONT_DOOR_CASES.read_text())["cases"]}
    assert set(differences.KNOWN_GAPS) <= ids


def test_every_deliberate_difference_is_in_the_readme():
    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "vllm.md").read_text().split())
    missing = [d.readme for d in differences.DIFFERENCES if d.readme not in readme]
    assert not missing, f"docs/vllm.md's comparison with vLLM lacks: {missing}"


def test_no_stale_differences():
    """Runs last: when every comparison ran, every deliberate difference must still be needed."""
    total = len(_render_params()) + len(_derender_params()) + len(_info_params())
    if len(RAN) < total:
        pytest.skip("only part of the corpus ran; run the whole module to check the difference list")
    stale = [d.readme + " / " + d.path for i, d in enumerate(differences.DIFFERENCES)
             if i not in USED_DIFFERENCES and d.scope in differences.CORPUS_SCOPES]
    assert not stale, f"deliberate differences no answer needs any more (remove them): {stale}"
