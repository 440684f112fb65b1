//! `GET /api/v1/checkpoints/latest`: the tenant's newest signed checkpoint,
//! for an auditor to keep (see [`crate::audit::checkpoint`]).

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::Authenticated,
    require_scope,
};
use crate::{
    audit::checkpoint::{self, Checkpoint},
    domain::tenant::Scope,
};

/// The latest signed checkpoint
///
/// The tenant's newest checkpoint: its head (seq and hash) at a time,
/// signed with memd's Ed25519 key, which is kept outside the database. Keep
/// it elsewhere; `memd verify --checkpoint FILE --public-key KEY` later
/// proves the log still extends it. Daemons with a key file take one every
/// few minutes when the log moved (`memd checkpoint` at once). Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/checkpoints/latest",
    tag = "events",
    responses(
        (status = 200, description = "The newest checkpoint", body = Checkpoint),
        (status = 404, description = "`not_found`: no checkpoint yet (no key file, or no event since the daemon started)", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_latest(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
) -> Result<Response, CallError> {
    require_scope(&caller, Scope::Read)?;
    let latest = checkpoint::latest(&state.pool, caller.tenant.as_str())
        .await?
        .ok_or_else(|| CallError::not_found("no checkpoint of this tenant yet"))?;
    Ok(Json(latest).into_response())
}
