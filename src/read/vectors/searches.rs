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
//! A search is remembered in a few kilobytes: its question by digest, its
//! rows by number only (their distances are counted again from the sign
//! bits when it goes on, a few microseconds), the row numbers as the
//! differences between them. So the share of memory searches may take
//! holds about four times as many as it held as whole vectors and
//! distances.
//!
//! **Privacy.** A search is remembered under everything that decides
//! which rows it may see (the channel, the bundle's agent, the scope's
//! kinds, filters and retention), compared in full: a search is never
//! answered from one made for another agent, another channel or another
//! filter. Each tenant's index holds its own, so tenants never share one.

use std::hash::{DefaultHasher, Hash, Hasher};

use sha2::{Digest, Sha256};

use super::super::{privacy::Visibility, retrieve::Scope};
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
    /// SHA-256 of the question's vector, bit for bit: 32 bytes where the
    /// vector is 1.5 kB, and two vectors of one digest are as unlikely as
    /// two events of one hash in the log.
    query: [u8; 32],
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
        let mut digest = Sha256::new();
        for x in query {
            digest.update(x.to_bits().to_le_bytes());
        }
        let query: [u8; 32] = digest.finalize().into();
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
    /// The rows rescored (row, similarity), best first: what the search
    /// answered, once it has (a question asked again with nothing added
    /// skips rescoring).
    pub answer: Option<Vec<(u32, f32)>>,
}

/// A [`Selection`] as kept: its rows without their distances.
#[derive(Debug)]
struct Remembered {
    rows: RowNumbers,
    of_rows: usize,
    lists_level: Option<usize>,
    answer: Option<Vec<(u32, f32)>>,
}

impl Remembered {
    fn new(selection: Selection) -> Self {
        Self {
            rows: RowNumbers::new(selection.rows.iter().map(|(row, _)| *row)),
            of_rows: selection.of_rows,
            lists_level: selection.lists_level,
            answer: selection.answer,
        }
    }

    fn selection(&self, distance: impl Fn(u32) -> u16) -> Selection {
        Selection {
            rows: self.rows.iter().map(|row| (row, distance(row))).collect(),
            of_rows: self.of_rows,
            lists_level: self.lists_level,
            answer: self.answer.clone(),
        }
    }
}

/// Row numbers, ascending, each written as its difference from the one
/// before in LEB128 (seven bits a byte): the 800 rows a search keeps of an
/// index of 100k take about a kilobyte, against 3.2 kB as `u32`s.
#[derive(Debug, Default)]
struct RowNumbers(Vec<u8>);

