//! The one transaction shape every projection write goes through: lock the
//! tenant's cursors, read the events after them, apply, advance the cursors,
//! commit. Projection rows and cursors commit together or not at all, so a
//! crash anywhere neither skips nor repeats an event.

use std::sync::Arc;

use sqlx::{PgConnection, PgPool};

use crate::{
    PROJECTED_CHANNEL,
    projector::{Projector, reset},
    schema::Schema,
};

use memd_core::{
    event::{StoredEvent, read_after},
    seal::Keyring,
};

/// Called after a batch is applied and before its cursors are written, with
/// the tenant and the batch's last seq; returning true makes the batch fail
/// there, as a crash would. For tests.
pub type Failpoint = Arc<dyn Fn(&str, i64) -> bool + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// A projector's own statements failed (the batch was rolled back).
    #[error("{projector}: {source}")]
    Projection {
        projector: &'static str,
        source: sqlx::Error,
    },
    #[error("failpoint: stopped before advancing {tenant}'s cursors to {seq}")]
    Failpoint { tenant: String, seq: i64 },
    #[error("unknown projector {0:?} (known: {1})")]
    UnknownProjector(String, String),
}

impl ProjectError {
    /// The database error behind this one, if any.
    pub fn database_error(&self) -> Option<&sqlx::Error> {
        match self {
            Self::Database(err) | Self::Projection { source: err, .. } => Some(err),
            _ => None,
        }
    }

    /// The projector whose statements failed, when one did.
    pub fn projector(&self) -> Option<&'static str> {
        match self {
            Self::Projection { projector, .. } => Some(projector),
            _ => None,
        }
    }
}

/// What one [`Engine::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Applied the events `from < seq <= to`.
    Advanced { from: i64, to: i64 },
    /// Nothing after the cursors.
    CaughtUp,
    /// Another worker holds every cursor of this tenant; it will finish.
    Busy,
    /// The next visible event is not `after + 1`: an earlier seq has not
    /// committed yet. Waiting is the only safe move.
    Gap { after: i64, next: i64 },
}

/// A cursor as held during a transaction.
#[derive(Clone)]
pub(crate) struct Cursor {
    pub projector: Arc<dyn Projector>,
    pub seq: i64,
    /// Events above this seq are left for later (drift checks stop where
    /// the live cursor stood).
    pub until: i64,
    /// Time spent in the projector's `apply` in this transaction (its own
    /// work and its statements' round trips), for the rebuild's accounts.
    pub spent: std::time::Duration,
}

/// How to treat cursors another transaction holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Skip them: their holder is applying the same events.
    SkipLocked,
    /// Wait for them (rebuild).
    Block,
}

#[derive(Clone)]
pub struct Engine {
    projectors: Vec<Arc<dyn Projector>>,
    batch_size: i64,
    /// Events per batch when replaying a log (rebuild, drift check):
    /// larger, since every batch costs each projector its round trips.
    replay_batch_size: i64,
    failpoint: Option<Failpoint>,
    /// Where each batch's commit is announced.
    channel: &'static str,
    /// Opens sealed events and seals what is derived from them.
    keyring: Keyring,
}

impl Engine {
    pub const DEFAULT_BATCH_SIZE: i64 = 1000;
    pub const DEFAULT_REPLAY_BATCH_SIZE: i64 = 5000;

    pub fn new(projectors: Vec<Arc<dyn Projector>>) -> Self {
        Self {
            projectors,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            replay_batch_size: Self::DEFAULT_REPLAY_BATCH_SIZE,
            failpoint: None,
            channel: PROJECTED_CHANNEL,
            keyring: Keyring::none(),
        }
    }

    /// Opens and seals high and secret content with `keyring`.
    pub fn with_keyring(mut self, keyring: Keyring) -> Self {
        self.keyring = keyring;
        self
    }

    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Announces batches on `channel` instead of [`PROJECTED_CHANNEL`]
    /// (the embeddings projections: readers waiting for the projections
    /// must not be woken by them).
    pub fn with_channel(mut self, channel: &'static str) -> Self {
        self.channel = channel;
        self
    }

