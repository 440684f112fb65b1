// memd's error answers as exceptions. Every error memd sends has one
// shape, `{"error": {"code", "message", "field"}}`; each becomes a
// `MemdError` carrying them, of a subclass by what a caller does about it.

export class MemdError extends Error {
  constructor(
    /** The HTTP status; 0 when the daemon could not be reached. */
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    /** The JSON path of the offending request field, when one is. */
    readonly field: string | null = null,
    /** Seconds memd asked to wait before a retry (`Retry-After`). */
    readonly retryAfter: number | null = null,
  ) {
    super(`memd ${status} ${code}: ${detail}${field ? ` (field ${field})` : ""}`);
    this.name = new.target.name;
  }
}

/** 400 or 413: the request is wrong; `field` names the offending part. */
export class InvalidRequest extends MemdError {}
/** 401 or 403: no valid token, another tenant, or too small a scope. */
export class AuthError extends MemdError {}
/** 404: no such thing in this tenant. */
export class NotFound extends MemdError {}
/** 409 `idempotency_conflict`: the key was used for another request; nothing was stored. */
export class IdempotencyConflict extends MemdError {}
/** 429: over the tenant's rate; retried by the client up to its limit. */
export class RateLimited extends MemdError {}
/** 503, or the daemon could not be reached: nothing was done. */
export class Unavailable extends MemdError {}

/** The exception for an error answer. */
export function errorFor(
  status: number,
  code: string,
  message: string,
  field: string | null,
  retryAfter: number | null,
): MemdError {
  const kind =
    status === 400 || status === 413 ? InvalidRequest
    : status === 401 || status === 403 ? AuthError
    : status === 404 ? NotFound
    : status === 409 && code === "idempotency_conflict" ? IdempotencyConflict
    : status === 429 ? RateLimited
    : status === 503 ? Unavailable
    : MemdError;
  return new kind(status, code, message, field, retryAfter);
}
