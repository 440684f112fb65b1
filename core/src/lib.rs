//! memd's event model, at the bottom of every other crate: what the HTTP
//! edge validates, the log stores and the projectors read.
//!
//! - [`event`]: the enums of an event's envelope (kind, channel,
//!   sensitivity, actor type), one type each for the wire and the database,
//!   and events as the log holds them ([`StoredEvent`]).
//! - [`content`]: each kind's content, typed.
//! - [`hash_chain`]: the per-tenant chain that makes the log tamper-evident.
//! - [`merkle`]: the Merkle tree over a tenant's chain, for inclusion and
//!   consistency proofs.
//! - [`seal`]: sealing sensitive content at rest, per data subject, and the
//!   checkpoint signing key.
//! - [`dedupe`]: the word sets near-duplicates are found by (and the words a
//!   hashed embedding is made of).

pub mod content;
pub mod dedupe;
pub mod event;
pub mod hash_chain;
pub mod merkle;
pub mod seal;

pub use event::StoredEvent;
