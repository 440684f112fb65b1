//! Generated histories that scenarios and the lab's benchmarks load: a chat and a tool-heavy coding
//! session, deterministic for a given size.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::{
    domain::{
        event::{EventRequest, NewEvent},
        redact::Redactor,
        tenant::TenantId,
    },
    write,
};

/// The kinds of history rebuilt.
#[derive(Debug, Clone, Copy)]
pub enum History {
    /// An assistant's conversation: mostly short messages, some tool calls
    /// with short results, a few decisions and task updates.
    Chat,
    /// A coding agent reading files: 15% tool outputs of ~5 KB each, which
    /// carry three quarters of the text.
    ToolHeavy,
}

impl History {
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::ToolHeavy => "tool-heavy",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Chat => {
                "80% messages, 8% tool calls, 8% tool results of ~300 B, 2% decisions, 2% task updates"
            }
            Self::ToolHeavy => {
                "70% messages, 15% tool outputs of ~5 KB, 5% decisions, 5% task updates, \
                 3% summaries with claims, 2% view updates"
            }
        }
    }

    pub fn event(self, i: u64, evidence: Option<&str>) -> Value {
        match self {
            Self::Chat => chat_event(i, evidence),
            Self::ToolHeavy => mixed_event(i, evidence),
        }
    }
}

/// Appends events `from+1..=to` of `history` to `tenant`, in batches of 1000.
pub async fn load(
    pool: &PgPool,
    tenant: &TenantId,
    history: History,
    from: u64,
    to: u64,
) -> anyhow::Result<()> {
    load_where(pool, tenant, history, from, to, |_| true).await
}

/// [`load`], appending only the events `keep` takes (their numbers stay
/// those of the whole history).
pub async fn load_where(
    pool: &PgPool,
    tenant: &TenantId,
    history: History,
    from: u64,
    to: u64,
    keep: impl Fn(&Value) -> bool,
) -> anyhow::Result<()> {
    const BATCH: u64 = 1000;
    let redactor = Redactor::default();
    let mut last_event: Option<String> = None;
    let mut n = from;
    while n < to {
        let end = (n + BATCH).min(to);
        let mut events = Vec::with_capacity((end - n) as usize);
        for i in n..end {
            let body = history.event(i, last_event.as_deref());
            if !keep(&body) {
                continue;
            }
            let request: EventRequest = serde_json::from_value(body)?;
            events.push(
                NewEvent::parse(request, &redactor)
                    .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.message))?,
            );
        }
        let appended =
            write::append(pool, &memd_core::seal::Keyring::none(), tenant, events).await?;
        last_event = appended.last().map(|a| a.event_id.clone());
        n = end;
        if n.is_multiple_of(100_000) {
            eprintln!("loaded {n} events");
        }
    }
    Ok(())
}

const STATUSES: [&str; 3] = ["open", "doing", "done"];
const VIEWS: [&str; 3] = ["identity", "rules", "preferences"];

/// The `n`th message of the chat history's kind (its events that are
/// messages, in order, from `first`): what an agent of that history says,
/// in its words.
pub fn chat_message(first: u64, n: u64) -> Value {
    let i = first + n / 40 * 50 + n % 40;
    chat_event(i, None)
}

fn chat_event(i: u64, evidence: Option<&str>) -> Value {
    let refs: Vec<&str> = evidence.into_iter().collect();
    let (actor, kind, content, refs) = match i % 50 {
        0..=39 if i.is_multiple_of(2) => (
            "human",
            "message",
            json!({"text": format!("Can you check why the nightly export {i} failed for account {}? \
                    It worked yesterday.", i % 311)}),
            vec![],
        ),
        0..=39 => (
            "agent",
            "message",
            json!({"text": format!("The export job {i} timed out after 30 s while reading account {}; \
                    I will retry with a smaller page size.", i % 311)}),
            vec![],
        ),
        40..=43 => (
            "agent",
            "tool_call",
            json!({"tool": "jobs.status", "args": {"job": format!("export-{i}")}}),
            vec![],
        ),
        44..=47 => (
            "tool",
            "tool_result",
            json!({"tool": "jobs.status", "output": format!(
                "job export-{i}: failed\nreason: timeout after 30000 ms\npages read: {}\nretries: 2\n", i % 97)}),
            vec![],
        ),
        48 => (
            "agent",
            "decision",
            json!({"decision": format!("Export pages of {} rows", 100 + i % 7 * 50), "key": "export-page-size",
                   "scope": "project", "rationale": ["timeouts above 500 rows"]}),
            refs,
        ),
        _ => (
            "agent",
            "task_update",
            json!({"task_id": format!("T-{}", i % 25), "status": STATUSES[(i % 3) as usize],
                   "title": format!("Fix export for account {}", i % 25)}),
            vec![],
        ),
    };
    json!({
        "session_id": format!("session-{}", i / 200),
        "channel": "private",
        "actor": {"type": actor, "id": actor},
        "kind": kind,
        "content": content,
        "refs": refs,
    })
}

fn mixed_event(i: u64, evidence: Option<&str>) -> Value {
    let refs: Vec<&str> = evidence.into_iter().collect();
    let (kind, content, refs) = match i % 100 {
        0..=69 => (
            "message",
            json!({"text": format!("Message {i}: we looked at module {} and the retry policy; \
                    the queue drains in about {} seconds under load.", i % 37, i % 90)}),
            vec![],
        ),
        70..=84 => {
            let output: String = (0..60)
                .map(|line| format!("{line:>4} | fn step_{i}_{line}(ctx: &mut Context) -> Result<()> {{ ctx.advance() }}\n"))
                .collect();
            (
                "tool_result",
                json!({"tool": "fs.read_file", "path": format!("src/mod_{}.rs", i % 50), "output": output}),
                vec![],
            )
        }
        85..=89 => (
            "decision",
            json!({"decision": format!("Use strategy {i} for module {}", i % 13), "key": format!("module-{}", i % 13),
                   "scope": "project", "rationale": ["measured", "simpler"]}),
            refs,
        ),
        90..=94 => (
            "task_update",
            json!({"task_id": format!("T-{}", i % 40), "status": STATUSES[(i % 3) as usize],
                   "title": format!("Task {}", i % 40)}),
            vec![],
        ),
        95..=97 => (
            "summary",
            json!({"text": format!("Summary {i}: module {} uses strategy {i}", i % 13),
                   "claims": [{"key": format!("module-{}", i % 13), "value": format!("strategy {i}")}]}),
            refs,
        ),
        _ => (
            "view_update",
            json!({"view": VIEWS[(i % 3) as usize], "text": format!("Revision {i}")}),
            vec![],
        ),
    };
    json!({
        "session_id": format!("session-{}", i / 500),
        "channel": "private",
        "actor": {"type": "agent", "id": "loader"},
        "kind": kind,
        "content": content,
        "refs": refs,
    })
}
