//! The event envelope (PRD §7.1) and its content by kind.
//!
//! [`EventRequest`] is what arrives on the wire; [`NewEvent::parse`] checks every
//! field, redacts secrets and normalizes tool results, producing what the write
//! side stores. Past that point nothing is checked again.

use chrono::{DateTime, Datelike, Utc};
use memd_core::seal::SEALED_PREFIX;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        Ref, RefOr,
        schema::{AnyOfBuilder, Schema},
    },
};

use super::{
    FieldError, limits,
    redact::Redactor,
    tool_result::{self, NormalizedToolResult},
};

// The wire's enums are the event model's own: the edge validates with the
// types the projectors read.
pub use memd_core::event::{ActorType, AppendableKind, Channel, Kind, Sensitivity};

/// The event envelope as a client sends it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRequest {
    /// Optional: the tenant comes from the bearer token. If given it must match.
    pub tenant_id: Option<String>,
    /// The conversation it belongs to; 1-256 bytes.
    #[schema(min_length = 1, max_length = 256)]
    pub session_id: String,
    pub channel: Channel,
    #[serde(deserialize_with = "super::object")]
    pub actor: ActorRequest,
    /// The agent whose memory this is (1-256 bytes). An agent-bound token
    /// sets it to its own agent; in the `private` channel only that agent's
    /// bundles see the event.
    pub agent_id: Option<String>,
    /// The data subject (a person, a customer; 1-256 bytes) the content is
    /// about: it is then sealed under that subject's own key, which
    /// `memd erase` can destroy. Needs a daemon with a key file.
    pub subject_id: Option<String>,
    #[schema(value_type = AppendableKind)]
    pub kind: Kind,
    #[serde(default)]
    pub sensitivity: Sensitivity,
    /// At most 64, each 1-128 bytes.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The shape `kind` asks for; other fields are kept as sent. At most
    /// 1 MiB as JSON, but for a `tool_result`, whose output is cut to an
    /// excerpt.
    #[schema(value_type = EventContent)]
    pub content: Value,
    /// Event or chunk ids it cites: at most 256, each 1-256 bytes.
    #[serde(default)]
    pub refs: Vec<String>,
    /// A retried append with the same key returns the original event.
    pub idempotency_key: Option<String>,
    /// When it happened, if not now (imports of older history). RFC 3339.
    pub ts: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActorRequest {
    #[serde(rename = "type")]
    pub kind: ActorType,
    /// 1-256 bytes.
    pub id: String,
}

/// A full tool output too large to keep in the event, bound for `artifacts`.
#[derive(Debug, Clone)]
pub struct NewArtifact {
    /// `tool_output` (a tool result's) or `blob` (an `artifact` event's).
    pub kind: &'static str,
    pub artifact_id: String,
    pub media_type: &'static str,
    pub sha256: [u8; 32],
    pub bytes: Vec<u8>,
    pub meta: Value,
}

/// A validated, redacted event, ready to append. Sequence number, event id and
/// hash are assigned by the write side under the tenant's lock.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub session_id: String,
    pub channel: Channel,
    pub actor_type: ActorType,
    pub actor_id: String,
    /// The agent whose memory it is, if any.
    pub agent_id: Option<String>,
    /// The data subject whose key seals the content, if any.
    pub subject_id: Option<String>,
    pub kind: Kind,
    pub sensitivity: Sensitivity,
    pub tags: Vec<String>,
    pub content: Value,
    pub refs: Vec<String>,
    pub idempotency_key: Option<String>,
    pub ts: Option<DateTime<Utc>>,
    pub artifact: Option<NewArtifact>,
    /// SHA-256 of the request as parsed and redacted, all but its
    /// idempotency key ([`request_digest`]): a resend under the same key
    /// must carry the same request, or it is a conflict, not a replay.
    pub request_digest: [u8; 32],
}

/// The path of the first request whose `tenant_id` names another tenant than
/// the caller's. The tenant always comes from the token; a body that claims a
/// different one is refused rather than silently corrected.
pub fn claimed_tenant_mismatch(
    requests: &[EventRequest],
    caller: &str,
    batch: bool,
) -> Option<String> {
    requests.iter().enumerate().find_map(|(index, request)| {
        let claimed = request.tenant_id.as_deref()?;
        (claimed != caller).then(|| {
            if batch {
                format!("events[{index}].tenant_id")
            } else {
                "tenant_id".to_string()
            }
        })
    })
}

