//! Reading the log back: `GET /api/v1/events` (a tenant's events in log
//! order, filterable and paged) and `GET /api/v1/events/{id}`, so that what
//! was recorded can be shown, cited and checked (each event carries its
//! chain hashes; `memd verify` proves the chain), and `GET
//! /api/v1/chunks/{id}`, the retrieval unit a bundle cites.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};

use super::{
    ApiState,
    error::{CallError, ErrorBody},
    extract::{Authenticated, PathId, QueryParams},
};
use crate::calls::log::{self, Chunk, ChunkList, EventPage, EventQuery, StoredEvent};

/// Read the log
///
/// The tenant's events in log order, as stored (secrets already redacted,
/// tool results normalized), each with its hash-chain links. Page with
/// `after_seq` = `next_after_seq`, or backwards with `before_seq` =
/// `next_before_seq` (newest first with `order=desc`; `before_seq=10&limit=2`
/// is seqs 8 and 9). Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "events",
    params(EventQuery),
    responses(
        (status = 200, description = "A page of events", body = EventPage),
        (status = 400, description = "`invalid_field`: `limit` out of range, `kind` not an event kind, `order` neither asc nor desc, `text` too long or without a searchable word, or a malformed or unknown query parameter (`field` is `query`)", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant))]
pub async fn get_events(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    QueryParams(query): QueryParams<EventQuery>,
) -> Result<Response, CallError> {
    Ok(Json(log::events(&state, &caller, &query).await?).into_response())
}

/// Read one event
///
/// An event by id, as stored. Another tenant's event is answered exactly
/// like a missing one: 404. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/events/{id}",
    tag = "events",
    params(("id" = String, Path, description = "An `event_id` (`evt_...`), e.g. from a bundle item's refs")),
    responses(
        (status = 200, description = "The event", body = StoredEvent),
        (status = 404, description = "`not_found`: no such event in this tenant", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, event = %event_id))]
pub async fn get_event(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(event_id): PathId,
) -> Result<Response, CallError> {
    Ok(Json(log::event(&state, &caller, &event_id).await?).into_response())
}

/// Read the chunks an event produced
///
/// The retrieval units the chunks projection made of an event, in part
/// order: what bundles can cite of it. Empty for an event with no text to
/// retrieve (a tool call) or not projected yet. Another tenant's event is
/// a 404, like a missing one. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/events/{id}/chunks",
    tag = "events",
    params(("id" = String, Path, description = "An `event_id` (`evt_...`)")),
    responses(
        (status = 200, description = "The event's chunks", body = ChunkList),
        (status = 404, description = "`not_found`: no such event in this tenant", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, event = %event_id))]
pub async fn get_event_chunks(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(event_id): PathId,
) -> Result<Response, CallError> {
    Ok(Json(log::event_chunks(&state, &caller, &event_id).await?).into_response())
}

/// Read one chunk
///
/// A retrieval unit a bundle's evidence cites (`chunk_id`): part of an
/// event's text, as projected. Another tenant's chunk is answered exactly
/// like a missing one: 404. Any scope.
#[utoipa::path(
    get,
    path = "/api/v1/chunks/{id}",
    tag = "events",
    params(("id" = String, Path, description = "A `chunk_id` (`chk_..._N`) from a bundle item's refs")),
    responses(
        (status = 200, description = "The chunk", body = Chunk),
        (status = 404, description = "`not_found`: no such chunk in this tenant", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[tracing::instrument(skip_all, fields(tenant = %caller.tenant, chunk = %chunk_id))]
pub async fn get_chunk(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    PathId(chunk_id): PathId,
) -> Result<Response, CallError> {
    Ok(Json(log::chunk(&state, &caller, &chunk_id).await?).into_response())
}
