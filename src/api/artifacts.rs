//! `GET /api/v1/artifacts/{id}`: the full output behind a truncated tool result.

use axum::{
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use sqlx::Row;

use super::{ApiState, error::ApiError, extract::Authenticated, require_scope};
use crate::domain::tenant::Scope;

/// Answers the bytes as stored, with their media type. Another tenant's
/// artifact is answered exactly like a missing one: 404.
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, artifact = %artifact_id))]
pub async fn get_artifact(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    Path(artifact_id): Path<String>,
) -> Result<Response, ApiError> {
    require_scope(&caller, Scope::Read)?;
    let row = sqlx::query(
        "SELECT bytes, media_type, event_id, encode(sha256, 'hex') AS sha256
           FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2",
    )
    .bind(caller.tenant.as_str())
    .bind(&artifact_id)
    .fetch_optional(&state.pool)
    .await?
    .ok_or_else(|| ApiError::not_found(format!("no artifact {artifact_id}")))?;

    let bytes: Vec<u8> = row.try_get("bytes")?;
    let media_type: String = row.try_get("media_type")?;
    let event_id: String = row.try_get("event_id")?;
    let sha256: String = row.try_get("sha256")?;
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE.as_str(), media_type),
        ("x-memd-event-id", event_id),
        ("x-memd-sha256", sha256),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}
