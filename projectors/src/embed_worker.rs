//! Keeps each tenant's embeddings projections current: the embedder its
//! bundles use (`embedder_choice.active`, or the daemon's default) and,
//! during a swap, the one being built to replace it (`building`). Runs
//! apart from the other projections ([`crate::runtime::Runtime`] over
//! [`EmbeddingWork`]), so embedding never holds up chunks, decisions or the
//! write path.
//!
//! **Writes first.** On a small machine the model's arithmetic competes
//! with appends for the same cores, even at the lowest CPU priority (two
//! vCPUs share caches, memory bandwidth and often one physical core). So
//! while appends are being announced, the worker embeds in short batches
//! and rests between them, using at most [`BUSY_DUTY`] of the time; once
//! the log has been quiet for [`QUIET`], it embeds at full speed again.
//! Bundles meanwhile find the newest chunks by their words (the lag is in
//! `provenance.semantic`).
//!
//! **Stopping.** A batch being embedded is abandoned, not waited for: at
//! the lowest CPU priority, on a machine whose cores other work holds, it
//! can take minutes. Its transaction rolls back (vectors and cursor
//! together), so the next start embeds it again.
//!
//! **Swap.** `memd embedder use NAME` (or the admin route) sets `building`.
//! Its projection is built beside the active one while bundles keep using
//! the active one; once it has caught up with the log, one transaction
//! makes it active and drops the old projection's rows and cursor.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio::sync::watch;

use crate::{
    EMBEDDED_CHANNEL,
    engine::{Engine, ProjectError, Step},
    projections::embeddings::{self, EmbeddingProjector},
    projector::BoxFuture,
    runtime::Work,
};
use memd_core::seal::Keyring;
use memd_embedder::Embedder;

/// What [`Work::label`] the embeddings work gives: its failures concern
/// every embeddings projection of the tenant.
pub const LABEL: &str = "embeddings";

/// A tenant's embedders as chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// What bundles use (`None`: no embedder, lexical only).
    pub active: Option<String>,
    /// What is being built to replace it.
    pub building: Option<String>,
}

/// How long after the last announced append the write path counts as
/// busy.
pub const QUIET: Duration = Duration::from_millis(500);
/// The share of time embedding may take while the write path is busy.
pub const BUSY_DUTY: f64 = 0.1;
/// Events per batch while the write path is busy: a short forward pass, so
/// the rests between batches are short too.
pub const BUSY_BATCH_EVENTS: i64 = 16;

/// When appends were last announced, and so whether embedding should give
/// way to them.
#[derive(Debug, Default)]
pub struct WriteActivity {
    last: Mutex<Option<Instant>>,
}

impl WriteActivity {
    pub fn appended(&self) {
        *self.last.lock().expect("write activity lock") = Some(Instant::now());
    }

    /// Whether an append was announced within [`QUIET`].
    pub fn busy(&self) -> bool {
        self.last
            .lock()
            .expect("write activity lock")
            .is_some_and(|last| last.elapsed() < QUIET)
    }

    /// How long to rest after a batch that took `worked`, so that embedding
    /// takes at most [`BUSY_DUTY`] of the time while writes are busy.
    pub fn rest_after(worked: Duration) -> Duration {
        worked.mul_f64((1.0 - BUSY_DUTY) / BUSY_DUTY)
    }
}

/// The embeddings projections of every tenant, for the embedders this
/// process can run.
pub struct EmbeddingWork {
    default: Option<&'static str>,
    engines: HashMap<&'static str, Engine>,
    writes: WriteActivity,
}

