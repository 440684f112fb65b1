//! `GET /api/v1/policy` returns the tenant's bundle policy as a JSON
//! document (save it as a file to keep or review it); `PUT` replaces it
//! with a document, absent fields taking their defaults.

use axum::{Json, extract::State, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, JsonBody},
    require_scope,
};
use crate::{
    domain::tenant::Scope,
    read::policy::{self, Policy},
};

/// The response header naming the policy's version: what a bundle's
/// `provenance.policy_version` refers to.
const VERSION_HEADER: &str = "memd-policy-version";

/// Read the tenant's bundle policy
///
/// Section caps and priorities, scoring weights, retrieval bounds and
/// fast-path intents; the defaults until one is stored. Save it as a file to
/// review or version it. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/policy",
    tag = "policy",
    responses(
        (status = 200, description = "The policy in force", body = Policy),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_policy(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Read)?;
    let policy = policy::load(&state.pool, caller.tenant.as_str()).await?;
    Ok(([(VERSION_HEADER, policy.version.to_string())], Json(policy)).into_response())
}

/// Replace the tenant's bundle policy
///
/// Fields left out take their defaults (so `{}` restores them all). Every
/// daemon on the database drops its cached copy at once. Each value is
/// checked against its bounds, e.g. `max_tokens` 256-65000,
/// `candidate_pool_max` <= 2000, `retrieved_max` <= 200,
/// `handoff_evidence_max` <= 20, weights in [0, 1] and not all zero.
/// Scope: admin.
#[utoipa::path(
    put,
    path = "/api/v1/policy",
    tag = "policy",
    request_body = Policy,
    responses(
        (status = 200, description = "Stored; the policy now in force", body = Policy),
        (status = 400, description = "`invalid_field`: a value out of its bounds or an unknown field, named by its path (`scoring.alpha`)", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn put_policy(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let policy = Policy::parse(body).map_err(CallError::invalid)?;
    let version = policy::store(&state.pool, caller.tenant.as_str(), &policy).await?;
    // Other daemons hear of it by notification.
    state.reader.cache.forget_policy(caller.tenant.as_str());
    Ok(([(VERSION_HEADER, version.to_string())], Json(policy)).into_response())
}
