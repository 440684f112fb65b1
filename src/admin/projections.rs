//! Where a tenant's projections stand: each one's cursor, version, lag
//! behind the log and last failure (the console's projections page and
//! `GET /api/v1/admin/projections`).

use chrono::{DateTime, Utc};
use memd_projectors::projections;
use serde::Serialize;
use sqlx::PgPool;

/// Where each of the tenant's projections stands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProjectionStatus {
    /// The projector (`chunks`, `decisions`, ...).
    name: String,
    /// The last seq it applied (0: none yet).
    cursor_seq: i64,
    /// The projector version its rows were built by; null before its first
    /// batch.
    #[schema(required = true)]
    version: Option<i32>,
    /// Events of the log it has not applied yet.
    lag: i64,
    /// Its last failure (the batch was rolled back and retried): the
    /// error, or null if it never failed. Lag 0 means it has recovered
    /// since.
    #[schema(required = true)]
    last_error: Option<String>,
    /// When that failure happened.
    #[schema(required = true)]
    last_error_at: Option<DateTime<Utc>>,
}

/// The tenant's projections.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProjectionsStatus {
    /// The seq of the tenant's newest event.
    pub head_seq: i64,
    pub projections: Vec<ProjectionStatus>,
}

/// Where `tenant`'s projections stand, its embeddings projections included.
pub async fn status(pool: &PgPool, tenant: &str) -> Result<ProjectionsStatus, sqlx::Error> {
    let head_seq: i64 = sqlx::query_scalar!(
        r#"SELECT coalesce((SELECT seq FROM tenant_heads WHERE tenant_id = $1), 0) AS "head_seq!""#,
        tenant
    )
    .fetch_one(pool)
    .await?;
    // The projections, then the tenant's embeddings projections (one per
    // embedder it has); a failure the engine recorded for the whole batch
    // (`projections`, `embeddings`) counts for each of its own.
    let projections = sqlx::query_as!(
        ProjectionStatus,
        r#"WITH names AS (
               SELECT name, position
                 FROM unnest($2::text[]) WITH ORDINALITY AS p (name, position)
               UNION ALL
               SELECT projector, 1000 FROM projections.cursors
                WHERE tenant_id = $1 AND projector LIKE 'embeddings\_%'
           )
           SELECT n.name AS "name!", coalesce(c.seq, 0) AS "cursor_seq!", c.version AS "version?",
                  $3 - coalesce(c.seq, 0) AS "lag!", f.error AS "last_error?",
                  f.failed_at AS "last_error_at?"
             FROM names n
             LEFT JOIN projections.cursors c ON c.projector = n.name AND c.tenant_id = $1
             LEFT JOIN LATERAL (
                  SELECT error, failed_at FROM projections.failures f
                   WHERE f.tenant_id = $1
                     AND f.projector IN (n.name, CASE WHEN n.name LIKE 'embeddings\_%'
                                                      THEN $5 ELSE $4 END)
                   ORDER BY failed_at DESC LIMIT 1) f ON true
            ORDER BY n.position, n.name"#,
        tenant,
        projections::NAMES as &[&str],
        head_seq,
        memd_projectors::runtime::ENGINE_LABEL,
        memd_projectors::embed_worker::LABEL
    )
    .fetch_all(pool)
    .await?;
    Ok(ProjectionsStatus {
        head_seq,
        projections,
    })
}
