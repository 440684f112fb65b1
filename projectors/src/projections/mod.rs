//! The read models memd derives from its log.

pub mod chunks;
pub mod decisions;
pub mod tasks;
pub mod tokens;
pub mod views;

use std::sync::Arc;

use crate::projector::Projector;
pub use tokens::{Encoding, TokenCounter};

/// Every projector memd runs, in the order they are applied within a batch.
pub fn all(encoding: Encoding) -> Vec<Arc<dyn Projector>> {
    vec![
        Arc::new(chunks::ChunkProjector::new(TokenCounter::new(encoding))),
        Arc::new(decisions::DecisionProjector),
        Arc::new(tasks::TaskProjector),
        Arc::new(views::ViewProjector),
    ]
}