impl RowNumbers {
    fn new(rows: impl Iterator<Item = u32>) -> Self {
        let mut rows: Vec<u32> = rows.collect();
        rows.sort_unstable();
        let mut bytes = Vec::with_capacity(rows.len() * 2);
        let mut previous = 0;
        for row in rows {
            let mut delta = row - previous;
            previous = row;
            while delta >= 0x80 {
                bytes.push((delta & 0x7f) as u8 | 0x80);
                delta >>= 7;
            }
            bytes.push(delta as u8);
        }
        bytes.shrink_to_fit();
        Self(bytes)
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut bytes = self.0.iter();
        let mut previous = 0_u32;
        std::iter::from_fn(move || {
            let (mut delta, mut shift) = (0_u32, 0);
            loop {
                let byte = *bytes.next()?;
                delta |= u32::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            previous += delta;
            Some(previous)
        })
    }
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
    remembered: Remembered,
    used: u64,
}

impl Searches {
    /// The selection last made for `key`, if kept, its rows' distances
    /// counted again by `distance`.
    pub fn get(&mut self, key: &SearchKey, distance: impl Fn(u32) -> u16) -> Option<Selection> {
        self.clock += 1;
        let clock = self.clock;
        let kept = self
            .kept
            .iter_mut()
            .find(|kept| kept.key.hash == key.hash && kept.key == *key)?;
        kept.used = clock;
        Some(kept.remembered.selection(distance))
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
            if kept.remembered.of_rows <= selection.of_rows {
                kept.remembered = Remembered::new(selection);
            }
            kept.used = used;
            return;
        }
        self.kept.push(Kept {
            key,
            remembered: Remembered::new(selection),
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
                    + kept.key.agent.as_ref().map_or(0, String::capacity)
                    + kept.remembered.rows.0.capacity()
                    + kept.remembered.answer.as_ref().map_or(0, |answer| {
                        answer.capacity() * std::mem::size_of::<(u32, f32)>()
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
            searches.get(&key(0.5, Some("alpha"), Channel::Private), |_| 2),
            Some(selection(7))
        );
        assert_eq!(
            searches.get(&key(0.5, Some("beta"), Channel::Private), |_| 2),
            None
        );
        assert_eq!(searches.get(&key(0.5, None, Channel::Private), |_| 2), None);
        assert_eq!(
            searches.get(&key(0.5, Some("alpha"), Channel::Team), |_| 2),
            None
        );
        assert_eq!(
            searches.get(&key(0.25, Some("alpha"), Channel::Private), |_| 2),
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
        assert_eq!(searches.get(&narrowed, |_| 2), None);
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
        assert!(searches.get(&key(0), |_| 2).is_some());
        searches.put(key(KEPT), selection(KEPT), usize::MAX);
        assert_eq!(searches.kept.len(), KEPT);
        assert!(searches.get(&key(0), |_| 2).is_some(), "used last, kept");
        assert!(
            searches.get(&key(1), |_| 2).is_none(),
            "used least, dropped"
        );
        // A selection of fewer rows than the one kept does not replace it.
        searches.put(key(0), selection(900), usize::MAX);
        searches.put(key(0), selection(800), usize::MAX);
        assert_eq!(searches.get(&key(0), |_| 2), Some(selection(900)));
    }

    #[test]
    fn row_numbers_come_back_ascending_whatever_their_gaps() {
        let rows = [u32::MAX, 0, 127, 128, 1, 16_384, 2_000_000, 129, 16_383];
        let mut sorted = rows.to_vec();
        sorted.sort_unstable();
        let kept = RowNumbers::new(rows.into_iter());
        assert_eq!(kept.iter().collect::<Vec<_>>(), sorted);
        assert!(RowNumbers::new(std::iter::empty()).iter().next().is_none());
        // Rows a hundred apart take a byte each.
        let close = RowNumbers::new((0..800).map(|i| i * 100));
        assert_eq!(close.0.len(), 800);
    }

    #[test]
    fn a_remembered_selection_comes_back_with_its_distances_counted_again() {
        let selection = Selection {
            rows: vec![(9, 4), (3, 1), (70_000, 2)],
            of_rows: 70_001,
            lists_level: Some(2),
            answer: Some(vec![(3, 0.9), (9, 0.5)]),
        };
        let back = Remembered::new(selection).selection(|row| (row % 7) as u16);
        assert_eq!(back.rows, vec![(3, 3), (9, 2), (70_000, 0)]);
        assert_eq!((back.of_rows, back.lists_level), (70_001, Some(2)));
        assert_eq!(back.answer, Some(vec![(3, 0.9), (9, 0.5)]));
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
        // What a search of 200 neighbours keeps of an index of 100k rows:
        // 800 rows to rescore, 200 rescored.
        let full = |of_rows: usize| Selection {
            rows: (0..800).map(|i| (i * 125 + 7, 3)).collect(),
            of_rows,
            lists_level: None,
            answer: Some((0..200).map(|i| (i * 500, 0.5)).collect()),
        };
        let mut searches = Searches::default();
        searches.put(key(0), full(0), usize::MAX);
        let one = searches.heap_bytes();
        assert!(one < 3_200, "{one} bytes for one search");
        // An index of 100 kB: its searches may take 6.25 kB, about two of
        // these.
        for i in 1..10 {
            searches.put(key(i), full(i), 100_000);
        }
        assert!(
            (1..=3).contains(&searches.kept.len()),
            "{}",
            searches.kept.len()
        );
        assert!(searches.heap_bytes() <= 100_000 / SHARE_OF_INDEX);
        assert!(searches.get(&key(9), |_| 2).is_some(), "the last search");
        searches.put(key(10), selection(10), 0);
        assert_eq!(searches.kept.len(), 1);
        assert!(searches.get(&key(10), |_| 2).is_some(), "the last search");
    }
}
