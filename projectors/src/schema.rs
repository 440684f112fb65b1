//! Where projection tables live: the live `projections` schema, or a shadow
//! copy used by drift checks.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

/// A validated schema name (lowercase letters, digits and `_`), safe to
/// splice into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema(String);

impl Schema {
    pub const LIVE: &str = "projections";

    pub fn live() -> Self {
        Self(Self::LIVE.to_owned())
    }

    /// A fresh, unique shadow schema name.
    pub fn shadow() -> Self {
        Self(format!(
            "projections_shadow_{}",
            ulid::Ulid::generate().to_string().to_lowercase()
        ))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// Begins a projection transaction whose unqualified table names resolve
    /// in this schema, in one round trip (the hot path of every projection
    /// step).
    ///
    /// Its commit does not wait for the WAL flush (`synchronous_commit =
    /// off`): a crash may lose the last projection commits, but cursors
    /// commit with their rows, so both are lost together and the events are
    /// applied again. The log itself is always committed synchronously.
    pub async fn begin(
        &self,
        pool: &PgPool,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_setting(pool, "").await
    }

    /// [`Self::begin`] for a live step, which mostly carries the one or two
    /// events appended since the last: each prepared statement is planned
    /// once for whatever values it gets (`plan_cache_mode =
    /// force_generic_plan`). The statements insert and update by key, so
    /// the one plan also suits a step that catches up a full batch.
    ///
    /// A plan made once is made for the tables as the session first finds
    /// them: on a new database, before autovacuum's first ANALYZE (a minute
    /// or so after the first fifty events), the reads of the log may be
    /// planned through another index than the primary key and scan the
    /// tenant's whole log until that ANALYZE has them planned again
    /// (`lab/results/2026-12-04-warm-start/`).
    ///
    /// Left to choose, PostgreSQL plans these statements anew at every
    /// execution: it knows the length of an array it is given as a value
    /// (one or two rows) but not of a parameter, so a plan for any values
    /// looks ten times dearer and is never chosen. With one event per step,
    /// planning was as long as running (pg_stat_statements over single
    /// appends: about 0.13 ms of planning for each of the step's five
    /// statements). A rebuild's batches of a thousand events are planned
    /// by their values: once per thousand events, and the plan fits them.
    pub async fn begin_step(
        &self,
        pool: &PgPool,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_setting(pool, "; SET LOCAL plan_cache_mode = force_generic_plan")
            .await
    }

    async fn begin_setting(
        &self,
        pool: &PgPool,
        more: &'static str,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        crate::transaction::begin_with(
            pool,
            sqlx::AssertSqlSafe(format!(
                "BEGIN; SET LOCAL search_path TO {}, public; SET LOCAL synchronous_commit = off{more}",
                self.0
            )),
        )
        .await
    }

    /// Points unqualified table names of this transaction at the schema.
    /// Projectors write `chunks`, `decisions`, ... unqualified, so the same
    /// code fills the live or the shadow tables.
    pub async fn enter(&self, tx: &mut PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query_scalar!(
            "SELECT set_config('search_path', $1, true)",
            format!("{}, public", self.0)
        )
        .fetch_one(tx)
        .await?;
        Ok(())
    }
}
