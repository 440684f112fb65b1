//! Handoff packets (PRD A6): one agent passes work to another as a packet
//! (task, constraints, decision ids, required files, open questions, refs),
//! not as its transcript. `POST /api/v1/handoffs` builds the packet and
//! records it as a `handoff` event in the receiving session; the receiving
//! agent's bundle for that session then holds the packet, its decisions and
//! at most `handoff_evidence_max` evidence chunks, and none of the sender's
//! conversation.

use chrono::{DateTime, Utc};
use memd_core::seal::{Keyring, SealError};
use memd_projectors::{projections::TokenCounter, render};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::bundle::Item;
use crate::domain::{
    FieldError,
    event::{Channel, Sensitivity},
    limits,
};

/// What a sender asks for.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffRequest {
    /// Optional: the tenant comes from the bearer token.
    pub tenant_id: Option<String>,
    /// The sending agent, 1-256 bytes; the event's actor.
    #[schema(min_length = 1, max_length = 256)]
    pub from_agent: String,
    /// The receiving agent, 1-256 bytes: its bundle (`agent_id`) in
    /// `session_id` will hold the packet.
    #[schema(min_length = 1, max_length = 256)]
    pub to_agent: String,
    /// The receiving session; a new one (`handoff_<ulid>`) when absent.
    pub session_id: Option<String>,
    /// What the receiver is to do. Taken from the task's title and details
    /// when absent and `task_id` names a task.
    pub task: Option<String>,
    pub task_id: Option<String>,
    #[serde(default)]
    #[schema(max_items = 64)]
    pub constraints: Vec<String>,
    /// Decisions the receiver must respect. When absent, the active
    /// decisions the channel may see, newest first (at most 20).
    #[schema(max_items = 64)]
    pub decision_ids: Option<Vec<String>>,
    #[serde(default)]
    #[schema(max_items = 64)]
    pub required_files: Vec<String>,
    #[serde(default)]
    #[schema(max_items = 64)]
    pub open_questions: Vec<String>,
    /// Evidence to carry: chunk or event ids.
    #[serde(default)]
    #[schema(max_items = 64)]
    pub refs: Vec<String>,
    #[serde(default = "private")]
    #[schema(default = "private", required = false)]
    pub channel: Channel,
    #[serde(default)]
    pub sensitivity: Sensitivity,
}

fn private() -> Channel {
    Channel::Private
}

/// A packet ready to be recorded.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Packet {
    pub session_id: String,
    pub from_agent: String,
    pub to_agent: String,
    pub task: String,
    pub task_id: Option<String>,
    pub constraints: Vec<String>,
    pub decision_ids: Vec<String>,
    pub required_files: Vec<String>,
    pub open_questions: Vec<String>,
    pub refs: Vec<String>,
    /// The data subject whose memory it copies (a subject's task), if any:
    /// the packet is sealed under that subject's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_id: Option<String>,
}

impl Packet {
    /// The `handoff` event's content.
    pub fn content(&self) -> Value {
        json!({
            "to_agent": self.to_agent,
            "task": self.task,
            "task_id": self.task_id,
            "constraints": self.constraints,
            "decision_ids": self.decision_ids,
            "required_files": self.required_files,
            "open_questions": self.open_questions,
        })
    }
}

/// Most decisions a packet defaults to.
const DEFAULT_DECISIONS: i64 = 20;
/// Most entries of each list a packet carries.
const MAX_LIST: usize = 64;

/// Checks the request and fills what it leaves to memd: the task from the
/// task's state, the decisions from the ledger. Unknown decision ids are
/// refused by name.
/// `agent`: the sender's token's agent, whose view of private decisions the
/// packet's default decisions come from.
pub async fn build(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    agent: Option<&str>,
    request: HandoffRequest,
) -> Result<Result<Packet, FieldError>, sqlx::Error> {
    if let Err(refused) = check(&request) {
        return Ok(Err(refused));
    }
    let given = request.task.clone().filter(|t| !t.trim().is_empty());
    let task = match (given, &request.task_id) {
        (Some(text), _) => Some(TaskText {
            text,
            subject_id: None,
        }),
        (None, Some(task_id)) => {
            match task_text(pool, keyring, tenant, agent, &request, task_id).await? {
                Ok(found) => found,
                Err(refused) => return Ok(Err(refused)),
            }
        }
        (None, None) => None,
    };
    let Some(task) = task else {
        return Ok(Err(FieldError::new(
            "task",
            "is required (or a task_id whose task exists)",
        )));
    };
    let decision_ids = match decisions(pool, tenant, agent, &request).await? {
        Ok(ids) => ids,
        Err(refused) => return Ok(Err(refused)),
    };
    Ok(Ok(Packet {
        session_id: request
            .session_id
            .unwrap_or_else(|| crate::domain::new_id("handoff")),
        from_agent: request.from_agent,
        to_agent: request.to_agent,
        task: task.text,
        task_id: request.task_id,
        constraints: request.constraints,
        decision_ids,
        required_files: request.required_files,
        open_questions: request.open_questions,
        refs: request.refs,
        subject_id: task.subject_id,
    }))
}

