//! The MCP tools' arguments. Their doc comments become the JSON Schema
//! descriptions a model reads, so they say what to send and what happens by
//! default. Each converts to the HTTP request body of the same call, which
//! is then checked by the same code as over HTTP (errors name the field).

use std::sync::Arc;

use schemars::{JsonSchema, generate::SchemaSettings};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::domain::{
    FieldError,
    event::{ActorType, AppendableKind, Channel, Kind, Sensitivity},
};
use crate::read::filters::RetrievalFilters;

/// Bundles asked for over MCP default to this many tokens: the result lands
/// in the calling model's own context, so it should be a slice of it, not
/// the 65,000-token ceiling an orchestrator asks for over HTTP.
pub const DEFAULT_MCP_BUNDLE_TOKENS: u32 = 4_000;
/// Decisions listed by default.
pub const DEFAULT_DECISIONS: i64 = 20;
/// Artifact bytes returned per call by default, and at most.
pub const DEFAULT_ARTIFACT_BYTES: usize = 64 * 1024;
pub const MAX_ARTIFACT_BYTES: usize = 1024 * 1024;

/// The input schema of a tool taking `T`, in the plainest JSON Schema:
/// subschemas inlined (no `$ref`/`$defs`), and an optional field written as
/// its type alone rather than "type or null" (it is simply not `required`).
/// Several LLM APIs accept only that subset in function declarations.
pub fn input_schema<T: JsonSchema>() -> Arc<Map<String, Value>> {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut schema = schema.to_value();
    drop_null_alternatives(&mut schema);
    match schema {
        Value::Object(mut fields) => {
            fields.remove("$schema");
            // A tool without arguments still declares its (empty) object:
            // some model APIs refuse an object schema without properties.
            fields
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            Arc::new(fields)
        }
        _ => Arc::new(Map::new()),
    }
}

/// `{"type": ["string", "null"]}` becomes `{"type": "string"}`, `null`
/// leaves enums, and `{"anyOf": [S, {"type": "null"}], ...}` becomes S with
/// the rest kept.
fn drop_null_alternatives(schema: &mut Value) {
    let Value::Object(fields) = schema else {
        if let Value::Array(items) = schema {
            items.iter_mut().for_each(drop_null_alternatives);
        }
        return;
    };
    if let Some(Value::Array(types)) = fields.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            fields.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = fields.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(options)) = fields.get("anyOf") {
        let mut rest: Vec<Value> = options
            .iter()
            .filter(|o| o.get("type").is_none_or(|t| t != "null"))
            .cloned()
            .collect();
        if rest.len() == 1
            && let Value::Object(only) = rest.remove(0)
        {
            fields.remove("anyOf");
            for (key, value) in only {
                fields.entry(key).or_insert(value);
            }
        }
    }
    fields.values_mut().for_each(drop_null_alternatives);
}

/// Who produced an event.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActorArg {
    /// `human`, `agent`, `tool` or `system`.
    #[serde(rename = "type")]
    pub kind: ActorType,
    /// The human's, agent's or tool's name, e.g. "alice", "coder", "fs".
    pub id: String,
}

