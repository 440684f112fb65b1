//! Recording events: one event or a batch, parsed, redacted and stamped
//! with the caller's agent, then appended; and one event of a kind from a
//! flat body (decisions, tasks).

use serde::Serialize;
use serde_json::Value;

use super::{ApiState, error::CallError, require_scope};
use crate::{
    domain::{
        FieldError,
        event::{ActorType, Kind, NewEvent, claimed_tenant_mismatch, parse_body},
        tenant::{Scope, TenantId},
    },
    metrics::Outcome,
    tenants::Caller,
    write::Appended,
};

/// The answer has the request's shape: one event, or a batch in request order.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum AppendResponse {
    One(Appended),
    Batch(AppendedBatch),
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct AppendedBatch {
    pub events: Vec<Appended>,
}

/// Whether an append stored anything: HTTP answers 201 or 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// At least one event is new.
    New,
    /// Every event was an idempotent replay of one stored before.
    Replayed,
}

/// Appends one event or a `{"events": [...]}` batch for `caller`: the one
/// write path of HTTP and MCP. Answers whether anything new was stored,
/// and the response body.
pub(crate) async fn record(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<(Stored, AppendResponse), CallError> {
    record_checked(state, caller, body, |_| Ok(())).await
}

/// [`record`], with a check of the route's own on the parsed events.
async fn record_checked(
    state: &ApiState,
    caller: &Caller,
    body: Value,
    check: impl FnOnce(&[NewEvent]) -> Result<(), CallError>,
) -> Result<(Stored, AppendResponse), CallError> {
    require_scope(caller, Scope::Write)?;
    let parsed = parse_events(state, caller, body)
        .and_then(|(events, batch)| check(&events).map(|()| (events, batch)));
    let parsed = match parsed {
        Ok((events, batch)) => match within_view_limits(state, caller, &events, batch).await {
            Ok(()) => retractable(state, caller, &events, batch)
                .await
                .map(|()| (events, batch)),
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    let (events, batch) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => {
            let tenant = caller.tenant.as_str();
            state
                .metrics
                .append(tenant, Outcome::of_failure(err.failure()), 0, None);
            return Err(err);
        }
    };
    let mut appended = append_counted(state, &caller.tenant, events)
        .await
        .map_err(|err| if batch { err.in_batch() } else { err })?;
    let status = if appended.iter().all(|a| a.replayed) {
        Stored::Replayed
    } else {
        Stored::New
    };
    let body = if batch {
        AppendResponse::Batch(AppendedBatch { events: appended })
    } else {
        AppendResponse::One(appended.swap_remove(0))
    };
    Ok((status, body))
}

/// Memory blocks: a `view_update` whose text has more tokens than the
/// tenant's policy allows its view (`view_limits`) is refused, naming the
/// view and its limit; nothing of the request is stored.
async fn within_view_limits(
    state: &ApiState,
    caller: &Caller,
    events: &[NewEvent],
    batch: bool,
) -> Result<(), CallError> {
    let updates: Vec<(usize, &str, &str)> = events
        .iter()
        .enumerate()
        .filter(|(_, event)| event.kind == Kind::ViewUpdate)
        .filter_map(|(index, event)| {
            let view = event.content.get("view")?.as_str()?;
            let text = event.content.get("text")?.as_str()?;
            Some((index, view, text))
        })
        .collect();
    if updates.is_empty() {
        return Ok(());
    }
    let tenant = caller.tenant.as_str();
    let policy = state.reader.cache.policy(&state.pool, tenant).await?;
    for (index, view, text) in updates {
        let Some(limit) = policy.view_limit(view) else {
            continue;
        };
        let tokens = state.reader.counter.count(text);
        if tokens > limit {
            let field = if batch {
                format!("events[{index}].content.text")
            } else {
                "content.text".to_owned()
            };
            return Err(CallError::invalid(FieldError::new(
                field,
                format!(
                    "view {view:?} holds at most {limit} tokens (policy view_limits); \
                     this text has {tokens}"
                ),
            )));
        }
    }
    Ok(())
}

/// A retraction withdraws events the caller may retract: events of its
/// tenant it may read and, for an agent's token, the agent's own or
/// nobody's. An id that names anything else (another agent's memory, an
/// event of another tenant, none at all) is refused alike, naming the ref,
/// so a refusal tells nothing of what exists. Erasures, retractions and
/// handoffs are not withdrawn: an erasure and a retraction are the log's
/// own record, and a handoff was delivered (record a new one).
async fn retractable(
    state: &ApiState,
    caller: &Caller,
    events: &[NewEvent],
    batch: bool,
) -> Result<(), CallError> {
    let retractions: Vec<(usize, &NewEvent)> = events
        .iter()
        .enumerate()
        .filter(|(_, event)| event.kind == Kind::Retraction)
        .collect();
    if retractions.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = retractions
        .iter()
        .flat_map(|(_, event)| event.refs.iter().map(String::as_str))
        .collect();
    let found: std::collections::HashMap<String, String> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT event_id, kind FROM events
              WHERE tenant_id = $1 AND event_id = ANY ($2) AND {readable}
                AND ($3::text IS NULL OR agent_id IS NULL OR agent_id = $3)",
            readable = crate::read::privacy::event_row_condition(3)
        )))
        .bind(caller.tenant.as_str())
        .bind(&ids)
        .bind(&caller.agent)
        .fetch_all(&state.pool)
        .await?
        .into_iter()
        .collect();
    for (index, event) in retractions {
        for (at, id) in event.refs.iter().enumerate() {
            let field = match batch {
                true => format!("events[{index}].refs[{at}]"),
                false => format!("refs[{at}]"),
            };
            let refused = match found.get(id).map(String::as_str) {
                None => format!("names no event of this tenant that this token may retract: {id}"),
                Some(kind @ ("erasure" | "retraction" | "handoff")) => {
                    format!("{id} is a {kind}, which cannot be retracted")
                }
                Some(_) => continue,
            };
            return Err(CallError::invalid(FieldError::new(field, refused)));
        }
    }
    Ok(())
}

