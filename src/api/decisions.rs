//! The decision ledger: `GET /api/v1/decisions` (and its PRD name
//! `/decisions/query`), filterable by status, scope, key and the channel it
//! would be shown in; `POST /api/v1/decisions` records one.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use memd_projectors::seal::{Keyring, SealError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    ApiState,
    error::{ApiError, BodyTooLarge, ErrorBody, RateLimited, Unauthorized, Unavailable},
    extract::{Authenticated, JsonBody, QueryParams, page_limit},
    require_scope,
};
use crate::{
    domain::{
        FieldError,
        event::{Channel, DECISION_SCOPES, Sensitivity},
        tenant::Scope,
    },
    read::{
        cache::open_decision,
        privacy::{Visibility, event_owner_condition},
    },
    tenants::Caller,
    write::Appended,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DecisionQuery {
    /// Only decisions with this status.
    #[param(value_type = Option<DecisionStatus>)]
    pub status: Option<String>,
    /// Only decisions of this scope.
    #[param(pattern = "^(project|user|global)$")]
    pub scope: Option<String>,
    /// Only decisions of this key (`export.page_size`, ...).
    pub key: Option<String>,
    /// Only what a bundle for this channel may show.
    pub channel: Option<Channel>,
    /// At most this many, newest first.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
    /// Only decisions recorded before this seq (paging, newest first).
    pub before_seq: Option<i64>,
}

/// Where a decision stands in the ledger. Documentation only: the ledger
/// stores it as text.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum DecisionStatus {
    /// In force.
    Active,
    /// Replaced: `superseded_by` names its successor.
    Superseded,
    /// Refused by the ledger (no refs, refs that are not earlier events, an
    /// unknown `supersedes`): `rejected_reason` says why.
    Rejected,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Decision {
    /// The `decision` event's id.
    decision_id: String,
    seq: i64,
    ts: DateTime<Utc>,
    #[schema(value_type = DecisionStatus)]
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
    #[schema(value_type = Channel)]
    channel: String,
    #[schema(value_type = Sensitivity)]
    sensitivity: String,
    actor_id: String,
    tags: Vec<String>,
}

impl Decision {
    /// Opens what a sealed decision keeps sealed.
    fn open(&mut self, keyring: &Keyring, tenant: &str) -> Result<(), SealError> {
        if let Some(value) = &mut self.value {
            keyring.open_json(tenant, value)?;
        }
        open_decision(
            keyring,
            tenant,
            &mut self.decision,
            [
                &mut self.rationale,
                &mut self.constraints,
                &mut self.alternatives,
                &mut self.consequences,
            ],
        )
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct DecisionList {
    /// Newest first.
    decisions: Vec<Decision>,
}

/// List the decision ledger
///
/// Decisions newest first, filtered by status, scope, key and the channel
/// they would be shown in. Page with `before_seq` = the last `seq` seen.
/// Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/decisions",
    tag = "decisions",
    params(DecisionQuery),
    responses(
        (status = 200, description = "The decisions", body = DecisionList),
        (status = 400, description = "`invalid_field`: `status` or `limit` out of range, or a malformed or unknown query parameter (`field` is `query`)", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_decisions(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<DecisionQuery>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let decisions = query_ledger(&state, &caller, &query).await?;
    Ok(Json(DecisionList { decisions }).into_response())
}

/// Query the decision ledger (the PRD's name)
///
/// The same as `GET /api/v1/decisions`. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/decisions/query",
    tag = "decisions",
    params(DecisionQuery),
    responses(
        (status = 200, description = "The decisions", body = DecisionList),
        (status = 400, description = "`invalid_field`: `status`, `scope` or `limit` out of range, or a malformed or unknown query parameter", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
pub async fn get_decisions_query(
    state: State<ApiState>,
    caller: Authenticated,
    query: QueryParams<DecisionQuery>,
) -> Result<Response, ApiError> {
    get_decisions(state, caller, query).await
}

/// Record a decision
///
/// A `decision` event from a flat body: the envelope (`session_id`,
/// `actor`, `channel` default private, `agent_id`, `sensitivity`, `tags`,
/// `refs`, `idempotency_key`, `ts`) and the decision itself (`decision`,
/// `scope`: project, user or global, `key`, `rationale`, `constraints`,
/// `alternatives`, `consequences`, `confidence`, `supersedes`, `value`).
/// The ledger rejects a decision without `refs`. Errors name the field as
/// in the event (`content.scope`). Scope: write.
#[utoipa::path(
    post,
    path = "/api/v1/decisions",
    tag = "decisions",
    request_body(content = Object, description = "Envelope and decision fields, flat", example = json!({
        "session_id": "s1", "actor": {"type": "agent", "id": "coder"}, "refs": ["evt_01M82PVAD4YW2NRKRS6SSKPC1F"],
        "decision": "Export invoices in pages of 200", "key": "export.page_size", "scope": "project",
        "rationale": ["timeouts above 500 rows"]})),
    responses(
        (status = 201, description = "Recorded; `event_id` is the decision's id", body = Appended),
        (status = 200, description = "A replay of an earlier `idempotency_key`", body = Appended),
        (status = 400, description = "`invalid_field`: e.g. `content.scope` not project, user or global", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`, `tenant_mismatch` or `agent_mismatch`", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_decision(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (status, appended) = super::events::record_kind(&state, &caller, "decision", body).await?;
    Ok((status, Json(appended)).into_response())
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
    if let Some(scope) = &query.scope
        && !DECISION_SCOPES.contains(&scope.as_str())
    {
        return Err(ApiError::invalid(FieldError::new(
            "scope",
            "must be project, user or global",
        )));
    }
    let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let visibility = query.channel.map(Visibility::new);
    let mut decisions: Vec<Decision> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT decision_id, seq, ts, status, key, scope, decision, value, rationale, constraints,
                alternatives, consequences, confidence, refs, supersedes, superseded_by,
                rejected_reason, session_id, channel, sensitivity, actor_id, tags
           FROM projections.decisions d
          WHERE tenant_id = $1
            AND {owner}
            AND ($2::text IS NULL OR status = $2)
            AND ($3::text IS NULL OR scope = $3)
            AND ($4::text IS NULL OR key = $4)
            AND ($5::text[] IS NULL OR channel = ANY ($5))
            AND ($6::text[] IS NULL OR sensitivity = ANY ($6))
            AND ($7::bigint IS NULL OR seq < $7)
          ORDER BY seq DESC LIMIT $8",
        owner = event_owner_condition("d", "seq", 9)
    )))
    .bind(caller.tenant.as_str())
    .bind(&query.status)
    .bind(&query.scope)
    .bind(&query.key)
    .bind(visibility.map(|v| v.channel_names()))
    .bind(visibility.map(|v| v.sensitivity_names()))
    .bind(query.before_seq)
    .bind(limit)
    .bind(&caller.agent)
    .fetch_all(&state.pool)
    .await?;
    for decision in &mut decisions {
        decision.open(&state.reader.keyring, caller.tenant.as_str())?;
    }
    Ok(decisions)
}
