//! The HTTP interface. Handlers are thin: parse at the edge into domain types,
//! call the write or read side, map errors to the one error shape.

pub(crate) mod acb;
mod admin;
pub(crate) mod artifacts;
pub(crate) mod decisions;
pub mod error;
pub(crate) mod events;
pub(crate) mod extract;
pub(crate) mod handoffs;
mod health;
mod log;
mod policy;
pub mod rate_limit;

use std::sync::Arc;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::StatusCode,
    routing::{get, post},
};
use sqlx::PgPool;

use crate::{
    domain::{redact::Redactor, tenant::Scope},
    read::Reader,
    tenants::{Caller, TokenCache},
    write::Appender,
};
use error::ApiError;

/// What every handler may use. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub pool: PgPool,
    pub redactor: Arc<Redactor>,
    pub tokens: Arc<TokenCache>,
    pub appender: Arc<Appender>,
    pub reader: Arc<Reader>,
    pub limiter: Arc<rate_limit::RateLimiter>,
}

pub fn router(state: ApiState, max_body_bytes: usize) -> Router {
    let api = Router::new()
        .route("/events", post(events::post_events).get(log::get_events))
        .route("/events/{id}", get(log::get_event))
        .route("/chunks/{id}", get(log::get_chunk))
        .route("/acb/build", post(acb::post_build))
        .route("/handoffs", post(handoffs::post_handoff))
        .route("/decisions", get(decisions::get_decisions))
        .route("/policy", get(policy::get_policy).put(policy::put_policy))
        .route("/artifacts/{id}", get(artifacts::get_artifact))
        .route("/admin/rebuild", post(admin::post_rebuild))
        .route("/admin/drift-check", post(admin::post_drift_check))
        .route("/admin/jobs/{id}", get(admin::get_job));
    Router::new()
        .nest("/api/v1", api)
        .nest_service("/mcp", crate::mcp::service(state.clone(), max_body_bytes))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// Refuses a caller whose token's scope is below `needed`.
pub fn require_scope(caller: &Caller, needed: Scope) -> Result<(), ApiError> {
    if caller.scope >= needed {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            format!(
                "this call needs a token with scope {} or above",
                needed.as_str()
            ),
        ))
    }
}