/// Content stored in place of anything sent with `sensitivity: "secret"`.
pub fn secret_marker() -> Value {
    serde_json::json!({"redacted": true, "reason": "sensitivity:secret"})
}

impl NewEvent {
    /// Checks every field of `request`, redacts secrets, and normalizes the
    /// content of its kind. The tenant is checked apart ([`claimed_tenant_mismatch`]):
    /// a wrong tenant is a permission error, not a malformed field.
    // Long on purpose: one check per field of the envelope, in its order,
    // so the edge's rules read as one list.
    pub fn parse(request: EventRequest, redactor: &Redactor) -> Result<Self, FieldError> {
        let EventRequest {
            session_id,
            channel,
            actor,
            agent_id,
            subject_id,
            kind,
            sensitivity,
            tags,
            content,
            refs,
            idempotency_key,
            ts,
            ..
        } = request;

        check_id("session_id", &session_id)?;
        check_id("actor.id", &actor.id)?;
        if let Some(agent) = &agent_id {
            check_id("agent_id", agent)?;
        }
        if let Some(subject) = &subject_id {
            check_id("subject_id", subject)?;
            // A subject id is stored in the clear: it must not carry a secret.
            if redactor.redact(subject).is_some() {
                return Err(FieldError::new(
                    "subject_id",
                    "looks like it contains a secret; use an opaque id",
                ));
            }
        }
        if let Some(ts) = ts
            && !(1..=9999).contains(&ts.year())
        {
            return Err(FieldError::new("ts", "must be between year 1 and 9999"));
        }
        if let Some(key) = &idempotency_key {
            check_id("idempotency_key", key)?;
            // Redacting a key could make two different keys equal, and the
            // second event would be dropped as a "replay": refuse instead.
            if redactor.redact(key).is_some() {
                return Err(FieldError::new(
                    "idempotency_key",
                    "looks like it contains a secret; use an opaque id (e.g. a UUID)",
                ));
            }
        }
        check_list("tags", &tags, limits::MAX_TAGS, limits::MAX_TAG_BYTES)?;
        check_list("refs", &refs, limits::MAX_REFS, limits::MAX_REF_BYTES)?;
        if kind == Kind::Retraction {
            check_withdrawn(&refs)?;
        }
        check_no_nul_in_json(&content, "content")?;
        if kind != Kind::ToolResult && kind != Kind::Artifact {
            let size = serde_json::to_vec(&content)
                .map(|v| v.len())
                .unwrap_or(usize::MAX);
            if size > limits::MAX_CONTENT_BYTES {
                return Err(FieldError::new(
                    "content",
                    format!(
                        "is {size} bytes; at most {} allowed",
                        limits::MAX_CONTENT_BYTES
                    ),
                ));
            }
        }
        // Validate the shape before redaction, so errors describe what was sent.
        check_content(kind, &content)?;

        let redact = |mut s: String| {
            redactor.redact_in_place(&mut s);
            s
        };
        let mut event = NewEvent {
            session_id: redact(session_id),
            channel,
            actor_type: actor.kind,
            actor_id: redact(actor.id),
            agent_id: agent_id.map(redact),
            subject_id,
            kind,
            sensitivity,
            tags: tags.into_iter().map(redact).collect(),
            content: Value::Null,
            refs: refs.into_iter().map(redact).collect(),
            idempotency_key,
            ts,
            artifact: None,
            request_digest: [0; 32],
        };

        if sensitivity == Sensitivity::Secret {
            event.content = secret_marker();
            event.request_digest = request_digest(&event, &event.content);
            return Ok(event);
        }
        let mut content = content;
        // A detected secret marks the whole event `secret` (PRD §9.2): kept
        // in the log, redacted, and never loaded into any bundle.
        if redactor.redact_json(&mut content) {
            event.sensitivity = Sensitivity::Secret;
        }
        // A view is shown in every channel's bundles (views are filtered by
        // sensitivity alone), so moving it to the private channel would not
        // keep a `<private>` span out of public ones: refused.
        if kind == Kind::ViewUpdate && holds_private_span(&content) {
            return Err(FieldError::new(
                "content.text",
                "a view is shown in every channel's bundles, so it cannot hold a <private> span; \
                 record the private part as a private message",
            ));
        }
        // A `<private>…</private>` span (seed 001's privacy tags) never
        // leaves the private channel: an event holding one is recorded
        // there, whatever channel it was sent to, and tagged so.
        if event.channel != Channel::Private && holds_private_span(&content) {
            event.channel = Channel::Private;
            if !event.tags.iter().any(|t| t == PRIVATE_SPAN_TAG)
                && event.tags.len() < limits::MAX_TAGS
            {
                event.tags.push(PRIVATE_SPAN_TAG.to_owned());
            }
        }
        // Before a tool result is cut to an excerpt under a new artifact id:
        // the same request must give the same digest.
        event.request_digest = request_digest(&event, &content);
        if kind == Kind::ToolResult || kind == Kind::Artifact {
            let NormalizedToolResult { content, artifact } = if kind == Kind::Artifact {
                tool_result::normalize_text(content, &tool_result::DOCUMENT)?
            } else {
                tool_result::normalize(content)?
            };
            event.content = content;
            event.artifact = artifact;
        } else {
            event.content = content;
        }
        Ok(event)
    }
}

