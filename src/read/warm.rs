//! Warming a daemon before it serves. The first bundle after a restart
//! used to pay for what later bundles find ready: connections opened, each
//! statement parsed and planned on its connection, the tenant's vectors
//! read into the in-memory index (in the background: that first bundle
//! retrieved by words alone). A daemon now builds a few bundles for its
//! most recently active tenants before it accepts requests, until their
//! vector indexes are loaded or its warm-up time is spent.
//!
//! It runs once the daemon's caches hear notifications
//! ([`crate::startup::Daemon::run`]), so everything it leaves behind stays
//! right as it would after any bundle: open connections with their
//! prepared statements, the tenants' state and policies (dropped when a
//! projection or policy change is announced), and vector indexes (checked
//! against the embeddings projection's cursor on every search).

use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    Reader,
    acb::{AcbRequest, build_acb},
};

/// Tenants warmed at most, the most recently active first.
const TENANTS: i64 = 8;
/// Bundles of a tenant are built four at once: each runs its statements on
/// connections of its own, so the pool's first few all have them planned.
/// How often a tenant whose vectors are loading in the background is
/// asked again.
const POLL: Duration = Duration::from_millis(50);

/// What a warm-up did, for the log.
#[derive(Debug, Default, PartialEq)]
pub struct Warmed {
    pub tenants: usize,
    pub bundles: usize,
    /// Tenants whose vector index was still loading when time ran out.
    pub still_loading: usize,
}

/// Builds bundles for the most recently active tenants until each one's
/// vector index is loaded (or it has none), within `budget`.
pub async fn warm(reader: &Reader, budget: Duration) -> Result<Warmed, sqlx::Error> {
    let mut warmed = Warmed::default();
    if budget.is_zero() {
        return Ok(warmed);
    }
    let until = Instant::now() + budget;
    let tenants: Vec<String> = sqlx::query_scalar!(
        "SELECT tenant_id FROM tenant_heads ORDER BY newest_ts DESC NULLS LAST LIMIT $1",
        TENANTS
    )
    .fetch_all(&reader.pool)
    .await?;
    for tenant in &tenants {
        warmed.tenants += 1;
        loop {
            let (a, b, c, d) = tokio::join!(
                build_acb(reader, tenant, question(0)),
                build_acb(reader, tenant, question(1)),
                build_acb(reader, tenant, question(2)),
                build_acb(reader, tenant, question(3)),
            );
            let built = [a, b, c, d];
            warmed.bundles += built.len();
            let loading = built.iter().any(|acb| {
                acb.as_ref().is_ok_and(|acb| {
                    let semantic = &acb.provenance.semantic;
                    !semantic.used
                        && semantic
                            .reason
                            .as_deref()
                            .is_some_and(|reason| reason.contains("loading"))
                })
            });
            if !loading {
                break;
            }
            if Instant::now() + POLL >= until {
                warmed.still_loading += 1;
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        if Instant::now() >= until {
            break;
        }
    }
    Ok(warmed)
}

/// A retrieval bundle's request, of no session (no recent window is read
/// into the cache), a different question each time.
fn question(n: usize) -> AcbRequest {
    serde_json::from_value(json!({
        "query_text": format!("what was decided about the plan and its next steps {n}"),
        "max_tokens": 4000,
    }))
    .expect("a valid bundle request")
}
