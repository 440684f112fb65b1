//! Where projection tables live: the live `projections` schema, or a shadow
//! copy used by drift checks.

use sqlx::PgConnection;

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