/// The tag an event gets when it was moved to the private channel for a
/// `<private>` span.
pub const PRIVATE_SPAN_TAG: &str = "private-span";

/// Whether any string of `value` holds a `<private>` span (any case).
fn holds_private_span(value: &Value) -> bool {
    match value {
        Value::String(text) => text.to_ascii_lowercase().contains("<private>"),
        Value::Array(items) => items.iter().any(holds_private_span),
        Value::Object(map) => map.values().any(holds_private_span),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// What identifies a request under its idempotency key: every field as
/// parsed and redacted (so no secret is hashed), but the key itself, in one
/// canonical form (content as PostgreSQL renders `jsonb`: key order and
/// spacing do not matter).
pub fn request_digest(event: &NewEvent, content: &Value) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let canonical = serde_json::json!([
        "memd-request-v1",
        event.session_id,
        event.channel.as_str(),
        event.actor_type.as_str(),
        event.actor_id,
        event.agent_id,
        event.subject_id,
        event.kind.as_str(),
        event.sensitivity.as_str(),
        event.tags,
        event.refs,
        event.ts.map(|ts| ts.timestamp_micros()),
        content,
    ]);
    let text = super::jsonb_text::render(&canonical).unwrap_or_else(|| canonical.to_string());
    Sha256::digest(text.as_bytes()).into()
}

/// An id field (session, actor, agent, key): 1 to 256 bytes, no NUL.
pub fn check_id(field: &str, value: &str) -> Result<(), FieldError> {
    if value.is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if value.len() > limits::MAX_ID_BYTES {
        return Err(FieldError::new(
            field,
            format!(
                "is {} bytes; at most {} allowed",
                value.len(),
                limits::MAX_ID_BYTES
            ),
        ));
    }
    check_no_nul(field, value)
}

fn check_list(
    field: &str,
    items: &[String],
    max_items: usize,
    max_bytes: usize,
) -> Result<(), FieldError> {
    if items.len() > max_items {
        return Err(FieldError::new(
            field,
            format!("has {} items; at most {max_items} allowed", items.len()),
        ));
    }
    for (index, item) in items.iter().enumerate() {
        let path = format!("{field}[{index}]");
        if item.is_empty() {
            return Err(FieldError::new(path, "must not be empty"));
        }
        if item.len() > max_bytes {
            return Err(FieldError::new(
                path,
                format!("is {} bytes; at most {max_bytes} allowed", item.len()),
            ));
        }
        check_no_nul(&path, item)?;
    }
    Ok(())
}

/// PostgreSQL cannot store U+0000 in text or jsonb; refuse it by name rather
/// than fail deep in the database.
fn check_no_nul(field: &str, value: &str) -> Result<(), FieldError> {
    if value.contains('\0') {
        Err(FieldError::new(
            field,
            "must not contain the NUL character (U+0000)",
        ))
    } else {
        Ok(())
    }
}

/// [`check_no_nul`] over every string and key of `value`; `path` names
/// `value` itself ("" for a request body).
pub fn check_no_nul_in_json(value: &Value, path: &str) -> Result<(), FieldError> {
    match value {
        Value::String(s) => check_no_nul(path, s),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_no_nul_in_json(v, &format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            let child = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            check_no_nul(&child, k)?;
            check_no_nul_in_json(v, &child)
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

// Content shapes by kind (docs/api.md, the event kinds). Extra fields are kept:
// agents attach their own metadata, and the log stores what they sent.
// The same structs are the shapes the OpenAPI document shows ([`EventContent`]).

/// `content` of a `message`.
#[derive(Deserialize, utoipa::ToSchema)]
struct MessageContent {
    text: String,
}

/// `content` of a `tool_call`.
#[derive(Deserialize, utoipa::ToSchema)]
struct ToolCallContent {
    tool: String,
    /// The call's arguments, any JSON.
    #[allow(dead_code)]
    args: Option<Value>,
}

/// Where a decision applies (PRD §6.1).
pub const DECISION_SCOPES: [&str; 3] = ["project", "user", "global"];

/// `content` of a `decision`. The ledger records it as rejected when the
/// event's `refs` cite no earlier event of the tenant.
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)] // fields are read by serde to check their types
struct DecisionContent {
    decision: String,
    /// What it decides (`export.page_size`): a new decision of a key
    /// supersedes the active one.
    key: Option<String>,
    /// Where it applies: one of [`DECISION_SCOPES`].
    scope: String,
    #[serde(default)]
    rationale: Vec<String>,
    #[serde(default)]
    constraints: Vec<String>,
    #[serde(default)]
    alternatives: Vec<String>,
    #[serde(default)]
    consequences: Vec<String>,
    /// Between 0 and 1.
    #[schema(minimum = 0.0, maximum = 1.0)]
    confidence: Option<f64>,
    /// The decision id this one replaces.
    supersedes: Option<String>,
}

/// `content` of a `task_update`.
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
struct TaskUpdateContent {
    task_id: String,
    status: TaskStatus,
    title: Option<String>,
    details: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
enum TaskStatus {
    Open,
    Doing,
    Done,
}

/// `content` of a `summary`. Claims that contradict the active decision of
/// their key mark the summary as conflicting.
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
struct SummaryContent {
    text: String,
    #[serde(default)]
    claims: Vec<Claim>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
struct Claim {
    /// A decision key.
    key: String,
    /// Any JSON.
    value: Value,
}

/// `content` of a `view_update`: the whole new text of a view.
#[derive(Deserialize, utoipa::ToSchema)]
struct ViewUpdateContent {
    /// 1-64 of letters, digits, `_`, `-`, `.` (e.g. `identity`, `rules`).
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,64}$")]
    view: String,
    #[allow(dead_code)]
    text: String,
}

/// `content` of a `retraction`: why the events its `refs` name (1-64
/// event ids, of events the caller may retract) are withdrawn.
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
struct RetractionContent {
    /// Why, for whoever audits the log later.
    reason: String,
}

/// `content` of a `handoff`, as `POST /api/v1/handoffs` records it.
#[derive(Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
struct HandoffContent {
    to_agent: String,
    task: String,
    task_id: Option<String>,
    #[serde(default)]
    constraints: Vec<String>,
    #[serde(default)]
    decision_ids: Vec<String>,
    #[serde(default)]
    required_files: Vec<String>,
    #[serde(default)]
    open_questions: Vec<String>,
}

/// `content` as the OpenAPI document shows it: the shape of the envelope's
/// `kind`. An `anyOf`, not a `oneOf`: the shapes keep extra fields, so they
/// overlap (`{"text": ...}` is a message and a summary alike) and a strict
/// `oneOf` would refuse valid bodies. Documentation only; [`check_content`]
/// is what checks.
pub struct EventContent;

type Schemas = Vec<(String, RefOr<Schema>)>;

impl EventContent {
    /// Adds each shape's schema (and those it uses) to `out`; returns the
    /// shapes' names, in the order of [`Kind`].
    fn shapes(out: &mut Schemas) -> Vec<String> {
        fn add<T: ToSchema>(out: &mut Schemas) -> String {
            out.push((T::name().into_owned(), T::schema()));
            T::schemas(out);
            T::name().into_owned()
        }
        vec![
            add::<MessageContent>(out),
            add::<ToolCallContent>(out),
            add::<tool_result::ToolResultContent>(out),
            add::<DecisionContent>(out),
            add::<TaskUpdateContent>(out),
            add::<SummaryContent>(out),
            add::<ViewUpdateContent>(out),
            add::<HandoffContent>(out),
            add::<tool_result::ArtifactContent>(out),
            add::<RetractionContent>(out),
        ]
    }
}

impl PartialSchema for EventContent {
    fn schema() -> RefOr<Schema> {
        Self::shapes(&mut Vec::new())
            .into_iter()
            .fold(AnyOfBuilder::new(), |any_of, name| {
                any_of.item(Ref::from_schema_name(name))
            })
            .description(Some(
                "The shape named by `kind`: message, tool_call, tool_result, decision, \
                 task_update, summary, view_update, handoff, artifact or retraction. Extra fields are kept as sent.",
            ))
            .into()
    }
}

impl ToSchema for EventContent {
    fn schemas(schemas: &mut Schemas) {
        Self::shapes(schemas);
    }
}

/// Events one retraction may withdraw.
pub const MAX_RETRACTED: usize = 64;

/// A retraction's `refs`: 1 to [`MAX_RETRACTED`] event ids. Whether each
/// names an event the caller may retract is the write path's to check.
fn check_withdrawn(refs: &[String]) -> Result<(), FieldError> {
    if refs.is_empty() || refs.len() > MAX_RETRACTED {
        return Err(FieldError::new(
            "refs",
            format!("a retraction names the 1 to {MAX_RETRACTED} events it withdraws"),
        ));
    }
    match refs.iter().position(|r| !r.starts_with("evt_")) {
        Some(index) => Err(FieldError::new(
            format!("refs[{index}]"),
            "a retraction withdraws events: name each by its event id (evt_...)",
        )),
        None => Ok(()),
    }
}

fn check_content(kind: Kind, content: &Value) -> Result<(), FieldError> {
    if !content.is_object() {
        return Err(FieldError::new("content", "must be a JSON object"));
    }
    if let Some(path) = sealed_marker_at(content, "content") {
        return Err(FieldError::new(
            path,
            "starts with memd's sealed-at-rest marker (\\u0001sealed:), which only memd writes",
        ));
    }
    match kind {
        Kind::Message => {
            let c: MessageContent = shape(content)?;
            non_empty("content.text", &c.text)
        }
        Kind::ToolCall => {
            let c: ToolCallContent = shape(content)?;
            non_empty("content.tool", &c.tool)
        }
        Kind::ToolResult => tool_result::check_shape(content),
        Kind::Artifact => tool_result::check_artifact_shape(content),
        Kind::Erasure => Err(FieldError::new(
            "kind",
            "erasure events are recorded by memd itself (memd erase), never sent",
        )),
        Kind::Decision => {
            let c: DecisionContent = shape(content)?;
            non_empty("content.decision", &c.decision)?;
            if !DECISION_SCOPES.contains(&c.scope.as_str()) {
                return Err(FieldError::new(
                    "content.scope",
                    format!("{:?} is not a scope: use project, user or global", c.scope),
                ));
            }
            if let Some(key) = &c.key {
                non_empty("content.key", key)?;
            }
            match c.confidence {
                Some(x) if !(0.0..=1.0).contains(&x) => Err(FieldError::new(
                    "content.confidence",
                    "must be between 0 and 1",
                )),
                _ => Ok(()),
            }
        }
        Kind::TaskUpdate => {
            let c: TaskUpdateContent = shape(content)?;
            non_empty("content.task_id", &c.task_id)
        }
        Kind::Summary => {
            let c: SummaryContent = shape(content)?;
            non_empty("content.text", &c.text)
        }
        Kind::Retraction => {
            let c: RetractionContent = shape(content)?;
            non_empty("content.reason", &c.reason)
        }
        Kind::Handoff => {
            let c: HandoffContent = shape(content)?;
            non_empty("content.to_agent", &c.to_agent)?;
            non_empty("content.task", &c.task)
        }
        Kind::ViewUpdate => {
            let c: ViewUpdateContent = shape(content)?;
            check_view_name("content.view", &c.view)
        }
    }
}

/// A view's name: 1-64 of letters, digits, `_`, `-`, `.`; else an error
/// naming `field`.
pub fn check_view_name(field: &str, view: &str) -> Result<(), FieldError> {
    let valid = !view.is_empty()
        && view.len() <= 64
        && view
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            "must be 1-64 of letters, digits, '_', '-' or '.' (e.g. \"identity\", \"rules\")",
        ))
    }
}

