//! `POST /api/v1/events`: append one event, or `{"events": [...]}` as one transaction.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    ApiState,
    error::ApiError,
    extract::{Authenticated, JsonBody},
    require_scope,
};
use crate::{
    domain::{
        event::{NewEvent, claimed_tenant_mismatch, parse_body},
        tenant::Scope,
    },
    tenants::Caller,
};

#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn post_events(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (status, body) = record(&state, &caller, body).await?;
    Ok((status, Json(body)).into_response())
}

/// Appends one event or a `{"events": [...]}` batch for `caller`: the one
/// write path of HTTP and MCP. Answers the status (201, or 200 when every
/// event was an idempotent replay) and the response body.
pub(crate) async fn record(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<(StatusCode, Value), ApiError> {
    require_scope(caller, Scope::Write)?;
    let (requests, batch) = parse_body(body).map_err(ApiError::invalid)?;
    if let Some(field) = claimed_tenant_mismatch(&requests, caller.tenant.as_str(), batch) {
        return Err(ApiError::tenant_mismatch(field));
    }
    let events = requests
        .into_iter()
        .enumerate()
        .map(|(index, request)| {
            NewEvent::parse(request, &state.redactor).map_err(|err| {
                if batch {
                    err.within(&format!("events[{index}]"))
                } else {
                    err
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::invalid)?;

    let appended = state.appender.append(&caller.tenant, events).await?;
    let status = if appended.iter().all(|a| a.replayed) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let body = if batch {
        json!({ "events": appended })
    } else {
        json!(appended[0])
    };
    Ok((status, body))
}
