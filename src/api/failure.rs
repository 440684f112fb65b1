//! How calls' outcomes are answered over HTTP: an append's status, a
//! failure's status, JSON body, `WWW-Authenticate` on a 401 and
//! `Retry-After` when the caller should retry; and the answers every
//! authenticated route shares, as OpenAPI responses.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

use crate::calls::{
    error::{CallError, ErrorBody, Failure},
    events::Stored,
};

/// An append's status: 201 when it stored something new, 200 when every
/// event was a replay.
pub fn stored(stored: Stored) -> StatusCode {
    match stored {
        Stored::New => StatusCode::CREATED,
        Stored::Replayed => StatusCode::OK,
    }
}

/// The HTTP status of a kind of failure.
pub fn status(failure: Failure) -> StatusCode {
    match failure {
        Failure::Invalid => StatusCode::BAD_REQUEST,
        Failure::Unauthorized => StatusCode::UNAUTHORIZED,
        Failure::Forbidden => StatusCode::FORBIDDEN,
        Failure::NotFound => StatusCode::NOT_FOUND,
        Failure::Conflict => StatusCode::CONFLICT,
        Failure::Gone => StatusCode::GONE,
        Failure::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Failure::Timeout => StatusCode::REQUEST_TIMEOUT,
        Failure::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Failure::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        Failure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Failure::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for CallError {
    fn into_response(self) -> Response {
        let status = status(self.failure());
        let mut response = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

// The answers every authenticated route shares, as reusable OpenAPI
// responses. Documentation only: `CallError` builds the real ones.

/// `unauthorized`: no, malformed, unknown or revoked bearer token.
#[derive(utoipa::ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "`Bearer`")))]
#[allow(dead_code)]
pub struct Unauthorized(ErrorBody);

/// `body_too_large`: the body is over the daemon's `--max-body-bytes`
/// (default 16 MiB); `field` is `body`.
#[derive(utoipa::ToResponse)]
#[allow(dead_code)]
pub struct BodyTooLarge(ErrorBody);

/// `rate_limited`: the tenant is over its request or body-byte rate on this
/// daemon; nothing was done. Retry after `Retry-After` seconds.
#[derive(utoipa::ToResponse)]
#[response(headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
#[allow(dead_code)]
pub struct RateLimited(ErrorBody);

/// `unavailable`: the database cannot be reached; nothing was done. Retry
/// after `Retry-After` seconds.
#[derive(utoipa::ToResponse)]
#[response(headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
#[allow(dead_code)]
pub struct Unavailable(ErrorBody);
