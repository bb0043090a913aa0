"""`run_listening`: `uvicorn.run` for one process, with a call once the socket accepts connections."""

from __future__ import annotations

import socket
from typing import Callable

import uvicorn

STARTUP_FAILURE = 3  # uvicorn.run's exit status when the server could not start (a port taken, …)


class ListeningServer(uvicorn.Server):
    """`uvicorn.Server` that calls ``on_listening()`` once its sockets accept connections."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:  # False when the bind failed (uvicorn then exits)
            self.on_listening()


def run_listening(config: uvicorn.Config, on_listening: Callable[[], None]) -> int:
    """Serve ``config`` (one process, no reload) as `uvicorn.run` does; ``on_listening()`` runs on the
    event loop once the server listens (`serve` starts the fast tokenizer's build there: work that
    need not delay ``/health``). Returns the exit status: 0, or `STARTUP_FAILURE`.
    """
    server = ListeningServer(config, on_listening)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it caught once it has shut down
        pass
    return 0 if server.started else STARTUP_FAILURE
