//! The read side: Active Context Bundles (PRD §7.2, §8).
//!
//! A bundle is built from the projections (through a per-tenant cache of
//! views, active decisions and tasks), the full-text index of chunks, and
//! the log itself for the recent window, which is therefore always fresh.
//!
//! - [`policy`]: caps, weights, bounds per tenant.
//! - [`privacy`]: what each channel may hold; applied before scoring.
//! - [`retrieve`]: candidates and ranking; [`dedupe`]: near-duplicates.
//! - [`cache`]: the per-tenant fast-path state and its invalidation.
//! - [`handoff`]: packets between agents.
//! - [`bundle`]: packing under the budget, rendering.
//! - [`acb`]: the build itself.

pub mod acb;
pub mod bundle;
pub mod cache;
pub mod dedupe;
pub mod handoff;
pub mod policy;
pub mod privacy;
pub mod retrieve;

use std::sync::Arc;

use memd_projectors::projections::{Encoding, TokenCounter, chunks::ChunkProjector};
use sqlx::PgPool;

pub use acb::{AcbRequest, build_acb};

/// What the read side keeps between bundles. Cheap to share.
pub struct Reader {
    pub pool: PgPool,
    pub cache: Arc<cache::ReadCache>,
    pub counter: TokenCounter,
    pub costs: bundle::Costs,
    /// Chunks events the projections have not reached yet (recent window).
    pub chunker: ChunkProjector,
    /// Names and versions of the projectors whose cursors say how far the
    /// projections reach.
    pub projectors: Vec<(&'static str, i32)>,
}

impl Reader {
    pub fn new(pool: PgPool, encoding: Encoding) -> Self {
        let counter = TokenCounter::new(encoding);
        let projectors = memd_projectors::projections::all(encoding)
            .iter()
            .map(|p| (p.name(), p.version()))
            .collect();
        Self {
            projectors,
            pool,
            cache: Arc::new(cache::ReadCache::default()),
            costs: bundle::Costs::new(&counter),
            chunker: ChunkProjector::new(counter),
            counter,
        }
    }
}
