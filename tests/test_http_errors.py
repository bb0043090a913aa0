"""Errors a fresh user meets on serve and drive, each in the OpenAI error shape with a message
that names what is wrong (tester report items 8 and 9): unknown routes and methods, integers
past a field's range, compressed bodies; and the driver's ``/load``."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest

from conftest import render_server, serve_app

from render_service.config.serve import ServeConfig
from render_service.driver.app import create_app as create_driver_app
from render_service.driver.config import DriverConfig
from render_service.driver.flow import Driver
from render_service.serve.server import load_bundle

CHAT = {"messages": [{"role": "user", "content": "x"}]}


@pytest.fixture(scope="module")
def serve_url():
    with render_server(None) as url:
        yield url


@pytest.fixture(scope="module")
def drive_url():
    """A driver rendering in process; its engines are ports with nothing behind them."""
    cfg = ServeConfig()
    driver = Driver(DriverConfig(prefill=("http://127.0.0.1:9",), decode=("http://127.0.0.1:9",), serve=cfg),
                    load_bundle(cfg))
    with serve_app(create_driver_app(driver)) as url:
        yield url


def openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert list(err) == ["message", "type", "param", "code"] and err["code"] == status
    return err


@pytest.mark.parametrize("server", ["serve_url", "drive_url"])
def test_unknown_route_and_wrong_method(request, server):
    url = request.getfixturevalue(server)
    err = openai_error(httpx.post(url + "/v1/nothing/here", json={}), 404)
    assert err["type"] == "NotFoundError" and "/v1/nothing/here" in err["message"]
    r = httpx.get(url + "/v1/chat/completions" + ("/render" if server == "serve_url" else ""))
    err = openai_error(r, 405)
    assert err["type"] == "MethodNotAllowedError" and "GET" in err["message"]
    assert r.headers["allow"] == "POST"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
def test_a_generation_route_on_serve_points_to_drive(serve_url, path):
    err = openai_error(httpx.post(serve_url + path, json=CHAT), 404)  # still a 404: routers probe routes
    assert err["type"] == "NotFoundError"
    assert "render-service drive" in err["message"] and f"{path}/render" in err["message"]


def test_messages_on_serve_points_to_drive_in_anthropics_shape(serve_url):
    r = httpx.post(serve_url + "/v1/messages", json=CHAT)
    assert r.status_code == 404
    body = r.json()
    assert body["type"] == "error" and "render-service drive" in body["error"]["message"]


def test_drive_load_counts_requests_in_flight(drive_url):
    r = httpx.get(drive_url + "/load")
    assert r.status_code == 200 and r.json() == {"server_load": 0}


@pytest.mark.parametrize(("field", "low", "high"), [("n", 1, 16384), ("seed", -(2**63), 2**63 - 1),
                                                    ("truncate_prompt_tokens", -1, 2**31 - 1)])
def test_integer_past_64_bits_names_the_field_and_its_range(serve_url, field, low, high):
    raw = orjson.dumps(CHAT)[:-1] + f', "{field}": {2**64}}}'.encode()
    r = httpx.post(serve_url + "/v1/chat/completions/render", content=raw, headers={"Content-Type": "application/json"})
    err = openai_error(r, 400)
    assert err["param"] == field
    assert f"{field}: integer out of range; it must be from {low} to {high}" in err["message"]
    assert "parse input string" not in err["message"]


@pytest.mark.parametrize("server", ["serve_url", "drive_url"])
def test_compressed_body_is_415(request, server):
    url = request.getfixturevalue(server)
    path = "/v1/chat/completions" + ("/render" if server == "serve_url" else "")
    r = httpx.post(url + path, content=gzip.compress(orjson.dumps(CHAT)),
                   headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    err = openai_error(r, 415)
    assert "Content-Encoding 'gzip' is not supported" in err["message"]
    messages = "/v1/messages" + ("/derender" if server == "serve_url" else "")
    r = httpx.post(url + messages, content=gzip.compress(b"{}"),
                   headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status_code == 415 and r.json()["type"] == "error"  # Anthropic's shape on its route


@pytest.mark.parametrize("route,body,param", [
    ("/v1/chat/completions/render", {**CHAT, "tools": [{"type": "function", "function": {"parameters": {}}}]},
     "tools.0.function.name"),
    ("/v1/chat/completions/render", {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}},
                                                       {"type": "function", "function": {"name": "g", "strict": 1}}]},
     "tools.1.function.strict"),
    ("/v1/chat/completions/render", {**CHAT, "tools": [{"type": "function", "function": {"name": "f",
                                                                                         "parameters": 3}}]},
     "tools.0.function.parameters"),
    ("/v1/chat/completions/render", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": 3}}},
     "response_format.json_schema.name"),
    ("/v1/responses/render", {"input": "hi", "tools": [{"type": "function"}]}, "tools.0.name"),
])
def test_a_bad_tool_names_the_fields_path(serve_url, route, body, param):
    """A tool without a name answered ``param: null`` (its check runs over the whole request,
    where pydantic has no location); docs/vllm.md promises the field's path."""
    r = httpx.post(serve_url + route, json=body, timeout=30)
    assert openai_error(r, 400)["param"] == param, r.text
