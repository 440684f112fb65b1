//! The MCP tools. Each is a thin handler: arguments become the HTTP
//! call's body, the shared call in `calls` does the work (scope, validation,
//! tenant isolation), and its error becomes a tool error whose text is the
//! HTTP error body, so a model reads which field to fix.

use rmcp::{
    ErrorData, ServerHandler,
    handler::server::{router::tool::ToolRouter, tool::Extension, wrapper::Parameters},
    model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig},
    tool, tool_handler, tool_router,
};
use serde::Serialize;
use serde_json::json;

use super::args::{
    BuildAcbArgs, CreateHandoffArgs, DEFAULT_ARTIFACT_BYTES, DEFAULT_DECISIONS, GetArtifactArgs,
    HandoffInboxArgs, ListTasksArgs, ListViewsArgs, MAX_ARTIFACT_BYTES, QueryDecisionsArgs,
    RecordEventArgs, SearchArgs, ViewEditArgs, input_schema,
};
use super::args::{CorrectArgs, RetractArgs, mcp_actor};
use crate::{
    calls::{
        ApiState, acb, artifacts, corrections, decisions, error::CallError, events, handoffs, tasks,
    },
    domain::FieldError,
    tenants::Caller,
};

/// What the server tells a model about using it, at initialization.
const INSTRUCTIONS: &str = "memd is your long-term memory. Record what happens as it happens \
(memory_record_event: each user message, your replies, tool calls and results, decisions with the \
events they rest on, task updates). Before each step, call memory_build_acb with what you are about \
to do as query_text: it returns what matters now (identity and rules, your tasks, the decisions in \
force, retrieved evidence with citations, the session's recent events) within a token budget. Cite \
items by their handles ([D1], [E2], ...) or refs. Use memory_search to look one thing up (scored \
memories, no bundle), memory_get_artifact for a truncated tool \
output, memory_query_decisions for the decision ledger, memory_list_tasks for every task's state \
(done ones too), memory_list_views for the identity, rules and preferences documents, \
memory_create_handoff to pass work to another agent, memory_retract and memory_correct to withdraw \
or fix a memory that is wrong.";

/// One MCP server per request (stateless transport); cheap to build.
#[derive(Clone)]
pub struct MemoryTools {
    state: ApiState,
    tool_router: ToolRouter<Self>,
}

/// The caller the `/mcp` auth layer resolved from the request's bearer token.
fn caller(parts: &axum::http::request::Parts) -> Result<&Caller, ErrorData> {
    parts
        .extensions
        .get::<Caller>()
        .ok_or_else(|| ErrorData::internal_error("request reached a tool unauthenticated", None))
}

/// A tool error a model can act on: the HTTP error body, as text and as
/// structured content.
fn failed(err: CallError) -> CallToolResult {
    CallToolResult::structured_error(json!(err.body()))
}

/// A result as structured content (and its JSON as text).
fn answered(value: &impl Serialize) -> Result<CallToolResult, ErrorData> {
    serde_json::to_value(value)
        .map(CallToolResult::structured)
        .map_err(|err| ErrorData::internal_error(err.to_string(), None))
}

fn invalid(err: FieldError) -> CallToolResult {
    failed(CallError::invalid(err))
}

#[tool_router]
impl MemoryTools {
    pub fn new(state: ApiState) -> Self {
        Self {
            state,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        input_schema = input_schema::<RecordEventArgs>(),
        description = "Record one event in memory: a message, a tool call or its result, a decision (cite the events it rests on in refs), a task update, a summary or a view update (identity, rules, preferences). Returns the event id and its position (seq) in the log. Secrets are redacted before anything is stored.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_record_event(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<RecordEventArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let body = match args.into_body(caller.agent.as_deref()) {
            Ok(body) => body,
            Err(err) => return Ok(invalid(err)),
        };
        match events::record(&self.state, caller, body).await {
            Ok((_, recorded)) => answered(&recorded),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<BuildAcbArgs>(),
        description = "Build the Active Context Bundle for your next step: identity and rules, your handoff packet, open tasks, the decisions in force, evidence retrieved for query_text (with citations), and the session's recent events, within max_tokens (default 4000). Call it with just query_text to recall what memory holds about something. The text result is the bundle as a prompt; the structured result has every item with its refs, what was left out and why (omissions), and provenance.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_build_acb(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<BuildAcbArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let policy = match self
            .state
            .reader
            .cache
            .policy(&self.state.pool, caller.tenant.as_str())
            .await
        {
            Ok(policy) => policy,
            Err(err) => return Ok(failed(CallError::from(err))),
        };
        let body = args.into_body(policy.max_tokens);
        let acb = match acb::build(&self.state, caller, body).await {
            Ok(acb) => acb,
            Err(err) => return Ok(failed(err)),
        };
        let mut structured = serde_json::to_value(&acb)
            .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
        // The prompt is the text content; not twice.
        if let Some(fields) = structured.as_object_mut() {
            fields.remove("prompt");
        }
        let prompt = acb.prompt.unwrap_or_default();
        let text = if prompt.is_empty() {
            "(memory holds nothing for this bundle yet)".to_owned()
        } else {
            prompt
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(structured);
        Ok(result)
    }

    #[tool(
        input_schema = input_schema::<SearchArgs>(),
        description = "Search memory: up to k (default 10) memories that best answer query, best first, each with its text, scores (relevance, lexical, semantic), event_id and chunk_id to cite, session and time. Decisions in force are among them. Use it to look something up; use memory_build_acb for the whole context of your next step.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_search(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<SearchArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let found = match acb::search(&self.state, caller, args.into_body()).await {
            Ok(found) => found,
            Err(err) => return Ok(failed(err)),
        };
        let text = if found.results.is_empty() {
            "(nothing in memory answers this)".to_owned()
        } else {
            found
                .results
                .iter()
                .map(|r| {
                    format!(
                        "[{}] {} {} (relevance {:.2})\n{}",
                        r.event_id,
                        r.kind,
                        r.ts.format("%Y-%m-%d %H:%M"),
                        r.relevance,
                        r.text
                    )
                })
                .collect::<Vec<_>>()
                .join("\n\n")
        };
        let structured = serde_json::to_value(&found)
            .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(structured);
        Ok(result)
    }

