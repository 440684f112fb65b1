//! Proofs an auditor checks against a signed checkpoint
//! ([`crate::audit::tree`]): `GET /api/v1/events/{id}/proof` (one event is
//! in the log as of a tree size) and `GET /api/v1/tree/consistency` (the log
//! at one size extends the log at a smaller one). Both carry hashes only,
//! never content.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, PathId, QueryParams},
    require_scope,
};
use crate::{
    audit::tree::{self, ConsistencyProof, InclusionProof, ProofError},
    domain::{FieldError, tenant::Scope},
};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProofQuery {
    /// The tree to prove against: its first `tree_size` events, the `seq`
    /// of the checkpoint you hold (default: the whole log now).
    pub tree_size: Option<u64>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyQuery {
    /// The earlier tree's size (an older checkpoint's `seq`), at least 1.
    #[param(minimum = 1)]
    pub first: u64,
    /// The later tree's size (a newer checkpoint's `seq`; default: the
    /// whole log now).
    pub second: Option<u64>,
}

fn out_of_range(field: &str, err: ProofError) -> CallError {
    match err {
        ProofError::OutOfRange(message) => CallError::invalid(FieldError::new(field, message)),
        ProofError::Database(err) => err.into(),
    }
}

/// Prove an event is in the log
///
/// The event's inclusion proof (RFC 9162) in the Merkle tree of the
/// tenant's first `tree_size` events: its chain hash, and the hashes that
/// lead from it to the tree's root. With a checkpoint of that `seq`
/// (format v2 signs the root as `tree_root`), an auditor checks it offline:
/// `memd verify-proof`, or `ops/verify_proof.py`. Content is never part of
/// it. The event must be one this token may read (`GET /events/{id}`).
/// Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/events/{id}/proof",
    tag = "events",
    params(("id" = String, Path, description = "An `event_id`"), ProofQuery),
    responses(
        (status = 200, description = "The inclusion proof", body = InclusionProof),
        (status = 400, description = "`invalid_field`: `tree_size` outside 1..=the log's size, or before the event", body = ErrorBody),
        (status = 404, description = "`not_found`: no such event in this tenant", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, event = %event_id))]
pub async fn get_inclusion(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(event_id): PathId,
    QueryParams(query): QueryParams<ProofQuery>,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Read)?;
    let tenant = caller.tenant.as_str();
    let (seq, hash) = tree::leaf(&state.pool, tenant, &event_id, caller.agent.as_deref())
        .await?
        .ok_or_else(|| CallError::not_found(format!("no event {event_id}")))?;
    let tree_size = match query.tree_size {
        Some(size) => size,
        None => tree::log_size(&state.pool, tenant).await?,
    };
    let proof = tree::inclusion(&state.pool, tenant, &event_id, seq, &hash, tree_size)
        .await
        .map_err(|err| out_of_range("tree_size", err))?;
    Ok(Json(proof).into_response())
}

/// Prove the log only grew
///
/// The consistency proof (RFC 9162) that the tree of the tenant's first
/// `second` events extends the tree of its first `first` events: with two
/// checkpoints of those sizes, an auditor checks that nothing signed in the
/// earlier one was rewritten since. Hashes only. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/tree/consistency",
    tag = "events",
    params(ConsistencyQuery),
    responses(
        (status = 200, description = "The consistency proof, with both roots", body = ConsistencyProof),
        (status = 400, description = "`invalid_field`: `first` or `second` outside 1..=the log's size, or first > second", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_consistency(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<ConsistencyQuery>,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Read)?;
    let tenant = caller.tenant.as_str();
    let second = match query.second {
        Some(size) => size,
        None => tree::log_size(&state.pool, tenant).await?,
    };
    let field = if query.first == 0 || query.first > second {
        "first"
    } else {
        "second"
    };
    let proof = tree::consistency(&state.pool, tenant, query.first, second)
        .await
        .map_err(|err| out_of_range(field, err))?;
    Ok(Json(proof).into_response())
}
