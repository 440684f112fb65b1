//! Operator calls: queue a rebuild or a drift check of the caller's tenant
//! as a background job, and read a job's status. Admin scope only.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use memd_projectors::projections;
use serde::{Deserialize, Serialize};

use super::{
    ApiState,
    error::{ApiError, BodyTooLarge, ErrorBody, RateLimited, Unauthorized, Unavailable},
    extract::{Authenticated, JsonBody, OptionalJsonBody},
    require_scope,
};
use crate::{
    admin::{
        embedder::{self, EmbedderStatus},
        jobs::{self, AdminJob, JobKind, JobState, JobStatus},
    },
    domain::{FieldError, parse_json, tenant::Scope},
};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RebuildRequest {
    /// Only these projectors (`chunks`, `decisions`, `tasks`, `views`,
    /// `handoffs`); all when absent or empty.
    #[serde(default)]
    projectors: Vec<String>,
}

/// No fields.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DriftCheckRequest {}

/// A queued job: poll `status_url` for its progress and result.
#[derive(Serialize, utoipa::ToSchema)]
struct JobQueued {
    job_id: String,
    #[schema(value_type = JobKind)]
    kind: &'static str,
    /// Always `pending`.
    #[schema(value_type = JobState)]
    status: &'static str,
    /// `/api/v1/admin/jobs/{job_id}`.
    status_url: String,
}

/// Rebuild the tenant's projections
///
/// Queues a background job that drops the caller's tenant's projections (of
/// `projectors`, all by default) and replays its log, like `memd rebuild`.
/// The body is optional. Jobs are queued in PostgreSQL: a queued job
/// survives a restart, and any daemon on the database may run it. Scope:
/// admin.
#[utoipa::path(
    post,
    path = "/api/v1/admin/rebuild",
    tag = "admin",
    // A `ref`, so that the body is optional without being `null`able
    // (openapi.rs lists the schema).
    request_body(
        content = ref("#/components/schemas/RebuildRequest"),
        description = "Optional: an empty body rebuilds every projector",
    ),
    responses(
        (status = 202, description = "Queued", body = JobQueued),
        (status = 400, description = "`invalid_field`: an unknown projector (`projectors[i]`) or field", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
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

/// Check the tenant's projections for drift
///
/// Queues a background job that rebuilds the caller's tenant's projections
/// into a shadow schema and diffs them row by row with the live ones, like
/// `memd drift-check`. The body is optional and has no fields. Scope: admin.
#[utoipa::path(
    post,
    path = "/api/v1/admin/drift-check",
    tag = "admin",
    request_body(
        content = ref("#/components/schemas/DriftCheckRequest"),
        description = "Optional: empty, or `{}`",
    ),
    responses(
        (status = 202, description = "Queued", body = JobQueued),
        (status = 400, description = "`invalid_field`: the body has a field", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
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
    let body = JobQueued {
        status_url: format!("/api/v1/admin/jobs/{job_id}"),
        job_id,
        kind: job.kind(),
        status: "pending",
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// Read a job's status and result
///
/// `status` is `pending`, `running`, `done` (then `result`) or `failed`
/// (then `error`). Another tenant's job is a 404, like a missing one.
/// Scope: admin.
#[utoipa::path(
    get,
    path = "/api/v1/admin/jobs/{id}",
    tag = "admin",
    params(("id" = String, Path, description = "The `job_id` the rebuild or drift-check call answered")),
    responses(
        (status = 200, description = "The job", body = JobStatus),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job in this tenant", body = ErrorBody),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
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

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EmbedderRequest {
    /// `minilm` or `hashed`.
    #[schema(pattern = "^(minilm|hashed)$")]
    embedder: String,
}

/// The tenant's embedder
///
/// Which embedder the tenant's bundles use for semantic retrieval, the one
/// being built to replace it (after a `PUT`), and how far each one's
/// embeddings projection has applied the log. Scope: admin.
#[utoipa::path(
    get,
    path = "/api/v1/admin/embedder",
    tag = "admin",
    responses(
        (status = 200, description = "The tenant's embedders", body = EmbedderStatus),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_embedder(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Admin)?;
    let status = embedder::status(
        &state.pool,
        caller.tenant.as_str(),
        state.reader.semantic.default_embedder(),
    )
    .await?;
    Ok(Json(status).into_response())
}

/// Switch the tenant's embedder
///
/// Starts building the named embedder's projection from the log beside the
/// one bundles use; the daemon's embedding workers build it, bundles switch
/// to it once it has caught up, and the old projection is dropped. Nothing
/// is re-ingested. Naming the embedder in use cancels a switch in progress.
/// Follow progress with `GET /api/v1/admin/embedder`. Scope: admin.
#[utoipa::path(
    put,
    path = "/api/v1/admin/embedder",
    tag = "admin",
    request_body = EmbedderRequest,
    responses(
        (status = 202, description = "Building (or already in use: `building` is null)", body = EmbedderStatus),
        (status = 400, description = "`invalid_field`: an unknown `embedder`, or one this daemon cannot run (model files missing)", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 413, response = BodyTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn put_embedder(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Admin)?;
    let request: EmbedderRequest = parse_json("", body).map_err(ApiError::invalid)?;
    let name = embedder::known(&request.embedder).map_err(ApiError::invalid)?;
    let semantic = &state.reader.semantic;
    if let Some(reason) = semantic.unavailable(Some(name)) {
        return Err(ApiError::invalid(FieldError::new("embedder", reason)));
    }
    let default = semantic.default_embedder();
    embedder::choose(&state.pool, caller.tenant.as_str(), name, default).await?;
    let status = embedder::status(&state.pool, caller.tenant.as_str(), default).await?;
    Ok((StatusCode::ACCEPTED, Json(status)).into_response())
}
