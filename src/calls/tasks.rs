//! Tasks and views as a caller may see them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ApiState, error::CallError, page_limit, require_scope};
use crate::{
    domain::{
        FieldError,
        event::{Channel, Sensitivity},
        tenant::Scope,
    },
    read::privacy::event_owner_condition,
    tenants::Caller,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;
const STATUSES: [&str; 3] = ["open", "doing", "done"];

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskQuery {
    /// Only tasks in this state: open, doing or done.
    #[param(pattern = "^(open|doing|done)$")]
    pub status: Option<String>,
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// A task as its updates left it.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Task {
    task_id: String,
    /// open, doing or done.
    status: String,
    title: String,
    details: String,
    refs: Vec<String>,
    /// Its `task_update` events, oldest first.
    event_ids: Vec<String>,
    session_id: String,
    channel: Channel,
    sensitivity: Sensitivity,
    updated_at: DateTime<Utc>,
}

/// The caller's tasks, filtered by `query`: shared by HTTP and MCP.
pub(crate) async fn list_tasks(
    state: &ApiState,
    caller: &Caller,
    query: &TaskQuery,
) -> Result<Vec<Task>, CallError> {
    require_scope(caller, Scope::Read)?;
    if let Some(status) = &query.status
        && !STATUSES.contains(&status.as_str())
    {
        return Err(CallError::invalid(FieldError::new(
            "status",
            "must be open, doing or done",
        )));
    }
    let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let mut tasks: Vec<Task> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT task_id, status, title, details, refs,
                ARRAY(SELECT e.event_id FROM projections.task_events e
                       WHERE e.tenant_id = t.tenant_id AND e.task_id = t.task_id
                       ORDER BY e.seq) AS event_ids,
                session_id, channel, sensitivity, updated_at
           FROM projections.tasks t
          WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2)
            AND {owner}
          ORDER BY last_seq DESC, task_id LIMIT $3",
        owner = event_owner_condition("t", "first_seq", 4)
    )))
    .bind(caller.tenant.as_str())
    .bind(&query.status)
    .bind(limit)
    .bind(&caller.agent)
    .fetch_all(&state.pool)
    .await?;
    let (keyring, tenant) = (&state.reader.keyring, caller.tenant.as_str());
    for task in &mut tasks {
        keyring.open_in_place(tenant, &mut task.title)?;
        keyring.open_in_place(tenant, &mut task.details)?;
    }
    Ok(tasks)
}

/// A view as the views projection holds it: its newest `view_update`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct View {
    view: String,
    text: String,
    event_id: String,
    ts: DateTime<Utc>,
    actor_id: String,
    channel: Channel,
    sensitivity: Sensitivity,
    /// The agent whose own version it is (its private updates); null for
    /// the shared version.
    owner: Option<String>,
}

/// The tenant's views: shared by HTTP and MCP. An agent's token sees the
/// shared versions and its own, never another agent's.
pub(crate) async fn list_views(state: &ApiState, caller: &Caller) -> Result<Vec<View>, CallError> {
    require_scope(caller, Scope::Read)?;
    let mut views = sqlx::query_as!(
        View,
        r#"SELECT view, text, event_id, ts, actor_id, channel AS "channel: Channel",
                  sensitivity AS "sensitivity: Sensitivity", nullif(owner, '') AS owner
             FROM projections.views
            WHERE tenant_id = $1 AND (owner = '' OR $2::text IS NULL OR owner = $2)
            ORDER BY view, owner"#,
        caller.tenant.as_str(),
        caller.agent
    )
    .fetch_all(&state.pool)
    .await?;
    for view in &mut views {
        state
            .reader
            .keyring
            .open_in_place(caller.tenant.as_str(), &mut view.text)?;
    }
    Ok(views)
}

/// The newest text of `view` as `caller` sees it (its own version, else
/// the shared one), once the projections hold everything appended so far
/// (at most the policy's strong-consistency wait), so an edit builds on
/// the caller's previous one.
pub(crate) async fn current_view(
    state: &ApiState,
    caller: &Caller,
    view: &str,
) -> Result<Option<String>, CallError> {
    require_scope(caller, Scope::Read)?;
    let tenant = caller.tenant.as_str();
    let policy = state.reader.cache.policy(&state.pool, tenant).await?;
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(policy.strong_consistency_timeout_ms);
    loop {
        let (head, projected) = state.reader.positions(tenant).await?;
        let now = std::time::Instant::now();
        if projected >= head || now >= deadline {
            break;
        }
        let slice = (deadline - now).min(std::time::Duration::from_millis(25));
        state.reader.cache.wait_projected(tenant, head, slice).await;
    }
    let text: Option<String> = sqlx::query_scalar!(
        "SELECT text FROM projections.views
          WHERE tenant_id = $1 AND view = $2 AND (owner = '' OR owner = $3)
          ORDER BY owner = '' LIMIT 1",
        tenant,
        view,
        caller.agent.as_deref().unwrap_or("")
    )
    .fetch_optional(&state.pool)
    .await?;
    let Some(mut text) = text else {
        return Ok(None);
    };
    state.reader.keyring.open_in_place(tenant, &mut text)?;
    Ok(Some(text))
}
