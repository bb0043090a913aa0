"""Four-hop driver: render → tokens-only prefill → decode → derender behind one OpenAI port.

``render-service drive --prefill URL[,URL…] --decode URL[,URL…] [--render URL] --port P``
serves every door of `doors.DOORS` (``POST /v1/chat/completions``, ``/v1/completions``,
``/v1/responses``, ``/v1/messages``; streaming and not), ``GET /v1/models``, ``/health``,
``/metrics``. Flow and fields: wire brief §6.1; user docs in ``docs/driver.md``; its
start-up is ``render_service/serve/drive.py``.

Module map (one job each):

- ``config.py``   `DriverConfig`: the flags as one frozen value
- ``legs.py``     legs and attempts: the prefill/decode bodies, `Upstreams` (pools, client,
                  metrics: what a leg uses, never the `Driver`), `Leg` (one prompt through
                  both engines), `relay` (decode chunks with their derendered views),
                  `Attempts` (next instance on connect failure), `RequestScope` (what to
                  abort), `Collected` (a decode stream folded into one response)
- ``upstream.py`` upstream pools (affinity, least-busy), HTTP calls, errors that name the hop
- ``hops.py``     render + derender, in-process (`LocalHops`, typed objects) or on a render
                  server (`RemoteHops`, the wire bodies)
- ``responder.py`` the ASGI responder: a JSON body or SSE events through ``send``
- ``timing.py``   per-hop timer, ``Server-Timing`` text, Prometheus metrics
- ``flow.py``     `Driver`: one `handle` for every door (`doors.DOORS`) through the four hops,
                  aborts, health; `ChatFlow` for chat and completions
- ``doors.py``    `DoorFlow`: the Responses and Anthropic Messages doors over the same legs
- ``conversations.py`` conversation keys and per-conversation KV reuse decisions
- ``app.py``      starlette app; raw ASGI endpoints that watch for client disconnect
"""

from .config import DriverConfig

__all__ = ["DriverConfig"]
