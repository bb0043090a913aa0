"""`StartupCheckError`: what every check made before the model loads raises (preflight.py,
tls.py, lora.py); start-up prints it as one line and exits 2."""


class StartupCheckError(RuntimeError):
    """A flag is wrong; the message says which and why (printed as one line, exit 2)."""
