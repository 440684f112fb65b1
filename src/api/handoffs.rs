//! `POST /api/v1/handoffs`: build a handoff packet for another agent and
//! record it as a `handoff` event in the receiving session.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::{ApiError, BodyTooLarge, ErrorBody, RateLimited, Unauthorized, Unavailable},
    extract::{Authenticated, JsonBody},
};
use crate::{
    calls::handoffs::{HandoffCreated, create},
    read::handoff::HandoffRequest,
};

/// Hand work over to another agent
///
/// Builds a packet (task, constraints, decisions, required files, open
/// questions, evidence refs) and records it as a `handoff` event in the
/// receiving session. The receiver's bundle (`agent_id` = `to_agent`,
/// `session_id` = the packet's) then holds the packet, its decisions and at
/// most 20 evidence chunks, never the sender's transcript. Scope: write.
#[utoipa::path(
    post,
    path = "/api/v1/handoffs",
    tag = "handoffs",
    request_body = HandoffRequest,
    responses(
        (status = 201, description = "Recorded", body = HandoffCreated),
        (status = 400, description = "`invalid_field`: a field is missing or invalid, a list is over 64 entries, `task` is missing (and no `task_id` names a task), or `decision_ids[i]` is not a decision of this tenant", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope` (a read token) or `tenant_mismatch`", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_handoff(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body = create(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