/// Record one event in memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordEventArgs {
    /// The conversation or task this event belongs to, e.g. "chat-42". Bundles built for this session show its most recent events.
    pub session_id: String,
    /// What the event is: `message` (default), `tool_call`, `tool_result`, `decision`, `task_update`, `summary`, `view_update` or `artifact`.
    #[schemars(with = "Option<AppendableKind>")]
    pub kind: Option<Kind>,
    /// The text of a message, summary or view update; a shortcut for `content: {"text": ...}`.
    pub text: Option<String>,
    /// The event's content, shaped by `kind`. message: {text}. tool_call: {tool, args?}. tool_result: {tool, path?, output} (large outputs are kept whole as an artifact). decision: {decision, scope, key?, rationale?: [..], constraints?: [..], alternatives?: [..], consequences?: [..], confidence?: 0..1, supersedes?: decision id}, and `refs` must cite the events it rests on. task_update: {task_id, status: open|doing|done, title?, details?}. summary: {text, claims?: [{key, value}]}. view_update: {view: identity|rules|preferences|..., text}. artifact: {name, text, media_type?} (a document; long ones are kept whole as an artifact). retraction: {reason}, and `refs` names the events withdrawn (memory_retract does it for you).
    pub content: Option<Map<String, Value>>,
    /// Where the conversation happens: `private` (default), `team`, `agent` or `public`. Decides which later bundles may show it.
    pub channel: Option<Channel>,
    /// Who produced it. Default: the token's agent, {"type": "agent", "id": "<agent>"}, or {"type": "agent", "id": "mcp-agent"} for a token of no agent. An agent's token may not name another agent.
    pub actor: Option<ActorArg>,
    /// `none` (default), `low`, `high` or `secret`. Secret content is never stored, only a marker.
    pub sensitivity: Option<Sensitivity>,
    /// Free labels; `pinned` or `important` raise the event's weight in retrieval.
    pub tags: Option<Vec<String>>,
    /// Ids of events or chunks this event refers to (decisions must cite their evidence here).
    pub refs: Option<Vec<String>>,
    /// An id of your own for this event: retrying with the same key records it only once.
    pub idempotency_key: Option<String>,
    /// When it happened (RFC 3339), if not now.
    pub ts: Option<String>,
    /// The person (or customer) the content is about, e.g. "user-118": the content is then sealed under that person's own key, which an operator can destroy on request (erasure).
    pub subject_id: Option<String>,
}

impl RecordEventArgs {
    /// The `POST /api/v1/events` body this call stands for.
    /// The body, recorded by `agent` (the token's) when it names no actor.
    pub fn into_body(self, agent: Option<&str>) -> Result<Value, FieldError> {
        let mut content = self.content.unwrap_or_default();
        if let Some(text) = self.text {
            if content.contains_key("text") {
                return Err(FieldError::new(
                    "text",
                    "give the text either as `text` or as `content.text`, not both",
                ));
            }
            content.insert("text".into(), Value::String(text));
        }
        let actor = self.actor.map_or_else(
            || mcp_actor(agent),
            |actor| json!({"type": actor.kind, "id": actor.id}),
        );
        let mut body = json!({
            "session_id": self.session_id,
            "kind": self.kind.unwrap_or(Kind::Message),
            "channel": self.channel.unwrap_or(Channel::Private),
            "actor": actor,
            "content": content,
        });
        let fields = body.as_object_mut().expect("an object literal");
        if let Some(sensitivity) = self.sensitivity {
            fields.insert("sensitivity".into(), json!(sensitivity));
        }
        for (name, value) in [
            ("tags", self.tags.map(Value::from)),
            ("refs", self.refs.map(Value::from)),
            ("idempotency_key", self.idempotency_key.map(Value::from)),
            ("ts", self.ts.map(Value::from)),
            ("subject_id", self.subject_id.map(Value::from)),
        ] {
            if let Some(value) = value {
                fields.insert(name.into(), value);
            }
        }
        Ok(body)
    }
}

/// Build the Active Context Bundle for your next step.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildAcbArgs {
    /// What you are about to work on or answer, in plain words, e.g. "why did we drop sqlite?". Memory relevant to it is retrieved with citations. Without it, the bundle holds only standing context (identity, rules, tasks, decisions, the session's recent events).
    pub query_text: Option<String>,
    /// Your session: its recent events form the bundle's recent window.
    pub session_id: Option<String>,
    /// Your agent id: with `session_id`, finds a handoff packet addressed to you.
    pub agent_id: Option<String>,
    /// Where the answer will be shown: `private` (default), `team`, `agent` or `public`. Public bundles hold no private or sensitive memory.
    pub channel: Option<Channel>,
    /// `continue`, `acknowledge`, `resume`, ... skip retrieval (fast path); anything else is free text.
    pub intent: Option<String>,
    /// Token budget of the bundle (default 4000, or the tenant's ceiling when lower; at most the tenant's policy, 65000 by default).
    pub max_tokens: Option<u32>,
    /// Also show superseded decisions with their successors. Default: when the query asks about history.
    pub include_history: Option<bool>,
    /// `eventual` (default) or `strong`: wait until everything recorded so far is indexed.
    pub consistency: Option<String>,
    /// A specific handoff packet (needs `agent_id` and `session_id`).
    pub handoff_id: Option<String>,
    /// The `seq` a record_event answered with: the bundle then reads a copy of memory that holds that event.
    pub after: Option<i64>,
    /// Narrow the retrieved evidence: `since`/`until` (RFC 3339), `agents`, `sessions`, `kinds`, `tags_all`, `tags_any`. E.g. {"sessions": ["s-42"], "since": "2026-11-01T00:00:00Z"} recalls only that session's memory since November.
    pub filters: Option<RetrievalFilters>,
}

