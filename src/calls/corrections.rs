//! Correcting one memory: a retraction of the event and its corrected
//! content, appended together, so that the log shows what was withdrawn,
//! why, and what replaced it, and no bundle ever shows both or neither.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{
    ApiState,
    error::{CallError, Failure},
    events::{AppendResponse, Stored, record},
    require_scope,
};
use crate::{
    domain::{
        FieldError,
        event::{ActorRequest, Channel, Kind, Sensitivity},
        limits::MAX_ID_BYTES,
        parse_json,
        tenant::Scope,
    },
    read::privacy::event_row_condition,
    tenants::Caller,
    write::Appended,
};

/// `POST /api/v1/events/{id}/correct`: the corrected content and why.
/// Everything else of the corrected event (its kind, session, channel,
/// agent, data subject, sensitivity, tags and refs) carries over.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectionRequest {
    /// The whole corrected content, in the shape of the event's kind (a
    /// message's `{"text": ...}`, a decision's `{"decision": ..., "scope":
    /// ...}`).
    #[schema(value_type = std::collections::HashMap<String, serde_json::Value>)]
    pub content: Map<String, Value>,
    /// Why the event is corrected: kept in the retraction, for audits.
    pub reason: String,
    /// Who corrects it.
    #[schema(value_type = ActorRequest)]
    pub actor: Map<String, Value>,
    /// A retry with the same key answers the original correction. At most
    /// 245 bytes: the retraction's key is this one and `#retraction`.
    pub idempotency_key: Option<String>,
    /// When it happened (default: now).
    pub ts: Option<DateTime<Utc>>,
}

/// What `POST /api/v1/events/{id}/correct` appended.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Corrected {
    /// The retraction of the corrected event.
    pub retraction: Appended,
    /// The event with the corrected content: the corrected event's kind,
    /// session, channel, agent, data subject, sensitivity and tags, its
    /// refs and the corrected event's id.
    pub event: Appended,
}

/// Suffix of the retraction's idempotency key, derived from the request's.
const RETRACTION_KEY_SUFFIX: &str = "#retraction";

/// Withdraws `event_id` and records `body.content` in its place, as one
/// batch (both or neither). The event must be one the caller may retract
/// (a 404 otherwise, whatever the reason, as for a missing one).
pub(crate) async fn correct(
    state: &ApiState,
    caller: &Caller,
    event_id: &str,
    body: Value,
) -> Result<(Stored, Corrected), CallError> {
    require_scope(caller, Scope::Write)?;
    let request: CorrectionRequest = parse_json("", body).map_err(CallError::invalid)?;
    if let Some(key) = &request.idempotency_key
        && key.len() + RETRACTION_KEY_SUFFIX.len() > MAX_ID_BYTES
    {
        return Err(invalid(
            "idempotency_key",
            "is at most 245 bytes in a correction (the retraction's key adds #retraction)",
        ));
    }
    let original = Original::read(state, caller, event_id).await?;
    if matches!(
        original.kind,
        Kind::Erasure | Kind::Retraction | Kind::Handoff
    ) {
        return Err(invalid(
            "id",
            &format!(
                "{event_id} is a {}, which cannot be corrected",
                original.kind.as_str()
            ),
        ));
    }
    // Corrected twice, an event would have two replacements in force. (A
    // resend of this very correction, under its key, is replayed below.)
    let resent = request.idempotency_key.as_ref().is_some_and(|key| {
        original.retraction_key.as_deref() == Some(&format!("{key}{RETRACTION_KEY_SUFFIX}"))
    });
    if let Some(by) = original.retracted_by.as_ref().filter(|_| !resent) {
        return Err(CallError::new(
            Failure::Conflict,
            "already_withdrawn",
            format!(
                "{event_id} was withdrawn by {by}; correct what replaced it (its refs name {event_id})"
            ),
        )
        .with_field("id"));
    }
    let envelope = |kind: Kind| {
        let mut event = Map::new();
        event.insert("session_id".into(), json!(original.session_id));
        event.insert("channel".into(), json!(original.channel));
        event.insert("agent_id".into(), json!(original.agent_id));
        event.insert("actor".into(), Value::Object(request.actor.clone()));
        event.insert("kind".into(), json!(kind));
        event.insert("sensitivity".into(), json!(original.sensitivity));
        if let Some(ts) = request.ts {
            event.insert("ts".into(), json!(ts));
        }
        event
    };
    let mut retraction = envelope(Kind::Retraction);
    retraction.insert("content".into(), json!({ "reason": request.reason }));
    retraction.insert("refs".into(), json!([event_id]));
    if let Some(key) = &request.idempotency_key {
        retraction.insert(
            "idempotency_key".into(),
            json!(format!("{key}{RETRACTION_KEY_SUFFIX}")),
        );
    }
    let mut corrected = envelope(original.kind);
    corrected.insert("subject_id".into(), json!(original.subject_id));
    corrected.insert("tags".into(), json!(original.tags));
    let mut refs = original.refs.clone();
    refs.push(event_id.to_owned());
    corrected.insert("refs".into(), json!(refs));
    corrected.insert("content".into(), Value::Object(request.content));
    if let Some(key) = request.idempotency_key {
        corrected.insert("idempotency_key".into(), json!(key));
    }
    let batch = json!({ "events": [retraction, corrected] });
    match record(state, caller, batch).await {
        Ok((status, AppendResponse::Batch(mut appended))) if appended.events.len() == 2 => {
            let event = appended.events.pop().expect("two events");
            let retraction = appended.events.pop().expect("two events");
            Ok((status, Corrected { retraction, event }))
        }
        Ok(_) => Err(CallError::internal(&std::io::Error::other(
            "a correction did not come back as two events",
        ))),
        Err(err) => Err(as_sent(err)),
    }
}

