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
        crate::transaction::begin_with(
            pool,
            sqlx::AssertSqlSafe(format!(
                "BEGIN; SET LOCAL search_path TO {}, public; SET LOCAL synchronous_commit = off",
                self.0
            )),
        )
        .await
    }

    /// Points unqualified table names of this transaction at the schema.
    /// Projectors write `chunks`, `decisions`, ... unqualified, so the same
    /// code fills the live or the shadow tables.
    pub async fn enter(&self, tx: &mut PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT set_config('search_path', $1, true)")
            .bind(format!("{}, public", self.0))
            .execute(tx)
            .await?;
        Ok(())
    }
}