impl BuildAcbArgs {
    /// The `POST /api/v1/acb/build` body this call stands for (rendered).
    /// Without `max_tokens`, the MCP default, or the tenant's ceiling
    /// (`policy_max`) when that is lower.
    pub fn into_body(self, policy_max: u32) -> Value {
        let mut body = Map::new();
        body.insert("render".into(), Value::Bool(true));
        body.insert(
            "max_tokens".into(),
            json!(
                self.max_tokens
                    .unwrap_or(DEFAULT_MCP_BUNDLE_TOKENS.min(policy_max))
            ),
        );
        for (name, value) in [
            ("query_text", self.query_text.map(Value::from)),
            ("session_id", self.session_id.map(Value::from)),
            ("agent_id", self.agent_id.map(Value::from)),
            ("channel", self.channel.map(|c| json!(c))),
            ("intent", self.intent.map(Value::from)),
            ("include_history", self.include_history.map(Value::from)),
            ("consistency", self.consistency.map(Value::from)),
            ("handoff_id", self.handoff_id.map(Value::from)),
            ("after", self.after.map(Value::from)),
            ("filters", self.filters.map(|f| json!(f))),
        ] {
            if let Some(value) = value {
                body.insert(name.into(), value);
            }
        }
        Value::Object(body)
    }
}

/// Search memory for what answers a question.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for, in plain words, e.g. "which database did we choose for billing?".
    pub query: String,
    /// How many memories at most, 1 to 100 (default 10).
    pub k: Option<u32>,
    /// Your agent id: another agent's private memory is not yours to see.
    pub agent_id: Option<String>,
    /// Where the results will be shown: `private` (default), `team`, `agent` or `public`. Public results hold no private or sensitive memory.
    pub channel: Option<Channel>,
    /// Also find superseded decisions. Default: when the query asks about history.
    pub include_history: Option<bool>,
    /// The `seq` a record_event answered with: the search then reads a copy of memory that holds that event.
    pub after: Option<i64>,
    /// Narrow the search: `since`/`until` (RFC 3339), `agents`, `sessions`, `kinds`, `tags_all`, `tags_any`.
    pub filters: Option<RetrievalFilters>,
}

impl SearchArgs {
    /// The `POST /api/v1/search` body this call stands for.
    pub fn into_body(self) -> Value {
        let mut body = Map::new();
        body.insert("query".into(), Value::from(self.query));
        for (name, value) in [
            ("k", self.k.map(Value::from)),
            ("agent_id", self.agent_id.map(Value::from)),
            ("channel", self.channel.map(|c| json!(c))),
            ("include_history", self.include_history.map(Value::from)),
            ("after", self.after.map(Value::from)),
            ("filters", self.filters.map(|f| json!(f))),
        ] {
            if let Some(value) = value {
                body.insert(name.into(), value);
            }
        }
        Value::Object(body)
    }
}

/// Edit a memory block (a view) as one `view_update` event.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ViewEditArgs {
    /// The view (memory block), e.g. `persona`, `human`, `rules`, `notes`.
    pub view: String,
    /// The text: the whole new text (replace), or the text to add on a new line (append).
    pub text: String,
    /// `private` (default: with an agent's token, that agent's own version of the view), or `team`/`agent`/`public` for the shared version.
    pub channel: Option<Channel>,
    /// The session the update is recorded in (default `memory-blocks`).
    pub session_id: Option<String>,
}

