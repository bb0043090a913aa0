"""Errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.

Every failure a client can cause is an `OpenAIError`; the HTTP layer turns it into a JSON
response with ``code`` equal to the HTTP status (vLLM 0.33 convention, wire brief §0).
We use ``BadRequestError`` for every 400, including body validation (vLLM mixes in the
HTTP phrase ``"Bad Request"`` there; clients key on ``code``/``param``, so one type is
kinder).
"""

from __future__ import annotations

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    415: "UnsupportedMediaTypeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    431: "RequestHeaderFieldsTooLargeError",
    500: "InternalServerError",
    501: "NotImplementedError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class OpenAIError(Exception):
    """A client-visible error.

    Args:
        status: HTTP status (4xx for the client's fault, 5xx for ours or an upstream's).
        message: human-readable, no tracebacks or file paths.
        param: the offending request field as a dotted path (``"messages.0.content"``), or None.
        type: error type; defaults from the status (``400`` → ``BadRequestError``).
    """

    def __init__(self, status: int, message: str, *, param: str | None = None, type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type or _TYPES.get(status, "Error")

    def body(self) -> dict:
        """The JSON body: ``{"error": {message, type, param, code}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    """A 400 ``BadRequestError``."""
    return OpenAIError(400, message, param=param)


def not_found(message: str, param: str | None = None) -> OpenAIError:
    """A 404 ``NotFoundError``."""
    return OpenAIError(404, message, param=param)


def check_token_ids(ids: list[int] | None, vocab_size: int, param: str) -> None:
    """400 unless every id is in ``[0, vocab_size)``."""
    if ids:
        lo, hi = min(ids), max(ids)
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise bad_request(f"Token id {bad} in `{param}` is outside the vocabulary [0, {vocab_size}).", param=param)
