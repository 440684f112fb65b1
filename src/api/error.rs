//! The one error shape of the HTTP API: `{"error": {"code", "message", "field"}}`.
//! Internal detail is logged, never sent.

use std::sync::Arc;

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::{domain::FieldError, write::AppendError};

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    /// Seconds, sent as `Retry-After`.
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn invalid(err: FieldError) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_field", err.message).with_field(err.field)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// A body `tenant_id` that is not the bearer token's tenant.
    pub fn tenant_mismatch(field: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "tenant_mismatch",
            "tenant_id differs from the tenant of the bearer token",
        )
        .with_field(field)
    }

    /// The tenant is over its request or byte rate; retry after `wait`.
    pub fn rate_limited(wait: std::time::Duration) -> Self {
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        let mut err = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("this tenant is over its request or byte rate; retry in {seconds} s"),
        );
        err.retry_after = Some(seconds);
        err
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// Logs the cause with its chain and answers a bare 500.
    pub fn internal(err: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(error = %ErrorChain(err), "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the daemon's log",
        )
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body every error answers with: `{"error": {"code", "message", "field"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message, "field": self.field}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::from_database(&err)
    }
}

impl ApiError {
    /// Connection trouble is the client's cue to retry (503); anything else is a bug (500).
    fn from_database(err: &sqlx::Error) -> Self {
        match err {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::warn!(error = %ErrorChain(err), "database unavailable");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the database is unavailable; retry",
                )
            }
            _ => Self::internal(err),
        }
    }
}

impl From<Arc<AppendError>> for ApiError {
    fn from(err: Arc<AppendError>) -> Self {
        match &*err {
            AppendError::UnknownTenant(tenant) => Self::new(
                StatusCode::FORBIDDEN,
                "unknown_tenant",
                format!("tenant {tenant} does not exist"),
            ),
            AppendError::WriterStopped => Self::internal(&*err),
            AppendError::Database(db) => Self::from_database(db),
        }
    }
}

/// Displays an error with every cause, `outer: inner: root`.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}