/// Withdraws `event_ids` (1 to 64 events the caller may retract) with
/// `reason`, as one `retraction` event recorded in the first one's
/// session, channel and sensitivity: what MCP's `memory_retract` does, for
/// a caller that knows the ids alone. Errors name `event_ids[i]` and
/// `reason`.
pub(crate) async fn retract(
    state: &ApiState,
    caller: &Caller,
    event_ids: &[String],
    reason: &str,
    actor: Value,
) -> Result<(Stored, Appended), CallError> {
    require_scope(caller, Scope::Write)?;
    let Some(first) = event_ids.first() else {
        return Err(invalid("event_ids", "name the events to retract"));
    };
    let original =
        Original::read(state, caller, first)
            .await
            .map_err(|err| match err.failure() {
                Failure::NotFound => invalid(
                    "event_ids[0]",
                    &format!("names no event of this tenant that this token may retract: {first}"),
                ),
                _ => err,
            })?;
    let body = json!({
        "session_id": original.session_id,
        "channel": original.channel,
        "agent_id": original.agent_id,
        "actor": actor,
        "kind": "retraction",
        "sensitivity": original.sensitivity,
        "content": {"reason": reason},
        "refs": event_ids,
    });
    match record(state, caller, body).await {
        Ok((status, AppendResponse::One(appended))) => Ok((status, appended)),
        Ok(_) => Err(CallError::internal(&std::io::Error::other(
            "one retraction came back as a batch",
        ))),
        Err(err) => {
            let renamed = err.field().map(|field| match field.strip_prefix("refs") {
                Some(index) => format!("event_ids{index}"),
                None if field == "content.reason" => "reason".to_owned(),
                None => field.to_owned(),
            });
            Err(match renamed {
                Some(field) => err.with_field(field),
                None => err,
            })
        }
    }
}

/// An error about the appended batch, named as the request named it: the
/// corrected event's fields as they are, the retraction's reason as
/// `reason`.
fn as_sent(err: CallError) -> CallError {
    let renamed = match err.field() {
        Some("events[0].content.reason") => Some("reason".to_owned()),
        Some(field) => field
            .strip_prefix("events[1].")
            .or_else(|| field.strip_prefix("events[0]."))
            .map(str::to_owned),
        None => None,
    };
    match renamed {
        Some(field) => err.with_field(field),
        None => err,
    }
}

fn invalid(field: &str, message: &str) -> CallError {
    CallError::invalid(FieldError::new(field, message))
}

/// The envelope of the event corrected.
#[derive(sqlx::FromRow)]
struct Original {
    session_id: String,
    channel: Channel,
    agent_id: Option<String>,
    subject_id: Option<String>,
    kind: Kind,
    sensitivity: Sensitivity,
    tags: Vec<String>,
    refs: Vec<String>,
    /// The first retraction that withdrew it, if one did, and that
    /// retraction's idempotency key.
    retracted_by: Option<String>,
    retraction_key: Option<String>,
}

impl Original {
    /// The event, if the caller may retract it: one of its tenant it may
    /// read, and for an agent's token the agent's own or nobody's.
    async fn read(state: &ApiState, caller: &Caller, event_id: &str) -> Result<Self, CallError> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT session_id, channel, agent_id, subject_id, kind, sensitivity, tags, refs,
                    r.event_id AS retracted_by, r.idempotency_key AS retraction_key
               FROM events
               LEFT JOIN LATERAL (
                    SELECT r.event_id, r.idempotency_key FROM events r
                     WHERE r.tenant_id = events.tenant_id AND r.kind = 'retraction'
                       AND r.refs @> ARRAY[events.event_id]::text[]
                     ORDER BY r.seq LIMIT 1) r ON true
              WHERE events.tenant_id = $1 AND events.event_id = $2 AND {readable}
                AND ($3::text IS NULL OR agent_id IS NULL OR agent_id = $3)",
            readable = event_row_condition(3)
        )))
        .bind(caller.tenant.as_str())
        .bind(event_id)
        .bind(&caller.agent)
        .fetch_optional(&state.pool)
        .await?
        .ok_or_else(|| CallError::not_found(format!("no event {event_id} this token may correct")))
    }
}
