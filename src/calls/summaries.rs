//! Summaries as the ledger checked them: `GET /api/v1/summaries`, each with
//! its claims and, when it contradicts a decision in force at its seq or
//! cites nothing real, its conflicts (both sides' refs), so a reader can
//! tell a summary to trust from one to question.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiState, error::CallError, page_limit, require_scope};
use crate::{
    domain::{
        event::{Channel, Sensitivity},
        tenant::Scope,
    },
    read::{
        privacy::{Visibility, event_owner_condition},
        retrieve,
    },
    tenants::Caller,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// `true`: only flagged summaries; `false`: only clean ones (clean to
    /// the caller: a conflict with a decision it may not see is not shown).
    /// A page may then hold fewer than `limit`: page on by `before_seq`.
    pub conflicted: Option<bool>,
    /// Only summaries of this session.
    pub session_id: Option<String>,
    /// Only what a bundle for this channel may show.
    pub channel: Option<Channel>,
    /// At most this many, newest first.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
    /// Only summaries recorded before this seq (paging, newest first).
    pub before_seq: Option<i64>,
}

/// A `summary` event as the ledger checked it.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Summary {
    /// The `summary` event's id.
    event_id: String,
    seq: i64,
    ts: DateTime<Utc>,
    session_id: String,
    channel: Channel,
    sensitivity: Sensitivity,
    text: String,
    /// The events it summarizes.
    refs: Vec<String>,
    /// `[{key, value}]` as recorded: what it asserts about decided keys.
    claims: Value,
    /// Whether any conflict was found.
    conflicted: bool,
    /// Each problem: `reason` (`no_refs`, `missing_refs`,
    /// `contradicts_decision`), a `message`, and for a contradiction the
    /// key, the claim, the decision in force and both sides' refs.
    conflicts: Value,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SummaryList {
    /// Newest first.
    summaries: Vec<Summary>,
}

/// The summaries `query` asks for, as `caller` may see them, opened.
pub(crate) async fn list(
    state: &ApiState,
    caller: &Caller,
    query: &SummaryQuery,
) -> Result<SummaryList, CallError> {
    require_scope(caller, Scope::Read)?;
    let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let visibility = query.channel.map(Visibility::new);
    let mut summaries: Vec<Summary> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT event_id, seq, ts, session_id, channel, sensitivity, text, refs, claims,
                conflicted, conflicts
           FROM projections.summaries s
          WHERE tenant_id = $1
            AND {owner}
            AND ($2::bool IS NULL OR conflicted = $2)
            AND ($3::text IS NULL OR session_id = $3)
            AND ($4::text[] IS NULL OR channel = ANY ($4))
            AND ($5::text[] IS NULL OR sensitivity = ANY ($5))
            AND ($6::bigint IS NULL OR seq < $6)
          ORDER BY seq DESC LIMIT $7",
        owner = event_owner_condition("s", "seq", 8)
    )))
    .bind(caller.tenant.as_str())
    // Flagged by the ledger; whether clean to this caller is known below.
    .bind(query.conflicted.filter(|flagged| *flagged))
    .bind(&query.session_id)
    .bind(visibility.map(|v| v.channel_names()))
    .bind(visibility.map(|v| v.sensitivity_names()))
    .bind(query.before_seq)
    .bind(limit)
    .bind(&caller.agent)
    .fetch_all(&state.pool)
    .await?;
    let (keyring, tenant) = (&state.reader.keyring, caller.tenant.as_str());
    for summary in &mut summaries {
        keyring.open_in_place(tenant, &mut summary.text)?;
        keyring.open_json(tenant, &mut summary.claims)?;
        keyring.open_json(tenant, &mut summary.conflicts)?;
    }
    // A contradiction quotes its decision: only those the caller may see
    // are shown, and a summary left with none is clean to this caller.
    let named = retrieve::conflict_decision_ids(summaries.iter().map(|s| &s.conflicts));
    let audiences = retrieve::decision_audiences(&state.pool, tenant, &named).await?;
    let reader = visibility
        .unwrap_or(Visibility::new(Channel::Private))
        .for_agent(caller.agent.as_deref());
    for summary in &mut summaries {
        summary.conflicts =
            retrieve::visible_conflicts(summary.conflicts.take(), &audiences, reader)
                .unwrap_or(Value::Array(Vec::new()));
        summary.conflicted = summary.conflicts.as_array().is_some_and(|c| !c.is_empty());
    }
    if let Some(conflicted) = query.conflicted {
        summaries.retain(|summary| summary.conflicted == conflicted);
    }
    Ok(SummaryList { summaries })
}
