//! `POST /api/v1/acb/build`: an Active Context Bundle for the next LLM call.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};
use serde_json::Value;

use super::{
    ApiState,
    error::ApiError,
    extract::{Authenticated, JsonBody},
    require_scope,
};
use crate::{
    domain::{parse_json, tenant::Scope},
    read::{
        AcbRequest,
        acb::{Acb, AcbError},
        build_acb,
    },
    tenants::Caller,
};

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_build(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let acb = build(&state, &caller, body).await?;
    Ok((StatusCode::OK, Json(acb)).into_response())
}

/// Builds a bundle for `caller` from a request body: the one read path of
/// HTTP and MCP.
pub(crate) async fn build(state: &ApiState, caller: &Caller, body: Value) -> Result<Acb, ApiError> {
    require_scope(caller, Scope::Read)?;
    let request: AcbRequest = parse_json("", body).map_err(ApiError::invalid)?;
    if let Some(claimed) = &request.tenant_id
        && claimed != caller.tenant.as_str()
    {
        return Err(ApiError::tenant_mismatch("tenant_id"));
    }
    build_acb(&state.reader, caller.tenant.as_str(), request)
        .await
        .map_err(|err| match err {
            AcbError::Invalid(field) => ApiError::invalid(field),
            AcbError::Database(db) => ApiError::from(db),
        })
}