/// Appends `events` for `tenant` and counts the request in the metrics
/// (stored, replayed or failed, and how long it took): every append of HTTP
/// and MCP goes through here.
pub(crate) async fn append_counted(
    state: &ApiState,
    tenant: &TenantId,
    events: Vec<NewEvent>,
) -> Result<Vec<Appended>, CallError> {
    let started = std::time::Instant::now();
    let appended = state.appender.append(tenant, events).await;
    let took = Some(started.elapsed());
    match appended {
        Ok(appended) => {
            let stored = appended.iter().filter(|a| !a.replayed).count();
            let outcome = if stored == 0 {
                Outcome::Replayed
            } else {
                Outcome::Ok
            };
            state.metrics.append(tenant.as_str(), outcome, stored, took);
            Ok(appended)
        }
        Err(err) => {
            let err = CallError::from(err);
            let outcome = Outcome::of_failure(err.failure());
            state.metrics.append(tenant.as_str(), outcome, 0, took);
            Err(err)
        }
    }
}

/// The request body as events ready to append (parsed, redacted, stamped
/// with the caller's agent), and whether it was a batch.
fn parse_events(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<(Vec<NewEvent>, bool), CallError> {
    let (requests, batch) = parse_body(body).map_err(CallError::invalid)?;
    if let Some(field) = claimed_tenant_mismatch(&requests, caller.tenant.as_str(), batch) {
        return Err(CallError::tenant_mismatch(field));
    }
    let events = requests
        .into_iter()
        .enumerate()
        .map(|(index, request)| {
            NewEvent::parse(request, &state.redactor).map_err(|err| {
                if batch {
                    err.within(&format!("events[{index}]"))
                } else {
                    err
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(CallError::invalid)?;
    if let Some((index, ts)) = too_far_ahead(&events, state.max_clock_skew) {
        let field = if batch {
            format!("events[{index}].ts")
        } else {
            "ts".to_owned()
        };
        return Err(CallError::invalid(crate::domain::FieldError::new(
            field,
            format!(
                "is {ts}, more than {} s ahead of the daemon's clock: an event cannot have \
                 happened later than it is recorded (omit ts for now; --max-clock-skew-secs \
                 sets the allowance)",
                state.max_clock_skew.as_secs()
            ),
        )));
    }
    // A subject's content is sealed under its own key, wrapped by the
    // master key: without a key file there is nothing to seal with.
    if !state.reader.keyring.is_on()
        && let Some(index) = events.iter().position(|e| e.subject_id.is_some())
    {
        let field = if batch {
            format!("events[{index}].subject_id")
        } else {
            "subject_id".to_owned()
        };
        return Err(CallError::invalid(crate::domain::FieldError::new(
            field,
            "needs encryption at rest: start memd with a key file (--key-file, MEMD_KEY_FILE)",
        )));
    }
    Ok((stamp_agent(caller, events, batch)?, batch))
}

/// The first event dated further ahead of the daemon's clock than `skew`.
fn too_far_ahead(
    events: &[NewEvent],
    skew: std::time::Duration,
) -> Option<(usize, chrono::DateTime<chrono::Utc>)> {
    let skew = chrono::Duration::from_std(skew).unwrap_or(chrono::Duration::MAX);
    let latest = chrono::Utc::now().checked_add_signed(skew)?;
    events
        .iter()
        .enumerate()
        .find_map(|(index, event)| event.ts.filter(|ts| *ts > latest).map(|ts| (index, ts)))
}

/// The envelope fields of an event; the rest of a convenience body
/// (`POST /decisions`, `POST /tasks`) is its content. `subject_id` among
/// them: a subject's decision or task is sealed under the subject's key,
/// as on `POST /api/v1/events`, never stored as plain content.
const ENVELOPE: &[&str] = &[
    "tenant_id",
    "session_id",
    "channel",
    "actor",
    "agent_id",
    "subject_id",
    "sensitivity",
    "tags",
    "refs",
    "idempotency_key",
    "ts",
];

/// A convenience body of one kind: the event kind, the content fields it
/// takes beside the envelope (any other field is refused: a typo must not
/// become stored content), and whether it must cite evidence.
pub(crate) struct FlatKind {
    pub kind: &'static str,
    pub content: &'static [&'static str],
    pub needs_refs: bool,
}

/// `POST /api/v1/decisions`: the ledger rejects a decision without
/// evidence, so the route refuses it instead of storing a rejection.
pub(crate) const DECISION_BODY: FlatKind = FlatKind {
    kind: "decision",
    content: &[
        "decision",
        "scope",
        "key",
        "rationale",
        "constraints",
        "alternatives",
        "consequences",
        "confidence",
        "supersedes",
        "value",
    ],
    needs_refs: true,
};

/// `POST /api/v1/tasks`.
pub(crate) const TASK_BODY: FlatKind = FlatKind {
    kind: "task_update",
    content: &["task_id", "status", "title", "details"],
    needs_refs: false,
};

/// Records one event of `flat.kind` from a flat body: its envelope fields,
/// and the kind's own fields as `content`. `channel` defaults to `private`.
/// The same checks, redaction and answer as `POST /api/v1/events`.
pub(crate) async fn record_kind(
    state: &ApiState,
    caller: &Caller,
    flat: &FlatKind,
    body: Value,
) -> Result<(Stored, Appended), CallError> {
    let Value::Object(mut fields) = body else {
        return Err(CallError::invalid(crate::domain::FieldError::new(
            "body",
            "must be a JSON object",
        )));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|name| !ENVELOPE.contains(&name.as_str()) && !flat.content.contains(&name.as_str()))
    {
        return Err(CallError::invalid(crate::domain::FieldError::new(
            unknown.clone(),
            format!(
                "unknown field; a {} takes the envelope ({}) and {}",
                flat.kind,
                ENVELOPE.join(", "),
                flat.content.join(", ")
            ),
        )));
    }
    let mut event = serde_json::Map::new();
    for name in ENVELOPE {
        if let Some(value) = fields.remove(*name) {
            event.insert((*name).to_owned(), value);
        }
    }
    event
        .entry("channel")
        .or_insert_with(|| Value::from("private"));
    event.insert("kind".to_owned(), Value::from(flat.kind));
    event.insert("content".to_owned(), Value::Object(fields));
    // Checked once the fields are (a wrong scope is named first).
    let needs_refs = |events: &[NewEvent]| {
        if flat.needs_refs && events.iter().any(|e| e.refs.is_empty()) {
            return Err(CallError::invalid(crate::domain::FieldError::new(
                "refs",
                "a decision must cite its evidence: at least one earlier event or chunk id \
                 (the ledger rejects a decision without refs)",
            )));
        }
        Ok(())
    };
    match record_checked(state, caller, Value::Object(event), needs_refs).await? {
        (status, AppendResponse::One(appended)) => Ok((status, appended)),
        (_, AppendResponse::Batch(_)) => Err(CallError::internal(&std::io::Error::other(
            "one event came back as a batch",
        ))),
    }
}

/// An agent's token records as that agent: events without `agent_id` get
/// its agent, and events naming another, as their `agent_id` or as their
/// agent actor (bundles show who spoke by the actor), are refused (the
/// whole batch). Humans and tools it may name freely: it records what they
/// said and returned.
fn stamp_agent(
    caller: &Caller,
    mut events: Vec<NewEvent>,
    batch: bool,
) -> Result<Vec<NewEvent>, CallError> {
    let Some(agent) = &caller.agent else {
        return Ok(events);
    };
    let field = |index: usize, name: &str| match batch {
        true => format!("events[{index}].{name}"),
        false => name.to_owned(),
    };
    for (index, event) in events.iter_mut().enumerate() {
        if event.agent_id.as_ref().is_some_and(|named| named != agent) {
            return Err(CallError::agent_mismatch(field(index, "agent_id")));
        }
        if event.actor_type == ActorType::Agent && event.actor_id != *agent {
            return Err(CallError::agent_mismatch(field(index, "actor.id")));
        }
        event.agent_id = Some(agent.clone());
    }
    Ok(events)
}
