//! Searches a tenant's index remembers, so that a question asked again
//! compares only the vectors added since with the question, not every
//! vector.
//!
//! Agents ask the same thing again and again (each step of a task
//! retrieves for the same goal; a team's agents share questions), and the
//! sign-bit scan is the largest part of a search. What is kept is the
//! scan's outcome: the closest rows by their sign bits, before rescoring.
//! Rows are only ever appended between erasures, and the closest `n` rows
//! of the rows scanned then and the rows added since are exactly the
//! closest `n` of all of them (the order, distance then newest row, is
//! total), so a search that goes on from a remembered one answers what a
//! full scan would.
//!
//! **Privacy.** A search is remembered under everything that decides
//! which rows it may see (the channel, the bundle's agent, the scope's
//! kinds, filters and retention), compared in full: a search is never
//! answered from one made for another agent, another channel or another
//! filter. Each tenant's index holds its own, so tenants never share one.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::{
    super::{privacy::Visibility, retrieve::Scope},
    Neighbour,
};
use crate::domain::event::Channel;

/// Searches kept per tenant and embedder at most: the most recently used.
/// Memory is what bounds them ([`SHARE_OF_INDEX`]); this only bounds the
/// list a search is looked up in. A tenant's agents asking a few hundred
/// questions in turn (one per customer account, say) keep them all when
/// its index is large enough for the scan to matter.
pub const KEPT: usize = 1_024;
/// The share of its index's memory a tenant's searches may take (the last
/// search is kept whatever its size): a small tenant, whose scan is
/// cheap, does not hold searches larger than its vectors.
pub const SHARE_OF_INDEX: usize = 16;

/// What decides a search's answer, besides the index's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchKey {
    /// The question's vector, bit for bit.
    query: Vec<u32>,
    k: usize,
    channel: Channel,
    agent: Option<String>,
    scope: Scope,
    /// Of the fields above, to compare first.
    hash: u64,
}

impl SearchKey {
    pub fn new(query: &[f32], k: usize, visibility: Visibility<'_>, scope: &Scope) -> Self {
        // Every field, by name: a field added to `Visibility` does not
        // compile here until the key holds it.
        let Visibility { channel, agent } = visibility;
        let query: Vec<u32> = query.iter().map(|x| x.to_bits()).collect();
        let mut hasher = DefaultHasher::new();
        (&query, k, channel.as_str(), agent).hash(&mut hasher);
        Self {
            query,
            k,
            channel,
            agent: agent.map(str::to_owned),
            scope: scope.clone(),
            hash: hasher.finish(),
        }
    }
}

/// The outcome of a search's sign-bit scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The closest visible rows by their sign bits (row, distance), at
    /// most the number wanted, in no particular order.
    pub rows: Vec<(u32, u16)>,
    /// Rows the index held when they were chosen.
    pub of_rows: usize,
    /// The level of the lists read, or `None`: every row was scanned.
    pub lists_level: Option<usize>,
    /// The rows rescored, best first: what the search answered, once it
    /// has (a question asked again with nothing added skips rescoring).
    pub answer: Option<Vec<Neighbour>>,
}

/// The searches of one index, most recently used kept.
#[derive(Debug, Default)]
pub struct Searches {
    kept: Vec<Kept>,
    clock: u64,
}

#[derive(Debug)]
struct Kept {
    key: SearchKey,
    selection: Selection,
    used: u64,
}

impl Searches {
    /// The selection last made for `key`, if kept.
    pub fn get(&mut self, key: &SearchKey) -> Option<Selection> {
        self.clock += 1;
        let clock = self.clock;
        let kept = self
            .kept
            .iter_mut()
            .find(|kept| kept.key.hash == key.hash && kept.key == *key)?;
        kept.used = clock;
        Some(kept.selection.clone())
    }

    /// Keeps `selection` for `key`, dropping the least recently used
    /// searches beyond [`KEPT`] or `index_bytes / SHARE_OF_INDEX`.
    pub fn put(&mut self, key: SearchKey, selection: Selection, index_bytes: usize) {
        self.clock += 1;
        let used = self.clock;
        if let Some(kept) = self
            .kept
            .iter_mut()
            .find(|kept| kept.key.hash == key.hash && kept.key == key)
        {
            // A search that ran beside this one may have read fewer rows.
            if kept.selection.of_rows <= selection.of_rows {
                kept.selection = selection;
            }
            kept.used = used;
            return;
        }
        self.kept.push(Kept {
            key,
            selection,
            used,
        });
        while self.kept.len() > 1
            && (self.kept.len() > KEPT || self.heap_bytes() > index_bytes / SHARE_OF_INDEX)
        {
            let oldest = (0..self.kept.len())
                .min_by_key(|at| self.kept[*at].used)
                .expect("searches kept");
            self.kept.swap_remove(oldest);
        }
    }

