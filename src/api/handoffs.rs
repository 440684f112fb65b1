//! `POST /api/v1/handoffs`: build a handoff packet for another agent and
//! record it as a `handoff` event in the receiving session.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};
use serde_json::{Value, json};

use super::{
    ApiState,
    error::ApiError,
    extract::{Authenticated, JsonBody},
    require_scope,
};
use crate::{
    domain::{
        event::{EventRequest, NewEvent},
        parse_json,
        tenant::Scope,
    },
    read::handoff::{self, HandoffRequest},
    tenants::Caller,
};

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_handoff(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body = create(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Builds the packet from a request body and records it for `caller`:
/// shared by HTTP and MCP.
pub(crate) async fn create(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<Value, ApiError> {
    require_scope(caller, Scope::Write)?;
    let request: HandoffRequest = parse_json("", body).map_err(ApiError::invalid)?;
    if let Some(claimed) = &request.tenant_id
        && claimed != caller.tenant.as_str()
    {
        return Err(ApiError::tenant_mismatch("tenant_id"));
    }
    let (channel, sensitivity) = (request.channel, request.sensitivity);
    let packet = handoff::build(&state.pool, caller.tenant.as_str(), request)
        .await?
        .map_err(ApiError::invalid)?;
    // Recorded like any append: validated, redacted, hash-chained.
    let event: EventRequest = serde_json::from_value(json!({
        "session_id": packet.session_id,
        "channel": channel,
        "actor": {"type": "agent", "id": packet.from_agent},
        "kind": "handoff",
        "sensitivity": sensitivity,
        "content": packet.content(),
        "refs": packet.refs,
    }))
    .map_err(|err| ApiError::internal(&err))?;
    let event = NewEvent::parse(event, &state.redactor).map_err(ApiError::invalid)?;
    let appended = state.appender.append(&caller.tenant, vec![event]).await?;
    let appended = &appended[0];
    Ok(json!({
        "handoff_id": appended.event_id,
        "event_id": appended.event_id,
        "seq": appended.seq,
        "created_at": appended.created_at,
        "session_id": packet.session_id,
        "packet": packet,
    }))
}
