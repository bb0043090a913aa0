"""TLS as uvicorn serves it (``--ssl-*``): checked before the model loads, then the server's
``ssl.SSLContext``."""

from __future__ import annotations

from pathlib import Path

from .startup_check import StartupCheckError


def check_tls(config) -> None:
    """The TLS flags as uvicorn will use them: both key and certificate or neither, every file
    readable, the key matching the certificate, the CA bundle and cipher list valid, mTLS
    (``--ssl-cert-reqs`` 1 or 2) only with a CA bundle to check clients against.

    Raises:
        StartupCheckError: the first problem, naming the flag and file.
    """
    import ssl

    files = {"--ssl-keyfile": config.ssl_keyfile, "--ssl-certfile": config.ssl_certfile,
             "--ssl-ca-certs": config.ssl_ca_certs}
    if not any(files.values()):
        if config.ssl_cert_reqs or config.ssl_ciphers:
            raise StartupCheckError("--ssl-cert-reqs / --ssl-ciphers need --ssl-certfile and --ssl-keyfile")
        return
    if not (config.ssl_keyfile and config.ssl_certfile):
        raise StartupCheckError("TLS needs both --ssl-certfile and --ssl-keyfile")
    for flag, path in files.items():
        if path:
            try:
                Path(path).read_bytes()
            except OSError as exc:
                raise StartupCheckError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except ssl.SSLError as exc:
        raise StartupCheckError(f"--ssl-certfile {config.ssl_certfile} / --ssl-keyfile {config.ssl_keyfile}: "
                                f"not a certificate and its key ({exc.reason or exc})") from None
    if config.ssl_ca_certs:
        try:
            context.load_verify_locations(config.ssl_ca_certs)
        except ssl.SSLError as exc:
            raise StartupCheckError(f"--ssl-ca-certs {config.ssl_ca_certs}: not a PEM CA bundle "
                                    f"({exc.reason or exc})") from None
    elif config.ssl_cert_reqs:
        raise StartupCheckError(f"--ssl-cert-reqs {config.ssl_cert_reqs} asks for client certificates: give "
                                "--ssl-ca-certs, the CA they must chain to")
    if config.ssl_ciphers:
        try:
            context.set_ciphers(config.ssl_ciphers)
        except ssl.SSLError:
            raise StartupCheckError(f"--ssl-ciphers {config.ssl_ciphers!r}: no cipher OpenSSL knows") from None


def tls_context(config):
    """The server's ``ssl.SSLContext`` for the TLS flags, made as uvicorn makes it
    (``uvicorn.config.create_ssl_context``), or None without ``--ssl-certfile``. The connection
    protocol (`render_service.http.connections.HardenedProtocol`, from ``app.state.tls``) does
    the handshake itself, under the connection bounds; uvicorn is not given the flags."""
    if not config.ssl_certfile:
        return None
    import ssl

    from uvicorn.config import create_ssl_context

    return create_ssl_context(config.ssl_certfile, config.ssl_keyfile, None, ssl.PROTOCOL_TLS_SERVER,
                              config.ssl_cert_reqs, config.ssl_ca_certs, config.ssl_ciphers)
