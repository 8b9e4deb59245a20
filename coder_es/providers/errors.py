"""Typed provider errors, and the mapping from HTTP status and API error types onto them.

Each error says whether retrying the same request could succeed (``retryable``); the retry loop
relies on that flag, never on string matching.
"""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class ProviderError(CoderESError):
    """A model provider failed. ``status`` and ``request_id`` are set when the server answered."""

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        request_id: str | None = None,
        error_type: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.message = message
        self.provider = provider
        self.status = status
        self.request_id = request_id
        self.error_type = error_type
        # Seconds the server asked us to wait before retrying (from retry-after headers).
        self.retry_after = retry_after
        parts = [f"{provider}: " if provider else "", message]
        if status is not None:
            parts.append(f" (HTTP {status}")
            parts.append(f", request {request_id})" if request_id else ")")
        elif request_id:
            parts.append(f" (request {request_id})")
        super().__init__("".join(parts))


class ProviderConfigError(ProviderError, UsageError):
    """The provider cannot be built: missing API key, bad base URL, unknown provider name."""


class AuthenticationError(ProviderError):
    """HTTP 401: the API key is missing, wrong or revoked."""


class PermissionDeniedError(ProviderError):
    """HTTP 403: the key is valid but may not use this model or feature."""


class NotFoundError(ProviderError):
    """HTTP 404: unknown model or endpoint (a wrong base URL shows up here)."""


class InvalidRequestError(ProviderError):
    """HTTP 400/413/422: the request itself is wrong; retrying it cannot help."""


class ContextTooLongError(InvalidRequestError):
    """The prompt does not fit the model's context window: the context must shrink."""


class ConflictError(ProviderError):
    """HTTP 409: a transient conflict on the server side; worth retrying."""

    retryable = True


class RateLimitedError(ProviderError):
    """HTTP 429: slow down; ``retry_after`` holds the server's hint in seconds when it gave one."""

    retryable = True


class OverloadedError(ProviderError):
    """HTTP 529 or an ``overloaded_error`` event: the provider is shedding load."""

    retryable = True


class ServerError(ProviderError):
    """HTTP 5xx: the provider failed internally."""

    retryable = True


class NetworkError(ProviderError):
    """The connection failed or broke (DNS, refused, reset, TLS)."""

    retryable = True


class ProviderTimeoutError(NetworkError):
    """No answer within the client's timeout (connect, read, write or pool)."""


class StreamProtocolError(ProviderError):
    """The response stream is malformed or ended early; nothing half-assembled is passed on."""


class ScriptExhaustedError(ProviderError):
    """The scripted provider was asked for more turns than its script holds."""


_BY_STATUS: dict[int, type[ProviderError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: ProviderTimeoutError,
    409: ConflictError,
    413: InvalidRequestError,
    422: InvalidRequestError,
    429: RateLimitedError,
    529: OverloadedError,
}

# Anthropic's error.type values (also used inside `event: error` after HTTP 200).
_BY_TYPE: dict[str, type[ProviderError]] = {
    "invalid_request_error": InvalidRequestError,
    "authentication_error": AuthenticationError,
    "permission_error": PermissionDeniedError,
    "not_found_error": NotFoundError,
    "request_too_large": InvalidRequestError,
    "rate_limit_error": RateLimitedError,
    "overloaded_error": OverloadedError,
    "api_error": ServerError,
    "timeout_error": ProviderTimeoutError,
    # OpenAI-compatible servers.
    "insufficient_quota": RateLimitedError,
    "rate_limit_exceeded": RateLimitedError,
    "server_error": ServerError,
    "context_length_exceeded": ContextTooLongError,
}

_CONTEXT_MARKERS = (
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
    "exceeds the context",
)


def error_class(status: int | None, error_type: str | None, message: str) -> type[ProviderError]:
    """The most specific error class for what the server said."""
    lowered = message.lower()
    maybe_context = error_type in (None, "invalid_request_error", "context_length_exceeded")
    if (maybe_context or status == 400) and any(m in lowered for m in _CONTEXT_MARKERS):
        return ContextTooLongError
    if error_type and error_type in _BY_TYPE:
        return _BY_TYPE[error_type]
    if status is not None:
        if status in _BY_STATUS:
            return _BY_STATUS[status]
        if status >= 500:
            return ServerError
        if 400 <= status < 500:
            return InvalidRequestError
    return ProviderError
