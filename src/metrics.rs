//! `GET /metrics`: what an operator graphs and alerts on, in the OpenMetrics
//! text format Prometheus scrapes.
//!
//! Two kinds of figures:
//! - **Counted as they happen** by this daemon: appends, bundles, rate-limit
//!   refusals, token-cache invalidations (counters and histograms).
//! - **Read from the database at each scrape**, so every daemon on one
//!   database reports the same and nothing drifts: each projection's lag in
//!   events and seconds and its last failure, admin jobs by kind and state,
//!   tenants and events in the log; and this daemon's connection pool.
//!
//! **Where it is served.** On a listener of its own (`--metrics-listen`),
//! never on the API's: the figures span every tenant, and every memd token
//! is one tenant's (even an admin token), so no token could be allowed to
//! read them. A metrics port is bound to localhost or a private interface,
//! as Prometheus exporters are.
//!
//! **Tenant labels** are off by default (`--metrics-tenant-labels`): one
//! series per tenant is fine for tens of tenants, not for thousands.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::{
    encoding::text::encode,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Registry, Unit},
};
use sqlx::PgPool;

/// A label set: pairs, so that the tenant label can be left out.
type Labels = Vec<(&'static str, String)>;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How a request ended, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with what was asked.
    Ok,
    /// An append whose every event was already stored (idempotency keys).
    Replayed,
    /// Refused for what it asked (a 4xx: bad field, scope, limits).
    Refused,
    /// The database was unreachable (a 503).
    Unavailable,
    /// Anything else (a 500).
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Replayed => "replayed",
            Self::Refused => "refused",
            Self::Unavailable => "unavailable",
            Self::Failed => "failed",
        }
    }

    /// The outcome an HTTP status stands for.
    /// A call's failure as the metrics count it.
    pub fn of_failure(failure: crate::calls::error::Failure) -> Self {
        use crate::calls::error::Failure;
        match failure {
            Failure::Unavailable => Self::Unavailable,
            Failure::Internal => Self::Failed,
            _ => Self::Refused,
        }
    }

    pub fn of_status(status: StatusCode) -> Self {
        if status.is_success() {
            Self::Ok
        } else if status == StatusCode::SERVICE_UNAVAILABLE {
            Self::Unavailable
        } else if status.is_client_error() {
            Self::Refused
        } else {
            Self::Failed
        }
    }
}

/// What a built bundle reports of itself, for [`Metrics::bundle`].
pub struct BundleSeen<'a> {
    /// `fast` or `retrieval`.
    pub path: &'a str,
    /// Whether the tenant's state came from the cache.
    pub cache_hit: bool,
    pub tokens_used: usize,
    pub budget: usize,
    /// The candidate pool, on the retrieval path.
    pub candidate_pool: Option<usize>,
    /// The database it read: `primary` or `standby`.
    pub read_from: &'a str,
}

/// This daemon's metrics. Cheap to share; every figure is atomic.
pub struct Metrics {
    registry: Registry,
    tenant_labels: bool,
    append_requests: Family<Labels, Counter>,
    appended_events: Family<Labels, Counter>,
    append_seconds: Histogram,
    bundle_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    bundle_tokens_used: Family<Labels, Counter>,
    bundle_tokens_budget: Family<Labels, Counter>,
    bundle_budget_share: Histogram,
    candidate_pool: Histogram,
    bundle_cache: Family<Labels, Counter>,
    rate_limited: Family<Labels, Counter>,
    checkpoints_refused: Family<Labels, Counter>,
    /// Tenants whose head the signer refused, and why: what `/readyz`
    /// reports until a checkpoint of theirs is signed again.
    refused_logs: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
    /// Given to the token cache, which counts what notifications dropped.
    pub token_invalidations: Counter,
    // Read at each scrape.
    projection_lag_events: Family<Labels, Gauge>,
    projection_lag_seconds: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    projection_last_error: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    admin_jobs: Family<Labels, Gauge>,
    tenants: Gauge,
    log_events: Gauge,
    pool_connections: Family<Labels, Gauge>,
    append_pool_connections: Family<Labels, Gauge>,
    pool_max: Gauge,
    // Kept by the standby monitor (`--read-database-url`).
    bundle_reads: Family<Labels, Counter>,
    standby_readable: Gauge,
    standby_lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
}

