"""memd's error answers as exceptions.

Every error memd sends has one shape, `{"error": {"code", "message",
"field"}}`; each becomes a `MemdError` carrying them, of a subclass by
what a caller does about it.
"""

from __future__ import annotations

from typing import Optional


class MemdError(Exception):
    """An error answer from memd (or no answer at all: `status` 0)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"memd {status} {code}: {message}{where}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after


class InvalidRequest(MemdError):
    """400 or 413: the request is wrong; `field` names the offending part."""


class AuthError(MemdError):
    """401 or 403: no valid token, another tenant, or too small a scope."""


class NotFound(MemdError):
    """404: no such thing in this tenant."""


class IdempotencyConflict(MemdError):
    """409 `idempotency_conflict`: the idempotency key was already used for a
    different request; nothing was stored. Resend the original request, or
    use a new key (`field` names the key: `idempotency_key`, or
    `events[i].idempotency_key` in a batch)."""


class RateLimited(MemdError):
    """429: over the tenant's rate; retried by the client up to its limit."""


class Unavailable(MemdError):
    """503, or the daemon could not be reached: nothing was done."""


def error_for(
    status: int,
    code: str,
    message: str,
    field: Optional[str],
    retry_after: Optional[float],
) -> MemdError:
    """The exception for an error answer."""
    kind: type[MemdError]
    if status in (400, 413):
        kind = InvalidRequest
    elif status in (401, 403):
        kind = AuthError
    elif status == 404:
        kind = NotFound
    elif status == 409 and code == "idempotency_conflict":
        kind = IdempotencyConflict
    elif status == 429:
        kind = RateLimited
    elif status == 503:
        kind = Unavailable
    else:
        kind = MemdError
    return kind(status, code, message, field, retry_after)
