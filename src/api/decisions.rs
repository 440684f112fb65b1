//! The decision ledger: `GET /api/v1/decisions` (and its PRD name
//! `/decisions/query`), filterable by status, scope, key and the channel it
//! would be shown in; `POST /api/v1/decisions` records one.

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
    failure, require_scope,
};
use crate::{
    calls::{
        decisions::{Decision, DecisionQuery, query_ledger},
        events::{DECISION_BODY, record_kind},
    },
    domain::tenant::Scope,
    write::Appended,
};

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
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_decisions(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<DecisionQuery>,
) -> Result<Response, CallError> {
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
    ),
    security(("bearer" = [])),
)]
pub async fn get_decisions_query(
    state: State<ApiState>,
    caller: Authenticated,
    query: QueryParams<DecisionQuery>,
) -> Result<Response, CallError> {
    get_decisions(state, caller, query).await
}

/// Record a decision
///
/// A `decision` event from a flat body: the envelope (`session_id`,
/// `actor`, `channel` default private, `agent_id`, `sensitivity`, `tags`,
/// `refs`, `idempotency_key`, `ts`) and the decision itself (`decision`,
/// `scope`: project, user or global, `key`, `rationale`, `constraints`,
/// `alternatives`, `consequences`, `confidence`, `supersedes`, `value`),
/// and `subject_id` (sealed under the subject's key, as on events). Any
/// other field is refused by name. A decision must cite its evidence: no
/// `refs` is a 400 naming `refs`. Errors name the field as in the event
/// (`content.scope`). Scope: write.
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
        (status = 400, description = "`invalid_field`: e.g. `content.scope` not project, user or global, `refs` missing or empty, or a field that is neither envelope nor decision", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`, `tenant_mismatch` or `agent_mismatch`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the `idempotency_key` was used for another request (nothing stored; resend the original or use a new key), or `subject_erased`: `subject_id` names an erased data subject", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_decision(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let (status, appended) = record_kind(&state, &caller, &DECISION_BODY, body).await?;
    Ok((failure::stored(status), Json(appended)).into_response())
}