    pub fn channel(&self) -> &'static str {
        self.channel
    }

    /// Batches of at most `batch_size` events, live and in replays.
    pub fn with_batch_size(mut self, batch_size: i64) -> Self {
        self.batch_size = batch_size.max(1);
        self.replay_batch_size = self.batch_size;
        self
    }

    pub fn with_failpoint(mut self, failpoint: Failpoint) -> Self {
        self.failpoint = Some(failpoint);
        self
    }

    pub fn projectors(&self) -> &[Arc<dyn Projector>] {
        &self.projectors
    }

    pub fn batch_size(&self) -> i64 {
        self.batch_size
    }

    pub fn replay_batch_size(&self) -> i64 {
        self.replay_batch_size
    }

    /// The same engine restricted to the named projectors (all when empty).
    pub fn only(&self, names: &[String]) -> Result<Self, ProjectError> {
        if names.is_empty() {
            return Ok(self.clone());
        }
        let mut chosen = Vec::new();
        for name in names {
            let found = self.projectors.iter().find(|p| p.name() == name);
            match found {
                Some(projector) => chosen.push(projector.clone()),
                None => {
                    let known: Vec<_> = self.projectors.iter().map(|p| p.name()).collect();
                    return Err(ProjectError::UnknownProjector(
                        name.clone(),
                        known.join(", "),
                    ));
                }
            }
        }
        Ok(Self {
            projectors: chosen,
            ..self.clone()
        })
    }

    /// Applies one batch of `tenant`'s log to the live projections.
    pub async fn step(&self, pool: &PgPool, tenant: &str) -> Result<Step, ProjectError> {
        self.step_at_most(pool, tenant, self.batch_size).await
    }

    /// [`Self::step`] with a batch of at most `batch_size` events.
    pub async fn step_at_most(
        &self,
        pool: &PgPool,
        tenant: &str,
        batch_size: i64,
    ) -> Result<Step, ProjectError> {
        let mut tx = Schema::live().begin_step(pool).await?;
        let mut cursors = self.lock_cursors(&mut tx, tenant, Wait::SkipLocked).await?;
        if cursors.is_empty() {
            return Ok(Step::Busy);
        }
        let from = cursors.iter().map(|c| c.seq).min().unwrap_or(0);
        let events = read_after(
            &mut tx,
            &self.keyring,
            tenant,
            from,
            i64::MAX,
            batch_size.max(1),
        )
        .await?;
        let ready = contiguous(from, &events);
        let step = match (ready.last(), events.first()) {
            (Some(last), _) => Step::Advanced { from, to: last.seq },
            (None, Some(next)) => Step::Gap {
                after: from,
                next: next.seq,
            },
            (None, None) => Step::CaughtUp,
        };
        let Step::Advanced { to, .. } = step else {
            // Nothing applied: nothing to write.
            return Ok(step);
        };
        apply(&mut tx, tenant, &mut cursors, ready).await?;
        if let Some(failpoint) = &self.failpoint
            && failpoint(tenant, to)
        {
            return Err(ProjectError::Failpoint {
                tenant: tenant.to_owned(),
                seq: to,
            });
        }
        save_cursors(&mut tx, tenant, &cursors, self.channel).await?;
        tx.commit().await?;
        Ok(step)
    }

    /// Locks this engine's cursors of `tenant` in the transaction's schema,
    /// creating missing ones, and resets those written by another version
    /// of their projector.
    pub(crate) async fn lock_cursors(
        &self,
        tx: &mut PgConnection,
        tenant: &str,
        wait: Wait,
    ) -> Result<Vec<Cursor>, ProjectError> {
        let names: Vec<&str> = self.projectors.iter().map(|p| p.name()).collect();
        let lock = match wait {
            Wait::SkipLocked => "FOR UPDATE SKIP LOCKED",
            Wait::Block => "FOR UPDATE",
        };
        let select = format!(
            "SELECT projector, seq, version FROM cursors
              WHERE tenant_id = $1 AND projector = ANY ($2)
              ORDER BY projector {lock}"
        );
        let mut rows: Vec<(String, i64, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(select.clone()))
            .bind(tenant)
            .bind(&names)
            .fetch_all(&mut *tx)
            .await?;
        // Missing rows (a new tenant or projector) are created, then locked.
        // Rows another worker holds are skipped, so fewer rows than
        // projectors can also mean contention: the insert is then a no-op.
        if rows.len() < names.len() {
            let versions: Vec<i32> = self.projectors.iter().map(|p| p.version()).collect();
            sqlx::query!(
                "INSERT INTO cursors (projector, tenant_id, seq, version)
                 SELECT p, $1, 0, v FROM unnest($2::text[], $3::int[]) AS u (p, v)
                 ON CONFLICT DO NOTHING",
                tenant,
                &names as &[&str],
                &versions
            )
            .execute(&mut *tx)
            .await?;
            rows = sqlx::query_as(sqlx::AssertSqlSafe(select))
                .bind(tenant)
                .bind(&names)
                .fetch_all(&mut *tx)
                .await?;
        }
        let mut cursors = Vec::with_capacity(rows.len());
        let mut went_back = false;
        for (name, seq, version) in rows {
            let Some(projector) = self.projectors.iter().find(|p| p.name() == name) else {
                continue;
            };
            let seq = if version == projector.version() {
                seq
            } else {
                tracing::info!(
                    projector = name,
                    tenant,
                    from = version,
                    to = projector.version(),
                    "projector version changed: replaying the tenant's log"
                );
                reset(tx, projector.as_ref(), tenant).await?;
                went_back = true;
                0
            };
            cursors.push(Cursor {
                projector: projector.clone(),
                seq,
                until: i64::MAX,
                spent: std::time::Duration::ZERO,
            });
        }
        if went_back {
            announce_went_back(tx, tenant, self.channel).await?;
        }
        Ok(cursors)
    }
}

