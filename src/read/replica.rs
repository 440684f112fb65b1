//! Bundles from a streaming-replication standby (`--read-database-url`).
//!
//! Appends, projectors, admin jobs and policy writes stay on the primary;
//! bundles read the standby while it keeps up. A monitor compares the
//! standby's replay position with the primary's WAL every
//! [`MONITOR_INTERVAL`]: the standby's lag, in time, is how long ago the
//! primary was where the standby is now. A standby further behind than
//! `max_lag`, or one that does not answer, is not read until it has caught
//! up again. A bundle that must see given writes (`after: <seq>`, or
//! `consistency: strong`) waits at most `wait` for the standby to have
//! them, then reads the primary. A bundle that fails on the standby is
//! built again on the primary: a standby can only send bundles back to the
//! primary, never make them fail or leave them stale.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde::Serialize;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::task::JoinHandle;

use super::Reader;

/// How often the monitor compares the standby with the primary.
pub const MONITOR_INTERVAL: Duration = Duration::from_millis(200);
/// How long the monitor and a bundle wait for a standby's connection
/// before counting it as gone.
const STANDBY_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much of the primary's WAL history the monitor remembers.
const HISTORY: Duration = Duration::from_secs(300);
/// The longest a read of the standby may take (the server cancels its
/// statements then too, `statement_timeout`); past it the read is made on
/// the primary. A standby replaying a conflicting change can hold a query
/// back for `max_standby_streaming_delay` (30 s by default).
pub const STANDBY_READ_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub options: PgConnectOptions,
    pub max_connections: u32,
    /// Further behind than this, the standby is not read.
    pub max_lag: Duration,
    /// How long a bundle that needs given writes waits for the standby.
    pub wait: Duration,
}

/// Where a bundle read, and why: `provenance.read`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ReadReport {
    /// `primary` or `standby`.
    pub from: &'static str,
    /// Why not the standby, when one is configured and was not read.
    pub reason: Option<String>,
    /// The standby's lag when the bundle chose (ms), as the monitor last
    /// measured it.
    pub standby_lag_ms: Option<f64>,
    /// How long the bundle waited for the standby to have what it needs.
    pub waited_ms: f64,
}

impl ReadReport {
    /// No standby configured.
    pub fn primary() -> Self {
        Self {
            from: "primary",
            reason: None,
            standby_lag_ms: None,
            waited_ms: 0.0,
        }
    }
}

/// What a bundle must find in the database it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Whatever is there (eventual consistency).
    Nothing,
    /// The tenant's log up to this seq (an append the caller made).
    Log(i64),
    /// Every projection of the tenant up to this seq.
    Projected(i64),
}

#[derive(Debug, Clone)]
enum Health {
    /// Not measured yet.
    Unknown,
    Lagging(Duration),
    /// Behind every position the monitor remembers: at least this far.
    BehindAll(Duration),
    Gone(String),
}

pub struct Replica {
    /// Reads the standby; shares the primary reader's caches.
    pub reader: Reader,
    max_lag: Duration,
    wait: Duration,
    health: Arc<Mutex<Health>>,
    monitor: JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.monitor.abort();
    }
}

impl Replica {
    /// Connects lazily (a standby that is down at start is only not read)
    /// and starts the monitor.
    pub fn start(
        primary: &Reader,
        config: ReplicaConfig,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let statement_timeout = STANDBY_READ_TIMEOUT.as_millis().to_string();
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(STANDBY_CONNECT_TIMEOUT)
            .connect_lazy_with(
                config
                    .options
                    .options([("statement_timeout", statement_timeout.as_str())]),
            );
        // The monitor's own connection to the primary: on the daemon's
        // pool, a burst of appends that took every connection would stop
        // the samples and leave a stale verdict standing.
        let primary_sampler = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(STANDBY_CONNECT_TIMEOUT)
            .connect_lazy_with((*primary.pool.connect_options()).clone());
        let health = Arc::new(Mutex::new(Health::Unknown));
        let monitor = tokio::spawn(monitor(
            primary_sampler,
            pool.clone(),
            health.clone(),
            (metrics, config.max_lag),
        ));
        Self {
            reader: primary.on_pool(pool),
            max_lag: config.max_lag,
            wait: config.wait,
            health,
            monitor,
        }
    }

    /// The standby's lag as last measured, or why it is not usable.
    fn health(&self) -> Health {
        self.health.lock().expect("health lock").clone()
    }

    /// A query on the standby failed: read the primary until the monitor
    /// sees the standby answer again.
    pub fn failed(&self, error: &sqlx::Error) {
        self.failed_because(&error.to_string());
    }

