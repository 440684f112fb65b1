//! The read models memd derives from its log.

pub mod chunks;
pub mod decisions;
pub mod embeddings;
pub mod handoffs;
pub mod sessions;
pub mod tasks;
pub mod tokens;
pub mod tree;
pub mod views;

use std::sync::Arc;

use crate::projector::Projector;
pub use tokens::{Encoding, TokenCounter};

/// The names of [`all`]'s projectors, without loading a token encoding.
pub const NAMES: &[&str] = &[
    "chunks",
    "decisions",
    "tasks",
    "views",
    "handoffs",
    "sessions",
    "event_tree",
];

/// Every projector memd runs, in the order they are applied within a batch.
pub fn all(encoding: Encoding) -> Vec<Arc<dyn Projector>> {
    vec![
        Arc::new(chunks::ChunkProjector::new(TokenCounter::new(encoding))),
        Arc::new(decisions::DecisionProjector),
        Arc::new(tasks::TaskProjector),
        Arc::new(views::ViewProjector),
        Arc::new(handoffs::HandoffProjector),
        Arc::new(sessions::SessionProjector),
        Arc::new(tree::TreeProjector),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_list_every_projector_in_order() {
        let names: Vec<_> = super::all(super::Encoding::default())
            .iter()
            .map(|p| p.name())
            .collect();
        assert_eq!(names, super::NAMES);
    }
}
