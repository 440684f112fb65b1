//! The read side: Active Context Bundles (PRD §7.2, §8).
//!
//! A bundle is built from the projections (through a per-tenant cache of
//! views, active decisions and tasks), the full-text index of chunks, and
//! the log itself for the recent window, which is therefore always fresh.
//!
//! - [`policy`]: caps, weights, bounds per tenant.
//! - [`privacy`]: what each channel may hold; applied before scoring.
//! - [`filters`]: what a request narrows retrieval to; applied likewise.
//! - [`retention`]: what a tenant's policy forgets as memory ages; likewise.
//! - [`retrieve`]: lexical candidates and ranking; [`dedupe`]: near-duplicates.
//! - [`semantic`], [`vectors`]: embedders, question vectors, the in-memory
//!   vector index; [`hybrid`]: the union of lexical and semantic candidates.
//! - [`cache`]: the per-tenant fast-path state and its invalidation.
//! - [`recent`]: the recent window, from the log, past what was kept.
//! - [`handoff`]: packets between agents.
//! - [`bundle`]: packing under the budget, rendering.
//! - [`acb`]: the build itself; [`search`]: its retrieval alone.
//! - [`replica`]: bundles from a streaming-replication standby.

pub mod acb;
pub mod bundle;
pub mod cache;
mod choose;
pub mod filters;
pub mod handoff;
pub mod hybrid;
pub mod neighbours;
mod omissions;
pub mod policy;
pub mod privacy;
pub mod recent;
pub mod replica;
pub mod retention;
pub mod retrieve;
pub mod search;
pub mod semantic;
pub mod vectors;
pub mod warm;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use memd_core::seal::Keyring;

use memd_projectors::projections::{Encoding, TokenCounter, chunks::ChunkProjector};
use sqlx::PgPool;

pub use acb::{AcbRequest, build_acb};

/// What the read side keeps between bundles. Cheap to share.
pub struct Reader {
    pub pool: PgPool,
    /// Where policies are read: the primary, also for a reader of a
    /// standby. A policy has no seq to compare, so one read from a standby
    /// that has not replayed a change yet would sit in the shared cache
    /// after the change's notification had cleared it.
    pub policy_pool: PgPool,
    pub cache: Arc<cache::ReadCache>,
    pub counter: TokenCounter,
    pub costs: bundle::Costs,
    /// Chunks events the projections have not reached yet (recent window).
    pub chunker: ChunkProjector,
    /// Names and versions of the projectors whose cursors say how far the
    /// projections reach.
    pub projectors: Vec<(&'static str, i32)>,
    /// Embedders, question vectors and the vector index.
    pub semantic: Arc<semantic::Semantic>,
    /// Opens what is sealed at rest (high and secret memory).
    pub keyring: Keyring,
    /// Bundles being built now, by this reader and those sharing its
    /// caches: whether the machine has a core to spare for a bundle's
    /// second statement ([`Building::spare_core`]).
    pub building: Building,
}

/// How many bundles are being built: while fewer than the machine's cores,
/// a hybrid bundle reads the rows of the chunks found by meaning beside its
/// lexical statement, on a second connection, instead of after it (the
/// same rows either way, read sooner); under load, where every core is
/// busy, it reads only those the lexical side did not find, after it.
#[derive(Clone)]
pub struct Building {
    now: Arc<AtomicUsize>,
    cores: usize,
}

impl Default for Building {
    fn default() -> Self {
        Self {
            now: Arc::default(),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }
}

impl Building {
    /// Counts a bundle as being built until the guard is dropped.
    pub fn start(&self) -> BuildingGuard {
        self.now.fetch_add(1, Ordering::Relaxed);
        BuildingGuard(self.now.clone())
    }

    /// Whether the bundles being built leave a core idle.
    pub fn spare_core(&self) -> bool {
        self.now.load(Ordering::Relaxed) < self.cores
    }
}

pub struct BuildingGuard(Arc<AtomicUsize>);

impl Drop for BuildingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reader {
    pub fn new(
        pool: PgPool,
        encoding: Encoding,
        semantic: Arc<semantic::Semantic>,
        keyring: Keyring,
    ) -> Self {
        let counter = TokenCounter::new(encoding);
        let projectors = memd_projectors::projections::all(encoding)
            .iter()
            .map(|p| (p.name(), p.version()))
            .collect();
        Self {
            projectors,
            semantic,
            policy_pool: pool.clone(),
            pool,
            cache: Arc::new(cache::ReadCache::default()),
            costs: bundle::Costs::new(&counter),
            chunker: ChunkProjector::new(counter),
            counter,
            keyring,
            building: Building::default(),
        }
    }

    /// A reader of another database (a standby of this one) that shares
    /// this one's caches, embedders, vector index and keys.
    pub fn on_pool(&self, pool: PgPool) -> Self {
        let counter = self.counter;
        Self {
            pool,
            policy_pool: self.policy_pool.clone(),
            cache: self.cache.clone(),
            counter,
            costs: bundle::Costs::new(&counter),
            chunker: ChunkProjector::new(counter),
            projectors: self.projectors.clone(),
            semantic: self.semantic.clone(),
            keyring: self.keyring.clone(),
            building: self.building.clone(),
        }
    }

    /// The tenant's log head and how far every projection has applied it.
    pub async fn positions(&self, tenant: &str) -> Result<(i64, i64), sqlx::Error> {
        let (names, versions) = self.projector_columns();
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT h.seq, ({PROJECTED_SEQ}) FROM public.tenant_heads h WHERE h.tenant_id = $1"
        )))
        .bind(tenant)
        .bind(&names)
        .bind(&versions)
        .fetch_optional(&self.pool)
        .await
        .map(|row: Option<(i64, Option<i64>)>| {
            row.map_or((0, 0), |(head, projected)| (head, projected.unwrap_or(0)))
        })
    }

    /// Waits, at most `timeout`, until every projection of `tenant` has
    /// applied its log up to the head as it is now: a call that reads
    /// projections right after the caller's own writes (a handoff naming the
    /// decision just recorded) sees them. True when caught up.
    pub async fn catch_up(&self, tenant: &str, timeout: Duration) -> Result<bool, sqlx::Error> {
        let (head, mut projected) = self.positions(tenant).await?;
        let deadline = Instant::now() + timeout;
        while projected < head && Instant::now() < deadline {
            let slice = (deadline - Instant::now()).min(Duration::from_millis(25));
            self.cache.wait_projected(tenant, head, slice).await;
            projected = self.positions(tenant).await?.1;
        }
        Ok(projected >= head)
    }

    /// The projectors' names and versions, as bound for [`PROJECTED_SEQ`].
    fn projector_columns(&self) -> (Vec<&'static str>, Vec<i32>) {
        self.projectors.iter().copied().unzip()
    }
}

/// How far every projection of tenant `h.tenant_id` has applied its log:
/// the lowest cursor among the current projectors (`$2` names, `$3`
/// versions), or 0 while any is missing or of another version.
pub(crate) const PROJECTED_SEQ: &str =
    "SELECT CASE WHEN count(*) = cardinality($2::text[]) THEN min(c.seq) ELSE 0 END
       FROM projections.cursors c
       JOIN unnest($2::text[], $3::int[]) AS p (name, version)
         ON c.projector = p.name AND c.version = p.version
      WHERE c.tenant_id = h.tenant_id";