    #[tool(
        input_schema = input_schema::<ViewEditArgs>(),
        description = "Replace a memory block (a view such as persona, human, rules or notes) with new text, recorded as a view_update event. Bundles show the newest text of each view. The tenant's policy may limit a view's tokens (view_limits): text over the limit is refused, naming the view and its limit.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_view_replace(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<ViewEditArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let body = args.body_setting(&args.text, caller.agent.as_deref());
        match events::record(&self.state, caller, body).await {
            Ok((_, recorded)) => answered(&recorded),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<ViewEditArgs>(),
        description = "Add text on a new line at the end of a memory block (a view such as persona, human, rules or notes), recorded as a view_update event holding the whole new text. Starts from the newest text of the view you see (your own version, else the shared one). A view over its policy limit (view_limits) is refused, naming the view and its limit.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_view_append(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<ViewEditArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let current = match tasks::current_view(&self.state, caller, &args.view).await {
            Ok(current) => current,
            Err(err) => return Ok(failed(err)),
        };
        let text = match current {
            Some(current) if !current.trim().is_empty() => {
                format!("{}\n{}", current.trim_end(), args.text)
            }
            _ => args.text.clone(),
        };
        match events::record(
            &self.state,
            caller,
            args.body_setting(&text, caller.agent.as_deref()),
        )
        .await
        {
            Ok((_, recorded)) => answered(&recorded),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<RetractArgs>(),
        description = "Withdraw memories that are wrong or should be forgotten (\"forget what I said at 10:02\"): records a retraction naming their event_ids, with a reason. From then on no bundle, search or view shows them; the log keeps them, marked retracted_by. Only your own memory or nobody's. To replace a memory with the right content, use memory_correct.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_retract(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<RetractArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let retracted = corrections::retract(
            &self.state,
            caller,
            &args.event_ids,
            &args.reason,
            mcp_actor(caller.agent.as_deref()),
        )
        .await;
        match retracted {
            Ok((_, recorded)) => answered(&recorded),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<CorrectArgs>(),
        description = "Correct one memory (\"that fact is wrong, here is the right one\"): withdraws the event and records the corrected content in its place (same kind, session and channel), both at once. Give the whole corrected content in the event kind's shape, e.g. {\"text\": ...} for a message. Only your own memory or nobody's.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_correct(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<CorrectArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        match corrections::correct(
            &self.state,
            caller,
            &args.event_id,
            args.body(caller.agent.as_deref()),
        )
        .await
        {
            Ok((_, corrected)) => answered(&corrected),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<GetArtifactArgs>(),
        description = "Read the full output of a truncated tool result (its artifact_id appears in events and bundle items), page by page: returns up to max_bytes (default 65536) from offset, and next_offset while more remains.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_get_artifact(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<GetArtifactArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let max_bytes = args.max_bytes.unwrap_or(DEFAULT_ARTIFACT_BYTES);
        if !(1..=MAX_ARTIFACT_BYTES).contains(&max_bytes) {
            return Ok(invalid(FieldError::new(
                "max_bytes",
                format!("must be between 1 and {MAX_ARTIFACT_BYTES}"),
            )));
        }
        let offset = args.offset.unwrap_or(0);
        let fetched =
            artifacts::fetch_range(&self.state, caller, &args.artifact_id, offset, max_bytes).await;
        let (artifact, total) = match fetched {
            Ok(fetched) => fetched,
            Err(err) => return Ok(failed(err)),
        };
        if offset > total {
            return Ok(invalid(FieldError::new(
                "offset",
                format!("is past the artifact's end ({total} bytes)"),
            )));
        }
        let (text, taken) = page(&artifact.bytes, 0, max_bytes);
        let end = offset + taken;
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "artifact_id": args.artifact_id,
            "event_id": artifact.event_id,
            "media_type": artifact.media_type,
            "sha256": artifact.sha256,
            "sealed": artifact.sealed,
            "total_bytes": total,
            "offset": offset,
            "returned_bytes": end - offset,
            "next_offset": (end < total).then_some(end),
        }));
        Ok(result)
    }

    #[tool(
        input_schema = input_schema::<QueryDecisionsArgs>(),
        description = "List decisions from the decision ledger, newest first: what was decided, why (rationale), constraints, alternatives, status (active, superseded with its successor, rejected, or retracted) and refs to the evidence. Filter by status, scope or key; give a key to see how one decision changed over time.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_query_decisions(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<QueryDecisionsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let query = decisions::DecisionQuery {
            status: args.status,
            scope: args.scope,
            key: args.key,
            channel: args.channel,
            limit: Some(args.limit.unwrap_or(DEFAULT_DECISIONS)),
            before_seq: args.before_seq,
        };
        match decisions::query_ledger(&self.state, caller, &query).await {
            Ok(decisions) => answered(&json!({ "decisions": decisions })),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<ListTasksArgs>(),
        description = "List tasks as their task_update events left them, most recently updated first: id, status (open, doing, done), title, details, refs and the updates' event ids. Filter by status. Bundles show only open and doing tasks; this shows done ones too.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_list_tasks(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<ListTasksArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let query = tasks::TaskQuery {
            status: args.status,
            limit: args.limit,
        };
        match tasks::list_tasks(&self.state, caller, &query).await {
            Ok(tasks) => answered(&json!({ "tasks": tasks })),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<ListViewsArgs>(),
        description = "Read the tenant's views: documents people curate for every agent (identity, rules, preferences, ...), each as its newest view_update left it. Change one by recording a view_update event.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_list_views(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(_): Parameters<ListViewsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        match tasks::list_views(&self.state, caller).await {
            Ok(views) => answered(&json!({ "views": views })),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<HandoffInboxArgs>(),
        description = "Your inbox of handoff packets, newest first: work other agents passed to you (task, constraints, decision ids, required files, open questions, evidence refs), by default those you have not accepted yet. Accept a packet by recording any event that cites its handoff_id in refs (your first reply or task update). Your bundles also show your newest pending packet, whatever their session.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_handoff_inbox(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<HandoffInboxArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let query = handoffs::InboxQuery {
            to_agent: args.to_agent,
            state: args.state,
            limit: args.limit,
        };
        match handoffs::inbox(&self.state, caller, &query).await {
            Ok(packets) => answered(&json!({ "handoffs": packets })),
            Err(err) => Ok(failed(err)),
        }
    }

    #[tool(
        input_schema = input_schema::<CreateHandoffArgs>(),
        description = "Hand work over to another agent: records a packet (task, constraints, decision ids, required files, open questions, evidence refs) in the receiver's session. The receiver then calls memory_build_acb with its agent_id and that session_id and gets the packet, its decisions and a few evidence chunks, never your transcript.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_create_handoff(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(args): Parameters<CreateHandoffArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        match handoffs::create(&self.state, caller, args.into_body()).await {
            Ok(created) => answered(&created),
            Err(err) => Ok(failed(err)),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memd", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Up to `max_bytes` of `bytes` from `offset`, as text, ending on a
