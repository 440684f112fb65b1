//! `GET /api/v1/artifacts/{id}`: the full output behind a truncated tool result.

use axum::{
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, PathId},
};
use crate::calls::artifacts::{Artifact, fetch};

/// Read a truncated tool output whole
///
/// The full bytes behind a `tool_result` whose output was over 64 KiB (its
/// `artifact_id`), as stored, with their media type. Another tenant's
/// artifact is answered exactly like a missing one: 404. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/artifacts/{id}",
    tag = "artifacts",
    params(("id" = String, Path, description = "The `artifact_id` a tool_result event or bundle item carries")),
    responses(
        (status = 200, description = "The whole output, as stored (`text/plain; charset=utf-8`)",
            body = String, content_type = "text/plain",
            headers(
                ("x-memd-event-id" = String, description = "The event that recorded the output"),
                ("x-memd-sha256" = String, description = "SHA-256 of the bytes as stored, hex; the event's `artifact_sha256` (of the sealed form when `x-memd-sealed` is true)"),
                ("x-memd-sealed" = bool, description = "Whether the artifact is sealed at rest (high or secret; the body is shown opened)"),
            )),
        (status = 404, description = "`not_found`: no such artifact in this tenant", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, artifact = %artifact_id))]
pub async fn get_artifact(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(artifact_id): PathId,
) -> Result<Response, CallError> {
    let Artifact {
        bytes,
        media_type,
        event_id,
        sha256,
        sealed,
    } = fetch(&state, &caller, &artifact_id).await?;
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE.as_str(), media_type),
        ("x-memd-event-id", event_id),
        ("x-memd-sha256", sha256),
        ("x-memd-sealed", sealed.to_string()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}
