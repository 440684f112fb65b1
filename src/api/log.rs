//! Reading the log back: `GET /api/v1/events` (a tenant's events in log
//! order, filterable and paged) and `GET /api/v1/events/{id}`, so that what
//! was recorded can be shown, cited and checked (each event carries its
//! chain hashes; `memd verify` proves the chain), and `GET
//! /api/v1/chunks/{id}`, the retrieval unit a bundle cites.

use axum::{
    Json,
    extract::{Path, Query, State},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ApiState, error::ApiError, extract::Authenticated, require_scope};
use crate::domain::{FieldError, tenant::Scope};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    pub session_id: Option<String>,
    /// One event kind (`message`, `tool_result`, ...).
    pub kind: Option<String>,
    /// Only events after this seq (paging: pass the last seq seen).
    pub after_seq: Option<i64>,
    pub limit: Option<i64>,
}

/// An event as stored: the envelope, the content as kept (redacted, tool
/// outputs normalized), and its place in the hash chain.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct StoredEvent {
    pub event_id: String,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub ts: DateTime<Utc>,
    pub session_id: String,
    pub channel: String,
    pub actor_type: String,
    pub actor_id: String,
    pub kind: String,
    pub sensitivity: String,
    pub tags: Vec<String>,
    pub refs: Vec<String>,
    pub content: Value,
    pub idempotency_key: Option<String>,
    pub artifact_id: Option<String>,
    /// Hex SHA-256 of the previous event's hash and this event.
    pub hash: String,
    pub prev_hash: String,
}

const EVENT_COLUMNS: &str = "event_id, seq, created_at, ts, session_id, channel, actor_type, \
     actor_id, kind, sensitivity, tags, refs, content, idempotency_key, artifact_id, \
     encode(hash, 'hex') AS hash, encode(prev_hash, 'hex') AS prev_hash";

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_events(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    query: Result<Query<EventQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let Query(query) =
        query.map_err(|err| ApiError::invalid(FieldError::new("query", err.body_text())))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(FieldError::new(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        )));
    }
    let events: Vec<StoredEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM events
          WHERE tenant_id = $1
            AND ($2::text IS NULL OR session_id = $2)
            AND ($3::text IS NULL OR kind = $3)
            AND seq > coalesce($4, 0)
          ORDER BY seq LIMIT $5"
    )))
    .bind(caller.tenant.as_str())
    .bind(&query.session_id)
    .bind(&query.kind)
    .bind(query.after_seq)
    .bind(limit)
    .fetch_all(&state.pool)
    .await?;
    let next_after_seq = (events.len() as i64 == limit)
        .then(|| events.last().map(|e| e.seq))
        .flatten();
    Ok(Json(json!({"events": events, "next_after_seq": next_after_seq})).into_response())
}

/// One event; another tenant's is a 404 exactly like a missing one.
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, event = %event_id))]
pub async fn get_event(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    Path(event_id): Path<String>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let event: StoredEvent = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND event_id = $2"
    )))
    .bind(caller.tenant.as_str())
    .bind(&event_id)
    .fetch_optional(&state.pool)
    .await?
    .ok_or_else(|| ApiError::not_found(format!("no event {event_id}")))?;
    Ok(Json(event).into_response())
}

/// A retrieval unit: part of an event's text, as projected.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct Chunk {
    pub chunk_id: String,
    pub event_id: String,
    pub seq: i64,
    pub part: i32,
    pub ts: DateTime<Utc>,
    pub session_id: String,
    pub channel: String,
    pub sensitivity: String,
    pub actor_type: String,
    pub actor_id: String,
    pub kind: String,
    pub tags: Vec<String>,
    pub source: Option<String>,
    pub line_start: Option<i32>,
    pub line_end: Option<i32>,
    pub text: String,
    pub token_est: i32,
    pub importance: f32,
}

/// One chunk; another tenant's is a 404 exactly like a missing one.
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, chunk = %chunk_id))]
pub async fn get_chunk(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    Path(chunk_id): Path<String>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let chunk: Chunk = sqlx::query_as(
        "SELECT chunk_id, event_id, seq, part, ts, session_id, channel, sensitivity, actor_type,
                actor_id, kind, tags, source, line_start, line_end, text, token_est, importance
           FROM projections.chunks WHERE tenant_id = $1 AND chunk_id = $2",
    )
    .bind(caller.tenant.as_str())
    .bind(&chunk_id)
    .fetch_optional(&state.pool)
    .await?
    .ok_or_else(|| ApiError::not_found(format!("no chunk {chunk_id}")))?;
    Ok(Json(chunk).into_response())
}
