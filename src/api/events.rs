//! `POST /api/v1/events`: append one event, or `{"events": [...]}` as one
//! transaction; `POST /api/v1/events/{id}/correct`: withdraw one event and
//! record its corrected content.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, JsonBody, PathId},
    failure,
};
use crate::{
    calls::{
        corrections::{Corrected, CorrectionRequest, correct},
        events::{AppendResponse, record},
    },
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
        (status = 403, description = "`insufficient_scope` (a read token), `tenant_mismatch` (a body `tenant_id` that is not the token's) or `unknown_tenant`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the `idempotency_key` was used for another request (nothing stored; resend the original or use a new key), or `subject_erased`: `subject_id` names an erased data subject", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_events(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let (status, body) = record(&state, &caller, body).await?;
    Ok((failure::stored(status), Json(body)).into_response())
}

/// Correct one memory
///
/// Withdraws the event (a `retraction` naming it, with `reason`) and
/// records `content` in its place, as one all-or-nothing batch: the
/// corrected event keeps the original's kind, session, channel, agent,
/// data subject, sensitivity and tags, and cites the original's refs and
/// the original itself. From then on no bundle, search or view shows the
/// original (`GET /api/v1/events/{id}` shows it with `retracted_by`). To
/// withdraw without a replacement, append a `retraction` event. An agent's
/// token corrects its own memory or nobody's. Scope: write.
#[utoipa::path(
    post,
    path = "/api/v1/events/{id}/correct",
    tag = "events",
    params(("id" = String, Path, description = "The `event_id` (`evt_...`) to correct")),
    request_body = CorrectionRequest,
    responses(
        (status = 201, description = "Withdrawn and recorded anew", body = Corrected),
        (status = 200, description = "A replay of an earlier correction with the same `idempotency_key`", body = Corrected),
        (status = 400, description = "`invalid_field`: `content` not of the event's kind's shape, `reason` empty, an unknown field, or the event is an erasure, retraction or handoff (`field` is `id`)", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`: a read token", body = ErrorBody),
        (status = 404, description = "`not_found`: no event of this id that the token may correct (another agent's memory is answered alike)", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the key was used for another request; `already_withdrawn` (field `id`): the event was withdrawn already (corrected or retracted); correct what replaced it", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, event = %event_id))]
pub async fn post_correct(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(event_id): PathId,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let (status, body) = correct(&state, &caller, &event_id, body).await?;
    Ok((failure::stored(status), Json(body)).into_response())
}
