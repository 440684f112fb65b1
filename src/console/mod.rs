//! The audit console at `/console`: a page for operators and auditors,
//! served by the daemon from files compiled into the binary (no CDN, works
//! offline). It is plain HTML, CSS and JavaScript over the same JSON API as
//! every client, signed in with a tenant token kept in the tab's session
//! storage; the daemon serves it without a token and never sees one in a
//! URL.

use axum::{
    Router,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");
const DOCS: &str = include_str!("assets/docs.html");
const DOCS_SCRIPT: &str = include_str!("assets/docs.js");

/// Only this daemon's own files, no inline script or style, no framing: an
/// event's content that looks like HTML can never run in the console.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/console",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/app.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route(
            "/console/docs.js",
            get(|| async { asset(DOCS_SCRIPT, "text/javascript; charset=utf-8") }),
        )
}

/// The API reference page (`/api/v1/docs`): the OpenAPI document rendered
/// by a script of the console's, so it works without any other host.
pub fn docs_page() -> Response {
    asset(DOCS, "text/html; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new binary may bring a new console: never serve a stale one.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
