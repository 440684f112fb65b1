//! Operator calls: queue a rebuild or a drift check of the caller's tenant
//! as a background job, read a job's status, erase a data subject. Admin
//! scope only.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use memd_projectors::projections;
use serde::{Deserialize, Serialize};

use super::{
    ApiState,
    error::{CallError, ErrorBody, Failure},
    extract::{Authenticated, JsonBody, OptionalJsonBody, PathId},
    require_scope,
};
use crate::{
    admin::{
        embedder::{self, EmbedderStatus},
        erase::{self, EraseError, Erasure},
        jobs::{self, AdminJob, JobKind, JobState, JobStatus},
        projections::ProjectionsStatus,
    },
    audit::checkpoint::Checkpoint,
    domain::{FieldError, event::check_id, parse_json, tenant::Scope},
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
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_rebuild(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let request: RebuildRequest = parse_json("", body).map_err(CallError::invalid)?;
    for (index, name) in request.projectors.iter().enumerate() {
        if !projections::NAMES.contains(&name.as_str()) {
            return Err(CallError::invalid(FieldError::new(
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
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_drift_check(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let DriftCheckRequest {} = parse_json("", body).map_err(CallError::invalid)?;
    queue(
        &state,
        AdminJob::DriftCheck {
            tenant: caller.tenant.to_string(),
        },
    )
    .await
}

async fn queue(state: &ApiState, job: AdminJob) -> Result<Response, CallError> {
    let body = enqueue(state, job).await?;
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

async fn enqueue(state: &ApiState, job: AdminJob) -> Result<JobQueued, CallError> {
    let job_id = jobs::enqueue(&state.pool, &job)
        .await
        .map_err(|err| CallError::internal(&err))?;
    Ok(JobQueued {
        status_url: format!("/api/v1/admin/jobs/{job_id}"),
        job_id,
        kind: job.kind(),
        status: "pending",
    })
}

/// The most checkpoints one verification checks (a year of hourly ones fits).
pub const MAX_CHECKPOINTS: usize = 10_000;

/// Signed checkpoints to check after the chain, like `memd verify
/// --checkpoint FILE... --public-key HEX`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct VerifyRequest {
    /// Checkpoints of the caller's tenant, as `memd checkpoint` wrote them
    /// or `GET /api/v1/checkpoints/latest` answered (at most 10,000).
    #[serde(default)]
    checkpoints: Vec<Checkpoint>,
    /// The Ed25519 public key (hex) the auditor trusts (`memd key public`,
    /// run where the key file is kept); required with `checkpoints`. The
    /// daemon's own word for its key is not taken: a checkpoint proves
    /// something only under a key the auditor holds independently.
    #[schema(pattern = "^[0-9a-fA-F]{64}$")]
    public_key: Option<String>,
}

impl VerifyRequest {
    fn check(&self, tenant: &str) -> Result<(), FieldError> {
        if self.checkpoints.len() > MAX_CHECKPOINTS {
            return Err(FieldError::new(
                "checkpoints",
                format!(
                    "{} checkpoints; at most {MAX_CHECKPOINTS} per verification",
                    self.checkpoints.len()
                ),
            ));
        }
        for (index, checkpoint) in self.checkpoints.iter().enumerate() {
            if checkpoint.tenant != tenant {
                return Err(FieldError::new(
                    format!("checkpoints[{index}].tenant"),
                    format!(
                        "a checkpoint of {:?}; this token verifies {tenant:?}",
                        checkpoint.tenant
                    ),
                ));
            }
        }
        match &self.public_key {
            None if !self.checkpoints.is_empty() => Err(FieldError::new(
                "public_key",
                "required with checkpoints: the hex public key you trust (memd key public)",
            )),
            Some(key) if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) => Err(
                FieldError::new("public_key", "not an Ed25519 public key: 64 hex digits"),
            ),
            _ => Ok(()),
        }
    }
}

/// Verify the tenant's hash chain and signed checkpoints
///
/// Queues a background job that recomputes the caller's tenant's hash chain
/// from its first event, like `memd verify --tenant`, then checks the
/// signed checkpoints in the body, if any, under the public key the caller
/// trusts: each must be signed by it, and the event at its seq must still
/// have the hash it signed, which catches a rewrite that recomputed every
/// hash after it. The result says `ok` (the chain verifies and every
/// checkpoint holds), how many events verified, the head hash, on a break
/// the first event that no longer matches (`broken`: seq, event id,
/// reason), and each checkpoint's finding. The body is optional. Scope:
/// admin.
#[utoipa::path(
    post,
    path = "/api/v1/admin/verify",
    tag = "admin",
    request_body(
        content = ref("#/components/schemas/VerifyRequest"),
        description = "Optional: empty or `{}` verifies the chain alone",
    ),
    responses(
        (status = 202, description = "Queued", body = JobQueued),
        (status = 400, description = "`invalid_field`: an unknown field, a malformed checkpoint (`checkpoints[i].seq`...), another tenant's checkpoint (`checkpoints[i].tenant`), more than 10,000 (`checkpoints`), or `public_key` missing or malformed", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_verify(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let request: VerifyRequest = parse_json("", body).map_err(CallError::invalid)?;
    request
        .check(caller.tenant.as_str())
        .map_err(CallError::invalid)?;
    queue(
        &state,
        AdminJob::Verify {
            tenant: caller.tenant.to_string(),
            checkpoints: request.checkpoints,
            public_key: request.public_key,
        },
    )
    .await
}

/// Read where the projections stand
///
/// Each projection's cursor, version, lag behind the tenant's log and last
/// failure, the embeddings projections of the tenant's embedders included,
/// for the console and for monitoring. Scope: admin.
#[utoipa::path(
    get,
    path = "/api/v1/admin/projections",
    tag = "admin",
    responses(
        (status = 200, description = "The tenant's projections", body = ProjectionsStatus),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_projections(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let status = crate::admin::projections::status(&state.pool, caller.tenant.as_str()).await?;
    Ok(Json(status).into_response())
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
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job in this tenant", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, job = %job_id))]
pub async fn get_job(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(job_id): PathId,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let status = jobs::status(&state.pool, caller.tenant.as_str(), &job_id)
        .await?
        .ok_or_else(|| CallError::not_found(format!("no job {job_id}")))?;
    Ok(Json(status).into_response())
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EmbedderRequest {
    /// `minilm`, `minilm_int8` or `hashed`.
    #[schema(pattern = "^(minilm|minilm_int8|hashed)$")]
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
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_embedder(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, CallError> {
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
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn put_embedder(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let request: EmbedderRequest = parse_json("", body).map_err(CallError::invalid)?;
    let name = embedder::known(&request.embedder).map_err(CallError::invalid)?;
    let semantic = &state.reader.semantic;
    if let Some(reason) = semantic.unavailable(Some(name)) {
        return Err(CallError::invalid(FieldError::new("embedder", reason)));
    }
    let default = semantic.default_embedder();
    embedder::choose(&state.pool, caller.tenant.as_str(), name, default).await?;
    let status = embedder::status(&state.pool, caller.tenant.as_str(), default).await?;
    Ok((StatusCode::ACCEPTED, Json(status)).into_response())
}

/// Whom to erase.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EraseRequest {
    /// The data subject (the `subject_id` its events carry).
    subject_id: String,
    /// Who erases it, for the record (1-256 bytes; default `admin-api`).
    by: Option<String>,
}

/// What `POST /api/v1/admin/erase` did, and the rebuild it queued.
#[derive(Serialize, utoipa::ToSchema)]
struct Erased {
    erasure: Erasure,
    /// The rebuild of the tenant's projections without the subject: until
    /// it is done, bundles may still show what was derived from its events.
    rebuild: JobQueued,
}

/// Erase a data subject
///
/// Destroys the subject's key: the content of its events, in the log and
/// in artifacts, can never be opened again, while the hash chain still
/// verifies. Appends an `erasure` event (who, when, which subject), deletes
/// the subject's embedding vectors, and queues a rebuild of the tenant's
/// other projections, which derives nothing from the erased events. Like
/// `memd erase`. Scope: admin.
#[utoipa::path(
    post,
    path = "/api/v1/admin/erase",
    tag = "admin",
    request_body = EraseRequest,
    responses(
        (status = 202, description = "Erased; the rebuild is queued", body = Erased),
        (status = 400, description = "`invalid_field`: `subject_id` or `by` missing or out of bounds", body = ErrorBody),
        (status = 403, description = "`insufficient_scope`: the token is not admin", body = ErrorBody),
        (status = 404, description = "`not_found`: no such data subject in this tenant (`subject_id`)", body = ErrorBody),
        (status = 409, description = "`subject_erased`: it was already erased (`subject_id`)", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_erase(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Admin)?;
    let request: EraseRequest = parse_json("", body).map_err(CallError::invalid)?;
    check_id("subject_id", &request.subject_id).map_err(CallError::invalid)?;
    let by = request.by.unwrap_or_else(|| "admin-api".into());
    check_id("by", &by).map_err(CallError::invalid)?;
    let erasure = erase::erase(
        &state.pool,
        &state.reader.keyring,
        &caller.tenant,
        &request.subject_id,
        &by,
    )
    .await
    .map_err(|err| match err {
        EraseError::Unknown(_) => CallError::not_found(err.to_string()).with_field("subject_id"),
        EraseError::AlreadyErased(_) => {
            CallError::new(Failure::Conflict, "subject_erased", err.to_string())
                .with_field("subject_id")
        }
        EraseError::Database(db) => db.into(),
        EraseError::Record { .. } => CallError::internal(&err),
    })?;
    let rebuild = enqueue(
        &state,
        AdminJob::Rebuild {
            tenant: caller.tenant.to_string(),
            projectors: Vec::new(),
        },
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(Erased { erasure, rebuild })).into_response())
}
