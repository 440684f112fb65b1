//! `GET /api/v1/sessions` and `GET /api/v1/agents`: who did what where.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, QueryParams},
};
use crate::calls::activity::{
    AgentPage, AgentQuery, SessionPage, SessionQuery, list_agents, list_sessions,
};

/// List sessions
///
/// The tenant's sessions, most recently active first: each one's first and
/// last event (seq and time), event count, the agents that took part and
/// the kinds recorded. An agent's token sees the shared part of each
/// session and its own private events, never another agent's. Filter by
/// an agent that took part and by time; page with `before_seq` =
/// `next_before_seq`. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/sessions",
    tag = "events",
    params(SessionQuery),
    responses(
        (status = 200, description = "A page of sessions", body = SessionPage),
        (status = 400, description = "`invalid_field`: `limit` out of range, a malformed time, or an unknown query parameter (`field` is `query`)", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_sessions(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<SessionQuery>,
) -> Result<Response, CallError> {
    Ok(Json(list_sessions(&state, &caller, &query).await?).into_response())
}

/// List agents
///
/// The tenant's agents by id: those that recorded events (as the agent
/// whose memory it is, or as the actor) and those with tokens, each with
/// its first and last activity, event count and tokens issued and active.
/// An agent's token sees itself alone. Page with `after` = `next_after`.
/// Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/agents",
    tag = "events",
    params(AgentQuery),
    responses(
        (status = 200, description = "A page of agents", body = AgentPage),
        (status = 400, description = "`invalid_field`: `limit` out of range, or an unknown query parameter (`field` is `query`)", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_agents(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<AgentQuery>,
) -> Result<Response, CallError> {
    Ok(Json(list_agents(&state, &caller, &query).await?).into_response())
}