    pub fn failed_because(&self, error: &str) {
        tracing::warn!(error, "the standby failed a read; reading the primary");
        *self.health.lock().expect("health lock") = Health::Gone(error.to_owned());
    }

    /// Whether a read that may be a little behind (a page of the log) can
    /// go to the standby now.
    pub fn usable(&self) -> bool {
        matches!(self.health(), Health::Lagging(lag) if lag <= self.max_lag)
    }

    /// Whether a bundle of `tenant` that `needs` this should read the
    /// standby, and the report for its provenance.
    pub async fn route(&self, tenant: &str, needs: Needs) -> (bool, ReadReport) {
        match self.lag_within_bound() {
            Ok(lag) => self.wait_for(tenant, needs, lag).await,
            Err(primary) => (false, primary),
        }
    }

    /// The standby's lag if it is measured and within `--read-max-lag-ms`;
    /// otherwise why the primary is read.
    fn lag_within_bound(&self) -> Result<Duration, ReadReport> {
        match self.health() {
            Health::Lagging(lag) if lag <= self.max_lag => Ok(lag),
            Health::Lagging(lag) => Err(primary_because(
                format!(
                    "the standby is {} ms behind (more than {} ms)",
                    lag.as_millis(),
                    self.max_lag.as_millis()
                ),
                Some(lag),
                Duration::ZERO,
            )),
            Health::Unknown => Err(primary_because(
                "the standby's lag is not measured yet".into(),
                None,
                Duration::ZERO,
            )),
            Health::BehindAll(lag) => Err(primary_because(
                format!(
                    "the standby is behind every position of the last {} ms",
                    lag.as_millis()
                ),
                Some(lag),
                Duration::ZERO,
            )),
            Health::Gone(error) => Err(primary_because(
                format!("the standby does not answer: {error}"),
                None,
                Duration::ZERO,
            )),
        }
    }

    /// Waits (up to `--read-wait-ms`) until the standby, `lag` behind, has
    /// what the bundle `needs`: then it is read; if not in time, or if it
    /// fails to answer, the primary is.
    async fn wait_for(&self, tenant: &str, needs: Needs, lag: Duration) -> (bool, ReadReport) {
        let started = Instant::now();
        let deadline = started + self.wait;
        loop {
            let has = match needs {
                Needs::Nothing => Ok(true),
                Needs::Log(seq) => self.reader.positions(tenant).await.map(|(h, _)| h >= seq),
                Needs::Projected(seq) => self.reader.positions(tenant).await.map(|(_, p)| p >= seq),
            };
            match has {
                Ok(true) => {
                    return (
                        true,
                        ReadReport {
                            from: "standby",
                            reason: None,
                            standby_lag_ms: Some(ms(lag)),
                            waited_ms: ms(started.elapsed()),
                        },
                    );
                }
                Ok(false) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(false) => {
                    let what = match needs {
                        Needs::Log(seq) => format!("the log up to seq {seq}"),
                        Needs::Projected(seq) => format!("projections up to seq {seq}"),
                        Needs::Nothing => unreachable!("nothing is always there"),
                    };
                    return (
                        false,
                        primary_because(
                            format!(
                                "the standby did not have {what} within {} ms",
                                self.wait.as_millis()
                            ),
                            Some(lag),
                            started.elapsed(),
                        ),
                    );
                }
                Err(error) => {
                    self.failed(&error);
                    return (
                        false,
                        primary_because(
                            format!("the standby does not answer: {error}"),
                            Some(lag),
                            started.elapsed(),
                        ),
                    );
                }
            }
        }
    }
}

