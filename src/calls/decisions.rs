//! The decision ledger as a caller may see it, filtered by status,
//! scope, key and the channel it would be shown in.

use chrono::{DateTime, Utc};
use memd_core::seal::{Keyring, SealError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiState, error::CallError, page_limit, require_scope};
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
    /// Withdrawn by a retraction (`retracted_by`): no longer in force, and
    /// its key has none in force until a new decision.
    Retracted,
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
    /// The retraction that withdrew it, if one did.
    retracted_by: Option<String>,
    session_id: String,
    channel: Channel,
    sensitivity: Sensitivity,
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

/// The caller's ledger, newest first, filtered by `query`: shared by HTTP
/// and MCP.
pub(crate) async fn query_ledger(
    state: &ApiState,
    caller: &Caller,
    query: &DecisionQuery,
) -> Result<Vec<Decision>, CallError> {
    require_scope(caller, Scope::Read)?;
    if let Some(status) = &query.status
        && !["active", "superseded", "rejected", "retracted"].contains(&status.as_str())
    {
        return Err(CallError::invalid(FieldError::new(
            "status",
            "must be active, superseded, rejected or retracted",
        )));
    }
    if let Some(scope) = &query.scope
        && !DECISION_SCOPES.contains(&scope.as_str())
    {
        return Err(CallError::invalid(FieldError::new(
            "scope",
            "must be project, user or global",
        )));
    }
    let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let visibility = query.channel.map(Visibility::new);
    let mut decisions: Vec<Decision> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT decision_id, seq, ts, status, key, scope, decision, value, rationale, constraints,
                alternatives, consequences, confidence, refs, supersedes, superseded_by,
                rejected_reason, retracted_by, session_id, channel, sensitivity, actor_id, tags
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