/// The leading run of `events` that continues `after` without a hole.
fn contiguous(after: i64, events: &[StoredEvent]) -> &[StoredEvent] {
    let run = events
        .iter()
        .zip(after + 1..)
        .take_while(|(event, expected)| event.seq == *expected)
        .count();
    &events[..run]
}

/// Gives each cursor's projector the events above its seq (up to its
/// `until`) and moves the cursor to the last one.
pub(crate) async fn apply(
    tx: &mut PgConnection,
    tenant: &str,
    cursors: &mut [Cursor],
    events: &[StoredEvent],
) -> Result<(), ProjectError> {
    for cursor in cursors.iter_mut() {
        let start = events.partition_point(|e| e.seq <= cursor.seq);
        let end = events.partition_point(|e| e.seq <= cursor.until);
        if start >= end {
            continue;
        }
        let slice = &events[start..end];
        let started = std::time::Instant::now();
        // An erased subject's events move the cursor and leave no rows,
        // except in projections that cover every event (the tree).
        let kept: Vec<StoredEvent>;
        let applied = if !cursor.projector.reads_erased() && slice.iter().any(|e| e.erased) {
            kept = slice.iter().filter(|e| !e.erased).cloned().collect();
            &kept[..]
        } else {
            slice
        };
        cursor
            .projector
            .apply(tx, tenant, applied)
            .await
            .map_err(|source| ProjectError::Projection {
                projector: cursor.projector.name(),
                source,
            })?;
        cursor.spent += started.elapsed();
        cursor.seq = slice[slice.len() - 1].seq;
    }
    Ok(())
}

/// Announces (at commit) on `channel` that the tenant's projections went
/// back: seq 0, sent by a rebuild and by a projector of a new version that
/// replays the log. Readers drop what they derived from the old projections
/// on this notice alone; a notice of a seq they have already read past is
/// the usual late news of projections moving on.
pub(crate) async fn announce_went_back(
    tx: &mut PgConnection,
    tenant: &str,
    channel: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_notify($1, $2 || ':0')", channel, tenant)
        .execute(tx)
        .await?;
    Ok(())
}

/// Writes the cursors and, in the same statement, the notification (sent at
/// commit) on `channel` (the engine's, [`PROJECTED_CHANNEL`] by default) of
/// how far the tenant's projections now reach.
pub(crate) async fn save_cursors(
    tx: &mut PgConnection,
    tenant: &str,
    cursors: &[Cursor],
    channel: &str,
) -> Result<(), sqlx::Error> {
    let names: Vec<&str> = cursors.iter().map(|c| c.projector.name()).collect();
    let seqs: Vec<i64> = cursors.iter().map(|c| c.seq).collect();
    let versions: Vec<i32> = cursors.iter().map(|c| c.projector.version()).collect();
    let projected = seqs.iter().copied().min().unwrap_or(0);
    sqlx::query!(
        "WITH saved AS (
             UPDATE cursors c SET seq = u.seq, version = u.version
               FROM unnest($2::text[], $3::bigint[], $4::int[]) AS u (projector, seq, version)
              WHERE c.tenant_id = $1 AND c.projector = u.projector
         )
         SELECT pg_notify($5, $1 || ':' || $6::bigint)",
        tenant,
        &names as &[&str],
        &seqs,
        &versions,
        channel,
        projected
    )
    .execute(tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> StoredEvent {
        StoredEvent::test_message(seq, format!("evt_{seq}"), "x")
    }

    #[test]
    fn contiguous_stops_at_the_first_hole() {
        let events: Vec<_> = [4, 5, 7, 8].into_iter().map(event).collect();
        assert_eq!(contiguous(3, &events).len(), 2);
        assert!(contiguous(2, &events).is_empty(), "seq 3 has not committed");
        assert!(contiguous(0, &[]).is_empty());
    }
}