/// character boundary when the bytes are UTF-8 (a page never splits a
/// character); returns the text and the end offset.
fn page(bytes: &[u8], offset: usize, max_bytes: usize) -> (String, usize) {
    let mut end = (offset + max_bytes).min(bytes.len());
    let slice = &bytes[offset..end];
    match std::str::from_utf8(slice) {
        Ok(text) => (text.to_owned(), end),
        Err(err) if err.error_len().is_none() && err.valid_up_to() > 0 => {
            // Cut inside the last character: stop before it.
            end = offset + err.valid_up_to();
            (
                String::from_utf8_lossy(&bytes[offset..end]).into_owned(),
                end,
            )
        }
        Err(_) => (String::from_utf8_lossy(slice).into_owned(), end),
    }
}

#[cfg(test)]
mod tests {
    use super::page;

    #[test]
    fn pages_never_split_a_character() {
        let text = "aé€b".as_bytes(); // 1 + 2 + 3 + 1 bytes
        assert_eq!(page(text, 0, 2), ("a".to_owned(), 1));
        assert_eq!(page(text, 1, 4), ("é".to_owned(), 3));
        assert_eq!(page(text, 3, 10), ("€b".to_owned(), 7));
        assert_eq!(page(text, 0, 100), ("aé€b".to_owned(), 7));
    }

    #[test]
    fn a_page_of_binary_bytes_still_advances() {
        let bytes = [0xff_u8, 0xfe, 0xfd];
        let (_, end) = page(&bytes, 0, 2);
        assert_eq!(end, 2);
    }
}
