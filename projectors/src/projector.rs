//! What a projector is.

use std::{future::Future, pin::Pin};

use sqlx::PgConnection;

use memd_core::event::{Kind, StoredEvent};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A projection table: its name (unqualified, resolved through the
/// transaction's `search_path`) and its key columns, which order digests and
/// pair rows in drift reports. Every table has a `tenant_id` column.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub key: &'static [&'static str],
}

/// Turns events into rows of its tables.
///
/// `apply` runs inside the transaction that also advances the projector's
/// cursor, so it must only write through `tx`. It receives a tenant's events
/// in seq order, each exactly once, and must be deterministic: the rows may
/// depend on the events and on rows it wrote earlier, never on the clock or
/// on other projectors' tables, so that a replay reproduces them exactly.
pub trait Projector: Send + Sync {
    /// Stable name, the key of its cursor.
    fn name(&self) -> &'static str;

    /// Bump when the rows it derives change: cursors written by another
    /// version are reset and the tenant's log is replayed.
    fn version(&self) -> i32;

    fn tables(&self) -> &'static [Table];

    /// Whether `apply` also receives the events of erased subjects (with
    /// `{}` for content and [`StoredEvent::erased`] set). Content-derived
    /// projections must not (an erased subject leaves no rows), but one
    /// that covers every event whatever it says must: the Merkle tree's
    /// leaves are the chain hashes, which survive erasure, and a tree
    /// without them would move every later leaf.
    fn reads_erased(&self) -> bool {
        false
    }

    /// Says that `events` come next in this transaction, after the batch
    /// about to be applied: a projector may start deriving their rows on
    /// another thread while the current batch's statements run. `apply`
    /// must write the same rows whether or not this was called. Replays
    /// (rebuild, drift check) call it; live workers do not.
    fn prepare(&self, _events: &std::sync::Arc<[StoredEvent]>) {}

    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;
}

/// A read model of some kinds of events: it names them, and only folds
/// them into its rows. The loop around it is written once ([`Projector`]
/// for every `Fold`): it hands the fold a batch's events of those kinds, in
/// seq order, and does not call it for a batch that has none.
pub trait Fold: Send + Sync {
    /// Stable name, the key of its cursor ([`Projector::name`]).
    const NAME: &'static str;
    /// [`Projector::version`].
    const VERSION: i32;
    const TABLES: &'static [Table];
    /// The event kinds it reads.
    const KINDS: &'static [Kind];

    /// As [`Projector::apply`], with the batch's events of [`Self::KINDS`]
    /// (at least one).
    fn fold<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: Vec<&'a StoredEvent>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
}

impl<T: Fold> Projector for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn version(&self) -> i32 {
        T::VERSION
    }

    fn tables(&self) -> &'static [Table] {
        T::TABLES
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        let read: Vec<&StoredEvent> = events
            .iter()
            .filter(|event| T::KINDS.contains(&event.kind))
            .collect();
        if read.is_empty() {
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(self.fold(tx, tenant, read))
    }
}

/// Deletes a tenant's rows from every table of `projector`.
pub async fn reset(
    tx: &mut PgConnection,
    projector: &dyn Projector,
    tenant: &str,
) -> Result<(), sqlx::Error> {
    for table in projector.tables() {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {} WHERE tenant_id = $1",
            table.name
        )))
        .bind(tenant)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
