//! `GET /api/v1/policy` returns the tenant's bundle policy as a JSON
//! document (save it as a file to keep or review it); `PUT` replaces it
//! with a document, absent fields taking their defaults.

use axum::{Json, extract::State, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::ApiError,
    extract::{Authenticated, JsonBody},
    require_scope,
};
use crate::{
    domain::tenant::Scope,
    read::policy::{self, Policy},
};

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_policy(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let policy = policy::load(&state.pool, caller.tenant.as_str()).await?;
    Ok(Json(policy).into_response())
}

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn put_policy(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Admin)?;
    let policy = Policy::parse(body).map_err(ApiError::invalid)?;
    policy::store(&state.pool, caller.tenant.as_str(), &policy).await?;
    Ok(Json(policy).into_response())
}
