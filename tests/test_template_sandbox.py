"""The request-template worker pool keeps its slots whatever happens to its workers.

A pool that lost count of its workers used to wait forever for one that no longer existed:
after `close()` (as a server shuts down) every later request template hung its thread.
"""

from __future__ import annotations

import pytest

from render_service.errors import OpenAIError
from render_service.model import template_sandbox
from render_service.model.template_sandbox import TemplateLimits, TemplateSandbox

SOURCE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def sandbox():
    box = TemplateSandbox(TemplateLimits(workers=1))
    yield box
    box.close()


def test_pool_serves_again_after_close(sandbox):
    assert sandbox.call("render", SOURCE, MESSAGES) == "user: hi\n"
    sandbox.close()
    assert sandbox.call("render", SOURCE, MESSAGES) == "user: hi\n"


def test_a_worker_that_cannot_start_frees_its_slot(sandbox, monkeypatch):
    def no_process(limits):
        raise OSError("no more processes")

    real = template_sandbox._Worker
    monkeypatch.setattr(template_sandbox, "_Worker", no_process)
    with pytest.raises(OSError):
        sandbox.call("render", SOURCE, MESSAGES)
    monkeypatch.setattr(template_sandbox, "_Worker", real)
    assert sandbox.call("render", SOURCE, MESSAGES) == "user: hi\n"


def test_busy_pool_answers_503_instead_of_waiting_forever(sandbox):
    held = sandbox._acquire()  # the only worker, taken and not given back
    try:
        with pytest.raises(OpenAIError) as err:
            sandbox.call("render", SOURCE, MESSAGES)
        assert err.value.status == 503
    finally:
        sandbox._idle.put(held)