impl ViewEditArgs {
    /// The `POST /api/v1/events` body that sets `view` to `text`.
    pub fn body_setting(&self, text: &str, agent: Option<&str>) -> Value {
        json!({
            "session_id": self.session_id.as_deref().unwrap_or("memory-blocks"),
            "kind": Kind::ViewUpdate,
            "channel": self.channel.unwrap_or(Channel::Private),
            "actor": mcp_actor(agent),
            "content": {"view": self.view, "text": text},
        })
    }
}

/// Withdraw memories: a `retraction` event naming them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetractArgs {
    /// The `event_id`s (`evt_...`) to withdraw: 1 to 64, your own memory or nobody's.
    pub event_ids: Vec<String>,
    /// Why they are withdrawn (kept in the log for audits).
    pub reason: String,
}

/// Correct one memory: withdraw it and record the corrected content.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectArgs {
    /// The `event_id` (`evt_...`) to correct: your own memory or nobody's.
    pub event_id: String,
    /// The whole corrected content, in the shape of the event's kind: `{"text": ...}` for a message or summary, a decision's `{"decision": ..., "scope": ...}`.
    pub content: serde_json::Map<String, Value>,
    /// Why it is corrected (kept in the log for audits).
    pub reason: String,
}

impl CorrectArgs {
    /// The `POST /api/v1/events/{id}/correct` body.
    pub fn body(&self, agent: Option<&str>) -> Value {
        json!({
            "content": self.content,
            "reason": self.reason,
            "actor": mcp_actor(agent),
        })
    }
}

/// Who MCP's writing tools record as the actor, when the model names none:
/// the token's agent (an agent's token speaks as itself only), or
/// `mcp-agent` for a token of no agent.
pub fn mcp_actor(agent: Option<&str>) -> Value {
    json!({"type": "agent", "id": agent.unwrap_or("mcp-agent")})
}

/// Read a stored tool output whole, page by page.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArtifactArgs {
    /// The `artifact_id` of a truncated tool result (bundle items and events carry it).
    pub artifact_id: String,
    /// Byte offset to start at (default 0); use `next_offset` of the previous page.
    pub offset: Option<usize>,
    /// Bytes to return (default 65536, at most 1048576).
    pub max_bytes: Option<usize>,
}

/// Look up the decision ledger.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryDecisionsArgs {
    /// `active` (in force), `superseded`, `rejected` or `retracted`. Default: all.
    pub status: Option<String>,
    /// Only decisions of this scope, e.g. "project".
    pub scope: Option<String>,
    /// Only decisions with this key, e.g. "export.page_size": shows how a decision changed over time.
    pub key: Option<String>,
    /// Only what may be shown in this channel (`private`, `team`, `agent`, `public`).
    pub channel: Option<Channel>,
    /// How many, newest first (default 20, at most 1000).
    pub limit: Option<i64>,
    /// Only decisions recorded before this seq (to page further back).
    pub before_seq: Option<i64>,
}

/// The tasks' state.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksArgs {
    /// Only tasks in this state: `open`, `doing` or `done`. Default: all.
    pub status: Option<String>,
    /// How many, most recently updated first (default 100, at most 1000).
    pub limit: Option<i64>,
}

/// A receiver's inbox of handoff packets.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffInboxArgs {
    /// The receiving agent (with an agent's token: yourself, the default).
    pub to_agent: Option<String>,
    /// `pending` (default: not accepted yet), `accepted` or `all`.
    pub state: Option<String>,
    /// How many, newest first (default 50, at most 1000).
    pub limit: Option<i64>,
}

/// The views (no arguments).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListViewsArgs {}

