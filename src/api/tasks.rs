//! Tasks and views as the read models hold them: `POST /api/v1/tasks`
//! records a task update, `GET /api/v1/tasks` lists the tasks' state,
//! `GET /api/v1/views` the views (identity, rules, ...).

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    ApiState,
    error::{ApiError, BodyTooLarge, ErrorBody, RateLimited, Unauthorized, Unavailable},
    extract::{Authenticated, JsonBody, QueryParams, page_limit},
    require_scope,
};
use crate::{
    domain::{
        FieldError,
        event::{Channel, Sensitivity},
        tenant::Scope,
    },
    read::privacy::event_owner_condition,
    tenants::Caller,
    write::Appended,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;
const STATUSES: [&str; 3] = ["open", "doing", "done"];

/// Record a task update
///
/// A `task_update` event from a flat body: the envelope (`session_id`,
/// `actor`, `channel` default private, `agent_id`, `sensitivity`, `tags`,
/// `refs`, `idempotency_key`, `ts`) and the update (`task_id`, `status`:
/// open, doing or done, `title`, `details`). The first update of a
/// `task_id` creates the task. Errors name the field as in the event
/// (`content.status`). Scope: write.
#[utoipa::path(
    post,
    path = "/api/v1/tasks",
    tag = "tasks",
    request_body(content = Object, description = "Envelope and task fields, flat", example = json!({
        "session_id": "s1", "actor": {"type": "agent", "id": "coder"},
        "task_id": "export-fix", "status": "doing", "title": "Fix the nightly export"})),
    responses(
        (status = 201, description = "Recorded", body = Appended),
        (status = 200, description = "A replay of an earlier `idempotency_key`", body = Appended),
        (status = 400, description = "`invalid_field`: e.g. `content.status` not open, doing or done", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`, `tenant_mismatch` or `agent_mismatch`", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_task(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (status, appended) =
        super::events::record_kind(&state, &caller, "task_update", body).await?;
    Ok((status, Json(appended)).into_response())
}

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
    #[schema(value_type = Channel)]
    channel: String,
    #[schema(value_type = Sensitivity)]
    sensitivity: String,
    updated_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TaskList {
    /// Most recently updated first.
    tasks: Vec<Task>,
}

/// List tasks
///
/// The tenant's tasks, most recently updated first, as the tasks
/// projection holds them (another agent's private tasks left out for an
/// agent's token). Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/tasks",
    tag = "tasks",
    params(TaskQuery),
    responses(
        (status = 200, description = "The tasks", body = TaskList),
        (status = 400, description = "`invalid_field`: `status` or `limit` out of range, or an unknown query parameter", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_tasks(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<TaskQuery>,
) -> Result<Response, ApiError> {
    let tasks = list_tasks(&state, &caller, &query).await?;
    Ok(Json(TaskList { tasks }).into_response())
}

/// The caller's tasks, filtered by `query`: shared by HTTP and MCP.
pub(crate) async fn list_tasks(
    state: &ApiState,
    caller: &Caller,
    query: &TaskQuery,
) -> Result<Vec<Task>, ApiError> {
    require_scope(caller, Scope::Read)?;
    if let Some(status) = &query.status
        && !STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::invalid(FieldError::new(
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
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct View {
    view: String,
    text: String,
    event_id: String,
    ts: DateTime<Utc>,
    actor_id: String,
    #[schema(value_type = Channel)]
    channel: String,
    #[schema(value_type = Sensitivity)]
    sensitivity: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ViewList {
    /// By name.
    views: Vec<View>,
}

/// List views
///
/// The tenant's views (identity, rules, preferences, ...): documents a
/// person curates for every agent, each its newest `view_update`. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/views",
    tag = "tasks",
    responses(
        (status = 200, description = "The views", body = ViewList),
        (status = 401, response = Unauthorized),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_views(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, ApiError> {
    let views = list_views(&state, &caller).await?;
    Ok(Json(ViewList { views }).into_response())
}

/// The tenant's views: shared by HTTP and MCP.
pub(crate) async fn list_views(state: &ApiState, caller: &Caller) -> Result<Vec<View>, ApiError> {
    require_scope(caller, Scope::Read)?;
    let mut views: Vec<View> = sqlx::query_as(
        "SELECT view, text, event_id, ts, actor_id, channel, sensitivity
           FROM projections.views WHERE tenant_id = $1 ORDER BY view",
    )
    .bind(caller.tenant.as_str())
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
