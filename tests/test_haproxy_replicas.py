"""deploy/haproxy/haproxy.cfg as shipped, live: four `render-service serve` replicas behind the real
HAProxy (Debian's package). Conversations that send no session header stay on one replica every
turn (hashed on their opening), their answers echo the session key, the turns after the first are
counted as reused on that replica, and every answer is token-identical to one server's (issue 39)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import httpx
import pytest

from bench.bench_replicas import haproxy as haproxy_running, reuse
from cli_server import serve
from conftest import REPO
from render_service.http.session_key import session_key

CONFIG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
INSTALL = "apt-get install -y haproxy"


def haproxy() -> str:
    """The haproxy binary; installed from Debian's packages under CI=true, else the test skips."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None and os.environ.get("CI") == "true":
        # a failed install (no registry) leaves found None: the test then skips, saying how to install
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "haproxy"], check=False)
        found = shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin:/usr/bin")
    if found is None:
        pytest.skip(f"haproxy is not installed ({INSTALL})")
    return found


def conversation(n: int, turns: int) -> list[list[dict]]:
    """The messages of each turn of agent conversation ``n`` (one system prompt for all: only the
    first user message tells conversations apart, as in a fleet of one agent)."""
    system = {"role": "system", "content": "You are a coding agent working in a large repository. " * 60}
    messages = [system, {"role": "user", "content": f"Task {n}: fix the failing test number {n}."}]
    out = [list(messages)]
    for t in range(1, turns):
        messages += [{"role": "assistant", "content": "", "tool_calls": [{
                          "id": f"c{t}", "type": "function",
                          "function": {"name": "read_file", "arguments": f"{{\"path\": \"src/m{n}_{t}.py\"}}"}}]},
                     {"role": "tool", "tool_call_id": f"c{t}", "content": f"def f{t}(x):\n    return x + {t}\n" * 20}]
        out.append(list(messages))
    return out


def test_conversations_without_a_session_header_stay_on_one_replica():
    binary = haproxy()
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(serve())[0] for _ in range(4)]
        ports = [client.base_url.port for client in replicas]
        url = stack.enter_context(haproxy_running(CONFIG.read_text(), ports, binary))
        client = stack.enter_context(httpx.Client(base_url=url, timeout=120))
        urls = [str(r.base_url).rstrip("/") for r in replicas]
        before = [reuse(u) for u in urls]
        conversations = [conversation(n, 4) for n in range(6)]
        answers, where = {}, {}
        for t in range(4):  # the conversations' turns interleaved, as concurrent agents send them
            for n, turns in enumerate(conversations):
                reply = client.post("/v1/chat/completions/render", json={"messages": turns[t]})
                assert reply.status_code == 200, reply.text
                assert reply.headers["x-session-id"] == session_key([], {"messages": turns[0]})
                where.setdefault(n, set()).add(reply.headers["x-render-replica"])
                answers[n, t] = reply.json()["token_ids"]
        assert all(len(replica) == 1 for replica in where.values()), where
        assert len(set.union(*where.values())) > 1  # and the conversations were spread
        # every turn after the first took the turn before from its replica's prefix cache
        grew = [(a[0] - b[0], a[1] - b[1]) for a, b in zip((reuse(u) for u in urls), before)]
        reused, tokenized = sum(g[0] for g in grew), sum(g[1] for g in grew)
        assert reused >= sum(len(answers[n, t - 1]) * 0.8 for n in range(6) for t in range(1, 4))
        assert reused + tokenized == sum(len(ids) for ids in answers.values())
        # token-identical to one server's answers (a fresh one: everything rendered cold)
        with serve() as (alone, _):
            for (n, t), ids in answers.items():
                assert alone.post("/v1/chat/completions/render", json={"messages": conversations[n][t]}
                                  ).json()["token_ids"] == ids
        # a caller's key routes the same way on every turn and comes back as sent
        keyed = {client.post("/render", json={"messages": turns}, headers={"X-Session-ID": "agent-7"}
                             ).headers["x-render-replica"] for turns in conversations[0]}
        assert len(keyed) == 1
        # a client that sends the echoed (derived) key back stays where its opening went
        for n, turns in enumerate(conversations):
            echoed = client.post("/v1/chat/completions/render", json={"messages": turns[-1]},
                                 headers={"X-Session-ID": session_key([], {"messages": turns[0]})})
            assert echoed.headers["x-render-replica"] in where[n], (n, echoed.headers["x-render-replica"], where[n])


def test_the_bench_varies_only_what_it_says():
    """bench/bench_replicas.py's configs: the shipped file with N server lines; its round-robin
    phase drops the hash and the stick table (what a plain Service does), nothing else."""
    from bench.bench_replicas import proxy_config

    shipped = CONFIG.read_text()
    two = proxy_config(2, False)
    assert [line.split()[1] for line in two.splitlines() if line.strip().startswith("server ")] == ["r1", "r2"]
    assert '127.0.0.1:"${R2}"' in two and "${R3}" not in two
    assert proxy_config(4, False) == shipped
    plain = proxy_config(4, True)
    assert "balance roundrobin" in plain and "stick on" not in plain and "balance hash" not in plain
    assert "hash-balance-factor 200" in proxy_config(4, False, 200)
