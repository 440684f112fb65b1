//! `POST /api/v1/handoffs`: build a handoff packet for another agent and
//! record it as a `handoff` event in the receiving session;
//! `GET /api/v1/handoffs`: a receiver's inbox.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, JsonBody, QueryParams},
};
use crate::{
    calls::handoffs::{HandoffCreated, InboxPacket, InboxQuery, create, inbox},
    read::handoff::HandoffRequest,
};

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Inbox {
    /// Newest first.
    handoffs: Vec<InboxPacket>,
}

/// A receiver's inbox
///
/// The handoff packets addressed to an agent, newest first: by default
/// those it has not accepted yet. A packet is accepted by the first event
/// its receiver records that cites it (its `handoff_id` in `refs`): a reply,
/// a task update. An agent's token reads its own inbox; the receiver's
/// bundles show its newest pending packet whatever their session. Scope:
/// read.
#[utoipa::path(
    get,
    path = "/api/v1/handoffs",
    tag = "handoffs",
    params(InboxQuery),
    responses(
        (status = 200, description = "The packets, newest first", body = Inbox),
        (status = 400, description = "`invalid_field`: `state` or `limit`", body = ErrorBody),
        (status = 403, description = "`agent_mismatch`: an agent's token named another agent's inbox", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_inbox(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<InboxQuery>,
) -> Result<Response, CallError> {
    let handoffs = inbox(&state, &caller, &query).await?;
    Ok(Json(Inbox { handoffs }).into_response())
}

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
        (status = 400, description = "`invalid_field`: a field is missing or invalid, `to_agent` is the sender, a list is over 64 entries, `task` is missing (and no `task_id` names a task), or `decision_ids[i]` is not a decision of this tenant the sender may see", body = ErrorBody),
        (status = 403, description = "`insufficient_scope` (a read token) or `tenant_mismatch`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_handoff(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let body = create(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
