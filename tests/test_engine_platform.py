"""The reference engine on whatever CPU this machine has (issue: AMX machines crashed it).

A llama.cpp build that cannot run on this CPU used to die with SIGSEGV on its first prompt of
more than one token (AMX tiles the VM does not enable), after the engine had said it was up.
Now the engine keeps llama.cpp's weights out of the AMX buffer, checks itself with a real
multi-token prefill + decode before it opens its port, and a dead engine is reported with the
signal it died of.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from conftest import P_LEG_KV, REPO, skip_unless_smollm2_engine
from reference_engine.selfcheck import BackendCheckError, choose_buffers, describe_exit
from reference_engine.testing import EngineProcess

GEN = "/inference/v1/generate"
PROMPT = list(range(1000, 1064))  # 64 ids inside SmolLM2's 49,152-token vocabulary: one multi-token prefill


def test_describe_exit_names_signals_and_codes():
    assert describe_exit(-signal.SIGSEGV) == "was killed by SIGSEGV (signal 11)"
    assert describe_exit(-signal.SIGILL) == "was killed by SIGILL (signal 4)"
    assert describe_exit(2) == "exited with code 2"


SEGV = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
OK = [sys.executable, "-c", "print('ok')"]


def test_a_layout_that_crashes_falls_back_to_plain_buffers():
    layout, note = choose_buffers("model.gguf", 1, command=lambda layout: SEGV if layout == "extra" else OK)
    assert layout == "plain"
    assert "extra buffers was killed by SIGSEGV (signal 11)" in note and "plain CPU buffers" in note


def test_the_first_layout_that_runs_is_kept_without_a_note():
    assert choose_buffers("model.gguf", 1, command=lambda layout: OK) == ("extra", "")


def test_no_layout_that_runs_is_refused_with_one_line_naming_the_signal():
    with pytest.raises(BackendCheckError) as info:
        choose_buffers("model.gguf", 1, command=lambda layout: SEGV)
    message = str(info.value)
    assert message.count("SIGSEGV") == 2 and "self-check" in message and "-DGGML_NATIVE=OFF" in message
    assert "\n" not in message


def test_a_child_that_fails_without_a_signal_is_reported_with_its_last_line():
    fail = [sys.executable, "-c", "import sys; print('loading', file=sys.stderr); sys.exit('cannot load: bad magic')"]
    tried = []
    with pytest.raises(BackendCheckError, match=r"exited with code 1: cannot load: bad magic"):
        choose_buffers("model.gguf", 1, command=lambda layout: tried.append(layout) or fail)
    assert tried == ["extra"]  # a model llama.cpp cannot load fails alike in every layout


def test_engine_process_reports_how_a_scripted_engine_died(tmp_path):
    script = tmp_path / "s.json"
    script.write_text('{"responses": [{"token_ids": [1, 2]}]}')
    with pytest.raises(RuntimeError, match=r"was killed by SIGSEGV \(signal 11\) while in use"):
        with EngineProcess("--scripted", str(script)) as eng:
            os.kill(eng.proc.pid, signal.SIGSEGV)
            eng.proc.wait(10)
            with pytest.raises(RuntimeError, match="SIGSEGV"):
                eng.check_alive()


def test_engine_process_kill_is_not_reported_as_a_death(tmp_path):
    script = tmp_path / "s.json"
    script.write_text('{"responses": [{"token_ids": [1, 2]}]}')
    with EngineProcess("--scripted", str(script)) as eng:
        eng.kill()  # a test simulating a crash on purpose
        eng.check_alive()


class TestRealModel:
    """SmolLM2-135M on llama.cpp as installed by the project (the `engine` extra)."""

    @pytest.fixture(autouse=True)
    def _needs_engine(self):
        skip_unless_smollm2_engine()

    def test_the_self_check_finds_a_layout_this_cpu_runs(self):
        from reference_engine.llama_backend import default_model_path

        layout, note = choose_buffers(default_model_path(), 1)
        assert layout in ("extra", "plain") and (layout == "extra") == (note == "")

    def test_the_choice_is_remembered_per_build_model_and_cpu(self, tmp_path, monkeypatch):
        from reference_engine import selfcheck
        from reference_engine.llama_backend import default_model_path

        monkeypatch.setenv("RENDER_SERVICE_CACHE_DIR", str(tmp_path))
        first = selfcheck.choose_buffers_once(default_model_path(), 1)
        assert [p.name for p in tmp_path.iterdir()][0].startswith("llama-selfcheck-")

        def must_not_run(*args, **kwargs):
            raise AssertionError("the check ran again")

        monkeypatch.setattr(selfcheck, "choose_buffers", must_not_run)
        assert selfcheck.choose_buffers_once(default_model_path(), 1) == first
        copy = tmp_path / "copy.gguf"  # another model file: checked again
        copy.write_bytes(open(default_model_path(), "rb").read())
        with pytest.raises(AssertionError, match="ran again"):
            selfcheck.choose_buffers_once(str(copy), 1)

    @pytest.mark.parametrize("role, extra", [("prefill", {"kv_transfer_params": P_LEG_KV}), ("both", {})])
    def test_multi_token_prefill_through_the_engine_process(self, role, extra):
        with EngineProcess(role=role) as eng:
            r = httpx.post(eng.url + GEN, json={"token_ids": PROMPT, "sampling_params": {
                "temperature": 0, "max_tokens": 4 if role == "both" else 1}, **extra}, timeout=120)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["token_ids"]
            eng.check_alive()
            assert eng.proc.poll() is None

    def test_engine_refuses_a_model_it_cannot_run_with_one_line(self, tmp_path):
        bad = tmp_path / "broken.gguf"
        bad.write_bytes(b"GGUF" + b"\0" * 64)
        done = subprocess.run([sys.executable, "-m", "reference_engine", "--model", str(bad), "--port", "9"],
                              capture_output=True, text=True, timeout=120, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("render-service engine: error: llama.cpp self-check"), lines


@pytest.mark.parametrize("exc, status, words", [
    (httpx.ConnectError("All connection attempts failed"), 503, "process has exited"),
    (httpx.RemoteProtocolError("Server disconnected without sending a response."), 502, "SIGSEGV"),
])
def test_drive_names_a_dead_engine_as_the_likely_cause(exc, status, words):
    from render_service.driver.upstream import error_from_exception

    err = error_from_exception("decode", "http://127.0.0.1:9", exc)
    assert err.status == status and words in err.message
    assert words not in error_from_exception("render", "http://127.0.0.1:9", exc).message