impl EmbeddingWork {
    /// `default` is the embedder of tenants that chose none.
    /// `keyring` opens sealed events, so high and secret memory is embedded
    /// too (vectors hold no text).
    pub fn new(
        default: Option<&'static str>,
        embedders: &[Arc<dyn Embedder>],
        keyring: &Keyring,
    ) -> Self {
        let engines = embedders
            .iter()
            .filter_map(|embedder| {
                let projector = EmbeddingProjector::new(embedder.clone())?;
                Some((
                    embedder.name(),
                    Engine::new(vec![Arc::new(projector)])
                        .with_batch_size(embeddings::BATCH_EVENTS)
                        .with_channel(EMBEDDED_CHANNEL)
                        .with_keyring(keyring.clone()),
                ))
            })
            .collect();
        Self {
            default,
            engines,
            writes: WriteActivity::default(),
        }
    }

    /// The engine of one embedder's projection, if it runs here.
    pub fn engine(&self, embedder: &str) -> Option<&Engine> {
        self.engines.get(embedder)
    }

    /// The tenant's choice, with the default filled in.
    pub async fn choice(&self, pool: &PgPool, tenant: &str) -> Result<Choice, sqlx::Error> {
        let row = sqlx::query!(
            "SELECT active, building FROM public.embedder_choice WHERE tenant_id = $1",
            tenant,
        )
        .fetch_optional(pool)
        .await?;
        Ok(match row {
            Some(row) => Choice {
                active: Some(row.active),
                building: row.building,
            },
            None => Choice {
                active: self.default.map(str::to_owned),
                building: None,
            },
        })
    }
}

impl Work for EmbeddingWork {
    fn label(&self) -> &'static str {
        LABEL
    }

    fn appended(&self) {
        self.writes.appended();
    }

    fn lagging<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<Vec<String>, sqlx::Error>> {
        Box::pin(async move {
            if self.engines.is_empty() {
                return Ok(Vec::new());
            }
            let (names, versions): (Vec<&str>, Vec<i32>) = self
                .engines
                .values()
                .flat_map(|engine| engine.projectors())
                .map(|p| (p.name(), p.version()))
                .unzip();
            sqlx::query_scalar!(
                "SELECT DISTINCT h.tenant_id
                   FROM public.tenant_heads h
                   LEFT JOIN public.embedder_choice ch ON ch.tenant_id = h.tenant_id
                  CROSS JOIN LATERAL unnest(ARRAY[coalesce(ch.active, $1), ch.building]) AS e (name)
                   JOIN unnest($2::text[], $3::int[]) AS p (projector, version)
                     ON p.projector = 'embeddings_' || e.name
                   LEFT JOIN projections.cursors c
                     ON c.tenant_id = h.tenant_id AND c.projector = p.projector
                  WHERE h.seq > 0 AND (c.seq IS NULL OR c.seq < h.seq OR c.version <> p.version)
                  ORDER BY h.tenant_id",
                self.default,
                &names as &[&str],
                &versions
            )
            .fetch_all(pool)
            .await
        })
    }

    fn catch_up<'a>(
        &'a self,
        pool: &'a PgPool,
        tenant: &'a str,
        stopped: &'a watch::Receiver<bool>,
    ) -> BoxFuture<'a, Result<(), ProjectError>> {
        Box::pin(async move {
            if self.engines.is_empty() {
                // No embedder runs here: nothing to ask the database.
                return Ok(());
            }
            let choice = self.choice(pool, tenant).await?;
            for name in [&choice.active, &choice.building].into_iter().flatten() {
                let Some(engine) = self.engines.get(name.as_str()) else {
                    continue;
                };
                loop {
                    let busy = self.writes.busy();
                    let batch = if busy {
                        BUSY_BATCH_EVENTS
                    } else {
                        engine.batch_size()
                    };
                    let started = Instant::now();
                    let mut stopping = stopped.clone();
                    // Stopping does not wait for the batch: its model runs
                    // at the lowest CPU priority, and on a busy machine it
                    // can take minutes. Its transaction rolls back (cursor
                    // and vectors together), and the next start embeds it.
                    let step = tokio::select! {
                        step = engine.step_at_most(pool, tenant, batch) => step?,
                        _ = stopping.wait_for(|stop| *stop) => return Ok(()),
                    };
                    if !matches!(step, Step::Advanced { .. }) || *stopped.borrow() {
                        break;
                    }
                    if busy {
                        tokio::select! {
                            _ = stopping.wait_for(|stop| *stop) => return Ok(()),
                            () = tokio::time::sleep(WriteActivity::rest_after(started.elapsed())) => {}
                        }
                    }
                }
                if *stopped.borrow() {
                    return Ok(());
                }
            }
            if let Some(building) = &choice.building
                && self.engines.contains_key(building.as_str())
            {
                switch_if_built(pool, tenant, building).await?;
            }
            Ok(())
        })
    }
}

