//! `POST /api/v1/acb/build`: an Active Context Bundle for the next LLM call.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::ApiError,
    extract::{Authenticated, JsonBody},
    require_scope,
};
use crate::{
    domain::{parse_json, tenant::Scope},
    read::{AcbRequest, acb::AcbError, build_acb},
};

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_build(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let request: AcbRequest = parse_json("", body).map_err(ApiError::invalid)?;
    if let Some(claimed) = &request.tenant_id
        && claimed != caller.tenant.as_str()
    {
        return Err(ApiError::tenant_mismatch("tenant_id"));
    }
    let acb = build_acb(&state.reader, caller.tenant.as_str(), request)
        .await
        .map_err(|err| match err {
            AcbError::Invalid(field) => ApiError::invalid(field),
            AcbError::Database(db) => ApiError::from(db),
        })?;
    Ok((StatusCode::OK, Json(acb)).into_response())
}
