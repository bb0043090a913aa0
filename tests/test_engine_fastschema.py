"""The engine's cheap validation refuses exactly what jsonschema (vLLM's GenerateRequest schema)
and our model refuse: `fastschema.SurelyValid` only vouches for valid bodies, the memo of
values jsonschema accepted never lets an invalid body through, and `checks.split_prompt`
gives the same verdict and error as validating the whole body."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from reference_engine import checks
from reference_engine.fastschema import SurelyValid
from render_service.errors import OpenAIError
from render_service.wire import generate as wire
from render_service.wire.validate import validate

SCHEMA = json.loads(checks.GENERATE_REQUEST_SCHEMA.read_text())
JUDGE = jsonschema.Draft202012Validator(SCHEMA)

SAMPLING = {"n": 1, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": None, "max_tokens": 16,
            "min_tokens": 0, "stop": None, "stop_token_ids": [2], "include_stop_str_in_output": False,
            "ignore_eos": False, "skip_special_tokens": True, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "repetition_penalty": 1.0, "logprobs": None, "prompt_logprobs": None, "structured_outputs": None,
            "output_kind": 2}
BASE = {"request_id": "r1", "token_ids": [5, 6, 7], "sampling_params": SAMPLING, "model": "m", "stream": False,
        "stream_options": None, "kv_transfer_params": {"do_remote_decode": True, "remote_block_ids": None}}
VALUES = [None, True, False, 0, 1, -1, 1.0, 2.5, 2**63, -(2**63) - 1, "", "x", "a" * 1100, [], [1], [1.0], [True],
          ["a"], [[1, 2]], [[1, "a"]], {}, {"a": 1}, {"include_usage": None}, {"json": None}, {"regex": 5},
          {"disable_any_whitespace": False}]
SO = {"json": None, "regex": None, "choice": None, "grammar": None, "json_object": None,
      "disable_any_whitespace": None, "disable_additional_properties": None, "whitespace_pattern": None,
      "structural_tag": None}


def _bodies() -> list:
    """The base body with each top-level, ``sampling_params`` and ``structured_outputs`` field
    (every one the schema names, plus an unknown one) set to each of `VALUES`."""
    out = [BASE]
    for field in [*SCHEMA["properties"], "unknown"]:
        out += [{**BASE, field: v} for v in VALUES]
    for field in [*SCHEMA["properties"]["sampling_params"]["properties"], "unknown"]:
        out += [{**BASE, "sampling_params": {**SAMPLING, field: v}} for v in VALUES]
    for field in SO:
        for v in VALUES:
            out.append({**BASE, "sampling_params": {**SAMPLING, "structured_outputs": {**SO, field: v}}})
    out += [{**BASE, "sampling_params": {**SAMPLING, "structured_outputs": {**SO, "disable_any_whitespace": False,
                                                                             "disable_additional_properties": False}}}]
    return out


BODIES = _bodies()


def _fast_verdict(body) -> str | None:
    try:
        checks.check_vllm_schema(body)
    except OpenAIError as err:
        return err.param or "body"
    return None


def test_the_cases_have_both_verdicts():
    valid = sum(JUDGE.is_valid(b) for b in BODIES)
    assert 200 < valid < len(BODIES) - 200, valid


def test_surely_valid_vouches_only_for_valid_bodies_and_for_the_usual_one():
    fast = SurelyValid(SCHEMA)
    vouched = [b for b in BODIES if fast(b, [])]
    assert all(JUDGE.is_valid(b) for b in vouched)
    assert fast(BASE, []) and len(vouched) > 100  # the body every client sends needs no jsonschema


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_check_vllm_schema_refuses_exactly_what_jsonschema_refuses(order):
    """Run through the cases in several orders (the memo fills as valid bodies pass): every
    verdict and named field is jsonschema's."""
    checks._surely_valid.cache_clear()
    bodies = BODIES if order == "forward" else BODIES[::-1]
    for body in bodies + bodies:
        error = jsonschema.exceptions.best_match(JUDGE.iter_errors(body))
        expected = None if error is None else (".".join(map(str, error.absolute_path)) or "body")
        assert _fast_verdict(body) == expected, body


def _verdict(body, split: bool):
    """The engine's request checks (our model, vLLM's schema, the token-id rule) on ``body``,
    whole or through `checks.split_prompt`: the request's fields, or the error."""
    try:
        shape, prompt = checks.split_prompt(body) if split else (body, None)
        req = validate(wire.GenerateRequest, shape)
        if prompt is not None:
            req.token_ids = prompt
        checks.check_request(req)
        checks.check_vllm_schema(shape)
    except OpenAIError as err:
        return err.status, err.param, err.message
    return req.model_dump()


@pytest.mark.parametrize("token_ids", [[5], [0, 1, 2], [True], [1, False], [1.0], [2.5], ["3"], [-1], [3, -2], [],
                                       [2**64], None, "x", {"a": 1}, [[1]], [None]])
def test_split_prompt_gives_the_verdict_of_the_whole_body(token_ids):
    for extra in ({}, {"request_id": 5}, {"sampling_params": {**SAMPLING, "temperature": "hot"}}):
        body = {**BASE, **extra, "token_ids": token_ids}
        assert _verdict(copy.deepcopy(body), split=True) == _verdict(copy.deepcopy(body), split=False)
