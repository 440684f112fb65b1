//! Operator commands over the derived side: rebuild, drift check, and the
//! human-editable views and bundle policy (export and import), and a
//! tenant's whole log as a file ([`transfer`]: export and import), and the
//! erasure of a data subject ([`erase`]).

pub mod embedder;
pub mod erase;
pub mod jobs;
pub mod policy_file;
pub mod progress;
pub mod projections;
pub mod transfer;
pub mod views;
