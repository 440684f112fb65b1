//! The derived side of memd: projectors that turn the append-only event log
//! into disposable read models, and the runtime that keeps them current.
//!
//! Events, their content, sealing and the Merkle tree are the event model
//! of `memd-core`; embedders are `memd-embedder`'s.
//!
//! - [`projector`]: the [`Projector`] abstraction and the transaction that
//!   applies a batch and advances the cursors together ([`engine`]).
//! - [`projections`]: chunks, decision ledger (with summary conflicts), tasks
//!   and views.
//! - [`runtime`]: LISTEN/NOTIFY plus polling workers that keep the live
//!   projections caught up; [`notifications`]: one LISTEN connection shared
//!   by everything in a process that waits on notifications.
//! - [`embed_worker`]: the tenants' embeddings projections, on a worker of
//!   their own, and the choice of a tenant's embedder.
//! - [`rebuild`] and [`drift`]: replay from zero, and prove the live
//!   projections equal a fresh replay.
//!
//! - [`retraction`]: how projections fold a retraction (withdrawn events
//!   leave their rows).
//! - [`transaction`]: beginning a transaction, safe to cancel.
//!
//! Every projection table lives in a [`Schema`]: `projections` for the live
//! read models, a throw-away shadow schema during a drift check.

pub mod drift;
pub mod embed_worker;
pub mod engine;
pub mod notifications;
pub mod projections;
pub mod projector;
pub mod rebuild;
pub mod render;
pub mod retraction;
pub mod runtime;
pub mod schema;
pub mod transaction;

pub use engine::Engine;
pub use projector::{Projector, Table};
pub use schema::Schema;

/// Channel on which each append's commit announces `<tenant>:<head seq>`.
pub const EVENTS_CHANNEL: &str = "memd_events";

/// Channel on which each projection batch's commit announces
/// `<tenant>:<seq>`: every projector of the set has applied the tenant's log
/// up to `seq`.
pub const PROJECTED_CHANNEL: &str = "memd_projected";

/// Channel on which each embeddings batch's commit announces
/// `<tenant>:<seq>` (apart from [`PROJECTED_CHANNEL`]: readers waiting for
/// the projections are not woken by embeddings).
pub const EMBEDDED_CHANNEL: &str = "memd_embedded";