/// Where `value` holds a string that looks sealed at rest: a client may
/// not send one, so whatever memd finds sealed, memd sealed.
fn sealed_marker_at(value: &Value, path: &str) -> Option<String> {
    match value {
        Value::String(text) if text.starts_with(SEALED_PREFIX) => Some(path.to_owned()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| sealed_marker_at(item, &format!("{path}[{i}]"))),
        Value::Object(fields) => fields
            .iter()
            .find_map(|(key, item)| sealed_marker_at(item, &format!("{path}.{key}"))),
        _ => None,
    }
}

/// Deserializes `content` into a kind's shape, naming the failing field.
pub(crate) fn shape<T: for<'de> Deserialize<'de>>(content: &Value) -> Result<T, FieldError> {
    super::parse_json("content", content)
}

pub(crate) fn non_empty(field: &str, value: &str) -> Result<(), FieldError> {
    if value.trim().is_empty() {
        Err(FieldError::new(field, "must not be empty"))
    } else {
        Ok(())
    }
}

/// The body [`parse_body`] reads, as the OpenAPI document shows it: one
/// event, or a batch. Documentation only.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
// Never built (a schema only), so its size costs nothing.
#[allow(dead_code, clippy::large_enum_variant)]
pub enum AppendRequest {
    One(EventRequest),
    Batch(EventBatch),
}