fn primary_because(reason: String, lag: Option<Duration>, waited: Duration) -> ReadReport {
    ReadReport {
        from: "primary",
        reason: Some(reason),
        standby_lag_ms: lag.map(ms),
        waited_ms: ms(waited),
    }
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// Samples the primary's WAL position and the standby's replay position
/// forever, keeping `health` current.
async fn monitor(
    primary: PgPool,
    standby: PgPool,
    health: Arc<Mutex<Health>>,
    (metrics, max_lag): (Arc<crate::metrics::Metrics>, Duration),
) {
    let mut history = WalHistory::default();
    let mut tick = tokio::time::interval(MONITOR_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let sampled = tokio::time::timeout(
            STANDBY_CONNECT_TIMEOUT,
            sqlx::query_scalar!(r#"SELECT pg_current_wal_lsn()::text AS "lsn!""#)
                .fetch_one(&primary),
        )
        .await;
        match sampled {
            Ok(Ok(lsn)) => match parse_lsn(&lsn) {
                Some(lsn) => history.record(Instant::now(), lsn),
                None => continue,
            },
            // Without the primary's position the standby's lag is unknown:
            // not read until a sample succeeds again.
            _ => {
                *health.lock().expect("health lock") =
                    Health::Gone("the primary's WAL position could not be sampled".into());
                metrics.standby(false, None);
                continue;
            }
        }
        let replayed = tokio::time::timeout(
            STANDBY_CONNECT_TIMEOUT,
            sqlx::query_scalar!("SELECT pg_last_wal_replay_lsn()::text AS lsn").fetch_one(&standby),
        )
        .await;
        let verdict = match replayed {
            Ok(Ok(Some(lsn))) => match parse_lsn(&lsn) {
                Some(lsn) => match history.lag(Instant::now(), lsn) {
                    Lag::Known(lag) => Health::Lagging(lag),
                    Lag::AtLeast(lag) => Health::BehindAll(lag),
                },
                None => Health::Gone(format!("unreadable replay position {lsn}")),
            },
            Ok(Ok(None)) => Health::Gone(
                "it is not a standby (pg_last_wal_replay_lsn() is null): not read".into(),
            ),
            Ok(Err(error)) => Health::Gone(error.to_string()),
            Err(_) => Health::Gone(format!(
                "no answer within {} ms",
                STANDBY_CONNECT_TIMEOUT.as_millis()
            )),
        };
        match &verdict {
            Health::Lagging(lag) => metrics.standby(*lag <= max_lag, Some(*lag)),
            Health::BehindAll(lag) => metrics.standby(false, Some(*lag)),
            Health::Unknown | Health::Gone(_) => metrics.standby(false, None),
        }
        *health.lock().expect("health lock") = verdict;
    }
}

/// The primary's WAL positions at the monitor's samples, oldest first.
#[derive(Default)]
struct WalHistory {
    samples: VecDeque<(Instant, u64)>,
}

impl WalHistory {
    fn record(&mut self, at: Instant, lsn: u64) {
        self.samples.push_back((at, lsn));
        while self
            .samples
            .front()
            .is_some_and(|(first, _)| at.duration_since(*first) > HISTORY)
        {
            self.samples.pop_front();
        }
    }

    /// How long ago the primary first went past `replayed`: zero when the
    /// standby has replayed the newest position sampled. Behind even the
    /// oldest sample, the standby may be any further behind than that
    /// sample's age (just after a start, the age of a few samples).
    fn lag(&self, now: Instant, replayed: u64) -> Lag {
        let age = |at: &Instant| now.saturating_duration_since(*at);
        match self.samples.iter().position(|(_, lsn)| *lsn > replayed) {
            None => Lag::Known(Duration::ZERO),
            Some(0) => Lag::AtLeast(age(&self.samples[0].0)),
            Some(first) => Lag::Known(age(&self.samples[first].0)),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Lag {
    Known(Duration),
    AtLeast(Duration),
}

/// PostgreSQL's `pg_lsn` text (`16/B374D848`) as a number.
fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_as_postgresql_orders_them() {
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("16/B374D848"), Some((0x16 << 32) | 0xB374_D848));
        assert!(parse_lsn("1/FFFFFFFF") < parse_lsn("2/0"));
        assert_eq!(parse_lsn("nonsense"), None);
    }

    #[test]
    fn lag_is_how_long_ago_the_primary_passed_the_standby() {
        let start = Instant::now();
        let mut history = WalHistory::default();
        for (ms, lsn) in [(0, 100), (200, 100), (400, 150), (600, 300)] {
            history.record(start + Duration::from_millis(ms), lsn);
        }
        let now = start + Duration::from_millis(700);
        // Caught up with the newest sample.
        assert_eq!(history.lag(now, 300), Lag::Known(Duration::ZERO));
        // At 150: the primary passed it at the 600 ms sample.
        assert_eq!(
            history.lag(now, 150),
            Lag::Known(Duration::from_millis(100))
        );
        // At 120: passed at 400 ms.
        assert_eq!(
            history.lag(now, 120),
            Lag::Known(Duration::from_millis(300))
        );
        // Behind everything remembered: at least as old as the history, and
        // maybe much older (a standby hours behind, seen just after a start).
        assert_eq!(
            history.lag(now, 50),
            Lag::AtLeast(Duration::from_millis(700))
        );
        let mut fresh = WalHistory::default();
        fresh.record(start, 1_000);
        assert_eq!(fresh.lag(start, 10), Lag::AtLeast(Duration::ZERO));
    }
}
