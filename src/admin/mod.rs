//! Operator commands over the derived side: rebuild, drift check, and the
//! human-editable views (export and import).

pub mod jobs;
pub mod progress;
pub mod views;