/// The agents and the lists' lengths.
fn check(request: &HandoffRequest) -> Result<(), FieldError> {
    for (field, value) in [
        ("from_agent", &request.from_agent),
        ("to_agent", &request.to_agent),
    ] {
        if value.trim().is_empty() || value.len() > limits::MAX_ID_BYTES {
            return Err(FieldError::new(field, "must be 1-256 bytes"));
        }
    }
    if request.to_agent == request.from_agent {
        return Err(FieldError::new(
            "to_agent",
            "is the sending agent: a handoff goes to another agent",
        ));
    }
    for (field, items) in [
        ("constraints", &request.constraints),
        ("required_files", &request.required_files),
        ("open_questions", &request.open_questions),
        ("refs", &request.refs),
    ] {
        if items.len() > MAX_LIST {
            return Err(FieldError::new(
                field,
                format!("has {} items; at most {MAX_LIST} allowed", items.len()),
            ));
        }
    }
    Ok(())
}

/// A packet's task, and the data subject whose memory it copies (a
/// subject's task's text): the packet is then sealed under that subject's
/// key, so that erasing the subject erases the copy too.
struct TaskText {
    text: String,
    subject_id: Option<String>,
}

/// The title and details of task `task_id`, as the packet may carry them:
/// `None` if the sender cannot read the task (another agent's private
/// task is as if it did not exist), refused if the packet's channel or
/// sensitivity may not carry its text or it holds several subjects' memory.
async fn task_text(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    agent: Option<&str>,
    request: &HandoffRequest,
    task_id: &str,
) -> Result<Result<Option<TaskText>, FieldError>, sqlx::Error> {
    let state: Option<(String, String, Channel, Sensitivity)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT title, details, channel, sensitivity FROM projections.tasks t
              WHERE tenant_id = $1 AND task_id = $2 AND {owner}",
            owner = super::privacy::event_owner_condition("t", "first_seq", 3)
        )))
        .bind(tenant)
        .bind(task_id)
        .bind(agent)
        .fetch_optional(pool)
        .await?;
    let Some((title, details, channel, sensitivity)) = state else {
        return Ok(Ok(None));
    };
    // The packet must not carry the task's text to anyone who could not
    // read the task itself.
    let visible = super::privacy::Visibility::new(request.channel);
    if !visible.allows(channel, sensitivity) || sensitivity > request.sensitivity {
        return Ok(Err(FieldError::new(
            "task_id",
            format!(
                "task {task_id} is {} and {}: a {} handoff of \
                 sensitivity {} may not carry its text; give `task` yourself, or \
                 send the handoff with a channel and sensitivity that may",
                channel.as_str(),
                sensitivity.as_str(),
                request.channel.as_str(),
                request.sensitivity.as_str()
            ),
        )));
    }
    let subjects: Vec<String> = sqlx::query_scalar!(
        "SELECT DISTINCT e.subject_id AS \"subject_id!\" FROM projections.task_events te
           JOIN public.events e ON e.tenant_id = te.tenant_id AND e.seq = te.seq
          WHERE te.tenant_id = $1 AND te.task_id = $2 AND e.subject_id IS NOT NULL",
        tenant,
        task_id
    )
    .fetch_all(pool)
    .await?;
    let subject_id = match subjects.as_slice() {
        [] => None,
        [subject] => Some(subject.clone()),
        _ => {
            return Ok(Err(FieldError::new(
                "task_id",
                format!(
                    "task {task_id} holds the memory of {} data subjects, and a \
                     packet can be erased with one only: give `task` yourself",
                    subjects.len()
                ),
            )));
        }
    };
    let (title, details) = (
        keyring.open(tenant, &title)?,
        keyring.open(tenant, &details)?,
    );
    let text = if details.trim().is_empty() {
        title.into_owned()
    } else {
        format!("{title}\n{details}")
    };
    Ok(Ok(Some(TaskText { text, subject_id })))
}

