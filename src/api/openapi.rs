//! The OpenAPI 3.1 document of the HTTP API. It is derived from the
//! handlers' `#[utoipa::path]` attributes and the wire types' `ToSchema`
//! derives, so the schemas are the structs the handlers read and answer,
//! not a second description that could drift from them. Served as JSON at
//! `GET /api/v1/openapi.json` (client generators read it), and rendered for
//! people at `GET /api/v1/docs` by the console's own script (served by the
//! daemon, so the page works offline).

use std::sync::LazyLock;

use axum::{http::header, response::IntoResponse};
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use super::{
    acb, activity, admin, artifacts, checkpoints, decisions,
    error::ErrorBody,
    events,
    failure::{BodyTooLarge, RateLimited, Unauthorized, Unavailable},
    handoffs, health, log, policy, proofs, search, summaries, tasks,
};

/// What `info.description` says: what an integrator needs before the first call.
const DESCRIPTION: &str = "\
Memory daemon for AI agents: an append-only, hash-chained event log, read models derived from it, \
and the Active Context Bundle each LLM call needs.

**Auth.** Every `/api/v1` call but this document and its page needs `Authorization: Bearer <token>`. \
Tokens come from `memd tenant create NAME` / `memd tenant token NAME`, each with a scope: \
`read` < `write` < `admin`. The tenant of a call is always the token's; another tenant's ids \
answer exactly like ids that do not exist.

**Errors** all have one shape, `ErrorBody`: `{\"error\": {\"code\", \"message\", \"field\"}}`, \
where `field` is the JSON path of the offending request field (or null). A refused request \
stores nothing. Any call may also answer 500 `internal` (see the daemon's log) and, on a \
method the route does not serve, 405 `method_not_allowed`.

**Rate limits.** Per tenant and daemon, requests per second and body bytes per second, with \
bursts of twice that; over them the answer is 429 with `Retry-After`.";

#[derive(OpenApi)]
#[openapi(
    info(title = "memd", version = env!("CARGO_PKG_VERSION"), description = DESCRIPTION),
    paths(
        events::post_events,
        events::post_correct,
        log::get_events,
        log::get_event,
        log::get_chunk,
        log::get_event_chunks,
        activity::get_sessions,
        activity::get_agents,
        acb::post_build,
        search::post_search,
        handoffs::post_handoff,
        handoffs::get_inbox,
        decisions::get_decisions,
        decisions::post_decision,
        decisions::get_decisions_query,
        summaries::get_summaries,
        tasks::post_task,
        tasks::get_tasks,
        tasks::get_views,
        policy::get_policy,
        policy::put_policy,
        artifacts::get_artifact,
        checkpoints::get_latest,
        proofs::get_inclusion,
        proofs::get_consistency,
        admin::post_rebuild,
        admin::post_erase,
        admin::post_drift_check,
        admin::get_job,
        admin::get_projections,
        admin::post_verify,
        admin::get_embedder,
        admin::put_embedder,
        health::healthz,
        health::readyz,
        openapi_json,
        docs,
    ),
    components(
        // Schemas no operation refers to by type: the optional admin bodies
        // are `ref`s (see admin.rs).
        schemas(ErrorBody, admin::RebuildRequest, admin::DriftCheckRequest, admin::VerifyRequest),
        responses(Unauthorized, BodyTooLarge, RateLimited, Unavailable),
    ),
    modifiers(&BearerAuth, &CommonResponses),
    tags(
        (name = "events", description = "The append-only event log: everything agents exchange with humans, tools and each other"),
        (name = "bundles", description = "Active Context Bundles: what the next LLM call should see, within a token budget"),
        (name = "handoffs", description = "Passing work to another agent as a packet, not a transcript"),
        (name = "decisions", description = "The decision ledger, and summaries checked against it"),
        (name = "tasks", description = "Tasks and views as their read models hold them"),
        (name = "policy", description = "The tenant's bundle policy: section caps, scoring weights, retrieval bounds"),
        (name = "artifacts", description = "Tool outputs too large to keep in their event"),
        (name = "admin", description = "Rebuild and drift check of the tenant's projections, as background jobs"),
        (name = "health", description = "Liveness and readiness, for supervisors and load balancers"),
        (name = "docs", description = "This document"),
    ),
)]
pub struct ApiDoc;

/// Declares the `bearer` scheme the operations' `security` names: derive
/// attributes cannot declare security schemes themselves.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A tenant token from `memd tenant create` or `memd tenant token`",
                    ))
                    .build(),
            ),
        );
    }
}

/// The answers every call with a token may give, written once here rather
/// than on each operation: 401 (no valid token), 429 (over the tenant's
/// rate) and 503 (the database cannot be reached) on every operation that
/// takes a token, and 413 on every one that takes a body.
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{RefOr, Response, schema::Ref};
        let common = |name: &str| -> RefOr<Response> { RefOr::Ref(Ref::from_response_name(name)) };
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                let answers = &mut operation.responses.responses;
                if operation.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    for (status, name) in [
                        ("401", "Unauthorized"),
                        ("429", "RateLimited"),
                        ("503", "Unavailable"),
                    ] {
                        answers.entry(status.to_owned()).or_insert(common(name));
                    }
                }
                if operation.request_body.is_some() {
                    answers
                        .entry("413".to_owned())
                        .or_insert(common("BodyTooLarge"));
                }
            }
        }
    }
}

/// Serialized once: the document only changes with the binary.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes")
});

/// The OpenAPI document
///
/// This document, for client generators and API tools. No token needed.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "docs",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")),
)]
pub async fn openapi_json() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
}

/// The API reference page
///
/// A page that renders this document, with a script the daemon serves
/// itself (nothing from another host: it works offline). No token needed.
#[utoipa::path(
    get,
    path = "/api/v1/docs",
    tag = "docs",
    responses((status = 200, description = "An HTML page", body = String, content_type = "text/html")),
)]
pub async fn docs() -> axum::response::Response {
    crate::console::docs_page()
}
