//! `GET /api/v1/decisions`: the decision ledger, filterable by status,
//! scope, key and the channel it would be shown in.

use axum::{
    Json,
    extract::{Query, State},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiState, error::ApiError, extract::Authenticated, require_scope};
use crate::{
    domain::{FieldError, event::Channel, tenant::Scope},
    read::privacy::Visibility,
    tenants::Caller,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionQuery {
    /// `active`, `superseded` or `rejected`.
    pub status: Option<String>,
    pub scope: Option<String>,
    pub key: Option<String>,
    /// Only what a bundle for this channel may show.
    pub channel: Option<Channel>,
    pub limit: Option<i64>,
    /// Only decisions recorded before this seq (paging, newest first).
    pub before_seq: Option<i64>,
}

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct Decision {
    decision_id: String,
    seq: i64,
    ts: DateTime<Utc>,
    status: String,
    key: Option<String>,
    scope: String,
    decision: String,
    value: Option<Value>,
    rationale: Vec<String>,
    constraints: Vec<String>,
    alternatives: Vec<String>,
    consequences: Vec<String>,
    confidence: Option<f64>,
    refs: Vec<String>,
    supersedes: Option<String>,
    superseded_by: Option<String>,
    rejected_reason: Option<String>,
    session_id: String,
    channel: String,
    sensitivity: String,
    actor_id: String,
    tags: Vec<String>,
}

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_decisions(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    query: Result<Query<DecisionQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let Query(query) =
        query.map_err(|err| ApiError::invalid(FieldError::new("query", err.body_text())))?;
    let decisions = query_ledger(&state, &caller, &query).await?;
    Ok(Json(serde_json::json!({ "decisions": decisions })).into_response())
}

/// The caller's ledger, newest first, filtered by `query`: shared by HTTP
/// and MCP.
pub(crate) async fn query_ledger(
    state: &ApiState,
    caller: &Caller,
    query: &DecisionQuery,
) -> Result<Vec<Decision>, ApiError> {
    require_scope(caller, Scope::Read)?;
    if let Some(status) = &query.status
        && !["active", "superseded", "rejected"].contains(&status.as_str())
    {
        return Err(ApiError::invalid(FieldError::new(
            "status",
            "must be active, superseded or rejected",
        )));
    }
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(FieldError::new(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        )));
    }
    let visibility = query.channel.map(Visibility::new);
    let decisions: Vec<Decision> = sqlx::query_as(
        "SELECT decision_id, seq, ts, status, key, scope, decision, value, rationale, constraints,
                alternatives, consequences, confidence, refs, supersedes, superseded_by,
                rejected_reason, session_id, channel, sensitivity, actor_id, tags
           FROM projections.decisions
          WHERE tenant_id = $1
            AND ($2::text IS NULL OR status = $2)
            AND ($3::text IS NULL OR scope = $3)
            AND ($4::text IS NULL OR key = $4)
            AND ($5::text[] IS NULL OR channel = ANY ($5))
            AND ($6::text[] IS NULL OR sensitivity = ANY ($6))
            AND ($7::bigint IS NULL OR seq < $7)
          ORDER BY seq DESC LIMIT $8",
    )
    .bind(caller.tenant.as_str())
    .bind(&query.status)
    .bind(&query.scope)
    .bind(&query.key)
    .bind(visibility.map(|v| v.channel_names()))
    .bind(visibility.map(|v| v.sensitivity_names()))
    .bind(query.before_seq)
    .bind(limit)
    .fetch_all(&state.pool)
    .await?;
    Ok(decisions)
}
