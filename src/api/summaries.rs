//! Summaries as the ledger checked them: `GET /api/v1/summaries`, each with
//! its claims and, when it contradicts a decision in force at its seq or
//! cites nothing real, its conflicts (both sides' refs), so a reader can
//! tell a summary to trust from one to question.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, QueryParams},
};
use crate::calls::summaries::{self, SummaryList, SummaryQuery};

/// List summaries with their conflict flags
///
/// Summaries newest first, each checked against the decision ledger as it
/// stood at the summary's seq: a claim that contradicts the decision in
/// force on its key, or refs that are missing, flag it (`conflicted`, with
/// `conflicts`). Another agent's private summaries are left out for an
/// agent's token. Page with `before_seq` = the last `seq` seen. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/summaries",
    tag = "decisions",
    params(SummaryQuery),
    responses(
        (status = 200, description = "The summaries", body = SummaryList),
        (status = 400, description = "`invalid_field`: `limit` out of range, or a malformed or unknown query parameter (`field` is `query`)", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_summaries(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<SummaryQuery>,
) -> Result<Response, CallError> {
    let summaries = summaries::list(&state, &caller, &query).await?;
    Ok(Json(summaries).into_response())
}