    /// Forgets every search (rows were dropped: the rows remembered may
    /// name other chunks now).
    pub fn clear(&mut self) {
        self.kept.clear();
    }

    /// Bytes held, roughly.
    pub fn heap_bytes(&self) -> usize {
        self.kept
            .iter()
            .map(|kept| {
                std::mem::size_of::<Kept>()
                    + kept.key.query.capacity() * 4
                    + kept.selection.rows.capacity() * std::mem::size_of::<(u32, u16)>()
                    + kept.selection.answer.as_ref().map_or(0, |answer| {
                        answer.capacity() * std::mem::size_of::<Neighbour>()
                    })
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::filters::RetrievalFilters;

    fn selection(of_rows: usize) -> Selection {
        Selection {
            rows: vec![(1, 2)],
            of_rows,
            lists_level: None,
            answer: None,
        }
    }

    #[test]
    fn a_search_is_found_only_under_everything_that_decides_it() {
        let scope = Scope::default();
        let key = |query: f32, agent, channel| {
            SearchKey::new(
                &[query, 0.5],
                10,
                Visibility::new(channel).for_agent(agent),
                &scope,
            )
        };
        let mut searches = Searches::default();
        searches.put(
            key(0.5, Some("alpha"), Channel::Private),
            selection(7),
            usize::MAX,
        );
        assert_eq!(
            searches.get(&key(0.5, Some("alpha"), Channel::Private)),
            Some(selection(7))
        );
        assert_eq!(
            searches.get(&key(0.5, Some("beta"), Channel::Private)),
            None
        );
        assert_eq!(searches.get(&key(0.5, None, Channel::Private)), None);
        assert_eq!(searches.get(&key(0.5, Some("alpha"), Channel::Team)), None);
        assert_eq!(
            searches.get(&key(0.25, Some("alpha"), Channel::Private)),
            None
        );
        let filtered = Scope {
            filters: RetrievalFilters {
                sessions: vec!["s1".into()],
                ..RetrievalFilters::default()
            },
            ..Scope::default()
        };
        let narrowed = SearchKey::new(
            &[0.5, 0.5],
            10,
            Visibility::new(Channel::Private).for_agent(Some("alpha")),
            &filtered,
        );
        assert_eq!(searches.get(&narrowed), None);
    }

    #[test]
    fn the_least_recently_used_search_goes_first() {
        let key = |i: usize| {
            SearchKey::new(
                &[i as f32],
                10,
                Visibility::new(Channel::Team),
                &Scope::default(),
            )
        };
        let mut searches = Searches::default();
        for i in 0..KEPT {
            searches.put(key(i), selection(i), usize::MAX);
        }
        assert!(searches.get(&key(0)).is_some());
        searches.put(key(KEPT), selection(KEPT), usize::MAX);
        assert_eq!(searches.kept.len(), KEPT);
        assert!(searches.get(&key(0)).is_some(), "used last, kept");
        assert!(searches.get(&key(1)).is_none(), "used least, dropped");
        // A selection of fewer rows than the one kept does not replace it.
        searches.put(key(0), selection(900), usize::MAX);
        searches.put(key(0), selection(800), usize::MAX);
        assert_eq!(searches.get(&key(0)), Some(selection(900)));
    }

    #[test]
    fn a_small_index_keeps_few_searches_and_always_the_last() {
        let key = |i: usize| {
            SearchKey::new(
                &[i as f32; 384],
                10,
                Visibility::new(Channel::Team),
                &Scope::default(),
            )
        };
        let mut searches = Searches::default();
        // An index of 100 kB: its searches may take 6.25 kB, about three
        // of these.
        for i in 0..10 {
            searches.put(key(i), selection(i), 100_000);
        }
        assert!(
            (1..=4).contains(&searches.kept.len()),
            "{}",
            searches.kept.len()
        );
        assert!(searches.heap_bytes() <= 100_000 / SHARE_OF_INDEX);
        assert!(searches.get(&key(9)).is_some(), "the last search");
        searches.put(key(10), selection(10), 0);
        assert_eq!(searches.kept.len(), 1);
        assert!(searches.get(&key(10)).is_some(), "the last search");
    }
}
