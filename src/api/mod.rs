//! The HTTP interface. Handlers are thin: parse at the edge into domain types,
//! call the write or read side, map errors to the one error shape.

pub(crate) mod acb;
mod admin;
pub(crate) mod artifacts;
mod checkpoints;
pub(crate) mod decisions;
pub mod error;
pub(crate) mod events;
pub(crate) mod extract;
pub(crate) mod handoffs;
mod health;
mod log;
pub mod openapi;
mod policy;
mod proofs;
pub mod rate_limit;
mod summaries;
pub(crate) mod tasks;

use std::sync::Arc;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::{Method, StatusCode},
    routing::{MethodFilter, MethodRouter, on},
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
    /// A streaming-replication standby that bundles read while it keeps up.
    pub replica: Option<Arc<crate::read::replica::Replica>>,
    pub limiter: Arc<rate_limit::RateLimiter>,
    /// What `/metrics` reports (served on its own listener).
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl ApiState {
    /// Runs a read of the log routes on the standby while it keeps up
    /// (within `--read-max-lag-ms`), else on the primary; on the primary
    /// too when the standby fails the read, or answers 404 (an event or
    /// chunk it has not replayed yet may well be on the primary), so the
    /// standby never answers worse than the primary would. Pages of a list
    /// read on the standby may miss its last moments of appends.
    pub(crate) async fn read_log<'a, T, F, Fut>(&'a self, read: F) -> Result<T, ApiError>
    where
        F: Fn(&'a PgPool) -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        if let Some(replica) = &self.replica
            && replica.usable()
        {
            let timeout = crate::read::replica::STANDBY_READ_TIMEOUT;
            match tokio::time::timeout(timeout, read(&replica.reader.pool)).await {
                Ok(Ok(found)) => return Ok(found),
                Ok(Err(err)) if err.status() == axum::http::StatusCode::NOT_FOUND => {}
                Ok(Err(err)) if err.status().is_server_error() => {
                    replica.failed_because(&err.body().error.message);
                }
                Ok(Err(err)) => return Err(err),
                Err(_) => {
                    replica.failed_because(&format!("no answer within {} ms", timeout.as_millis()))
                }
            }
        }
        read(&self.pool).await
    }
}

/// One route the daemon serves.
pub struct Route {
    pub method: Method,
    /// In OpenAPI's (and axum's) syntax: `/api/v1/artifacts/{id}`.
    pub path: &'static str,
    /// Whether it needs `Authorization: Bearer <token>`.
    pub bearer: bool,
    handler: fn(MethodFilter) -> MethodRouter<ApiState>,
}

/// Every route, and nothing else: [`router`] is built from this table, and a
/// test checks that the OpenAPI document ([`openapi::ApiDoc`]) lists exactly
/// these, so a route cannot be served undocumented.
pub const ROUTES: &[Route] = &[
    Route {
        method: Method::POST,
        path: "/api/v1/events",
        bearer: true,
        handler: |m| on(m, events::post_events),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/events",
        bearer: true,
        handler: |m| on(m, log::get_events),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/events/{id}",
        bearer: true,
        handler: |m| on(m, log::get_event),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/events/{id}/chunks",
        bearer: true,
        handler: |m| on(m, log::get_event_chunks),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/chunks/{id}",
        bearer: true,
        handler: |m| on(m, log::get_chunk),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/acb/build",
        bearer: true,
        handler: |m| on(m, acb::post_build),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/handoffs",
        bearer: true,
        handler: |m| on(m, handoffs::post_handoff),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/decisions",
        bearer: true,
        handler: |m| on(m, decisions::get_decisions),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/decisions",
        bearer: true,
        handler: |m| on(m, decisions::post_decision),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/decisions/query",
        bearer: true,
        handler: |m| on(m, decisions::get_decisions_query),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/summaries",
        bearer: true,
        handler: |m| on(m, summaries::get_summaries),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/tasks",
        bearer: true,
        handler: |m| on(m, tasks::post_task),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/tasks",
        bearer: true,
        handler: |m| on(m, tasks::get_tasks),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/views",
        bearer: true,
        handler: |m| on(m, tasks::get_views),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/policy",
        bearer: true,
        handler: |m| on(m, policy::get_policy),
    },
    Route {
        method: Method::PUT,
        path: "/api/v1/policy",
        bearer: true,
        handler: |m| on(m, policy::put_policy),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/artifacts/{id}",
        bearer: true,
        handler: |m| on(m, artifacts::get_artifact),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/rebuild",
        bearer: true,
        handler: |m| on(m, admin::post_rebuild),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/erase",
        bearer: true,
        handler: |m| on(m, admin::post_erase),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/drift-check",
        bearer: true,
        handler: |m| on(m, admin::post_drift_check),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/jobs/{id}",
        bearer: true,
        handler: |m| on(m, admin::get_job),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/projections",
        bearer: true,
        handler: |m| on(m, admin::get_projections),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/verify",
        bearer: true,
        handler: |m| on(m, admin::post_verify),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/embedder",
        bearer: true,
        handler: |m| on(m, admin::get_embedder),
    },
    Route {
        method: Method::PUT,
        path: "/api/v1/admin/embedder",
        bearer: true,
        handler: |m| on(m, admin::put_embedder),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/checkpoints/latest",
        bearer: true,
        handler: |m| on(m, checkpoints::get_latest),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/events/{id}/proof",
        bearer: true,
        handler: |m| on(m, proofs::get_inclusion),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/tree/consistency",
        bearer: true,
        handler: |m| on(m, proofs::get_consistency),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/openapi.json",
        bearer: false,
        handler: |m| on(m, openapi::openapi_json),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/docs",
        bearer: false,
        handler: |m| on(m, openapi::docs),
    },
    Route {
        method: Method::GET,
        path: "/healthz",
        bearer: false,
        handler: |m| on(m, health::healthz),
    },
    Route {
        method: Method::GET,
        path: "/readyz",
        bearer: false,
        handler: |m| on(m, health::readyz),
    },
];

pub fn router(state: ApiState, max_body_bytes: usize) -> Router {
    ROUTES
        .iter()
        .fold(Router::new(), |router, route| {
            let filter = MethodFilter::try_from(route.method.clone())
                .expect("every method in ROUTES is one axum routes");
            // Routes of one path (GET and PUT /api/v1/policy) merge.
            router.route(route.path, (route.handler)(filter))
        })
        // MCP speaks JSON-RPC on one path; its tools are listed by MCP
        // itself (tools/list), not in the OpenAPI document.
        .nest_service("/mcp", crate::mcp::service(state.clone(), max_body_bytes))
        // The console's page and files (HTML, not in the OpenAPI document).
        .merge(crate::console::router())
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn(refuse_nul_in_uri))
        .with_state(state)
}

/// A path or query holding an encoded U+0000 (`%00`) is refused before any
/// handler: PostgreSQL stores NUL in no text column, so it would surface as
/// a 500 from deep in a query. (Bodies are checked by the JSON extractors.)
async fn refuse_nul_in_uri(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let uri = request.uri();
    // "%00" has no letters: no case to fold.
    let has_nul = |part: &str| part.contains("%00");
    let field = if has_nul(uri.path()) {
        Some("path")
    } else if uri.query().is_some_and(has_nul) {
        Some("query")
    } else {
        None
    };
    match field {
        Some(field) => ApiError::invalid(crate::domain::FieldError::new(
            field,
            "must not contain the NUL character (U+0000)",
        ))
        .into_response(),
        None => next.run(request).await,
    }
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
