//! Building a handoff packet for another agent and recording it as a
//! `handoff` event in the receiving session.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ApiState, error::CallError, page_limit, require_scope};
use crate::{
    domain::{
        FieldError,
        event::{Channel, EventRequest, NewEvent, Sensitivity},
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
/// shared by HTTP and MCP. The body is redacted first, so the packet
/// answered is the one stored, without the secrets it was sent with.
pub(crate) async fn create(
    state: &ApiState,
    caller: &Caller,
    mut body: Value,
) -> Result<HandoffCreated, CallError> {
    require_scope(caller, Scope::Write)?;
    state.redactor.redact_json(&mut body);
    let request: HandoffRequest = parse_json("", body).map_err(CallError::invalid)?;
    if let Some(claimed) = &request.tenant_id
        && claimed != caller.tenant.as_str()
    {
        return Err(CallError::tenant_mismatch("tenant_id"));
    }
    if let Some(agent) = &caller.agent
        && *agent != request.from_agent
    {
        return Err(CallError::agent_mismatch("from_agent"));
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
    .map_err(CallError::invalid)?;
    // Recorded like any append: validated, redacted, hash-chained. It is
    // the receiver's memory (`agent_id`): the log shows it to the sender,
    // the receiver and operators only.
    let event: EventRequest = serde_json::from_value(json!({
        "session_id": packet.session_id,
        "channel": channel,
        "actor": {"type": "agent", "id": packet.from_agent},
        "agent_id": packet.to_agent,
        "subject_id": packet.subject_id,
        "kind": "handoff",
        "sensitivity": sensitivity,
        "content": packet.content(),
        "refs": packet.refs,
    }))
    .map_err(|err| CallError::internal(&err))?;
    let event = NewEvent::parse(event, &state.redactor).map_err(CallError::invalid)?;
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

/// `GET /api/v1/handoffs`: a receiver's inbox.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InboxQuery {
    /// The receiving agent. An agent's token lists its own inbox (naming
    /// another is 403 `agent_mismatch`); other tokens list every agent's
    /// packets unless they name one.
    pub to_agent: Option<String>,
    /// `pending` (default: not accepted yet), `accepted`, or `all`.
    #[param(pattern = "^(pending|accepted|all)$")]
    pub state: Option<String>,
    #[param(minimum = 1, maximum = 1000, default = 50)]
    pub limit: Option<i64>,
}

/// A packet in an inbox, opened, with where it stands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InboxPacket {
    #[serde(flatten)]
    pub packet: handoff::Handoff,
    /// `pending`, or `accepted`: the receiver recorded an event citing it.
    pub state: String,
    /// The receiver's event that accepted it.
    pub accepted_by: Option<String>,
}

const INBOX_DEFAULT: i64 = 50;
const INBOX_MAX: i64 = 1_000;

/// The packets addressed to an agent, newest first: shared by HTTP and MCP.
pub(crate) async fn inbox(
    state: &ApiState,
    caller: &Caller,
    query: &InboxQuery,
) -> Result<Vec<InboxPacket>, CallError> {
    require_scope(caller, Scope::Read)?;
    let to_agent = match (&caller.agent, &query.to_agent) {
        (Some(own), Some(named)) if own != named => {
            return Err(CallError::agent_mismatch("to_agent"));
        }
        (Some(own), _) => Some(own.clone()),
        (None, named) => named.clone(),
    };
    let wanted = match query.state.as_deref() {
        None | Some("pending") => Some(false),
        Some("accepted") => Some(true),
        Some("all") => None,
        Some(_) => {
            return Err(CallError::invalid(FieldError::new(
                "state",
                "must be pending, accepted or all",
            )));
        }
    };
    let limit = page_limit(query.limit, INBOX_DEFAULT, INBOX_MAX)?;
    let rows = sqlx::query!(
        r#"SELECT handoff_id, seq, ts, session_id, from_agent, to_agent, task, task_id,
                  constraints, decision_ids, required_files, open_questions, refs,
                  channel AS "channel: Channel", sensitivity AS "sensitivity: Sensitivity",
                  CASE WHEN accepted_seq IS NULL THEN 'pending' ELSE 'accepted' END AS "state!",
                  accepted_by
             FROM projections.handoffs
            WHERE tenant_id = $1 AND ($2::text IS NULL OR to_agent = $2)
              AND ($3::bool IS NULL OR (accepted_seq IS NOT NULL) = $3)
            ORDER BY seq DESC LIMIT $4"#,
        caller.tenant.as_str(),
        to_agent,
        wanted,
        limit
    )
    .fetch_all(&state.pool)
    .await?;
    let mut packets: Vec<InboxPacket> = rows
        .into_iter()
        .map(|row| InboxPacket {
            packet: handoff::Handoff {
                handoff_id: row.handoff_id,
                seq: row.seq,
                ts: row.ts,
                session_id: row.session_id,
                channel: row.channel,
                sensitivity: row.sensitivity,
                from_agent: row.from_agent,
                to_agent: row.to_agent,
                task: row.task,
                task_id: row.task_id,
                constraints: row.constraints,
                decision_ids: row.decision_ids,
                required_files: row.required_files,
                open_questions: row.open_questions,
                refs: row.refs,
            },
            state: row.state,
            accepted_by: row.accepted_by,
        })
        .collect();
    for inbox in &mut packets {
        inbox
            .packet
            .open(&state.reader.keyring, caller.tenant.as_str())?;
    }
    Ok(packets)
}
