//! The one error shape of the HTTP API: `{"error": {"code", "message", "field"}}`.
//! Internal detail is logged, never sent.

use std::sync::Arc;

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::{domain::FieldError, write::AppendError};

/// Every error answer: `{"error": {"code", "message", "field"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"error": {"code": "invalid_field",
    "message": "unknown variant `radio`, expected one of `private`, `public`, `team`, `agent`",
    "field": "events[1].channel"}}))]
pub struct ErrorBody {
    #[schema(inline)]
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for programs: `invalid_field`, `bad_body`,
    /// `unauthorized`, `tenant_mismatch`, `insufficient_scope`,
    /// `unknown_tenant`, `not_found`, `method_not_allowed`, `body_too_large`,
    /// `subject_erased`, `idempotency_conflict`, `erased`, `rate_limited`,
    /// `unavailable`, `internal`.
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// The JSON path of the offending request field (`events[1].channel`,
    /// `body`), when there is one.
    #[schema(required = true)]
    pub field: Option<String>,
}

// The answers every authenticated route shares, as reusable OpenAPI
// responses. Documentation only: `ApiError` builds the real ones.

/// `unauthorized`: no, malformed, unknown or revoked bearer token.
#[derive(utoipa::ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "`Bearer`")))]
#[allow(dead_code)]
pub struct Unauthorized(ErrorBody);

/// `body_too_large`: the body is over the daemon's `--max-body-bytes`
/// (default 16 MiB); `field` is `body`.
#[derive(utoipa::ToResponse)]
#[allow(dead_code)]
pub struct BodyTooLarge(ErrorBody);

/// `rate_limited`: the tenant is over its request or body-byte rate on this
/// daemon; nothing was done. Retry after `Retry-After` seconds.
#[derive(utoipa::ToResponse)]
#[response(headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
#[allow(dead_code)]
pub struct RateLimited(ErrorBody);

/// `unavailable`: the database cannot be reached; nothing was done. Retry
/// after `Retry-After` seconds.
#[derive(utoipa::ToResponse)]
#[response(headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
#[allow(dead_code)]
pub struct Unavailable(ErrorBody);

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    /// Seconds, sent as `Retry-After`.
    retry_after: Option<u64>,
    /// The event of an append the error is about, when it is about one:
    /// a batch's answer names `events[i].` before the field.
    event_index: Option<usize>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
            event_index: None,
        }
    }

    /// As the answer to a `{"events": [...]}` batch: the field of an error
    /// about one of its events becomes `events[i].field`.
    pub fn in_batch(mut self) -> Self {
        if let (Some(index), Some(field)) = (self.event_index, &self.field) {
            self.field = Some(format!("events[{index}].{field}"));
        }
        self
    }

    /// The field the error names, if any.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
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

    /// A body names another agent than the one the token is bound to.
    pub fn agent_mismatch(field: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "agent_mismatch",
            "this token is bound to an agent and acts as that agent only; agent_id names another",
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
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message.clone(),
                field: self.field.clone(),
            },
        }
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

/// A stored value that does not open is a row that cannot be read as it
/// must be: answered as the database error it becomes on every read path.
impl From<memd_projectors::seal::SealError> for ApiError {
    fn from(err: memd_projectors::seal::SealError) -> Self {
        Self::from(sqlx::Error::from(err))
    }
}

impl ApiError {
    /// Connection trouble is the client's cue to retry (503, `Retry-After`);
    /// anything else is a bug (500).
    fn from_database(err: &sqlx::Error) -> Self {
        if !crate::db::unavailable(err) {
            return Self::internal(err);
        }
        tracing::warn!(error = %ErrorChain(err), "database unavailable");
        let mut unavailable = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the database is unavailable; retry",
        );
        unavailable.retry_after = Some(1);
        unavailable
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
            AppendError::SubjectErased(subject) => Self::new(
                StatusCode::CONFLICT,
                "subject_erased",
                format!("data subject {subject} was erased; nothing more is recorded under it"),
            )
            .with_field("subject_id"),
            AppendError::IdempotencyConflict { index, key } => {
                let mut err = Self::new(
                    StatusCode::CONFLICT,
                    "idempotency_conflict",
                    format!(
                        "idempotency key {key} was already used for a different request; \
                         nothing was stored (resend the original request to get its event, \
                         or use a new key)"
                    ),
                )
                .with_field("idempotency_key");
                err.event_index = Some(*index);
                err
            }
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
