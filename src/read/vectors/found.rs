//! The rows of chunks a tenant's searches found, remembered by position,
//! so that a question finding them again (asked again, or another
//! question near it) does not read them from PostgreSQL: a couple of
//! hundred index lookups a bundle, which cost the database more than
//! anything else the semantic side does.
//!
//! A chunk's row never changes once projected. What can make a remembered
//! row wrong is what the index itself follows: an erasure (its rows are
//! dropped here with the vectors, [`super::TenantVectors::remove_events`])
//! and a rebuild or reset of the projection (the index, and this with it,
//! starts again). Rows are remembered for every channel and agent of the
//! tenant; [`FoundRow::candidate`] applies the channel's rules to each
//! again, and the search that named a position had applied the scope.

use std::{collections::HashMap, sync::Arc};

use super::{super::retrieve::FoundRow, Position};

/// Rows remembered at least (a small tenant's, up to its size), and per
/// indexed chunk beyond that: one in eight, so that a tenant's memory of
/// rows stays a small share of its vectors' (a row is about 400 bytes,
/// a `minilm` chunk's vectors about 450).
const AT_LEAST: usize = 4_096;
const ONE_IN: usize = 8;

#[derive(Debug, Default)]
pub struct FoundRows {
    /// Shared, so that a bundle takes a row without copying it.
    rows: HashMap<Position, (Arc<FoundRow>, u64)>,
    clock: u64,
}

impl FoundRows {
    /// The rows remembered at `positions` (`None` where there is none).
    pub fn get(&mut self, positions: &[Position]) -> Vec<Option<Arc<FoundRow>>> {
        self.clock += 1;
        let clock = self.clock;
        positions
            .iter()
            .map(|position| {
                self.rows.get_mut(position).map(|(row, used)| {
                    *used = clock;
                    row.clone()
                })
            })
            .collect()
    }

    /// Remembers `rows`, for an index of `indexed` chunks: past its bound,
    /// the least recently used half is forgotten.
    pub fn put(&mut self, rows: impl IntoIterator<Item = FoundRow>, indexed: usize) {
        self.clock += 1;
        let clock = self.clock;
        for row in rows {
            self.rows.insert(row.position(), (Arc::new(row), clock));
        }
        let bound = AT_LEAST.max(indexed / ONE_IN);
        if self.rows.len() > bound {
            let mut by_use: Vec<(u64, Position)> = self
                .rows
                .iter()
                .map(|(position, (_, used))| (*used, *position))
                .collect();
            // The least recently used first: down to half the bound.
            let forget = by_use.len() - bound / 2;
            by_use.select_nth_unstable(forget - 1);
            for (_, position) in &by_use[..forget] {
                self.rows.remove(position);
            }
        }
    }

    /// Forgets the rows of the events at `seqs` (erased).
    pub fn remove_events(&mut self, seqs: &std::collections::HashSet<i64>) {
        self.rows.retain(|(seq, _), _| !seqs.contains(seq));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Bytes held, roughly.
    pub fn heap_bytes(&self) -> usize {
        self.rows
            .values()
            .map(|(row, _)| row.heap_bytes() + std::mem::size_of::<(Position, u64)>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_least_recently_used_rows_go_first_and_erased_ones_at_once() {
        let mut found = FoundRows::default();
        found.put((0..AT_LEAST as i64).map(|seq| FoundRow::at(seq, 0)), 100);
        assert_eq!(found.len(), AT_LEAST);
        // Used again: kept when the bound is passed.
        let used: Vec<Position> = (0..10).map(|seq| (seq, 0)).collect();
        assert!(found.get(&used).iter().all(Option::is_some));
        found.put([FoundRow::at(1_000_000, 1)], 100);
        assert_eq!(found.len(), AT_LEAST / 2);
        assert!(found.get(&used).iter().all(Option::is_some));
        assert!(found.get(&[(1_000_000, 1)])[0].is_some());
        // A large index remembers more: one row in eight of its chunks.
        found.put(
            (0..AT_LEAST as i64).map(|seq| FoundRow::at(seq, 0)),
            80 * AT_LEAST,
        );
        assert_eq!(found.len(), AT_LEAST + 1);

        found.remove_events(&HashSet::from([0, 1, 2]));
        assert_eq!(found.len(), AT_LEAST - 2);
        assert!(
            found
                .get(&[(0, 0), (3, 0)])
                .iter()
                .map(Option::is_some)
                .eq([false, true])
        );
        assert!(found.heap_bytes() > found.len() * std::mem::size_of::<FoundRow>());
    }
}