/// Starts building `embedder`'s projection for `tenant` beside the active
/// one (the worker, or the caller, builds it; [`switch_if_built`] swaps).
/// Choosing the active embedder again cancels a swap in progress. Returns
/// the choice now in force.
pub async fn choose(
    pool: &PgPool,
    tenant: &str,
    embedder: &str,
    default: Option<&str>,
) -> Result<Choice, sqlx::Error> {
    let chosen = sqlx::query!(
        "INSERT INTO public.embedder_choice AS ch (tenant_id, active, building)
         VALUES ($1, coalesce($3, $2), CASE WHEN coalesce($3, $2) = $2 THEN NULL ELSE $2 END)
         ON CONFLICT (tenant_id) DO UPDATE
            SET building = CASE WHEN ch.active = $2 THEN NULL ELSE $2 END,
                updated_at = now()
         RETURNING active, building",
        tenant,
        embedder,
        default,
    )
    .fetch_one(pool)
    .await?;
    Ok(Choice {
        active: Some(chosen.active),
        building: chosen.building,
    })
}

/// When `building`'s projection of `tenant` has caught up with the log,
/// makes it the active one and drops the old one's rows and cursor, in one
/// transaction. True when it switched.
pub async fn switch_if_built(
    pool: &PgPool,
    tenant: &str,
    building: &str,
) -> Result<bool, sqlx::Error> {
    let Some(projector) = embeddings::projector_name(building) else {
        return Ok(false);
    };
    let mut tx = crate::transaction::begin(pool).await?;
    // Locks the choice: a concurrent `choose` waits, then sees the switch.
    let old: Option<String> = sqlx::query_scalar!(
        "SELECT ch.active FROM public.embedder_choice ch
           JOIN public.tenant_heads h ON h.tenant_id = ch.tenant_id
           JOIN projections.cursors c ON c.tenant_id = ch.tenant_id AND c.projector = $3
          WHERE ch.tenant_id = $1 AND ch.building = $2 AND c.seq >= h.seq
            FOR UPDATE OF ch",
        tenant,
        building,
        projector
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(old) = old else {
        return Ok(false);
    };
    sqlx::query!(
        "UPDATE public.embedder_choice SET active = building, building = NULL, updated_at = now()
          WHERE tenant_id = $1",
        tenant
    )
    .execute(&mut *tx)
    .await?;
    if old != building
        && let Some(old_projector) = embeddings::projector_name(&old)
    {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM projections.{old_projector} WHERE tenant_id = $1"
        )))
        .bind(tenant)
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "DELETE FROM projections.cursors WHERE tenant_id = $1 AND projector = $2",
            tenant,
            old_projector
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    tracing::info!(tenant, from = old, to = building, "embedder switched");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_path_is_busy_only_shortly_after_an_append() {
        let writes = WriteActivity::default();
        assert!(!writes.busy(), "no append yet");
        writes.appended();
        assert!(writes.busy());
        *writes.last.lock().unwrap() = Some(Instant::now() - QUIET - Duration::from_millis(1));
        assert!(!writes.busy(), "quiet for longer than QUIET");
    }

    #[test]
    fn rests_keep_embedding_to_its_share_of_a_busy_time() {
        let worked = Duration::from_millis(120);
        let rest = WriteActivity::rest_after(worked);
        let share = worked.as_secs_f64() / (worked + rest).as_secs_f64();
        assert!((share - BUSY_DUTY).abs() < 1e-9, "{share}");
    }
}
