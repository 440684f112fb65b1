//! The calls HTTP (`api`) and MCP (`mcp`) both offer, on one shared
//! state: record events (and correct one), build a bundle, read an artifact, query the
//! decision ledger, list tasks and views, create a handoff. Each checks the
//! caller's scope, validates its input and keeps tenants apart, and answers
//! in the one error shape ([`error::CallError`]); the two front ends only
//! translate their requests into these calls and the answers back.

pub(crate) mod acb;
pub(crate) mod activity;
pub(crate) mod artifacts;
pub(crate) mod corrections;
pub(crate) mod decisions;
pub mod error;
pub(crate) mod events;
pub(crate) mod handoffs;
pub(crate) mod log;
pub mod rate_limit;
pub(crate) mod summaries;
pub(crate) mod tasks;

use std::{sync::Arc, time::Instant};

use sqlx::PgPool;

use crate::{
    domain::{
        FieldError,
        redact::Redactor,
        tenant::{ApiToken, Scope},
    },
    read::Reader,
    tenants::{Caller, TokenCache},
    write::Appender,
};
use error::{CallError, Failure};

/// What every call may use. Cheap to clone.
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
    /// How far ahead of the daemon's clock an event's `ts` may be.
    pub max_clock_skew: std::time::Duration,
}

impl ApiState {
    /// Runs a read of the log routes on the standby while it keeps up
    /// (within `--read-max-lag-ms`), else on the primary; on the primary
    /// too when the standby fails the read, or answers 404 (an event or
    /// chunk it has not replayed yet may well be on the primary), so the
    /// standby never answers worse than the primary would. Pages of a list
    /// read on the standby may miss its last moments of appends.
    pub(crate) async fn read_log<'a, T, F, Fut>(&'a self, read: F) -> Result<T, CallError>
    where
        F: Fn(&'a PgPool) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        if let Some(replica) = &self.replica
            && replica.usable()
        {
            let timeout = crate::read::replica::STANDBY_READ_TIMEOUT;
            match tokio::time::timeout(timeout, read(&replica.reader.pool)).await {
                Ok(Ok(found)) => return Ok(found),
                Ok(Err(err)) if err.failure() == Failure::NotFound => {}
                Ok(Err(err))
                    if matches!(err.failure(), Failure::Unavailable | Failure::Internal) =>
                {
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

/// Resolves an `Authorization` header's value (`Bearer <token>`) to its
/// caller and admits the request under the tenant's request rate: the one
/// door of HTTP and MCP.
pub(crate) async fn authenticate(
    authorization: Option<&[u8]>,
    state: &ApiState,
) -> Result<Caller, CallError> {
    let header = authorization
        .ok_or_else(|| CallError::unauthorized("missing Authorization: Bearer <token>"))?;
    let token = std::str::from_utf8(header)
        .ok()
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .and_then(ApiToken::parse)
        .ok_or_else(|| CallError::unauthorized("malformed bearer token"))?;
    let caller = state
        .tokens
        .resolve(&state.pool, &token)
        .await?
        .ok_or_else(|| CallError::unauthorized("unknown or revoked token"))?;
    if let Err(wait) = state.limiter.admit(caller.tenant.as_str(), Instant::now()) {
        state.metrics.rate_limited(caller.tenant.as_str());
        return Err(CallError::rate_limited(wait));
    }
    Ok(caller)
}

/// Refuses a caller whose token's scope is below `needed`.
pub fn require_scope(caller: &Caller, needed: Scope) -> Result<(), CallError> {
    if caller.scope >= needed {
        Ok(())
    } else {
        Err(CallError::new(
            Failure::Forbidden,
            "insufficient_scope",
            format!(
                "this call needs a token with scope {} or above",
                needed.as_str()
            ),
        ))
    }
}

/// A page size: `limit` when given (1 to `max`), else `default`.
pub fn page_limit(limit: Option<i64>, default: i64, max: i64) -> Result<i64, CallError> {
    let limit = limit.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(CallError::invalid(FieldError::new(
            "limit",
            format!("must be between 1 and {max}"),
        )))
    }
}
