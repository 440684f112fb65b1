//! Audit of the ground truth: walking each tenant's hash chain, and signed
//! checkpoints that prove the chain was not rewritten since.

pub mod checkpoint;
pub mod tree;
mod verify;

pub use verify::{ChainBreak, ChainReport, verify_chains, verify_from};