/// Hand work over to another agent as a packet, not a transcript.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateHandoffArgs {
    /// The agent handing over (you).
    pub from_agent: String,
    /// The agent taking over.
    pub to_agent: String,
    /// The receiver's session; a new one is made when absent (returned as `session_id`).
    pub session_id: Option<String>,
    /// What the receiver is to do. Taken from the task when absent and `task_id` is given.
    pub task: Option<String>,
    /// The task being handed over (as in task_update events).
    pub task_id: Option<String>,
    /// Rules the receiver must keep, e.g. "no schema changes".
    pub constraints: Option<Vec<String>>,
    /// Decision ids the receiver must respect. Default: the active decisions, newest first (at most 20).
    pub decision_ids: Option<Vec<String>>,
    /// Files the receiver needs, e.g. "src/export.rs".
    pub required_files: Option<Vec<String>>,
    /// Questions still open.
    pub open_questions: Option<Vec<String>>,
    /// Event or chunk ids of evidence to carry.
    pub refs: Option<Vec<String>>,
    /// `private` (default), `team`, `agent` or `public`.
    pub channel: Option<Channel>,
    /// `none` (default), `low` or `high`.
    pub sensitivity: Option<Sensitivity>,
}

impl CreateHandoffArgs {
    /// The `POST /api/v1/handoffs` body this call stands for.
    pub fn into_body(self) -> Value {
        let mut body = Map::new();
        body.insert("from_agent".into(), Value::from(self.from_agent));
        body.insert("to_agent".into(), Value::from(self.to_agent));
        for (name, value) in [
            ("session_id", self.session_id.map(Value::from)),
            ("task", self.task.map(Value::from)),
            ("task_id", self.task_id.map(Value::from)),
            ("constraints", self.constraints.map(Value::from)),
            ("decision_ids", self.decision_ids.map(Value::from)),
            ("required_files", self.required_files.map(Value::from)),
            ("open_questions", self.open_questions.map(Value::from)),
            ("refs", self.refs.map(Value::from)),
            ("channel", self.channel.map(|c| json!(c))),
            ("sensitivity", self.sensitivity.map(|s| json!(s))),
        ] {
            if let Some(value) = value {
                body.insert(name.into(), value);
            }
        }
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_needs_only_a_session_and_text() {
        let args: RecordEventArgs =
            serde_json::from_value(json!({"session_id": "s1", "text": "hello"})).unwrap();
        let body = args.into_body(None).unwrap();
        assert_eq!(
            body,
            json!({"session_id": "s1", "kind": "message", "channel": "private",
                   "actor": {"type": "agent", "id": "mcp-agent"}, "content": {"text": "hello"}})
        );
    }

    #[test]
    fn text_and_content_text_together_are_refused_by_name() {
        let args: RecordEventArgs = serde_json::from_value(
            json!({"session_id": "s1", "text": "a", "content": {"text": "b"}}),
        )
        .unwrap();
        assert_eq!(args.into_body(None).unwrap_err().field, "text");
    }

    #[test]
    fn schemas_have_no_refs_and_no_null_types() {
        let schema = Value::Object((*input_schema::<CreateHandoffArgs>()).clone());
        let text = schema.to_string();
        assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
        assert!(!text.contains("null"), "{text}");
        assert_eq!(
            schema["properties"]["channel"]["enum"],
            json!(["private", "public", "team", "agent"])
        );
        assert_eq!(schema["properties"]["constraints"]["type"], "array");
        assert!(schema["properties"]["channel"]["description"].is_string());
        assert_eq!(schema["required"], json!(["from_agent", "to_agent"]));
    }

    #[test]
    fn a_bundle_needs_nothing_and_is_rendered_at_the_mcp_budget() {
        let body = BuildAcbArgs::default().into_body(65_000);
        assert_eq!(
            body,
            json!({"render": true, "max_tokens": DEFAULT_MCP_BUNDLE_TOKENS})
        );
        // A tenant whose ceiling is lower gets its ceiling, not an error.
        assert_eq!(
            BuildAcbArgs::default().into_body(1_000)["max_tokens"],
            1_000
        );
        let asked = BuildAcbArgs {
            max_tokens: Some(2_000),
            ..BuildAcbArgs::default()
        };
        assert_eq!(
            asked.into_body(1_000)["max_tokens"],
            2_000,
            "asked for: checked as asked"
        );
    }
}
