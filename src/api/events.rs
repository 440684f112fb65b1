//! `POST /api/v1/events`: append one event, or `{"events": [...]}` as one transaction.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{ApiError, BodyTooLarge, ErrorBody, RateLimited, Unauthorized, Unavailable},
    extract::{Authenticated, JsonBody},
};
use crate::{
    calls::events::{AppendResponse, record},
    domain::event::AppendRequest,
};

/// Append events to the log
///
/// One event, or `{"events": [...]}` (1 to 1000) appended as one
/// all-or-nothing transaction. Every string is scanned and secrets are
/// replaced with `[REDACTED:<pattern>]` before anything is stored;
/// `sensitivity: "secret"` content is never stored. A retry with the same
/// `idempotency_key` returns the original event (`replayed: true`). Scope:
/// write.
#[utoipa::path(
    post,
    path = "/api/v1/events",
    tag = "events",
    request_body = AppendRequest,
    responses(
        (status = 201, description = "Appended; one item per event, in request order", body = AppendResponse),
        (status = 200, description = "Every event was a replay of an earlier `idempotency_key`: nothing new was stored; the items are the originals, with `replayed: true`", body = AppendResponse),
        (status = 400, description = "`invalid_field`: a field is missing, of the wrong type, out of its enum or over a limit; `field` is its JSON path (`events[1].channel`)", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope` (a read token), `tenant_mismatch` (a body `tenant_id` that is not the token's) or `unknown_tenant`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the `idempotency_key` was used for another request (nothing stored; resend the original or use a new key), or `subject_erased`: `subject_id` names an erased data subject", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_events(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (status, body) = record(&state, &caller, body).await?;
    Ok((status, Json(body)).into_response())
}
