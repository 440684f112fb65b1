//! `POST /api/v1/acb/build`: an Active Context Bundle for the next LLM call.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, JsonBody},
};
use crate::{
    calls::acb::build,
    read::{AcbRequest, acb::Acb},
};

/// Build an Active Context Bundle
///
/// What the next LLM call of an agent should see, within `max_tokens`:
/// identity and rules, the handoff packet addressed to it, active tasks, the
/// decisions in force, evidence retrieved for `query_text` (with citations)
/// and the session's recent window. Everything the `channel` may not see is
/// filtered out before ranking; what was left out, and why, is in
/// `omissions`. With `render: true` the bundle comes as one prompt string
/// too, whose exact token count is `token_used_est`. Any scope.
#[utoipa::path(
    post,
    path = "/api/v1/acb/build",
    tag = "bundles",
    request_body = AcbRequest,
    responses(
        (status = 200, description = "The bundle", body = Acb),
        (status = 400, description = "`invalid_field`: e.g. `max_tokens` over the policy's, `query_text` over 16 KiB, `handoff_id` without `agent_id` and `session_id`, an unknown field", body = ErrorBody),
        (status = 403, description = "`tenant_mismatch`: a body `tenant_id` that is not the token's; `agent_mismatch`: an agent's token asking for another agent's bundle", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_build(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let acb = build(&state, &caller, body).await?;
    Ok((StatusCode::OK, Json(acb)).into_response())
}
