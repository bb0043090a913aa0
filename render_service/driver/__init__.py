"""Four-hop driver: render → tokens-only prefill → decode → derender behind one OpenAI port.

``render-service drive --prefill URL[,URL…] --decode URL[,URL…] [--render URL] --port P``
serves ``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming and not),
``GET /v1/models``, ``/health``, ``/metrics``. Flow and fields: wire brief §6.1; user docs
in ``docs/driver.md``.

Module map (one job each):

- ``config.py``   `DriverConfig`: the flags as one frozen value
- ``legs.py``     pure edits of a rendered `GenerateRequest` into the prefill and decode legs
- ``upstream.py`` upstream pools (affinity, least-busy), HTTP calls, errors that name the hop
- ``hops.py``     render + derender, in-process (`LocalHops`) or on a render server (`RemoteHops`)
- ``timing.py``   per-hop timer, ``Server-Timing`` text, Prometheus metrics
- ``flow.py``     `Driver`: one client request through the four hops, aborts, stop strings
- ``app.py``      starlette app; raw ASGI endpoints that watch for client disconnect
- ``cli.py``      the ``drive`` subcommand
"""

from .config import DriverConfig

__all__ = ["DriverConfig"]
