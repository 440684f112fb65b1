//! Replay from zero: delete a tenant's projection rows and apply its whole
//! log again, in one transaction per tenant. Readers keep seeing the old rows
//! until the new ones commit; live workers skip the tenant meanwhile (its
//! cursors are locked) and resume from the rebuilt cursors.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::{PgConnection, PgPool};
use tokio::sync::mpsc;

use crate::{
    engine::{Cursor, Engine, ProjectError, Wait, announce_went_back, apply, save_cursors},
    projector::reset,
    schema::Schema,
};

use memd_core::event::{StoredEvent, read_after};

/// Where a replay is, for progress display.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub tenant: &'a str,
    pub done: i64,
    pub total: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRebuild {
    pub tenant: String,
    pub events: i64,
    pub elapsed: Duration,
    /// Where `elapsed` went: waiting for the log (read ahead on another
    /// connection), then each projector's `apply` (its own work and its
    /// statements), in order. The rest is the reset and the commit.
    pub reading: Duration,
    pub by_projector: Vec<(&'static str, Duration)>,
}

/// Rebuilds the live projections of `tenant` (every tenant when `None`)
/// for the engine's projectors.
pub async fn rebuild(
    pool: &PgPool,
    engine: &Engine,
    tenant: Option<&str>,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<Vec<TenantRebuild>, ProjectError> {
    let tenants: Vec<String> = match tenant {
        Some(tenant) => vec![tenant.to_owned()],
        None => {
            sqlx::query_scalar!("SELECT tenant_id FROM public.tenant_heads ORDER BY tenant_id")
                .fetch_all(pool)
                .await?
        }
    };
    let mut done = Vec::with_capacity(tenants.len());
    for tenant in tenants {
        let started = Instant::now();
        let mut tx = Schema::live().begin(pool).await?;
        let mut cursors = engine.lock_cursors(&mut tx, &tenant, Wait::Block).await?;
        for cursor in &mut cursors {
            reset(&mut tx, cursor.projector.as_ref(), &tenant).await?;
            cursor.seq = 0;
        }
        let (events, reading) =
            replay(pool, &mut tx, engine, &tenant, &mut cursors, progress).await?;
        // Announced at commit, before where the projections now reach: the
        // tenant's projections went back to nothing and were made again,
        // so what a reader derived from them (its cached state) is dropped
        // even where the new cursors equal the old ones.
        announce_went_back(&mut tx, &tenant, engine.channel()).await?;
        save_cursors(&mut tx, &tenant, &cursors, engine.channel()).await?;
        tx.commit().await?;
        done.push(TenantRebuild {
            tenant,
            events,
            elapsed: started.elapsed(),
            reading,
            by_projector: cursors
                .iter()
                .map(|c| (c.projector.name(), c.spent))
                .collect(),
        });
    }
    Ok(done)
}

/// Vacuums the rebuilt tables and refreshes their statistics: what the
/// operator commands do after [`rebuild`] (not counted in its rate: the
/// rebuilt rows are live from its commit). A rebuild
/// replaces every row at once: until autovacuum notices, the old rows stay
/// as dead tuples, new full-text entries wait in the GIN pending list that
/// every search scans, and the planner keeps estimating from the old
/// contents (a term it thinks rare may now match most chunks, and a plan
/// built for a rare term reads them all).
///
/// With `tenants` (the ones rebuilt), a table partitioned by tenant is
/// vacuumed only in the partitions that hold them: rebuilding one tenant
/// of many must not cost a vacuum of every other tenant's rows.
pub async fn vacuum_analyze(
    pool: &PgPool,
    engine: &Engine,
    tenants: Option<&[String]>,
) -> Result<(), ProjectError> {
    let tables = vacuumed_tables(pool, engine, tenants).await?;
    if !tables.is_empty() {
        // Table names are the projectors' own constants, and partitions'
        // names as the catalog quotes them.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "VACUUM (ANALYZE) {}",
            tables.join(", ")
        )))
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// The tables [`vacuum_analyze`] vacuums, qualified: each projector's
/// table, or with `tenants`, of a partitioned one the partitions holding a
/// row of theirs.
pub async fn vacuumed_tables(
    pool: &PgPool,
    engine: &Engine,
    tenants: Option<&[String]>,
) -> Result<Vec<String>, sqlx::Error> {
    let mut vacuumed = Vec::new();
    for table in engine.projectors().iter().flat_map(|p| p.tables()) {
        let qualified = format!("projections.{}", table.name);
        let partitioned = sqlx::query_scalar!(
            "SELECT c.relkind = 'p' FROM pg_class c
              WHERE c.oid = to_regclass($1)",
            &qualified
        )
        .fetch_optional(pool)
        .await?
        .flatten()
        .unwrap_or(false);
        match tenants {
            Some(tenants) if partitioned => {
                // A tenant's rows are all in one partition: its first row's
                // says which. A tenant left with no rows has nothing there
                // to vacuum but the dead ones, which autovacuum will find.
                let partitions: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT DISTINCT p.tableoid::regclass::text
                       FROM unnest($1::text[]) AS t (tenant_id)
                      CROSS JOIN LATERAL (SELECT r.tableoid FROM {qualified} r
                                           WHERE r.tenant_id = t.tenant_id LIMIT 1) AS p
                      ORDER BY 1"
                )))
                .bind(tenants)
                .fetch_all(pool)
                .await?;
                vacuumed.extend(partitions);
            }
            _ => vacuumed.push(qualified),
        }
    }
    Ok(vacuumed)
}

