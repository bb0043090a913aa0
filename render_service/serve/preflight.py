"""Start-up checks that need no model: run before it loads, each refusal one line (exit 2)."""

from __future__ import annotations

import errno
import socket


class StartupCheckError(RuntimeError):
    """A flag is wrong; the message says which and why (printed as one line, exit 2)."""


def check_port(host: str, port: int) -> None:
    """That ``host:port`` can be listened on now (an empty ``host`` is every interface), so a
    server that cannot serve says so before it loads anything.

    Raises:
        StartupCheckError: ``host`` is no address or name this machine resolves, no interface
            here has it, or the port is taken (another server) or not ours to take.
    """
    where = f"{host}:{port}" if host else f"port {port} of all interfaces"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except socket.gaierror as exc:
            raise StartupCheckError(f"--host {host}: not a valid address or a host name this machine resolves "
                                    f"({exc.strerror})") from None
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise StartupCheckError(f"--host {host}: no network interface of this machine has that address "
                                        "(127.0.0.1: this machine only; leave it out for every interface)") from None
            hint = " (is another server running there?)" if exc.errno == errno.EADDRINUSE else ""
            raise StartupCheckError(f"cannot listen on {where}: {exc.strerror or exc}{hint}") from None
