//! Replay from zero: delete a tenant's projection rows and apply its whole
//! log again, in one transaction per tenant. Readers keep seeing the old rows
//! until the new ones commit; live workers skip the tenant meanwhile (its
//! cursors are locked) and resume from the rebuilt cursors.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::{PgConnection, PgPool};

use crate::{
    engine::{Cursor, Engine, ProjectError, Wait, apply, save_cursors},
    event::{StoredEvent, read_after},
    projector::reset,
    schema::Schema,
};

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
    /// Where `elapsed` went: reading (and opening) the log, then each
    /// projector's `apply` (its own work and its statements), in order.
    /// The rest is the reset and the commit.
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
            sqlx::query_scalar("SELECT tenant_id FROM public.tenant_heads ORDER BY tenant_id")
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
        let (events, reading) = replay(&mut tx, engine, &tenant, &mut cursors, progress).await?;
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
pub async fn vacuum_analyze(pool: &PgPool, engine: &Engine) -> Result<(), ProjectError> {
    let tables: Vec<String> = engine
        .projectors()
        .iter()
        .flat_map(|p| p.tables())
        .map(|table| format!("projections.{}", table.name))
        .collect();
    if !tables.is_empty() {
        // Table names are the projectors' own constants.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "VACUUM (ANALYZE) {}",
            tables.join(", ")
        )))
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// Applies the log above the cursors, batch by batch, up to each cursor's
/// `until` or the first hole. Returns how many events were read, and the
/// time reading them took.
pub(crate) async fn replay(
    tx: &mut PgConnection,
    engine: &Engine,
    tenant: &str,
    cursors: &mut [Cursor],
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<(i64, Duration), ProjectError> {
    let until = cursors.iter().map(|c| c.until).max().unwrap_or(0);
    let head: i64 = sqlx::query_scalar("SELECT seq FROM public.tenant_heads WHERE tenant_id = $1")
        .bind(tenant)
        .fetch_optional(&mut *tx)
        .await?
        .unwrap_or(0);
    let total = head.min(until);
    let mut position = cursors.iter().map(|c| c.seq).min().unwrap_or(0);
    let mut read = 0;
    let mut reading = Duration::ZERO;
    let mut batch = read_batch(tx, engine, tenant, position, until, &mut reading).await?;
    while let Some(last) = batch.last() {
        if last.seq != position + batch.len() as i64 {
            tracing::warn!(
                tenant,
                after = position,
                "replay stopped at a hole in the log"
            );
            break;
        }
        // The next batch is read before this one is applied, so that
        // projectors can derive its rows while this one's are written.
        let last_seq = last.seq;
        let next = read_batch(tx, engine, tenant, last_seq, until, &mut reading).await?;
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
    Ok((read, reading))
}

/// The batch of events after `after` (up to `until`), its reading time
/// added to `reading`.
async fn read_batch(
    tx: &mut PgConnection,
    engine: &Engine,
    tenant: &str,
    after: i64,
    until: i64,
    reading: &mut Duration,
) -> Result<Arc<[StoredEvent]>, sqlx::Error> {
    let started = Instant::now();
    let batch = read_after(
        tx,
        engine.keyring(),
        tenant,
        after,
        until,
        engine.batch_size(),
    )
    .await?;
    *reading += started.elapsed();
    Ok(batch.into())
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
