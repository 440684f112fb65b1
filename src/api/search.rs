//! `POST /api/v1/search`: the memories that best answer a question.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse, response::Response};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, JsonBody},
};
use crate::{
    calls::acb::search,
    read::search::{SearchRequest, SearchResults},
};

/// Search memory
///
/// Up to `k` (default 10, at most 100) memories that best answer `query`,
/// best first, each with its text, scores (fused relevance, lexical,
/// semantic, recency, importance), ids to cite and session. It is a
/// bundle's retrieval alone: the same ranking, and the same channel
/// privacy, agent isolation, retention, filters and dedupe; decisions in
/// force are results like any memory; no budget. Any scope.
#[utoipa::path(
    post,
    path = "/api/v1/search",
    tag = "bundles",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "What was found, best first", body = SearchResults),
        (status = 400, description = "`invalid_field`: `query` empty or over 16 KiB, `k` outside 1-100, an unknown field", body = ErrorBody),
        (status = 403, description = "`tenant_mismatch`: a body `tenant_id` that is not the token's; `agent_mismatch`: an agent's token searching as another agent", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_search(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, CallError> {
    let results = search(&state, &caller, body).await?;
    Ok((StatusCode::OK, Json(results)).into_response())
}
