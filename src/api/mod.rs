//! The HTTP interface. Handlers are thin: parse at the edge into domain types,
//! call the shared calls ([`crate::calls`]) or the write or read side, map
//! errors to the one error shape.

mod acb;
mod activity;
mod admin;
mod artifacts;
mod checkpoints;
mod decisions;
mod events;
pub(crate) mod extract;
mod failure;
mod handoffs;
mod health;
mod log;
pub mod openapi;
mod policy;
mod proofs;
mod search;
mod summaries;
mod tasks;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::Method,
    routing::{MethodFilter, MethodRouter, on},
};

// The handlers' shared state, error shape and scope check, under the names
// they use (`super::ApiState`, `super::error`).
use crate::calls::{ApiState, error, require_scope};
use error::{CallError, Failure};

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
        method: Method::POST,
        path: "/api/v1/events/{id}/correct",
        bearer: true,
        handler: |m| on(m, events::post_correct),
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
        method: Method::GET,
        path: "/api/v1/sessions",
        bearer: true,
        handler: |m| on(m, activity::get_sessions),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/agents",
        bearer: true,
        handler: |m| on(m, activity::get_agents),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/acb/build",
        bearer: true,
        handler: |m| on(m, acb::post_build),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/search",
        bearer: true,
        handler: |m| on(m, search::post_search),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/handoffs",
        bearer: true,
        handler: |m| on(m, handoffs::post_handoff),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/handoffs",
        bearer: true,
        handler: |m| on(m, handoffs::get_inbox),
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

/// Every route of [`ROUTES`], the console, and `mcp` (the MCP endpoint,
/// which lists its tools itself) at `/mcp`, behind the same body limit and
/// body deadline ([`body_deadline`]).
pub fn router(
    state: ApiState,
    max_body_bytes: usize,
    body_read_timeout: std::time::Duration,
    mcp: Router,
) -> Router {
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
        .nest_service("/mcp", mcp)
        // The console's page and files (HTML, not in the OpenAPI document).
        .merge(crate::console::router())
        .fallback(|| async { CallError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            CallError::new(
                Failure::MethodNotAllowed,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn(answer_panics))
        .layer(axum::middleware::from_fn(refuse_nul_in_uri))
        .layer(axum::middleware::from_fn_with_state(
            (body_read_timeout, max_body_bytes),
            body_deadline,
        ))
        .with_state(state)
}

/// A request whose handler panics (a bug) is answered 500 in the API's
/// error shape, and the panic is logged; unanswered, the client saw its
/// connection closed (an MCP client waited for an answer that never came).
async fn answer_panics(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match CatchUnwind(Box::pin(next.run(request))).await {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            CallError::internal(&std::io::Error::other(format!("handler panicked: {what}")))
                .into_response()
        }
    }
}

/// A future's result, or the panic of one of its polls.
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // A future that panicked is not polled again (it is dropped with
        // the request), so what it left half-done is never seen.
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(poll) => poll.map(Ok),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}

/// Every body is read whole before any handler, within `deadline` of the
/// request's headers: a client that trickles its body is answered 408 and
/// holds no handler, connection slot or database work meanwhile. A body
/// over `max` is a 413 here (in the API's error shape, `/mcp` included).
async fn body_deadline(
    axum::extract::State((deadline, max)): axum::extract::State<(std::time::Duration, usize)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let too_large = || {
        CallError::new(
            Failure::TooLarge,
            "body_too_large",
            "the request body is over the daemon's limit (--max-body-bytes)",
        )
        .with_field("body")
        .into_response()
    };
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, max)).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
        // http-body-util's limit error, as axum wraps it.
        Ok(Err(err)) if err.to_string() == "length limit exceeded" => too_large(),
        Ok(Err(err)) => CallError::new(Failure::Invalid, "bad_body", err.to_string())
            .with_field("body")
            .into_response(),
        Err(_) => CallError::new(
            Failure::Timeout,
            "request_timeout",
            format!(
                "the request body did not arrive within {} s of its headers (--body-read-timeout-secs)",
                deadline.as_secs_f64()
            ),
        )
        .with_field("body")
        .into_response(),
    }
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
        Some(field) => CallError::invalid(crate::domain::FieldError::new(
            field,
            "must not contain the NUL character (U+0000)",
        ))
        .into_response(),
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod panics {
    use super::*;

    /// A handler that panics is answered 500 in the error shape, and the
    /// daemon goes on answering.
    #[tokio::test]
    async fn a_panicking_handler_is_answered_500() {
        let router = Router::new()
            .route(
                "/boom",
                axum::routing::get(|| async {
                    if std::hint::black_box(true) {
                        panic!("a bug");
                    }
                    "never"
                }),
            )
            .route("/fine", axum::routing::get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(answer_panics));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let client = reqwest::Client::new();
        let answer = client.get(format!("{base}/boom")).send().await.unwrap();
        assert_eq!(answer.status(), 500);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "internal", "{body}");
        let answer = client.get(format!("{base}/fine")).send().await.unwrap();
        assert_eq!(answer.text().await.unwrap(), "fine");
        server.abort();
    }
}