/// Applies the log above the cursors, batch by batch, up to each cursor's
/// `until` or the first hole. Returns how many events were read, and the
/// time the replay waited for the log.
pub(crate) async fn replay(
    pool: &PgPool,
    tx: &mut PgConnection,
    engine: &Engine,
    tenant: &str,
    cursors: &mut [Cursor],
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<(i64, Duration), ProjectError> {
    let until = cursors.iter().map(|c| c.until).max().unwrap_or(0);
    let head: i64 = sqlx::query_scalar!(
        "SELECT seq FROM public.tenant_heads WHERE tenant_id = $1",
        tenant
    )
    .fetch_optional(&mut *tx)
    .await?
    .unwrap_or(0);
    let total = head.min(until);
    let mut position = cursors.iter().map(|c| c.seq).min().unwrap_or(0);
    let mut read = 0;
    let mut log = LogReader::start(pool, engine, tenant, position, until).await;
    let mut batch = log.next(tx).await?;
    while let Some(last) = batch.last() {
        if last.seq != position + batch.len() as i64 {
            tracing::warn!(
                tenant,
                after = position,
                "replay stopped at a hole in the log"
            );
            break;
        }
        // The next batch is at hand before this one is applied, so that
        // projectors can derive its rows while this one's are written.
        let last_seq = last.seq;
        let next = log.next(tx).await?;
        if next.first().is_some_and(|first| first.seq == last_seq + 1) {
            for cursor in cursors.iter() {
                cursor.projector.prepare(&next);
            }
        }
        apply(tx, tenant, cursors, &batch).await?;
        position = last_seq;
        read += batch.len() as i64;
        progress(Progress {
            tenant,
            done: position,
            total: total.max(position),
        });
        batch = next;
    }
    Ok((read, log.waited))
}

/// Batches of a tenant's log, in order, for a replay.
///
/// Read ahead on a connection of their own while the replay's transaction
/// applies the batch before: the log below `until` is committed and never
/// changes, so any snapshot reads the same events, and reading then costs
/// the replay no time of its own. Without a spare connection (a pool at its
/// limit), read in the replay's transaction between batches.
struct LogReader {
    ahead: Option<mpsc::Receiver<Result<Arc<[StoredEvent]>, sqlx::Error>>>,
    /// Reading in the transaction: the last seq read, and the bounds.
    after: i64,
    until: i64,
    tenant: String,
    engine: Engine,
    /// Time the replay spent waiting for a batch.
    waited: Duration,
}

/// Batches read ahead and not yet applied, at most.
const READ_AHEAD: usize = 2;
/// How long a replay waits for a spare connection to read ahead on.
const SPARE_CONNECTION_WAIT: Duration = Duration::from_secs(1);

impl LogReader {
    async fn start(pool: &PgPool, engine: &Engine, tenant: &str, after: i64, until: i64) -> Self {
        let spare = tokio::time::timeout(SPARE_CONNECTION_WAIT, pool.acquire())
            .await
            .ok()
            .and_then(Result::ok);
        let ahead = spare.map(|mut connection| {
            let (sender, receiver) = mpsc::channel(READ_AHEAD);
            let (engine, tenant) = (engine.clone(), tenant.to_owned());
            tokio::spawn(async move {
                let mut after = after;
                loop {
                    let batch = read_after(
                        &mut connection,
                        engine.keyring(),
                        &tenant,
                        after,
                        until,
                        engine.replay_batch_size(),
                    )
                    .await;
                    let done = match &batch {
                        Ok(events) => match events.last() {
                            Some(last) => {
                                after = last.seq;
                                false
                            }
                            None => true,
                        },
                        Err(_) => true,
                    };
                    // The replay stopped listening (done, failed, or a hole).
                    if sender.send(batch.map(Arc::from)).await.is_err() || done {
                        return;
                    }
                }
            });
            receiver
        });
        Self {
            ahead,
            after,
            until,
            tenant: tenant.to_owned(),
            engine: engine.clone(),
            waited: Duration::ZERO,
        }
    }

    /// The next batch; empty at the end of the log.
    async fn next(&mut self, tx: &mut PgConnection) -> Result<Arc<[StoredEvent]>, sqlx::Error> {
        let started = Instant::now();
        let batch = match &mut self.ahead {
            // The reader ends by sending an empty batch, after which the
            // replay asks no more: a closed channel means it died early.
            Some(ahead) => ahead.recv().await.unwrap_or_else(|| {
                Err(sqlx::Error::Protocol(format!(
                    "the log reader of {} stopped before the end of the log",
                    self.tenant
                )))
            }),
            None => {
                let events = read_after(
                    tx,
                    self.engine.keyring(),
                    &self.tenant,
                    self.after,
                    self.until,
                    self.engine.replay_batch_size(),
                )
                .await?;
                if let Some(last) = events.last() {
                    self.after = last.seq;
                }
                Ok(Arc::from(events))
            }
        };
        self.waited += started.elapsed();
        batch
    }
}

/// A digest of each of the engine's tables for `tenant` in `schema`: MD5
/// over every row's JSON, in key order. Equal digests mean equal content.
pub async fn digests(
    pool: &PgPool,
    engine: &Engine,
    schema: &Schema,
    tenant: &str,
) -> Result<std::collections::BTreeMap<String, String>, sqlx::Error> {
    let mut digests = std::collections::BTreeMap::new();
    for table in engine.projectors().iter().flat_map(|p| p.tables()) {
        let digest: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT md5(coalesce(string_agg(to_jsonb(t)::text, E'\\n' ORDER BY {key}), ''))
               FROM {schema}.{table} t WHERE tenant_id = $1",
            key = table.key.join(", "),
            schema = schema.name(),
            table = table.name,
        )))
        .bind(tenant)
        .fetch_one(pool)
        .await?;
        digests.insert(table.name.to_owned(), digest);
    }
    Ok(digests)
}
