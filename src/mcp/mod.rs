//! MCP on `/mcp`, over the Streamable HTTP transport: the same memory as
//! the HTTP API, as seven tools a model can call (`memory_record_event`,
//! `memory_build_acb`, `memory_get_artifact`, `memory_query_decisions`,
//! `memory_list_tasks`, `memory_list_views`, `memory_create_handoff`). Names use `_` because the major LLM APIs refuse
//! dots in tool names.
//!
//! **Stateless.** Every POST is answered on its own, as plain JSON, with no
//! MCP session kept in the daemon: any daemon on the database can answer
//! any request (no sticky sessions behind a load balancer), and there is no
//! session id another caller could borrow.
//!
//! **Auth.** The same bearer tokens as `/api/v1`, checked on every request
//! by a layer in front of the transport, which also applies the tenant's
//! request and byte rates. The tools read the caller from the request, never
//! from arguments.

mod args;
mod tools;

use std::{sync::Arc, time::Instant};

use axum::{
    Router,
    extract::{Request, State},
    http::header,
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

pub use args::DEFAULT_MCP_BUNDLE_TOKENS;
pub use tools::MemoryTools;

use crate::calls::{ApiState, authenticate};

/// The `/mcp` endpoint, to nest into the daemon's router.
pub fn service(state: ApiState, max_body_bytes: usize) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(max_body_bytes)
        // rmcp checks Host against loopback names to stop DNS rebinding
        // attacks on unauthenticated local servers. Every call here needs a
        // bearer token a rebinding page cannot have, and a daemon behind a
        // proxy is reached under its public name.
        .disable_allowed_hosts();
    let tools_state = state.clone();
    let transport = StreamableHttpService::new(
        move || Ok(MemoryTools::new(tools_state.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .fallback_service(transport)
        .layer(middleware::from_fn_with_state(state, authenticated))
}

/// Lets a request through to the transport only with a valid token, and
/// puts the caller in its extensions for the tools.
async fn authenticated(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match authenticate(
        request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .map(|value| value.as_bytes()),
        &state,
    )
    .await
    {
        Ok(caller) => caller,
        Err(err) => return err.into_response(),
    };
    // The transport reads the body itself; charge what the client declares.
    if let Some(length) = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok())
    {
        state
            .limiter
            .charge_bytes(caller.tenant.as_str(), length, Instant::now());
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}