/// The decisions the packet names: the request's, each checked to exist
/// (another agent's private decision is answered as a missing one: the
/// refusal must not tell what exists), or else the newest active ones the
/// packet's channel may carry.
async fn decisions(
    pool: &PgPool,
    tenant: &str,
    agent: Option<&str>,
    request: &HandoffRequest,
) -> Result<Result<Vec<String>, FieldError>, sqlx::Error> {
    let Some(ids) = &request.decision_ids else {
        let visible = super::privacy::Visibility::new(request.channel);
        return Ok(Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT decision_id FROM projections.decisions d
              WHERE tenant_id = $1 AND status = 'active'
                AND channel = ANY ($2) AND sensitivity = ANY ($3)
                AND {owner}
              ORDER BY seq DESC LIMIT $4",
            owner = super::privacy::event_owner_condition("d", "seq", 5)
        )))
        .bind(tenant)
        .bind(visible.channel_names())
        .bind(visible.sensitivity_names())
        .bind(DEFAULT_DECISIONS)
        .bind(agent)
        .fetch_all(pool)
        .await?));
    };
    if ids.len() > MAX_LIST {
        return Ok(Err(FieldError::new(
            "decision_ids",
            format!("has {} items; at most {MAX_LIST} allowed", ids.len()),
        )));
    }
    let known: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT decision_id FROM projections.decisions d
          WHERE tenant_id = $1 AND decision_id = ANY ($2) AND {owner}",
        owner = super::privacy::event_owner_condition("d", "seq", 3)
    )))
    .bind(tenant)
    .bind(ids)
    .bind(agent)
    .fetch_all(pool)
    .await?;
    if let Some((index, id)) = ids.iter().enumerate().find(|(_, id)| !known.contains(id)) {
        return Ok(Err(FieldError::new(
            format!("decision_ids[{index}]"),
            format!("{id} is not a decision of this tenant"),
        )));
    }
    Ok(Ok(ids.clone()))
}

/// A recorded packet, as the receiver's bundle and inbox show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Handoff {
    pub handoff_id: String,
    pub seq: i64,
    pub ts: DateTime<Utc>,
    /// The session it was recorded in (the receiver's, as the sender chose).
    pub session_id: String,
    pub channel: Channel,
    pub sensitivity: Sensitivity,
    pub from_agent: String,
    pub to_agent: String,
    pub task: String,
    pub task_id: Option<String>,
    pub constraints: Vec<String>,
    pub decision_ids: Vec<String>,
    pub required_files: Vec<String>,
    pub open_questions: Vec<String>,
    pub refs: Vec<String>,
}

/// The packet `handoff_id`, opened (which packet waits for a receiving
/// agent is decided with the bundle's head, in `read::acb`).
pub async fn by_id(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    handoff_id: &str,
) -> Result<Option<Handoff>, sqlx::Error> {
    let handoff = sqlx::query_as!(
        Handoff,
        r#"SELECT handoff_id, seq, ts, session_id, channel AS "channel: Channel",
                  sensitivity AS "sensitivity: Sensitivity", from_agent, to_agent,
                  task, task_id, constraints, decision_ids, required_files, open_questions, refs
             FROM projections.handoffs
            WHERE tenant_id = $1 AND handoff_id = $2"#,
        tenant,
        handoff_id
    )
    .fetch_optional(pool)
    .await?;
    let Some(mut handoff) = handoff else {
        return Ok(None);
    };
    handoff.open(keyring, tenant)?;
    Ok(Some(handoff))
}

impl Handoff {
    /// Its texts opened, as the projection seals them for a sealed packet.
    pub fn open(&mut self, keyring: &Keyring, tenant: &str) -> Result<(), SealError> {
        keyring.open_in_place(tenant, &mut self.task)?;
        for items in [
            &mut self.constraints,
            &mut self.required_files,
            &mut self.open_questions,
        ] {
            keyring.open_all(tenant, items)?;
        }
        Ok(())
    }

    pub fn item(&self, counter: &TokenCounter) -> Option<Item> {
        let label = format!("handoff from {} to {}", self.from_agent, self.to_agent);
        let meta = render::meta([label.as_str()], self.ts);
        let mut text = format!("Task: {}", self.task);
        let list = |text: &mut String, title: &str, items: &[String]| {
            if !items.is_empty() {
                text.push_str(&format!("\n{title}:"));
                for item in items {
                    text.push_str(&format!("\n- {item}"));
                }
            }
        };
        list(&mut text, "Constraints", &self.constraints);
        list(&mut text, "Decisions", &self.decision_ids);
        list(&mut text, "Required files", &self.required_files);
        list(&mut text, "Open questions", &self.open_questions);
        list(&mut text, "Evidence", &self.refs);
        let mut refs = vec![self.handoff_id.clone()];
        refs.extend(self.refs.iter().cloned());
        Some(
            Item::counted(
                "handoff",
                self.handoff_id.clone(),
                meta,
                &text,
                refs,
                counter,
            )?
            .with("handoff_id", self.handoff_id.clone())
            .with("from_agent", self.from_agent.clone())
            .with("task_id", self.task_id.clone())
            .with("decision_ids", self.decision_ids.clone())
            .with("required_files", self.required_files.clone()),
        )
    }
}