/// Events appended as one all-or-nothing transaction, in this order.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct EventBatch {
    /// 1 to 1000 events (`limits::MAX_BATCH_EVENTS`).
    #[schema(min_items = 1, max_items = 1000)]
    events: Vec<EventRequest>,
}

/// Parses a request body: one event, or `{"events": [...]}`. Field paths in
/// errors are relative to the body (`events[2].kind`).
pub fn parse_body(body: Value) -> Result<(Vec<EventRequest>, bool), FieldError> {
    match body {
        Value::Object(mut map) if map.contains_key("events") => {
            if map.len() > 1 {
                let other = map
                    .keys()
                    .find(|k| *k != "events")
                    .cloned()
                    .unwrap_or_default();
                return Err(FieldError::new(
                    other,
                    "a batch body holds only \"events\"; put every field inside each event",
                ));
            }
            let Some(Value::Array(items)) = map.remove("events") else {
                return Err(FieldError::new("events", "must be an array of events"));
            };
            if items.is_empty() {
                return Err(FieldError::new("events", "must hold at least one event"));
            }
            if items.len() > limits::MAX_BATCH_EVENTS {
                return Err(FieldError::new(
                    "events",
                    format!(
                        "has {} events; at most {} per batch",
                        items.len(),
                        limits::MAX_BATCH_EVENTS
                    ),
                ));
            }
            let requests = items
                .into_iter()
                .enumerate()
                .map(|(i, item)| parse_one(item).map_err(|e| e.within(&format!("events[{i}]"))))
                .collect::<Result<_, _>>()?;
            Ok((requests, true))
        }
        Value::Object(map) => Ok((vec![parse_one(Value::Object(map))?], false)),
        _ => Err(FieldError::new("body", "must be a JSON object")),
    }
}

