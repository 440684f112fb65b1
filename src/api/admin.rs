//! Operator calls: queue a rebuild or a drift check of the caller's tenant
//! as a background job, and read a job's status. Admin scope only.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use memd_projectors::projections;
use serde::Deserialize;
use serde_json::json;

use super::{
    ApiState,
    error::ApiError,
    extract::{Authenticated, OptionalJsonBody},
    require_scope,
};
use crate::{
    admin::jobs::{self, AdminJob},
    domain::{FieldError, parse_json, tenant::Scope},
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RebuildRequest {
    /// Only these projectors; all when absent or empty.
    #[serde(default)]
    projectors: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DriftCheckRequest {}

/// `POST /api/v1/admin/rebuild`: `{"projectors": ["chunks", ...]}`, optional.
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_rebuild(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Admin)?;
    let request: RebuildRequest = parse_json("", body).map_err(ApiError::invalid)?;
    for (index, name) in request.projectors.iter().enumerate() {
        if !projections::NAMES.contains(&name.as_str()) {
            return Err(ApiError::invalid(FieldError::new(
                format!("projectors[{index}]"),
                format!(
                    "unknown projector {name:?}; known: {}",
                    projections::NAMES.join(", ")
                ),
            )));
        }
    }
    queue(
        &state,
        AdminJob::Rebuild {
            tenant: caller.tenant.to_string(),
            projectors: request.projectors,
        },
    )
    .await
}

/// `POST /api/v1/admin/drift-check`: no fields.
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_drift_check(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Admin)?;
    let DriftCheckRequest {} = parse_json("", body).map_err(ApiError::invalid)?;
    queue(
        &state,
        AdminJob::DriftCheck {
            tenant: caller.tenant.to_string(),
        },
    )
    .await
}

async fn queue(state: &ApiState, job: AdminJob) -> Result<Response, ApiError> {
    let job_id = jobs::enqueue(&state.pool, &job)
        .await
        .map_err(|err| ApiError::internal(&err))?;
    let body = json!({
        "job_id": job_id,
        "kind": job.kind(),
        "status": "pending",
        "status_url": format!("/api/v1/admin/jobs/{job_id}"),
    });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// `GET /api/v1/admin/jobs/{id}`: another tenant's job is a 404, like a
/// missing one.
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, job = %job_id))]
pub async fn get_job(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Admin)?;
    let status = jobs::status(&state.pool, caller.tenant.as_str(), &job_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no job {job_id}")))?;
    Ok(Json(status).into_response())
}
