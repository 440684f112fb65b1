//! How a call fails, in one shape for every front end: what kind of
//! failure it is ([`Failure`]), and the body `{"error": {"code", "message",
//! "field"}}`. `api/` answers it as an HTTP status, MCP as a tool error.
//! Internal detail is logged, never sent.

use std::sync::Arc;

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

/// What kind of failure a call ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request is wrong: a field, the body, a page size.
    Invalid,
    /// No, a malformed, an unknown or a revoked token.
    Unauthorized,
    /// The token may not do this, or names another tenant or agent.
    Forbidden,
    /// Nothing of this tenant that the caller may see goes by that id.
    NotFound,
    /// The request contradicts what is stored (an idempotency key reused
    /// for another request, an erased subject).
    Conflict,
    /// What was asked for existed, and was erased.
    Gone,
    /// The request's body is over the daemon's limit.
    TooLarge,
    /// The request's body took too long to arrive.
    Timeout,
    /// The route exists, not with this method (HTTP only).
    MethodNotAllowed,
    /// The tenant is over its rate; retry later.
    RateLimited,
    /// The database cannot be reached; retry later.
    Unavailable,
    /// A bug; the daemon's log says more.
    Internal,
}

#[derive(Debug)]
pub struct CallError {
    failure: Failure,
    code: &'static str,
    message: String,
    field: Option<String>,
    /// Seconds, sent as `Retry-After`.
    retry_after: Option<u64>,
    /// The event of an append the error is about, when it is about one:
    /// a batch's answer names `events[i].` before the field.
    event_index: Option<usize>,
}

impl CallError {
    pub fn new(failure: Failure, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            failure,
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
        Self::new(Failure::Invalid, "invalid_field", err.message).with_field(err.field)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(Failure::Unauthorized, "unauthorized", message)
    }

    /// A body `tenant_id` that is not the bearer token's tenant.
    pub fn tenant_mismatch(field: impl Into<String>) -> Self {
        Self::new(
            Failure::Forbidden,
            "tenant_mismatch",
            "tenant_id differs from the tenant of the bearer token",
        )
        .with_field(field)
    }

    /// A body names another agent than the one the token is bound to.
    pub fn agent_mismatch(field: impl Into<String>) -> Self {
        Self::new(
            Failure::Forbidden,
            "agent_mismatch",
            "this token is bound to an agent and acts as that agent only; the field names another agent",
        )
        .with_field(field)
    }

    /// The tenant is over its request or byte rate; retry after `wait`.
    pub fn rate_limited(wait: std::time::Duration) -> Self {
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        let mut err = Self::new(
            Failure::RateLimited,
            "rate_limited",
            format!("this tenant is over its request or byte rate; retry in {seconds} s"),
        );
        err.retry_after = Some(seconds);
        err
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Failure::NotFound, "not_found", message)
    }

    /// Logs the cause with its chain and answers a bare 500.
    pub fn internal(err: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(error = %ErrorChain(err), "request failed");
        Self::new(
            Failure::Internal,
            "internal",
            "internal error; see the daemon's log",
        )
    }

    pub fn failure(&self) -> Failure {
        self.failure
    }

    /// Seconds the caller should wait before retrying, when it should.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
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

impl From<sqlx::Error> for CallError {
    fn from(err: sqlx::Error) -> Self {
        Self::from_database(&err)
    }
}

/// A stored value that does not open is a row that cannot be read as it
/// must be: answered as the database error it becomes on every read path.
impl From<memd_core::seal::SealError> for CallError {
    fn from(err: memd_core::seal::SealError) -> Self {
        Self::from(sqlx::Error::from(err))
    }
}

impl CallError {
    /// Connection trouble is the client's cue to retry (503, `Retry-After`);
    /// anything else is a bug (500).
    fn from_database(err: &sqlx::Error) -> Self {
        if !crate::db::unavailable(err) {
            return Self::internal(err);
        }
        tracing::warn!(error = %ErrorChain(err), "database unavailable");
        let mut unavailable = Self::new(
            Failure::Unavailable,
            "unavailable",
            "the database is unavailable; retry",
        );
        unavailable.retry_after = Some(1);
        unavailable
    }
}

impl From<Arc<AppendError>> for CallError {
    fn from(err: Arc<AppendError>) -> Self {
        match &*err {
            AppendError::UnknownTenant(tenant) => Self::new(
                Failure::Forbidden,
                "unknown_tenant",
                format!("tenant {tenant} does not exist"),
            ),
            AppendError::SubjectErased(subject) => Self::new(
                Failure::Conflict,
                "subject_erased",
                format!("data subject {subject} was erased; nothing more is recorded under it"),
            )
            .with_field("subject_id"),
            AppendError::IdempotencyConflict { index, key } => {
                let mut err = Self::new(
                    Failure::Conflict,
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
