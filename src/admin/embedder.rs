//! Changing a tenant's embedder without re-ingesting anything: the new
//! embedder's projection is built from the log beside the one bundles use,
//! bundles switch to it once it has caught up, and the old one is dropped
//! (see [`memd_embedder::worker`]). Only the embeddings
//! projection is built; no event is appended or re-read into any other
//! projection.

use memd_embedder as embed;

use memd_projectors::{
    embed_worker as worker,
    embed_worker::{Choice, EmbeddingWork},
    engine::Step,
    projections::embeddings,
    rebuild::Progress,
};
use serde::Serialize;
use sqlx::PgPool;

use crate::domain::FieldError;

/// Where a tenant's embedders stand.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EmbedderStatus {
    /// What bundles use now (`null`: lexical retrieval only).
    pub active: Option<String>,
    /// What is being built to replace it.
    pub building: Option<String>,
    /// The log's head.
    pub head_seq: i64,
    /// How far the active embedder's projection has applied the log.
    pub active_seq: i64,
    /// How far the one being built has.
    pub building_seq: Option<i64>,
}

/// `name`, when it is an embedder memd knows.
pub fn known(name: &str) -> Result<&'static str, FieldError> {
    embed::NAMES
        .iter()
        .copied()
        .find(|known| *known == name)
        .ok_or_else(|| {
            FieldError::new(
                "embedder",
                format!(
                    "unknown embedder {name:?}; known: {}",
                    embed::NAMES.join(", ")
                ),
            )
        })
}

/// Every tenant's id, in order: what `memd embedder` walks.
pub async fn tenants(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT tenant_id FROM tenants ORDER BY tenant_id")
        .fetch_all(pool)
        .await
}

/// The tenant's embedders and their projections' progress.
pub async fn status(
    pool: &PgPool,
    tenant: &str,
    default: Option<&str>,
) -> Result<EmbedderStatus, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT coalesce(ch.active, $2) AS active, ch.building AS "building?",
                  coalesce(h.seq, 0) AS "head_seq!"
             FROM (SELECT $1::text AS tenant_id) t
             LEFT JOIN public.embedder_choice ch ON ch.tenant_id = t.tenant_id
             LEFT JOIN public.tenant_heads h ON h.tenant_id = t.tenant_id"#,
        tenant,
        default
    )
    .fetch_one(pool)
    .await?;
    let (active, building, head_seq) = (row.active, row.building, row.head_seq);
    let cursor = |name: Option<String>| async move {
        let Some(projector) = name.as_deref().and_then(embeddings::projector_name) else {
            return Ok::<_, sqlx::Error>(None);
        };
        sqlx::query_scalar!(
            "SELECT seq FROM projections.cursors WHERE tenant_id = $1 AND projector = $2",
            tenant,
            projector
        )
        .fetch_optional(pool)
        .await
    };
    let active_seq = cursor(active.clone()).await?.unwrap_or(0);
    let building_seq = match &building {
        Some(_) => Some(cursor(building.clone()).await?.unwrap_or(0)),
        None => None,
    };
    Ok(EmbedderStatus {
        active,
        building,
        head_seq,
        active_seq,
        building_seq,
    })
}

/// Starts the swap of `tenant` to `name` (see [`worker::choose`]).
pub async fn choose(
    pool: &PgPool,
    tenant: &str,
    name: &'static str,
    default: Option<&str>,
) -> Result<Choice, sqlx::Error> {
    worker::choose(pool, tenant, name, default).await
}

/// Builds the projection `tenant` is switching to in this process,
/// reporting progress, then switches. What `memd embedder use` does after
/// [`choose`]; daemons' workers would do the same (cursor locks keep them
/// from embedding the same events twice). True when it switched.
pub async fn build_and_switch(
    pool: &PgPool,
    work: &EmbeddingWork,
    tenant: &str,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> anyhow::Result<bool> {
    let choice = work.choice(pool, tenant).await?;
    let Some(building) = choice.building else {
        return Ok(false);
    };
    let engine = work.engine(&building).ok_or_else(|| {
        anyhow::anyhow!("embedder {building} cannot be loaded here (model files missing?)")
    })?;
    loop {
        let head: i64 = sqlx::query_scalar!(
            r#"SELECT coalesce(max(seq), 0) AS "head!" FROM public.tenant_heads WHERE tenant_id = $1"#,
            tenant
        )
        .fetch_one(pool)
        .await?;
        match engine.step(pool, tenant).await? {
            Step::Advanced { to, .. } => progress(Progress {
                tenant,
                done: to,
                total: head,
            }),
            Step::CaughtUp => {
                progress(Progress {
                    tenant,
                    done: head,
                    total: head,
                });
                break;
            }
            // Another process holds the cursor, or an append is in flight.
            Step::Busy | Step::Gap { .. } => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    // New events may have arrived since: the switch waits for them.
    loop {
        if worker::switch_if_built(pool, tenant, &building).await? {
            return Ok(true);
        }
        let choice = work.choice(pool, tenant).await?;
        if choice.building.as_deref() != Some(building.as_str()) {
            return Ok(false);
        }
        while let Step::Advanced { .. } = engine.step(pool, tenant).await? {}
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
