//! Tasks and views as the read models hold them: `POST /api/v1/tasks`
//! records a task update, `GET /api/v1/tasks` lists the tasks' state,
//! `GET /api/v1/views` the views (identity, rules, ...).

use serde::Serialize;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, JsonBody, QueryParams},
    failure,
};
use crate::{
    calls::{
        events::{TASK_BODY, record_kind},
        tasks::{Task, TaskQuery, View, list_tasks, list_views},
    },
    write::Appended,
};

#[derive(Serialize, utoipa::ToSchema)]
pub struct TaskList {
    /// Most recently updated first.
    tasks: Vec<Task>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ViewList {
    /// By name.
    views: Vec<View>,
}

/// Record a task update
///
/// A `task_update` event from a flat body: the envelope (`session_id`,
/// `actor`, `channel` default private, `agent_id`, `sensitivity`, `tags`,
/// `refs`, `idempotency_key`, `ts`, and `subject_id`, sealed under the
/// subject's key as on events) and the update (`task_id`, `status`: open,
/// doing or done, `title`, `details`); any other field is refused by name.
/// The first update of a `task_id` creates the task. Errors name the field as in the event
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
        (status = 400, description = "`invalid_field`: e.g. `content.status` not open, doing or done, or a field that is neither envelope nor task", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`, `tenant_mismatch` or `agent_mismatch`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the `idempotency_key` was used for another request (nothing stored; resend the original or use a new key), or `subject_erased`: `subject_id` names an erased data subject", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_task(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let (status, appended) = record_kind(&state, &caller, &TASK_BODY, body).await?;
    Ok((failure::stored(status), Json(appended)).into_response())
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
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_tasks(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<TaskQuery>,
) -> Result<Response, CallError> {
    let tasks = list_tasks(&state, &caller, &query).await?;
    Ok(Json(TaskList { tasks }).into_response())
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
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_views(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, CallError> {
    let views = list_views(&state, &caller).await?;
    Ok(Json(ViewList { views }).into_response())
}
