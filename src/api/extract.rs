//! Extractors that turn an HTTP request into what handlers need, answering in
//! the API's error shape when they cannot.

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{StatusCode, request::Parts},
};

use super::{
    ApiState,
    error::{CallError, Failure},
};
use crate::calls::authenticate;
use crate::{
    domain::{FieldError, strict_json},
    tenants::Caller,
};

/// A JSON body, parsed with errors that name the `body` field. The size limit
/// is the router's `DefaultBodyLimit`; over it the answer is 413. Its bytes
/// count against the caller's byte rate.
pub struct JsonBody(pub serde_json::Value);

impl FromRequest<ApiState> for JsonBody {
    type Rejection = CallError;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// Like [`JsonBody`], but an empty body reads as `{}`: for calls whose
/// fields are all optional (`curl -X POST` with nothing).
pub struct OptionalJsonBody(pub serde_json::Value);

impl FromRequest<ApiState> for OptionalJsonBody {
    type Rejection = CallError;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(serde_json::Value::Object(Default::default())));
        }
        parse(&bytes).map(OptionalJsonBody)
    }
}

async fn body_bytes(req: Request, state: &ApiState) -> Result<Bytes, CallError> {
    let caller = req.extensions().get::<Caller>().cloned();
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            CallError::new(
                Failure::TooLarge,
                "body_too_large",
                "the request body is over the daemon's limit (--max-body-bytes)",
            )
            .with_field("body")
        } else {
            CallError::new(Failure::Invalid, "bad_body", rejection.body_text()).with_field("body")
        }
    })?;
    if let Some(caller) = caller {
        state
            .limiter
            .charge_bytes(caller.tenant.as_str(), bytes.len(), Instant::now());
    }
    Ok(bytes)
}

/// Every request body of the API is a JSON object. (serde would read a
/// struct from an array of its fields in order, so `[]` must be refused
/// here, not left to each handler.) A key twice in one object, or an
/// integer past 64 bits, is refused ([`strict_json`]).
fn parse(bytes: &[u8]) -> Result<serde_json::Value, CallError> {
    let value = strict_json::parse(bytes).map_err(CallError::invalid)?;
    if !value.is_object() {
        return Err(CallError::invalid(FieldError::new(
            "body",
            "must be a JSON object",
        )));
    }
    // No request field may hold U+0000: PostgreSQL stores it in neither text
    // nor jsonb, so it would fail deep in a query as a 500 (schemathesis
    // found one in a bundle's `query_text`).
    crate::domain::event::check_no_nul_in_json(&value, "").map_err(CallError::invalid)?;
    Ok(value)
}

/// Query parameters, parsed with errors naming the parameter whose value
/// is malformed (`limit`), or `query` (an unknown parameter, a query that
/// does not parse).
pub struct QueryParams<T>(pub T);

impl<T, S> FromRequestParts<S> for QueryParams<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = CallError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let params = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(params)
            .map(QueryParams)
            .map_err(|err| {
                let path = err.path().to_string();
                let field = match path.as_str() {
                    "." | "" => "query".to_owned(),
                    named => named.to_owned(),
                };
                let message = err.into_inner().to_string();
                CallError::invalid(FieldError::new(field, message))
            })
    }
}

/// The id in a route's path (`/api/v1/events/{id}`), with errors in the
/// API's shape naming `path` (an id that is not UTF-8 once decoded, say),
/// where axum's own extractor answers plain text.
pub struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = CallError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(id)| PathId(id))
            .map_err(|err| CallError::invalid(FieldError::new("path", err.body_text())))
    }
}

/// The caller, from `Authorization: Bearer <token>`. The tenant of every call
/// comes from here and nowhere else. A tenant over its request or byte rate
/// is refused here (429), before any work.
pub struct Authenticated(pub Caller);

impl FromRequestParts<ApiState> for Authenticated {
    type Rejection = CallError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let caller = authenticate(
            parts
                .headers
                .get(axum::http::header::AUTHORIZATION)
                .map(|value| value.as_bytes()),
            state,
        )
        .await?;
        // For the body extractors, which charge what they read.
        parts.extensions.insert(caller.clone());
        Ok(Authenticated(caller))
    }
}