/// Latency buckets: 0.5 ms to about 16 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
}

impl Metrics {
    /// The metrics of a daemon whose pool holds at most `pool_max`
    /// connections; with `tenant_labels`, per-tenant series.
    // Long on purpose: one line per metric and one registration with its
    // help text each, read best as one list.
    pub fn new(tenant_labels: bool, pool_max: u32) -> Self {
        let mut registry = Registry::with_prefix("memd");
        let metrics = Self {
            tenant_labels,
            append_requests: Family::default(),
            appended_events: Family::default(),
            append_seconds: latency_histogram(),
            bundle_seconds: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            bundle_tokens_used: Family::default(),
            bundle_tokens_budget: Family::default(),
            bundle_budget_share: Histogram::new([0.1, 0.25, 0.5, 0.75, 0.9, 1.0]),
            candidate_pool: Histogram::new(exponential_buckets(16.0, 2.0, 8)),
            bundle_cache: Family::default(),
            rate_limited: Family::default(),
            checkpoints_refused: Family::default(),
            refused_logs: std::sync::Mutex::default(),
            token_invalidations: Counter::default(),
            projection_lag_events: Family::default(),
            projection_lag_seconds: Family::default(),
            projection_last_error: Family::default(),
            admin_jobs: Family::default(),
            tenants: Gauge::default(),
            log_events: Gauge::default(),
            pool_connections: Family::default(),
            append_pool_connections: Family::default(),
            pool_max: Gauge::default(),
            bundle_reads: Family::default(),
            standby_readable: Gauge::default(),
            standby_lag_seconds: Gauge::default(),
            registry: Registry::default(),
        };
        metrics.pool_max.set(i64::from(pool_max));
        let r = &mut registry;
        r.register(
            "checkpoints_refused",
            "Heads the checkpoint signer refused to sign: the log no longer extends the newest signed checkpoint (a rewritten log)",
            metrics.checkpoints_refused.clone(),
        );
        r.register(
            "append_requests",
            "Append requests (one event or a batch) by outcome",
            metrics.append_requests.clone(),
        );
        r.register(
            "appended_events",
            "Events stored in the log (idempotent replays not counted)",
            metrics.appended_events.clone(),
        );
        r.register_with_unit(
            "append_duration",
            "Time to store an append, queueing for the tenant's writer included",
            Unit::Seconds,
            metrics.append_seconds.clone(),
        );
        r.register_with_unit(
            "bundle_duration",
            "Time to build a bundle, by path (fast, retrieval, or cold: the tenant's state was not cached) and outcome",
            Unit::Seconds,
            metrics.bundle_seconds.clone(),
        );
        r.register(
            "bundle_tokens_used",
            "Tokens of the bundles built",
            metrics.bundle_tokens_used.clone(),
        );
        r.register(
            "bundle_tokens_budget",
            "Token budgets (max_tokens) of the bundles built",
            metrics.bundle_tokens_budget.clone(),
        );
        r.register(
            "bundle_budget_used_ratio",
            "Share of its budget each bundle used",
            metrics.bundle_budget_share.clone(),
        );
        r.register(
            "bundle_candidate_pool",
            "Candidates ranked by each retrieval bundle",
            metrics.candidate_pool.clone(),
        );
        r.register(
            "bundle_cache",
            "Bundles whose tenant state (views, decisions, tasks) was cached (hit) or read (miss)",
            metrics.bundle_cache.clone(),
        );
        r.register(
            "rate_limited_requests",
            "Requests refused with 429 by the per-tenant rate limits",
            metrics.rate_limited.clone(),
        );
        r.register(
            "token_cache_invalidations",
            "Cached tokens dropped by revocation notices (or all of them, after the listener was away)",
            metrics.token_invalidations.clone(),
        );
        r.register(
            "projection_lag_events",
            "Events of the log a projection has not applied, the most of any tenant (a cursor of another version counts as none applied)",
            metrics.projection_lag_events.clone(),
        );
        r.register_with_unit(
            "projection_lag",
            "Age of the oldest event a projection has not applied, the most of any tenant",
            Unit::Seconds,
            metrics.projection_lag_seconds.clone(),
        );
        r.register_with_unit(
            "projection_last_error_timestamp",
            "When a projection last failed a batch (Unix time; GET /api/v1/admin/projections has the error)",
            Unit::Seconds,
            metrics.projection_last_error.clone(),
        );
        r.register(
            "admin_jobs",
            "Admin jobs (rebuild, drift_check, verify) by kind and state",
            metrics.admin_jobs.clone(),
        );
        r.register("tenants", "Tenants with a log", metrics.tenants.clone());
        r.register(
            "log_events",
            "Events in the log, every tenant's",
            metrics.log_events.clone(),
        );
        r.register(
            "db_pool_connections",
            "This daemon's PostgreSQL connections, by state (in_use, idle)",
            metrics.pool_connections.clone(),
        );
        r.register(
            "db_pool_max_connections",
            "The most connections this daemon's pool opens (its append pool may open as many)",
            metrics.pool_max.clone(),
        );
        r.register(
            "db_append_pool_connections",
            "This daemon's PostgreSQL connections for single-event appends without an idempotency key, a pool of their own, by state (in_use, idle)",
            metrics.append_pool_connections.clone(),
        );
        r.register(
            "bundle_reads",
            "Bundles built, by the database they read (primary, standby)",
            metrics.bundle_reads.clone(),
        );
        r.register(
            "standby_readable",
            "1 while the standby of --read-database-url is read; 0 while it is too far behind, silent or unmeasured, or when there is none",
            metrics.standby_readable.clone(),
        );
        r.register_with_unit(
            "standby_lag",
            "How far the standby's replay is behind the primary's WAL, as last measured",
            Unit::Seconds,
            metrics.standby_lag_seconds.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// `pairs`, plus the tenant when tenant labels are on.
    fn labels(&self, tenant: &str, pairs: &[(&'static str, &str)]) -> Labels {
        let mut labels: Labels = pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        if self.tenant_labels {
            labels.push(("tenant", tenant.to_owned()));
        }
        labels
    }

    /// An append request that ended in `outcome` after `took`, having
    /// stored `stored` new events.
    pub fn append(&self, tenant: &str, outcome: Outcome, stored: usize, took: Option<Duration>) {
        self.append_requests
            .get_or_create(&self.labels(tenant, &[("outcome", outcome.as_str())]))
            .inc();
        if stored > 0 {
            self.appended_events
                .get_or_create(&self.labels(tenant, &[]))
                .inc_by(stored as u64);
        }
        if let Some(took) = took {
            self.append_seconds.observe(took.as_secs_f64());
        }
    }

    /// A bundle request that took `took` and ended in `outcome`, with what
    /// the bundle said of itself when one was built.
    pub fn bundle(
        &self,
        tenant: &str,
        outcome: Outcome,
        took: Duration,
        seen: Option<BundleSeen<'_>>,
    ) {
        let path = match &seen {
            Some(seen) if !seen.cache_hit => "cold",
            Some(seen) => seen.path,
            None => "none",
        };
        self.bundle_seconds
            .get_or_create(&self.labels(tenant, &[("path", path), ("outcome", outcome.as_str())]))
            .observe(took.as_secs_f64());
        let Some(seen) = seen else { return };
        let tenant_only = self.labels(tenant, &[]);
        self.bundle_tokens_used
            .get_or_create(&tenant_only)
            .inc_by(seen.tokens_used as u64);
        self.bundle_tokens_budget
            .get_or_create(&tenant_only)
            .inc_by(seen.budget as u64);
        if seen.budget > 0 {
            self.bundle_budget_share
                .observe(seen.tokens_used as f64 / seen.budget as f64);
        }
        if let Some(pool) = seen.candidate_pool {
            self.candidate_pool.observe(pool as f64);
        }
        let result = if seen.cache_hit { "hit" } else { "miss" };
        self.bundle_cache
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
        self.bundle_reads
            .get_or_create(&vec![("from", seen.read_from.to_owned())])
            .inc();
    }

    /// The standby monitor's latest verdict: whether the standby is read,
    /// and its lag when measured.
    pub fn standby(&self, readable: bool, lag: Option<Duration>) {
        self.standby_readable.set(i64::from(readable));
        if let Some(lag) = lag {
            self.standby_lag_seconds.set(lag.as_secs_f64());
        }
    }

    /// The signer refused `tenant`'s head (`reason`).
    pub fn checkpoint_refused(&self, tenant: &str, reason: &str) {
        // Always by tenant: an alarm must say whose log it is.
        self.checkpoints_refused
            .get_or_create(&vec![("tenant", tenant.to_owned())])
            .inc();
        self.refused_logs
            .lock()
            .expect("refused logs lock")
            .insert(tenant.to_owned(), reason.to_owned());
    }

    /// A checkpoint of `tenant` was signed: no alarm stands for it.
    pub fn checkpoint_signed(&self, tenant: &str) {
        self.refused_logs
            .lock()
            .expect("refused logs lock")
            .remove(tenant);
    }

    /// The tenants whose heads the signer refuses, and why.
    pub fn refused_logs(&self) -> Vec<(String, String)> {
        let logs = self.refused_logs.lock().expect("refused logs lock");
        logs.iter().map(|(t, r)| (t.clone(), r.clone())).collect()
    }

    /// A request refused by the tenant's rate limits.
    pub fn rate_limited(&self, tenant: &str) {
        self.rate_limited
            .get_or_create(&self.labels(tenant, &[]))
            .inc();
    }

    /// The text Prometheus scrapes: the figures read from the database
    /// now through `reads` (`projectors`: the current projections' names
    /// and versions, the embeddings' included), the `daemon` and `appends`
    /// pools' connections, then everything encoded.
    pub async fn render(
        &self,
        reads: &PgPool,
        daemon: &PgPool,
        appends: &PgPool,
        projectors: &[(String, i32)],
    ) -> Result<String, sqlx::Error> {
        self.read_database(reads, projectors).await?;
        for (gauge, pool) in [
            (&self.pool_connections, daemon),
            (&self.append_pool_connections, appends),
        ] {
            let idle = pool.num_idle() as i64;
            let open = i64::from(pool.size());
            gauge
                .get_or_create(&vec![("state", "idle".to_owned())])
                .set(idle);
            gauge
                .get_or_create(&vec![("state", "in_use".to_owned())])
                .set((open - idle).max(0));
        }
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        Ok(text)
    }

    async fn read_database(
        &self,
        pool: &PgPool,
        projectors: &[(String, i32)],
    ) -> Result<(), sqlx::Error> {
        let (names, versions): (Vec<&str>, Vec<i32>) =
            projectors.iter().map(|(n, v)| (n.as_str(), *v)).unzip();
        // Per tenant and projection: how far behind, and since when. A
        // tenant without a cursor (or with one of another version) has
        // applied nothing. The embeddings projections count for the
        // tenants that have their cursor (a tenant uses one embedder).
        let lags = sqlx::query!(
            r#"SELECT p.name AS "name!", h.tenant_id, h.seq - coalesce(c.seq, 0) AS "behind!",
                      coalesce(extract(epoch FROM now() - (
                          SELECT e.created_at FROM public.events e
                           WHERE e.tenant_id = h.tenant_id AND e.seq = coalesce(c.seq, 0) + 1
                      ))::float8, 0) AS "seconds!"
                 FROM public.tenant_heads h
                CROSS JOIN unnest($1::text[], $2::int[]) AS p (name, version)
                 LEFT JOIN projections.cursors c
                   ON c.tenant_id = h.tenant_id AND c.projector = p.name AND c.version = p.version
                WHERE h.seq > 0
                  AND (p.name NOT LIKE 'embeddings\_%'
                       OR EXISTS (SELECT 1 FROM projections.cursors e
                                   WHERE e.tenant_id = h.tenant_id AND e.projector = p.name))"#,
            &names as &[&str],
            &versions
        )
        .fetch_all(pool)
        .await?;
        self.projection_lag_events.clear();
        self.projection_lag_seconds.clear();
        for name in &names {
            // Every projection has a series, at 0 when nothing lags.
            if !self.tenant_labels {
                let labels = vec![("projection", (*name).to_owned())];
                self.projection_lag_events.get_or_create(&labels).set(0);
                self.projection_lag_seconds.get_or_create(&labels).set(0.0);
            }
        }
        for row in lags {
            let (name, tenant, behind, seconds) =
                (row.name, row.tenant_id, row.behind, row.seconds);
            let labels = self.labels(&tenant, &[("projection", &name)]);
            let seconds = if behind > 0 { seconds } else { 0.0 };
            let events = self.projection_lag_events.get_or_create(&labels);
            events.set(events.get().max(behind));
            let age = self.projection_lag_seconds.get_or_create(&labels);
            age.set(age.get().max(seconds));
        }
        let failures = sqlx::query!(
            r#"SELECT projector, tenant_id, extract(epoch FROM max(failed_at))::float8 AS "at!"
                 FROM projections.failures GROUP BY projector, tenant_id"#
        )
        .fetch_all(pool)
        .await?;
        self.projection_last_error.clear();
        for (projector, tenant, at) in failures
            .into_iter()
            .map(|row| (row.projector, row.tenant_id, row.at))
        {
            let gauge = self
                .projection_last_error
                .get_or_create(&self.labels(&tenant, &[("projection", &projector)]));
            gauge.set(gauge.get().max(at));
        }
        let jobs: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT coalesce(convert_from(job, 'UTF8')::jsonb ->> 'kind', 'unknown'),
                    lower(status), count(*)
               FROM apalis.jobs WHERE job_type = $1 GROUP BY 1, 2",
        )
        .bind(crate::admin::jobs::QUEUE)
        .fetch_all(pool)
        .await?;
        self.admin_jobs.clear();
        for (kind, status, count) in jobs {
            self.admin_jobs
                .get_or_create(&vec![("kind", kind), ("state", status)])
                .set(count);
        }
        let heads = sqlx::query!(
            r#"SELECT count(*) AS "tenants!", coalesce(sum(seq), 0)::int8 AS "events!"
                 FROM public.tenant_heads WHERE seq > 0"#
        )
        .fetch_one(pool)
        .await?;
        let (tenants, events) = (heads.tenants, heads.events);
        self.tenants.set(tenants);
        self.log_events.set(events);
        Ok(())
    }
}

/// What the metrics listener serves with.
#[derive(Clone)]
struct Scrape {
    metrics: Arc<Metrics>,
    /// Reads the database's figures (a connection of its own).
    reads: PgPool,
    /// The daemon's pools, whose connections are reported.
    daemon: PgPool,
    appends: PgPool,
    projectors: Arc<Vec<(String, i32)>>,
}

/// The metrics listener's routes: `GET /metrics` alone. `reads` queries the
/// database at each scrape; `daemon` and `appends` are the pools whose
/// connections are counted.
pub fn router(
    metrics: Arc<Metrics>,
    reads: PgPool,
    daemon: PgPool,
    appends: PgPool,
    projectors: Vec<(String, i32)>,
) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(Scrape {
            metrics,
            reads,
            daemon,
            appends,
            projectors: Arc::new(projectors),
        })
}

async fn scrape(State(scrape): State<Scrape>) -> Response {
    let rendered = scrape
        .metrics
        .render(
            &scrape.reads,
            &scrape.daemon,
            &scrape.appends,
            &scrape.projectors,
        )
        .await;
    match rendered {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "reading metrics from the database failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "the database is unreachable; the metrics read from it are unavailable\n",
            )
                .into_response()
        }
    }
}
