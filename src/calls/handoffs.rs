//! Building a handoff packet for another agent and recording it as a
//! `handoff` event in the receiving session.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::{ApiState, error::ApiError, require_scope};
use crate::{
    domain::{
        event::{EventRequest, NewEvent},
        parse_json,
        tenant::Scope,
    },
    read::handoff::{self, HandoffRequest, Packet},
    tenants::Caller,
};

/// The recorded packet. `handoff_id` is the `handoff` event's id: pass it
/// as the receiver's bundle `handoff_id` to ask for this packet.
#[derive(Serialize, utoipa::ToSchema)]
pub struct HandoffCreated {
    pub handoff_id: String,
    pub event_id: String,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    /// The receiving session: build the receiver's bundle with it.
    pub session_id: String,
    pub packet: Packet,
}

/// Builds the packet from a request body and records it for `caller`:
/// shared by HTTP and MCP.
pub(crate) async fn create(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<HandoffCreated, ApiError> {
    require_scope(caller, Scope::Write)?;
    let request: HandoffRequest = parse_json("", body).map_err(ApiError::invalid)?;
    if let Some(claimed) = &request.tenant_id
        && claimed != caller.tenant.as_str()
    {
        return Err(ApiError::tenant_mismatch("tenant_id"));
    }
    if let Some(agent) = &caller.agent
        && *agent != request.from_agent
    {
        return Err(ApiError::agent_mismatch("from_agent"));
    }
    // The packet names decisions and tasks the caller may have recorded a
    // moment ago: read them once projections have caught up (bounded).
    let policy = state
        .reader
        .cache
        .policy(&state.pool, caller.tenant.as_str())
        .await?;
    state
        .reader
        .catch_up(
            caller.tenant.as_str(),
            std::time::Duration::from_millis(policy.strong_consistency_timeout_ms),
        )
        .await?;
    let (channel, sensitivity) = (request.channel, request.sensitivity);
    let packet = handoff::build(
        &state.pool,
        &state.reader.keyring,
        caller.tenant.as_str(),
        caller.agent.as_deref(),
        request,
    )
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
    let appended = super::events::append_counted(state, &caller.tenant, vec![event]).await?;
    let appended = &appended[0];
    Ok(HandoffCreated {
        handoff_id: appended.event_id.clone(),
        event_id: appended.event_id.clone(),
        seq: appended.seq,
        created_at: appended.created_at,
        session_id: packet.session_id.clone(),
        packet,
    })
}