fn parse_one(value: Value) -> Result<EventRequest, FieldError> {
    super::parse_json("", value)
}

/// Reads a tool-result field that the normalizer needs.
pub(crate) fn take_string(map: &mut Map<String, Value>, key: &str) -> Option<String> {
    match map.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            map.insert(key.to_string(), other);
            None
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(extra: Value) -> Value {
        let mut base = json!({
            "session_id": "s1",
            "channel": "private",
            "actor": {"type": "human", "id": "user"},
            "kind": "message",
            "content": {"text": "hello"},
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    fn parse(body: Value) -> Result<Vec<NewEvent>, FieldError> {
        let (requests, _) = parse_body(body)?;
        requests
            .into_iter()
            .map(|r| NewEvent::parse(r, &Redactor::default()))
            .collect()
    }

    fn field_of(body: Value) -> String {
        parse(body).expect_err("should be refused").field
    }

    #[test]
    fn a_plain_message_parses() {
        let events = parse(message(json!({"tags": ["a"], "refs": ["evt_1"]}))).unwrap();
        assert_eq!(events[0].kind, Kind::Message);
        assert_eq!(events[0].sensitivity, Sensitivity::None);
        assert_eq!(events[0].content, json!({"text": "hello"}));
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(field_of(message(json!({"channel": "radio"}))), "channel");
        assert_eq!(
            field_of(message(json!({"actor": {"type": "robot", "id": "x"}}))),
            "actor.type"
        );
        assert_eq!(
            field_of(message(json!({"actor": {"type": "human"}}))),
            "actor.id"
        );
        assert_eq!(field_of(message(json!({"kind": "gossip"}))), "kind");
        assert_eq!(
            field_of(message(json!({"sensitivity": "top"}))),
            "sensitivity"
        );
        assert_eq!(field_of(message(json!({"session_id": ""}))), "session_id");
        assert_eq!(
            field_of(message(json!({"session_id": "x".repeat(257)}))),
            "session_id"
        );
        assert_eq!(field_of(message(json!({"tags": ["ok", ""]}))), "tags[1]");
        assert_eq!(field_of(message(json!({"tags": vec!["t"; 65]}))), "tags");
        assert_eq!(
            field_of(message(json!({"refs": ["r".repeat(257)]}))),
            "refs[0]"
        );
        assert_eq!(
            field_of(message(json!({"content": {"text": ""}}))),
            "content.text"
        );
        assert_eq!(
            field_of(message(json!({"content": {"txt": "x"}}))),
            "content.text"
        );
        assert_eq!(field_of(message(json!({"content": "x"}))), "content");
        assert_eq!(
            field_of(message(json!({"content": {"text": "a\u{0}b"}}))),
            "content.text"
        );
        assert_eq!(
            field_of(message(json!({"sensitivty": "low"}))),
            "sensitivty"
        );
        assert_eq!(field_of(message(json!({"ts": "yesterday"}))), "ts");
        assert_eq!(
            field_of(message(json!({"ts": "+12000-01-01T00:00:00Z"}))),
            "ts"
        );
        assert_eq!(
            field_of(message(
                json!({"content": {"text": "x".repeat(limits::MAX_CONTENT_BYTES)}})
            )),
            "content"
        );
    }

    #[test]
    fn the_appendable_kinds_are_every_kind_but_erasure() {
        let appendable: Vec<&str> = AppendableKind::ALL.iter().map(|k| k.as_str()).collect();
        let kinds: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| **k != Kind::Erasure)
            .map(|k| k.as_str())
            .collect();
        assert_eq!(appendable, kinds);
    }

    /// Every field the projectors read of a kind's content is one the
    /// append edge stores: an event of each kind with every field the edge
    /// accepts, stored as the edge stores it, read back.
    #[test]
    fn what_the_edge_stores_is_what_the_projectors_read() {
        use memd_core::content::Content;
        let every_field = [
            ("message", json!({"text": "hello"})),
            (
                "summary",
                json!({"text": "so far", "claims": [{"key": "page-size", "value": 200}]}),
            ),
            (
                "tool_result",
                json!({"tool": "fs.read", "path": "src/main.rs", "output": "fn main() {}", "line_start": 3}),
            ),
            (
                "artifact",
                json!({"name": "notes.md", "text": "# Notes", "media_type": "text/markdown"}),
            ),
            (
                "decision",
                json!({"decision": "Pages of 200", "key": "page-size", "scope": "project",
                "rationale": ["timeouts"], "constraints": ["memory"], "alternatives": ["100"],
                "consequences": ["more requests"], "confidence": 0.8, "supersedes": "evt_1",
                "value": 200}),
            ),
            (
                "task_update",
                json!({"task_id": "T-1", "status": "doing", "title": "Fix", "details": "soon"}),
            ),
            ("view_update", json!({"view": "rules", "text": "Be brief."})),
            ("retraction", json!({"reason": "said in error"})),
            (
                "handoff",
                json!({"to_agent": "reviewer", "task": "review", "task_id": "T-1",
                "constraints": ["tests"], "decision_ids": ["evt_2"], "required_files": ["a.rs"],
                "open_questions": ["why?"]}),
            ),
        ];
        for (kind, content) in every_field {
            let event = &parse(message(
                json!({"kind": kind, "content": content, "refs": ["evt_1"]}),
            ))
            .unwrap_or_else(|e| panic!("{kind}: {e:?}"))[0];
            let kind = Kind::parse(kind).unwrap();
            let stored = event.content.as_object().unwrap();
            for field in Content::fields(kind) {
                assert!(
                    stored.contains_key(*field),
                    "{kind:?}: the projectors read `{field}`, which the edge does not store: {stored:?}"
                );
            }
            assert!(
                !matches!(Content::read(kind, &event.content), Content::Other),
                "{kind:?} reads as its kind"
            );
        }
    }

    #[test]
    fn content_is_checked_by_kind() {
        let bad = [
            (
                json!({"kind": "task_update", "content": {"task_id": "t", "status": "later"}}),
                "content.status",
            ),
            (
                json!({"kind": "decision", "content": {"decision": "x"}}),
                "content.scope",
            ),
            (
                json!({"kind": "decision", "content": {"decision": "x", "scope": "galaxy"}}),
                "content.scope",
            ),
            (
                json!({"kind": "decision", "content": {"decision": "x", "scope": "project", "confidence": 2.0}}),
                "content.confidence",
            ),
            (
                json!({"kind": "summary", "content": {"text": "x", "claims": [{"key": "k"}]}}),
                "content.claims[0].value",
            ),
            (
                json!({"kind": "view_update", "content": {"view": "../etc", "text": "x"}}),
                "content.view",
            ),
            (
                json!({"kind": "tool_call", "content": {"args": {}}}),
                "content.tool",
            ),
            (
                json!({"kind": "tool_result", "content": {"tool": "ls"}}),
                "content.output",
            ),
        ];
        for (extra, field) in bad {
            assert_eq!(field_of(message(extra.clone())), field, "{extra}");
        }
        let good = json!({"kind": "decision", "content": {"decision": "Use Postgres", "scope": "project",
            "key": "db", "rationale": ["boring"], "confidence": 0.8}});
        assert!(parse(message(good)).is_ok());
    }

    #[test]
    fn batch_errors_name_the_item() {
        let body = json!({"events": [message(json!({})), message(json!({"channel": "x"}))]});
        assert_eq!(field_of(body), "events[1].channel");
        assert_eq!(field_of(json!({"events": []})), "events");
        assert_eq!(field_of(json!({"events": {}})), "events");
        assert_eq!(
            field_of(json!({"events": [], "session_id": "s"})),
            "session_id"
        );
        let too_many: Vec<Value> = (0..=limits::MAX_BATCH_EVENTS)
            .map(|_| message(json!({})))
            .collect();
        assert_eq!(field_of(json!({"events": too_many})), "events");
        assert_eq!(field_of(json!([1])), "body");
    }

    #[test]
    fn a_claimed_tenant_must_be_the_callers() {
        let body = json!({"events": [message(json!({"tenant_id": "t1"})), message(json!({"tenant_id": "t2"}))]});
        let (requests, batch) = parse_body(body).unwrap();
        assert_eq!(
            claimed_tenant_mismatch(&requests, "t1", batch).as_deref(),
            Some("events[1].tenant_id")
        );
        assert_eq!(claimed_tenant_mismatch(&requests[..1], "t1", batch), None);
    }

    #[test]
    fn secret_sensitivity_keeps_only_a_marker() {
        let events = parse(message(
            json!({"sensitivity": "secret", "content": {"text": "my pin is 1234"}}),
        ))
        .unwrap();
        assert_eq!(events[0].content, secret_marker());
    }

    #[test]
    fn secrets_are_redacted_in_every_field() {
        let secret = "sk-abcdefghijklmnopqrstuvwx";
        let events = parse(message(json!({
            "session_id": secret, "actor": {"type": "agent", "id": secret},
            "tags": [secret], "refs": [secret],
            "content": {"text": secret, secret: [secret]},
        })))
        .unwrap();
        let dump = format!("{:?}", events[0]);
        assert!(!dump.contains(secret), "{dump}");
    }

    #[test]
    fn an_idempotency_key_holding_a_secret_is_refused_not_redacted() {
        // Redacted, "token=abc" and "token=def" would be the same key.
        let err = parse(message(json!({"idempotency_key": "token=abc"}))).unwrap_err();
        assert_eq!(err.field, "idempotency_key");
        assert!(parse(message(json!({"idempotency_key": "turn-42"}))).is_ok());
    }
}
