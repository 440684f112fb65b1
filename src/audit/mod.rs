//! Audit of the ground truth: walking each tenant's hash chain.

mod verify;

pub use verify::{ChainBreak, ChainReport, verify_chains};
