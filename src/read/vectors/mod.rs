//! The in-process vector index: every embedded chunk of a tenant, held in
//! memory for nearest-neighbour search, built from the embeddings
//! projection and refreshed from it before each search. Disposable: it is
//! never written anywhere, and a restarted daemon builds it again from the
//! table on a tenant's first bundle.
//!
//! **Why in process.** pgvector is not packaged for this machine's
//! PostgreSQL, and compact codes keep a tenant in memory: 1M chunks of 384
//! dimensions are 48 MB of sign bits plus 384 MB of int8 vectors (read
//! only for the few hundred closest).
//!
//! **Search.** Each vector is kept twice: its sign bits (binary
//! quantisation), and int8 with a per-vector scale. A search counts the
//! Hamming distance of visible vectors' sign bits to the query's (every
//! vector of a small tenant; those of the closest [`lists`] of a large
//! one), keeps the closest `RESCORE_FACTOR × k`, rescoring those by the
//! dot product of the int8 vector with the float query, and returns the
//! best `k`. Ties go to the newer chunk, so the same vectors and the same
//! question give the same answer.
//!
//! **Privacy and filters.** The channel may only see what [`Visibility`]
//! allows, the scope's excluded kinds are skipped, and the request's
//! [`RetrievalFilters`] hold, in the scan itself: what the channel may not
//! see, or the request did not ask for, is never a candidate, exactly as on
//! the lexical path, and the nearest `k` are the nearest that pass. Indexes
//! are per tenant: a search never reads another tenant's.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use sqlx::{PgPool, Row};
use tokio::sync::RwLock;

use memd_embedder as embed;

use super::{
    filters::RetrievalFilters,
    privacy::Visibility,
    retention::{ChunkFields, Forgetting},
    retrieve::{FoundRow, Scope},
};
use crate::domain::event::{Channel, Kind, Sensitivity};

mod cpu;
mod found;
mod lists;
mod searches;
use found::FoundRows;
use lists::Lists;
pub use lists::Tuning;
use searches::{SearchKey, Searches, Selection};

/// Candidates rescored per result wanted, after the sign-bit scan.
const RESCORE_FACTOR: usize = 4;
/// Visible rows a search of lists reads at least, per candidate rescored.
const ENOUGH_FACTOR: usize = 4;
/// Rows read per round trip when loading a tenant.
const LOAD_PAGE: i64 = 20_000;

/// A chunk's position in the log: `(seq, part)`.
pub type Position = (i64, i32);

/// One nearest neighbour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    pub position: Position,
    pub similarity: f32,
}

/// How a search finds the nearest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// From the closest lists once the tenant has them (what bundles do).
    Lists,
    /// Likewise, reading at least one list in this many (bundles read one
    /// in [`lists::PROBE_SHARE`]): what recall and time a share buys.
    Probing(usize),
    /// From every row, whatever the tenant's size: what lists are measured
    /// against.
    Exact,
}

/// A search's answer, and the rows it compared with the query.
#[derive(Debug, Default)]
pub struct Searched {
    pub neighbours: Vec<Neighbour>,
    pub rows_read: usize,
}

/// What privacy filters a row by: (channel, sensitivity, kind, owner). The
/// owner is kept for the `private` channel alone, the one it decides.
pub type Class = (Channel, Sensitivity, Kind, Option<String>);

/// What a request's [`RetrievalFilters`] read of a row, beyond its kind.
#[derive(Debug, Clone, Default)]
pub struct Filtered {
    pub ts_us: i64,
    pub agent: Option<String>,
    pub session: String,
    pub tags: Vec<String>,
}

/// Values many rows share, each held once and named by its index.
struct Interner<T> {
    values: Vec<T>,
    index: HashMap<T, u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> Interner<T> {
    fn intern(&mut self, value: T) -> u32 {
        if let Some(index) = self.index.get(&value) {
            return *index;
        }
        let index = self.values.len() as u32;
        self.index.insert(value.clone(), index);
        self.values.push(value);
        index
    }

    /// `test` of each value, by index.
    fn each(&self, test: impl Fn(&T) -> bool) -> Vec<bool> {
        self.values.iter().map(test).collect()
    }
}

/// The vectors of one tenant for one embedder.
#[derive(Default)]
pub struct TenantVectors {
    /// The projection's cursor (seq, version) when last refreshed.
    pub loaded_seq: i64,
    loaded_version: i32,
    dimensions: usize,
    /// Sorted by position (rows arrive in seq order).
    positions: Vec<Position>,
    /// Index into `classes` per row.
    class: Vec<u32>,
    classes: Interner<Class>,
    /// Per row, for [`RetrievalFilters`]: its time, and indexes into the
    /// interned owners, sessions and tag sets.
    ts_us: Vec<i64>,
    agent: Vec<u32>,
    agents: Interner<Option<String>>,
    session: Vec<u32>,
    sessions: Interner<String>,
    tag_set: Vec<u32>,
    tag_sets: Interner<Vec<String>>,
    /// `words()` u64 sign words per row.
    signs: Vec<u64>,
    /// `dimensions` int8 per row.
    quantised: Vec<i8>,
    scales: Vec<f32>,
    /// Rows per class, to tell whether reading lists pays for a channel.
    class_rows: Vec<usize>,
    /// Lists of rows by nearest centroid, once the tenant is large enough.
    lists: Option<Lists>,
    tuning: Tuning,
    /// Bundles' recent searches ([`searches`]).
    searches: Mutex<Searches>,
    /// The rows of chunks searches found ([`found`]).
    found: Mutex<FoundRows>,
}

impl TenantVectors {
    fn words(&self) -> usize {
        self.dimensions.div_ceil(64)
    }

    pub fn len(&self) -> usize {
        self.positions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Bytes held, roughly (what `bench` reports at 1M chunks).
    pub fn heap_bytes(&self) -> usize {
        self.vector_bytes()
            + self.searches.lock().expect("searches lock").heap_bytes()
            + self.found.lock().expect("found rows lock").heap_bytes()
    }

    /// The rows remembered of the chunks at `positions`, where they are
    /// ([`found`]).
    pub fn found_rows(&self, positions: &[Position]) -> Vec<Option<Arc<FoundRow>>> {
        self.found.lock().expect("found rows lock").get(positions)
    }

    /// Remembers rows read for chunks searches found.
    pub fn remember_found(&self, rows: impl IntoIterator<Item = FoundRow>) {
        self.found
            .lock()
            .expect("found rows lock")
            .put(rows, self.len());
    }

    /// Bytes of the rows and lists, without the searches remembered.
    fn vector_bytes(&self) -> usize {
        self.positions.capacity() * std::mem::size_of::<Position>()
            + self.class.capacity() * 4
            + self.ts_us.capacity() * 8
            + (self.agent.capacity() + self.session.capacity() + self.tag_set.capacity()) * 4
            + self.signs.capacity() * 8
            + self.quantised.capacity()
            + self.scales.capacity() * 4
            + self.lists.as_ref().map_or(0, Lists::heap_bytes)
    }

    /// Adds one chunk's vector; rows come in position order.
    pub fn push(
        &mut self,
        position: Position,
        mut class: Class,
        filtered: Filtered,
        vector: &[f32],
    ) {
        if self.dimensions == 0 {
            self.dimensions = vector.len();
        }
        if vector.len() != self.dimensions {
            tracing::warn!(?position, "vector of another dimension; skipped");
            return;
        }
        if class.0 != Channel::Private {
            class.3 = None;
        }
        let class = self.classes.intern(class);
        if self.class_rows.len() <= class as usize {
            self.class_rows.resize(class as usize + 1, 0);
        }
        self.class_rows[class as usize] += 1;
        self.positions.push(position);
        self.class.push(class);
        self.ts_us.push(filtered.ts_us);
        self.agent.push(self.agents.intern(filtered.agent));
        self.session.push(self.sessions.intern(filtered.session));
        let mut tags = filtered.tags;
        tags.sort_unstable();
        tags.dedup();
        self.tag_set.push(self.tag_sets.intern(tags));
        self.signs.extend(sign_words(vector));
        let largest = vector.iter().fold(0.0_f32, |m, x| m.max(x.abs()));
        let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
        self.quantised
            .extend(vector.iter().map(|x| (x / scale).round() as i8));
        self.scales.push(scale);
    }

    /// Drops the rows of the events at `seqs`, keeping the others in
    /// order; how many were dropped. An erased subject's vectors were
    /// derived from content nobody may read again.
    pub fn remove_events(&mut self, seqs: &HashSet<i64>) -> usize {
        let keep: Vec<bool> = self
            .positions
            .iter()
            .map(|(seq, _)| !seqs.contains(seq))
            .collect();
        let dropped = keep.iter().filter(|kept| !**kept).count();
        if dropped == 0 {
            return 0;
        }
        fn retain_rows<T: Copy>(values: &mut Vec<T>, keep: &[bool], per_row: usize) {
            let mut next = 0;
            for (row, kept) in keep.iter().enumerate() {
                if *kept {
                    values.copy_within(row * per_row..(row + 1) * per_row, next * per_row);
                    next += 1;
                }
            }
            values.truncate(next * per_row);
        }
        let (words, dimensions) = (self.words(), self.dimensions);
        retain_rows(&mut self.positions, &keep, 1);
        retain_rows(&mut self.class, &keep, 1);
        retain_rows(&mut self.ts_us, &keep, 1);
        retain_rows(&mut self.agent, &keep, 1);
        retain_rows(&mut self.session, &keep, 1);
        retain_rows(&mut self.tag_set, &keep, 1);
        retain_rows(&mut self.signs, &keep, words);
        retain_rows(&mut self.quantised, &keep, dimensions);
        retain_rows(&mut self.scales, &keep, 1);
        self.class_rows.fill(0);
        for class in &self.class {
            self.class_rows[*class as usize] += 1;
        }
        // Lists are a function of the rows: trained again from those left.
        self.lists = None;
        // Rows remembered by number name other chunks now.
        self.searches.get_mut().expect("searches lock").clear();
        self.found
            .get_mut()
            .expect("found rows lock")
            .remove_events(seqs);
        self.settle();
        dropped
    }

    /// The similarity of the chunk at `position` to `query`, if it is
    /// embedded: one binary search, the reference [`Self::similarities`]
    /// is tested against.
    #[cfg(test)]
    pub fn similarity(&self, position: Position, query: &[f32]) -> Option<f32> {
        let row = self.positions.binary_search(&position).ok()?;
        Some(cpu::with_avx2(
            #[inline(always)]
            || self.rescore(row, query),
        ))
    }

    /// [`Self::similarity`] of each chunk at `positions`, in any order;
    /// quickest newest first (the pool's order), as each is then looked
    /// for a few steps below the one before: a thousand searches of the
    /// whole index cost more than the products themselves.
    pub fn similarities(&self, positions: &[Position], query: &[f32]) -> Vec<Option<f32>> {
        let mut rows = Vec::with_capacity(positions.len());
        let mut end = self.positions.len();
        let mut previous = None;
        for &position in positions {
            if previous.is_some_and(|previous| position >= previous) {
                // Not below the one before: search everything again.
                end = self.positions.len();
            }
            previous = Some(position);
            // Galloping down from `end`: `self.positions[end..]` are all
            // after `position`, and `start` is at or before it (or 0).
            let (mut start, mut step) = (end.saturating_sub(1), 1);
            while start > 0 && self.positions[start] > position {
                end = start;
                start = start.saturating_sub(step);
                step *= 2;
            }
            let at = start + self.positions[start..end].partition_point(|p| *p < position);
            rows.push((at < end && self.positions[at] == position).then_some(at));
            end = at;
        }
        cpu::with_avx2(
            #[inline(always)]
            || {
                rows.iter()
                    .map(|row| row.map(|row| self.rescore(row, query)))
                    .collect()
            },
        )
    }

    /// The int8 vector of `row` against `query`. Inlined into callers that
    /// run it compiled for AVX2 ([`cpu::with_avx2`]): eight products an
    /// instruction instead of four, the same sums in the same order.
    #[inline(always)]
    fn rescore(&self, row: usize, query: &[f32]) -> f32 {
        let vector = &self.quantised[row * self.dimensions..(row + 1) * self.dimensions];
        // Sixteen running sums, not one: a single sum waits for each
        // addition before the next, and cannot use the vector unit.
        const LANES: usize = 16;
        let mut sums = [0.0_f32; LANES];
        let whole = (vector.len() / LANES) * LANES;
        for (v, q) in vector[..whole]
            .chunks_exact(LANES)
            .zip(query[..whole].chunks_exact(LANES))
        {
            for lane in 0..LANES {
                sums[lane] += f32::from(v[lane]) * q[lane];
            }
        }
        let tail: f32 = vector[whole..]
            .iter()
            .zip(&query[whole..])
            .map(|(v, q)| f32::from(*v) * q)
            .sum();
        (sums.iter().sum::<f32>() + tail) * self.scales[row]
    }

    /// The `k` visible chunks closest to `query` (a unit vector), best
    /// first: from the lists closest to it once the tenant has them
    /// ([`lists`]), else from every row. What bundles call: a search made
    /// before with the same question and visibility goes on from where it
    /// stopped ([`searches`]), with the same answer a new one would give.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        visibility: Visibility<'_>,
        scope: &Scope,
    ) -> Vec<Neighbour> {
        self.searched(query, k, visibility, scope).neighbours
    }

    /// [`Self::search`], with how many rows it compared with the question.
    pub fn searched(
        &self,
        query: &[f32],
        k: usize,
        visibility: Visibility<'_>,
        scope: &Scope,
    ) -> Searched {
        let Some(plan) = self.plan(Method::Lists, query, k, visibility, scope) else {
            return Searched::default();
        };
        let key = SearchKey::new(query, k, visibility, scope);
        let words = self.words();
        let earlier = self
            .searches
            .lock()
            .expect("searches lock")
            .get(&key, |row| {
                lists::distance(
                    lists::row(&self.signs, words, row as usize),
                    &plan.query_signs,
                )
            });
        let (mut selection, rows_read) = self.select(&plan, earlier);
        // The same rows as last time are rescored the same: the answer is
        // kept with them.
        let answer = match selection.answer.take() {
            Some(answer) => answer,
            None => self.rescored(&selection.rows, query, k),
        };
        let neighbours = self.neighbours(&answer);
        selection.answer = Some(answer);
        let index_bytes = self.vector_bytes();
        self.searches
            .lock()
            .expect("searches lock")
            .put(key, selection, index_bytes);
        Searched {
            neighbours,
            rows_read,
        }
    }

    /// [`Self::searched`] as the index stood at the projection's seq
    /// `through`, which it may have passed: a bundle reads the cursor with
    /// the log's head, and another bundle may catch the index up before
    /// this one searches. The rows past `through` are hidden from the
    /// search, as a filter hides rows, so such a bundle finds no chunk past
    /// its own cursor and, by a full scan, exactly what the index held at
    /// `through` gives (by lists, the lists as they are now). Afresh: the
    /// searches kept for questions asked again are of the newest rows.
    pub fn searched_through(
        &self,
        query: &[f32],
        k: usize,
        visibility: Visibility<'_>,
        scope: &Scope,
        through: i64,
    ) -> Searched {
        let rows = self.positions.partition_point(|p| p.0 <= through);
        if rows == self.len() {
            return self.searched(query, k, visibility, scope);
        }
        let Some(mut plan) = self.plan(Method::Lists, query, k, visibility, scope) else {
            return Searched::default();
        };
        plan.passes.below = Some(rows);
        let (selection, rows_read) = self.select(&plan, None);
        Searched {
            neighbours: self.neighbours(&self.rescored(&selection.rows, query, k)),
            rows_read,
        }
    }

    /// [`Self::search`] by `method`, with what it read, afresh.
    pub fn search_by(
        &self,
        method: Method,
        query: &[f32],
        k: usize,
        visibility: Visibility<'_>,
        scope: &Scope,
    ) -> Searched {
        let Some(plan) = self.plan(method, query, k, visibility, scope) else {
            return Searched::default();
        };
        let (selection, rows_read) = self.select(&plan, None);
        debug_assert!(selection.answer.is_none());
        Searched {
            neighbours: self.neighbours(&self.rescored(&selection.rows, query, k)),
            rows_read,
        }
    }

    /// How a search will read the rows, or `None` when it has nothing to
    /// read.
    fn plan<'a>(
        &'a self,
        method: Method,
        query: &[f32],
        k: usize,
        visibility: Visibility<'_>,
        scope: &'a Scope,
    ) -> Option<Plan<'a>> {
        if k == 0 || self.is_empty() || query.len() != self.dimensions {
            return None;
        }
        let allowed = self.classes.each(|(channel, sensitivity, kind, owner)| {
            visibility.allows(*channel, *sensitivity)
                && visibility.owner_allows(*channel, owner.as_deref())
                && !scope.excluded_kinds.contains(&kind.as_str())
                && scope.filters.allows_kind(*kind)
        });
        let wanted = k.saturating_mul(RESCORE_FACTOR);
        let lists = self
            .lists
            .as_ref()
            .filter(|_| method != Method::Exact && self.lists_pay(&allowed, wanted));
        Some(Plan {
            passes: RowTest::new(self, scope),
            allowed,
            query_signs: sign_words(query).collect(),
            wanted,
            lists,
            probe_share: match method {
                Method::Probing(share) => share.max(1),
                _ => lists::PROBE_SHARE,
            },
        })
    }

    /// The rows `plan` selects by their sign bits, and how many it
    /// compared with the question: going on from `earlier` (the same
    /// search, made on fewer rows) where that gives the same rows.
    fn select(&self, plan: &Plan, earlier: Option<Selection>) -> (Selection, usize) {
        let level = plan.lists.map(|lists| lists.level);
        let earlier = earlier.filter(|earlier| {
            earlier.lists_level == level
                && match level {
                    // Appended rows are placed in lists, and the lists
                    // read depend on how many rows each holds: only the
                    // same rows give the same lists.
                    Some(_) => earlier.of_rows == self.len(),
                    None => earlier.of_rows <= self.len(),
                }
        });
        let from = earlier.as_ref().map_or(0, |earlier| earlier.of_rows);
        let (rows, rows_read) = match (plan.lists, earlier) {
            (Some(_), Some(earlier)) => return (earlier, 0),
            (Some(lists), None) => {
                let (found, rows_read) = self.probe(
                    lists,
                    &plan.query_signs,
                    plan.probe_share,
                    &plan.allowed,
                    &plan.passes,
                    plan.wanted,
                );
                let rows = nearest_signs(found.iter().copied(), plan.wanted, self.dimensions);
                (rows, rows_read)
            }
            // Nothing added: the rows, and so the answer, are the earlier
            // search's.
            (None, Some(earlier)) if from == self.len() => return (earlier, 0),
            (None, earlier) => {
                // Hamming distance of every row from `from`; u16::MAX
                // hides a row.
                let words = self.words();
                let mut scratch = SCAN_SCRATCH.take();
                let distances = &mut scratch;
                hamming(
                    &self.signs[from * words..],
                    words,
                    &self.class[from..],
                    &plan.allowed,
                    &plan.query_signs,
                    distances,
                );
                if !plan.passes.passes_all() {
                    for (row, distance) in (from..).zip(distances.iter_mut()) {
                        if *distance != u16::MAX && !plan.passes.row(row) {
                            *distance = u16::MAX;
                        }
                    }
                }
                let added = distances
                    .iter()
                    .zip(from as u32..)
                    .filter(|(distance, _)| **distance != u16::MAX)
                    .map(|(distance, row)| (row, *distance));
                let earlier = earlier.map(|earlier| earlier.rows).unwrap_or_default();
                let rows = nearest_signs(
                    earlier.iter().copied().chain(added),
                    plan.wanted,
                    self.dimensions,
                );
                SCAN_SCRATCH.set(scratch);
                (rows, self.len() - from)
            }
        };
        let selection = Selection {
            rows,
            of_rows: self.len(),
            lists_level: level,
            answer: None,
        };
        (selection, rows_read)
    }

    /// The best `k` of `rows` (row, similarity), rescored by their int8
    /// vectors, best first (the newer of equals: rows are in position
    /// order).
    fn rescored(&self, rows: &[(u32, u16)], query: &[f32], k: usize) -> Vec<(u32, f32)> {
        let mut scored = cpu::with_avx2(
            #[inline(always)]
            || {
                let mut found = Vec::with_capacity(rows.len());
                for (row, _) in rows {
                    found.push((*row, self.rescore(*row as usize, query)));
                }
                found
            },
        );
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        scored.truncate(k);
        scored
    }

    /// Rescored rows as the chunks they hold.
    fn neighbours(&self, rescored: &[(u32, f32)]) -> Vec<Neighbour> {
        rescored
            .iter()
            .map(|(row, similarity)| Neighbour {
                position: self.positions[*row as usize],
                similarity: *similarity,
            })
            .collect()
    }

    /// Whether reading lists beats scanning every row: not when so few rows
    /// are visible to the channel that the lists would have to be read
    /// nearly all (an agent's own private memory in a large team tenant).
    fn lists_pay(&self, allowed: &[bool], wanted: usize) -> bool {
        let visible: usize = self
            .class_rows
            .iter()
            .zip(allowed)
            .filter(|(_, allowed)| **allowed)
            .map(|(rows, _)| rows)
            .sum();
        visible >= 4 * ENOUGH_FACTOR * wanted
    }

    /// The visible rows of the lists closest to the query: at least one
    /// list in [`lists::PROBE_SHARE`], then more until `ENOUGH_FACTOR ×
    /// wanted` rows have passed, and every row not yet in a list.
    fn probe(
        &self,
        lists: &Lists,
        query: &[u64],
        probe_share: usize,
        allowed: &[bool],
        passes: &RowTest,
        wanted: usize,
    ) -> (Vec<(u32, u16)>, usize) {
        let words = self.words();
        let at_least = lists.len().div_ceil(probe_share);
        let enough = ENOUGH_FACTOR * wanted;
        let mut found = Vec::with_capacity(enough.max(self.len() / probe_share));
        // Most bundles have no filters and forget nothing: then a row's
        // class alone decides, without a call per row.
        let passes_all = passes.passes_all();
        let keep = |row: u32, class: u32| {
            allowed[class as usize] && (passes_all || passes.row(row as usize))
        };
        let mut rows_read = self.len() - lists.assigned;
        for (probed, list) in lists.closest_first(query).into_iter().enumerate() {
            if probed >= at_least && found.len() >= enough {
                break;
            }
            rows_read += lists.members(list).len();
            lists.scan(list, query, keep, &mut found);
        }
        for row in lists.assigned..self.len() {
            if keep(row as u32, self.class[row]) {
                let signs = lists::row(&self.signs, words, row);
                found.push((row as u32, lists::distance(signs, query)));
            }
        }
        (found, rows_read)
    }

    /// Places rows loaded since the last call in the lists, or trains them
    /// afresh when the tenant reaches a new level (or has none yet).
    pub fn settle(&mut self) {
        match self.tuning.level(self.len()) {
            None => self.lists = None,
            Some(level) => match &mut self.lists {
                Some(lists) if lists.level == level => lists.assign(&self.signs, &self.class),
                _ => {
                    self.lists = Some(Lists::train(
                        &self.signs,
                        &self.class,
                        self.words(),
                        level,
                        self.tuning,
                    ))
                }
            },
        }
    }

    /// Trains the lists again from the rows as they are (what a tenant
    /// crossing a level pays; `memd-bench vectors` times it).
    pub fn train_lists(&mut self) {
        self.lists = None;
        self.settle();
    }

    /// How many lists, trained on how many rows, if the tenant has them.
    pub fn lists_built(&self) -> Option<(usize, usize)> {
        self.lists.as_ref().map(|lists| (lists.len(), lists.level))
    }

    /// An index that builds its lists as `tuning` says (tests and benches:
    /// small lists, or none).
    pub fn with_tuning(tuning: Tuning) -> Self {
        Self {
            tuning,
            ..Self::default()
        }
    }
}

/// How one search reads the rows ([`TenantVectors::plan`]).
struct Plan<'a> {
    /// Per class: whether the channel may see it and the scope wants it.
    allowed: Vec<bool>,
    passes: RowTest<'a>,
    query_signs: Vec<u64>,
    /// Rows selected by their sign bits, to rescore.
    wanted: usize,
    /// The lists to read, or `None`: every row.
    lists: Option<&'a Lists>,
    probe_share: usize,
}

/// The `wanted` rows of `read` (row, Hamming distance) closest by their
/// sign bits, the newer (higher row) of equals: the first `wanted` in the
/// order (distance, newest), a total order, so that the closest of the
/// closest of some rows and the rest are the closest of all. The distance
/// under which `wanted` rows fall comes from a histogram: no sort of a
/// million rows. Of the rows at that distance, the newest fill what is
/// left: many chunks can share one distance (templated messages,
/// near-duplicates), and rescoring them all would cost more than the scan.
fn nearest_signs(
    read: impl Iterator<Item = (u32, u16)> + Clone,
    wanted: usize,
    dimensions: usize,
) -> Vec<(u32, u16)> {
    let mut histogram = vec![0_usize; dimensions + 2];
    for (_, distance) in read.clone() {
        histogram[distance as usize] += 1;
    }
    let mut threshold = 0;
    let mut below = 0;
    for (distance, count) in histogram.iter().enumerate() {
        threshold = distance as u16;
        if below + count >= wanted {
            break;
        }
        below += count;
    }
    let mut closest = Vec::with_capacity(wanted);
    let mut tied = Vec::new();
    for (row, distance) in read {
        if distance < threshold {
            closest.push((row, distance));
        } else if distance == threshold {
            tied.push((row, distance));
        }
    }
    tied.sort_unstable_by(|a, b| b.cmp(a));
    tied.truncate(wanted.saturating_sub(below));
    closest.extend(tied);
    closest
}

/// What the request's filters and retention leave of each row, beyond its
/// class.
struct RowTest<'a> {
    vectors: &'a TenantVectors,
    filters: Option<&'a RetrievalFilters>,
    agents: Vec<bool>,
    sessions: Vec<bool>,
    tag_sets: Vec<bool>,
    forgetting: Option<&'a Forgetting>,
    /// Rows from this one on are hidden (added after the seq searched
    /// through, [`TenantVectors::searched_through`]).
    below: Option<usize>,
}

impl<'a> RowTest<'a> {
    fn new(vectors: &'a TenantVectors, scope: &'a Scope) -> Self {
        let filters = (!scope.filters.is_empty()).then_some(&scope.filters);
        let each =
            |test: &dyn Fn(&RetrievalFilters) -> Vec<bool>| filters.map(test).unwrap_or_default();
        RowTest {
            vectors,
            agents: each(&|f| {
                vectors
                    .agents
                    .each(|agent| f.allows_agent(agent.as_deref()))
            }),
            sessions: each(&|f| vectors.sessions.each(|session| f.allows_session(session))),
            tag_sets: each(&|f| vectors.tag_sets.each(|tags| f.allows_tags(tags))),
            filters,
            forgetting: (!scope.forgetting.is_empty()).then_some(&scope.forgetting),
            below: None,
        }
    }

    /// Whether every row passes (no filters, nothing forgotten).
    fn passes_all(&self) -> bool {
        self.filters.is_none() && self.forgetting.is_none() && self.below.is_none()
    }

    /// Whether the filters hold for `row` and retention keeps it: the
    /// filters narrow the search, not its results.
    fn row(&self, row: usize) -> bool {
        if self.below.is_some_and(|below| row >= below) {
            return false;
        }
        let v = self.vectors;
        if let Some(filters) = self.filters
            && !(filters.allows_time(v.ts_us[row])
                && self.agents[v.agent[row] as usize]
                && self.sessions[v.session[row] as usize]
                && self.tag_sets[v.tag_set[row] as usize])
        {
            return false;
        }
        match self.forgetting {
            None => true,
            Some(forgetting) => !forgetting.forgets(&ChunkFields {
                seq: v.positions[row].0,
                ts_us: v.ts_us[row],
                kind: v.classes.values[v.class[row] as usize].2,
                session: &v.sessions.values[v.session[row] as usize],
                tags: &v.tag_sets.values[v.tag_set[row] as usize],
            }),
        }
    }
}

/// The Hamming distance of each row's sign bits (`words` u64 per row) to
/// the query's, or `u16::MAX` for a row whose class is not allowed, with
/// the POPCNT instruction where the CPU has it ([`cpu::with_popcnt`]).
///
/// A large tenant's rows are scanned in pieces on rayon's pool (one thread
/// per core): at a million rows the scan reads 48 MB, and one core takes
/// most of a bundle's time budget doing it.
fn hamming(
    signs: &[u64],
    words: usize,
    class: &[u32],
    allowed: &[bool],
    query: &[u64],
    distances: &mut Vec<u16>,
) {
    use rayon::prelude::*;
    // Every distance is written below: only a longer scan than the
    // thread's last zeroes what it adds.
    distances.truncate(class.len());
    distances.resize(class.len(), 0);
    if class.len() < 2 * PARALLEL_ROWS {
        hamming_rows(signs, words, class, allowed, query, distances);
        return;
    }
    distances
        .par_chunks_mut(PARALLEL_ROWS)
        .zip(class.par_chunks(PARALLEL_ROWS))
        .zip(signs.par_chunks(PARALLEL_ROWS * words))
        .for_each(|((distances, class), signs)| {
            hamming_rows(signs, words, class, allowed, query, distances)
        });
}

thread_local! {
    /// The distances of a scan, kept for the thread's next: a fresh 184 kB
    /// for each search of a 92k-row tenant came from the allocator as new
    /// pages for the kernel to zero (`memd-bench vectors` on such a
    /// tenant: 6,342 page faults before, 1,463 after).
    static SCAN_SCRATCH: std::cell::Cell<Vec<u16>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Rows per piece of a parallel scan; a tenant with fewer than twice as
/// many is scanned on the calling thread (handing work to another thread
/// costs more than it saves).
const PARALLEL_ROWS: usize = 131_072;

/// [`hamming`] of some rows, on this thread, into `distances` (one per
/// row).
fn hamming_rows(
    signs: &[u64],
    words: usize,
    class: &[u32],
    allowed: &[bool],
    query: &[u64],
    distances: &mut [u16],
) {
    cpu::with_popcnt(
        #[inline(always)]
        || match words {
            // The embedders' widths (256, 384, 512, 768 dimensions): with the
            // width known, a row's words are compared unrolled, about
            // twice as fast as a loop of `words` steps.
            4 => each_distance_of::<4>(signs, class, allowed, query, distances),
            6 => each_distance_of::<6>(signs, class, allowed, query, distances),
            8 => each_distance_of::<8>(signs, class, allowed, query, distances),
            12 => each_distance_of::<12>(signs, class, allowed, query, distances),
            _ => each_distance(signs, words, class, allowed, query, distances),
        },
    )
}

// Loops written out, not `collect`: the loop must be in this function to
// be compiled for POPCNT, and `collect` runs it in a function of its own.
#[inline(always)]
fn each_distance(
    signs: &[u64],
    words: usize,
    class: &[u32],
    allowed: &[bool],
    query: &[u64],
    distances: &mut [u16],
) {
    for ((distance, row), class) in distances
        .iter_mut()
        .zip(signs.chunks_exact(words))
        .zip(class)
    {
        *distance = if allowed[*class as usize] {
            lists::distance(row, query)
        } else {
            u16::MAX
        };
    }
}

/// [`each_distance`] for rows of `WORDS` words.
#[inline(always)]
fn each_distance_of<const WORDS: usize>(
    signs: &[u64],
    class: &[u32],
    allowed: &[bool],
    query: &[u64],
    distances: &mut [u16],
) {
    let query: &[u64; WORDS] = query.try_into().expect("the query has the rows' width");
    let (rows, _) = signs.as_chunks::<WORDS>();
    for ((distance, row), class) in distances.iter_mut().zip(rows).zip(class) {
        let mut bits = 0;
        for word in 0..WORDS {
            bits += (row[word] ^ query[word]).count_ones();
        }
        *distance = if allowed[*class as usize] {
            bits as u16
        } else {
            u16::MAX
        };
    }
}

/// A vector's sign bits, 64 per word.
fn sign_words(vector: &[f32]) -> impl Iterator<Item = u64> + '_ {
    vector.chunks(64).map(|chunk| {
        chunk
            .iter()
            .enumerate()
            .fold(0_u64, |word, (bit, x)| word | (u64::from(*x > 0.0) << bit))
    })
}

/// One tenant's vectors of one embeddings table, shared by the bundles
/// that search them.
#[derive(Default)]
pub struct Entry {
    vectors: RwLock<TenantVectors>,
    /// A load in the background holds `vectors`: bundles go lexical
    /// rather than wait for it.
    loading: AtomicBool,
}

pub type SharedVectors = Arc<Entry>;

/// What a search may use now.
pub enum Current {
    Ready(SharedVectors),
    /// Too far behind the projection to catch up within a bundle (the
    /// first bundle after a restart, or after a rebuild): a load runs in
    /// the background, and this bundle uses lexical candidates alone.
    Loading {
        behind: i64,
    },
}

impl Entry {
    pub async fn read(&self) -> tokio::sync::RwLockReadGuard<'_, TenantVectors> {
        self.vectors.read().await
    }
}

/// Events of projection a bundle catches up with itself; more is loaded in
/// the background (100k vectors take a second or so to read).
const INLINE_CATCH_UP_EVENTS: i64 = 5_000;

/// Every tenant's vectors, per embeddings table, in this process.
#[derive(Default)]
pub struct VectorIndex {
    tenants: Mutex<HashMap<(String, &'static str), SharedVectors>>,
}

impl VectorIndex {
    /// The tenant's vectors of `table` (an embeddings projection), brought
    /// up to the projection's cursor (`cursor_seq`, `cursor_version`, read
    /// by the caller with the log's head). A cursor of another version, or
    /// behind what was loaded (a rebuild or a reset), reloads from zero.
    /// A large gap is loaded in the background ([`Current::Loading`]).
    pub async fn current(
        &self,
        pool: &PgPool,
        tenant: &str,
        table: &'static str,
        cursor_seq: i64,
        cursor_version: i32,
    ) -> Result<Current, sqlx::Error> {
        let entry = self
            .tenants
            .lock()
            .expect("vector index lock")
            .entry((tenant.to_owned(), table))
            .or_default()
            .clone();
        if entry.loading.load(Ordering::Acquire) {
            return Ok(Current::Loading { behind: cursor_seq });
        }
        let (loaded_seq, loaded_version) = {
            let vectors = entry.vectors.read().await;
            (vectors.loaded_seq, vectors.loaded_version)
        };
        let reset = loaded_version != cursor_version
            || (loaded_seq > cursor_seq
                && rebuilt_since(pool, tenant, table, loaded_seq, loaded_version).await?);
        let behind = if reset {
            cursor_seq
        } else {
            (cursor_seq - loaded_seq).max(0)
        };
        if behind == 0 {
            // Caught up, or past this bundle's cursor (another bundle,
            // which read the cursor later, caught it up): the search leaves
            // out what came after the cursor ([`TenantVectors::searched_through`]).
            return Ok(Current::Ready(entry));
        }
        if behind > INLINE_CATCH_UP_EVENTS {
            if !entry.loading.swap(true, Ordering::AcqRel) {
                let (pool, tenant, loading) = (pool.clone(), tenant.to_owned(), entry.clone());
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    let loaded = catch_up(
                        &loading,
                        &pool,
                        &tenant,
                        table,
                        (cursor_seq, cursor_version),
                        reset,
                    )
                    .await
                    .map_err(|err| err.to_string());
                    let count = loading.vectors.read().await.len();
                    let ms = started.elapsed().as_millis() as u64;
                    match loaded {
                        Ok(()) => {
                            tracing::info!(
                                tenant,
                                table,
                                vectors = count,
                                ms,
                                "vector index loaded"
                            )
                        }
                        Err(err) => {
                            tracing::warn!(tenant, table, error = err, "vector index load failed")
                        }
                    }
                    loading.loading.store(false, Ordering::Release);
                });
            }
            return Ok(Current::Loading { behind });
        }
        catch_up(
            &entry,
            pool,
            tenant,
            table,
            (cursor_seq, cursor_version),
            reset,
        )
        .await?;
        Ok(Current::Ready(entry))
    }

    /// Vectors held for every tenant, and their bytes.
    pub async fn footprint(&self) -> (usize, usize) {
        let entries: Vec<_> = self
            .tenants
            .lock()
            .expect("vector index lock")
            .values()
            .cloned()
            .collect();
        let mut total = (0, 0);
        for entry in entries {
            let vectors = entry.vectors.read().await;
            total.0 += vectors.len();
            total.1 += vectors.heap_bytes();
        }
        total
    }
}

/// Brings `entry` up to the projection's cursor, reading the rows past
/// what it holds (all of them after a `reset` or a version change). An
/// index already at or past the cursor is left as it is: another bundle
/// caught it up meanwhile, and going back would mean reading every row.
async fn catch_up(
    entry: &Entry,
    pool: &PgPool,
    tenant: &str,
    table: &'static str,
    (cursor_seq, cursor_version): (i64, i32),
    reset: bool,
) -> Result<(), sqlx::Error> {
    let mut vectors = entry.vectors.write().await;
    if reset || vectors.loaded_version != cursor_version {
        *vectors = TenantVectors {
            loaded_version: cursor_version,
            ..TenantVectors::with_tuning(vectors.tuning)
        };
    }
    if vectors.loaded_seq > 0 && vectors.loaded_seq < cursor_seq {
        forget_erased(&mut vectors, pool, tenant, cursor_seq).await?;
    }
    while vectors.loaded_seq < cursor_seq {
        // Rows past the last position loaded, and past the last cursor
        // (everything up to it is in).
        let after = match vectors.positions.last() {
            Some(last) if last.0 > vectors.loaded_seq => *last,
            _ => (vectors.loaded_seq, i32::MAX),
        };
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT seq, part, channel, sensitivity, kind, vector, agent_id, ts, session_id, tags
               FROM projections.{table}
              WHERE tenant_id = $1 AND (seq, part) > ($2, $3) AND seq <= $4
              ORDER BY seq, part LIMIT $5"
        )))
        .bind(tenant)
        .bind(after.0)
        .bind(after.1)
        .bind(cursor_seq)
        .bind(LOAD_PAGE)
        .fetch_all(pool)
        .await?;
        let full = rows.len() as i64 == LOAD_PAGE;
        for row in rows {
            let vector = embed::decode(row.try_get::<&[u8], _>(5)?);
            vectors.push(
                (row.try_get(0)?, row.try_get(1)?),
                (
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                    row.try_get(6)?,
                ),
                Filtered {
                    ts_us: row
                        .try_get::<chrono::DateTime<chrono::Utc>, _>(7)?
                        .timestamp_micros(),
                    agent: row.try_get(6)?,
                    session: row.try_get(8)?,
                    tags: row.try_get(9)?,
                },
                &vector,
            );
        }
        if !full {
            vectors.loaded_seq = cursor_seq;
        }
    }
    vectors.settle();
    Ok(())
}

/// Whether the embeddings projection `table` went back below `loaded_seq`
/// (a rebuild or a reset: its vectors are to be read again), asked when a
/// bundle's cursor is behind what the index holds. Usually it did not: the
/// bundle read the cursor before another bundle caught the index up.
async fn rebuilt_since(
    pool: &PgPool,
    tenant: &str,
    table: &'static str,
    loaded_seq: i64,
    loaded_version: i32,
) -> Result<bool, sqlx::Error> {
    let cursor = sqlx::query!(
        "SELECT seq, version FROM projections.cursors WHERE tenant_id = $1 AND projector = $2",
        tenant,
        table,
    )
    .fetch_optional(pool)
    .await?;
    Ok(cursor.is_none_or(|row| row.seq < loaded_seq || row.version != loaded_version))
}

/// Every vector of `tenant` in the embeddings table `table`, with its
/// lists: what a daemon holds after loading the tenant (`bench vectors`).
pub async fn load_tenant(
    pool: &PgPool,
    tenant: &str,
    table: &'static str,
    tuning: Tuning,
) -> Result<TenantVectors, sqlx::Error> {
    let entry = Entry {
        vectors: RwLock::new(TenantVectors::with_tuning(tuning)),
        ..Entry::default()
    };
    catch_up(&entry, pool, tenant, table, (i64::MAX, 0), true).await?;
    Ok(entry.vectors.into_inner())
}

/// Drops from `vectors` the rows of every subject erased, and of every
/// event a retraction withdrew, in the log between what they hold and
/// `cursor_seq`. `memd erase` and the embeddings projector (folding a
/// retraction) delete those rows from the embeddings table, but vectors
/// already loaded stay in memory (in every daemon) until the erasure or
/// retraction is seen here. A load from zero reads the table, which no
/// longer has them.
async fn forget_erased(
    vectors: &mut TenantVectors,
    pool: &PgPool,
    tenant: &str,
    cursor_seq: i64,
) -> Result<(), sqlx::Error> {
    let (subjects, withdrawn): (Vec<Option<String>>, Vec<Option<Vec<String>>>) = sqlx::query!(
        "SELECT content->>'subject_id' AS subject,
                    CASE WHEN kind = 'retraction' THEN refs END AS withdrawn
               FROM public.events
              WHERE tenant_id = $1 AND seq > $2 AND seq <= $3
                AND kind IN ('erasure', 'retraction')",
        tenant,
        vectors.loaded_seq,
        cursor_seq
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|row| (row.subject, row.withdrawn))
    .unzip();
    let subjects: Vec<String> = subjects.into_iter().flatten().collect();
    let withdrawn: Vec<String> = withdrawn.into_iter().flatten().flatten().collect();
    if subjects.is_empty() && withdrawn.is_empty() {
        return Ok(());
    }
    let seqs: HashSet<i64> = sqlx::query_scalar!(
        "SELECT seq AS \"seq!\" FROM public.events
          WHERE tenant_id = $1 AND subject_id = ANY ($2)
         UNION ALL
         SELECT seq FROM public.events WHERE tenant_id = $1 AND event_id = ANY ($3)",
        tenant,
        &subjects,
        &withdrawn
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    if seqs.is_empty() {
        return Ok(());
    }
    let dropped = vectors.remove_events(&seqs);
    tracing::info!(
        tenant,
        dropped,
        "erased or withdrawn events' vectors dropped from memory"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::Channel;

    fn unit(values: &[f32]) -> Vec<f32> {
        let mut v = values.to_vec();
        embed::normalise(&mut v);
        v
    }

    #[test]
    fn rescoring_compiled_for_avx2_gives_the_default_targets_bits() {
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        let mut vector = || {
            let values: Vec<f32> = (0..384)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1 << 23) as f32 - 1.0
                })
                .collect();
            unit(&values)
        };
        let mut vectors = TenantVectors::default();
        for seq in 1..=64 {
            vectors.push(
                (seq, 0),
                (Channel::Private, Sensitivity::None, Kind::Message, None),
                Filtered::default(),
                &vector(),
            );
        }
        let query = vector();
        for row in 0..vectors.len() {
            // `rescore` inlined here, built for the default target;
            // `similarity` runs it compiled for AVX2 where the CPU has it.
            let default_target = vectors.rescore(row, &query);
            let dispatched = vectors
                .similarity(vectors.positions[row], &query)
                .expect("embedded");
            assert_eq!(default_target.to_bits(), dispatched.to_bits(), "row {row}");
        }
    }

    fn index(rows: &[(i64, &str, &str, &[f32])]) -> TenantVectors {
        let mut vectors = TenantVectors::default();
        for (seq, channel, sensitivity, vector) in rows {
            vectors.push(
                (*seq, 0),
                (
                    Channel::parse(channel).expect("a channel"),
                    Sensitivity::parse(sensitivity).expect("a sensitivity"),
                    Kind::Message,
                    None,
                ),
                Filtered::default(),
                &unit(vector),
            );
        }
        vectors
    }

    #[test]
    fn a_large_index_scanned_in_pieces_gives_the_distances_one_thread_gives() {
        let (rows, words) = (2 * PARALLEL_ROWS + 1_001, 6);
        // Deterministic pseudo-random sign words; every third row hidden.
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let signs: Vec<u64> = (0..rows * words)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            })
            .collect();
        let class: Vec<u32> = (0..rows).map(|row| (row % 3 == 1) as u32).collect();
        let allowed = [true, false];
        let query = &signs[..words];
        let mut pieces = Vec::new();
        hamming(&signs, words, &class, &allowed, query, &mut pieces);
        let mut one_thread = vec![0; rows];
        hamming_rows(&signs, words, &class, &allowed, query, &mut one_thread);
        assert_eq!(pieces, one_thread);
        // The loop of any width gives what the unrolled one gives.
        let mut any_width = vec![0; rows];
        each_distance(&signs, words, &class, &allowed, query, &mut any_width);
        assert_eq!(any_width, one_thread);
        assert_eq!(pieces.len(), rows);
        assert_eq!(pieces[1], u16::MAX, "a hidden row");
        assert_eq!(pieces[0], 0, "the query's own row");
    }

    #[test]
    fn another_agents_private_vectors_are_never_found() {
        let mut vectors = TenantVectors::default();
        for (seq, channel, owner) in [
            (1, "private", Some("alpha")),
            (2, "private", Some("beta")),
            (3, "private", None),
            (4, "team", Some("alpha")),
        ] {
            vectors.push(
                (seq, 0),
                (
                    Channel::parse(channel).expect("a channel"),
                    Sensitivity::None,
                    Kind::Message,
                    owner.map(str::to_owned),
                ),
                Filtered::default(),
                &unit(&[1.0, 0.0, 0.0]),
            );
        }
        let found = |agent| -> Vec<i64> {
            let mut seqs: Vec<i64> = vectors
                .search(
                    &unit(&[1.0, 0.0, 0.0]),
                    10,
                    Visibility::new(Channel::Private).for_agent(agent),
                    &Scope::default(),
                )
                .iter()
                .map(|n| n.position.0)
                .collect();
            seqs.sort_unstable();
            seqs
        };
        assert_eq!(found(Some("beta")), [2, 3, 4]);
        assert_eq!(found(Some("alpha")), [1, 3, 4]);
        assert_eq!(found(None), [1, 2, 3, 4]);
    }

    #[test]
    fn nearest_first_and_ties_to_the_newer() {
        let vectors = index(&[
            (1, "private", "none", &[1.0, 0.0, 0.0]),
            (2, "private", "none", &[0.0, 1.0, 0.0]),
            (3, "private", "none", &[0.9, 0.1, 0.0]),
            (4, "private", "none", &[1.0, 0.0, 0.0]),
        ]);
        let found = vectors.search(
            &unit(&[1.0, 0.0, 0.0]),
            3,
            Visibility::new(Channel::Private),
            &Scope::default(),
        );
        let order: Vec<i64> = found.iter().map(|n| n.position.0).collect();
        assert_eq!(order, [4, 1, 3]);
        assert!((found[0].similarity - 1.0).abs() < 0.01);
        assert_eq!(
            vectors
                .similarity((2, 0), &unit(&[0.0, 1.0, 0.0]))
                .map(|s| s.round()),
            Some(1.0)
        );
        assert_eq!(vectors.similarity((9, 0), &unit(&[0.0, 1.0, 0.0])), None);
    }

    #[test]
    fn of_many_equally_close_the_newest_come_back() {
        // 500 copies of one vector and an older, slightly different one:
        // the copies tie at the cut-off distance; only the newest of them
        // are rescored, and they are what comes back.
        let mut rows: Vec<(i64, &str, &str, &[f32])> =
            vec![(1, "private", "none", &[1.0, 0.2, 0.0])];
        for seq in 2..=501 {
            rows.push((seq, "private", "none", &[1.0, 0.0, 0.0]));
        }
        let vectors = index(&rows);
        let found = vectors.search_by(
            Method::Exact,
            &unit(&[1.0, 0.0, 0.0]),
            3,
            Visibility::new(Channel::Private),
            &Scope::default(),
        );
        assert_eq!(seqs_of(&found.neighbours), [501, 500, 499]);
        assert_eq!(found.rows_read, 501);
    }

    fn seqs_of(found: &[Neighbour]) -> Vec<i64> {
        found.iter().map(|n| n.position.0).collect()
    }

    #[test]
    fn an_erased_events_vectors_leave_and_the_rest_keep_their_own() {
        let mut vectors = index(&[
            (1, "private", "none", &[1.0, 0.0, 0.0]),
            (2, "private", "none", &[0.0, 1.0, 0.0]),
            (3, "team", "low", &[0.9, 0.1, 0.0]),
            (4, "private", "none", &[0.0, 0.0, 1.0]),
        ]);
        assert_eq!(vectors.remove_events(&HashSet::from([1, 3, 7])), 2);
        assert_eq!(vectors.len(), 2);
        let x = unit(&[1.0, 0.0, 0.0]);
        assert_eq!(vectors.similarity((1, 0), &x), None);
        assert_eq!(vectors.similarity((3, 0), &x), None);
        // What stayed is still found by its own vector and class.
        for (seq, vector) in [(2, [0.0, 1.0, 0.0]), (4, [0.0, 0.0, 1.0])] {
            let found = vectors.search(
                &unit(&vector),
                1,
                Visibility::new(Channel::Private),
                &Scope::default(),
            );
            assert_eq!(found[0].position, (seq, 0));
            assert!((found[0].similarity - 1.0).abs() < 0.01);
        }
        let found = vectors.search(&x, 5, Visibility::new(Channel::Team), &Scope::default());
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(vectors.remove_events(&HashSet::from([1])), 0);
    }

    #[test]
    fn a_public_channel_never_finds_private_or_sensitive_vectors() {
        let vectors = index(&[
            (1, "private", "none", &[1.0, 0.0]),
            (2, "public", "high", &[1.0, 0.0]),
            (3, "public", "none", &[0.0, 1.0]),
        ]);
        let found = vectors.search(
            &unit(&[1.0, 0.0]),
            10,
            Visibility::new(Channel::Public),
            &Scope::default(),
        );
        let seqs: Vec<i64> = found.iter().map(|n| n.position.0).collect();
        assert_eq!(seqs, [3], "only the public, non-sensitive chunk");
        let excluded = Scope {
            excluded_kinds: vec!["message"],
            ..Scope::default()
        };
        assert!(
            vectors
                .search(
                    &unit(&[1.0, 0.0]),
                    10,
                    Visibility::new(Channel::Private),
                    &excluded
                )
                .is_empty()
        );
    }

    #[test]
    fn a_large_index_rescores_only_the_closest_and_finds_the_best() {
        // 5,000 pseudo-random 64-dimension vectors and one planted copy of
        // the query: the sign-bit scan must keep it for rescoring.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        };
        let mut vectors = TenantVectors::default();
        let query = unit(&(0..64).map(|_| next()).collect::<Vec<_>>());
        for seq in 1..=5_000 {
            let vector = if seq == 2_345 {
                query.clone()
            } else {
                unit(&(0..64).map(|_| next()).collect::<Vec<_>>())
            };
            vectors.push(
                (seq, 0),
                (Channel::Private, Sensitivity::None, Kind::Message, None),
                Filtered::default(),
                &vector,
            );
        }
        let found = vectors.search(
            &query,
            5,
            Visibility::new(Channel::Private),
            &Scope::default(),
        );
        assert_eq!(found.len(), 5);
        assert_eq!(found[0].position, (2_345, 0));
        assert!(found.windows(2).all(|w| w[0].similarity >= w[1].similarity));
    }

    #[test]
    fn filters_narrow_the_search_not_its_results() {
        // The query's nearest rows are in session "b"; a filter on "a" must
        // still return `k` rows, the nearest of "a", not what is left of
        // the overall nearest.
        let mut vectors = TenantVectors::default();
        for seq in 1..=40 {
            let (session, vector) = if seq <= 20 {
                ("b", [1.0, 0.01 * seq as f32, 0.0])
            } else {
                ("a", [0.2, 1.0, 0.01 * seq as f32])
            };
            vectors.push(
                (seq, 0),
                (Channel::Private, Sensitivity::None, Kind::Message, None),
                Filtered {
                    ts_us: seq * 1_000_000,
                    agent: (seq % 2 == 0).then(|| "even".to_owned()),
                    session: session.into(),
                    tags: if seq % 4 == 0 {
                        vec!["four".into()]
                    } else {
                        vec![]
                    },
                },
                &unit(&vector),
            );
        }
        let search = |filters: RetrievalFilters| -> Vec<i64> {
            let scope = Scope {
                filters,
                ..Scope::default()
            };
            vectors
                .search(
                    &unit(&[1.0, 0.0, 0.0]),
                    5,
                    Visibility::new(Channel::Private),
                    &scope,
                )
                .iter()
                .map(|n| n.position.0)
                .collect()
        };
        assert!(
            search(RetrievalFilters::default())
                .iter()
                .all(|seq| *seq <= 20)
        );
        let in_a = search(RetrievalFilters {
            sessions: vec!["a".into()],
            ..RetrievalFilters::default()
        });
        assert_eq!(in_a.len(), 5);
        assert!(in_a.iter().all(|seq| *seq > 20), "{in_a:?}");
        let tagged_even = search(RetrievalFilters {
            agents: vec!["even".into()],
            tags_any: vec!["four".into()],
            ..RetrievalFilters::default()
        });
        assert_eq!(tagged_even.len(), 5);
        assert!(
            tagged_even.iter().all(|seq| seq % 4 == 0),
            "{tagged_even:?}"
        );
        let window = search(RetrievalFilters {
            since: chrono::DateTime::from_timestamp(30, 0),
            until: chrono::DateTime::from_timestamp(33, 0),
            ..RetrievalFilters::default()
        });
        let mut window = window;
        window.sort_unstable();
        assert_eq!(window, [30, 31, 32]);
        let decisions_only = search(RetrievalFilters {
            kinds: vec![crate::domain::event::Kind::Decision],
            ..RetrievalFilters::default()
        });
        assert!(decisions_only.is_empty());
    }
}

#[cfg(test)]
mod list_tests {
    //! The index once a tenant has lists ([`lists`]), with small lists so
    //! that a few thousand rows reach them.
    use super::*;
    use crate::domain::event::Channel;

    const SMALL: Tuning = Tuning {
        approximate_from: 1024,
        rows_per_list: 64,
    };
    const DIMENSIONS: usize = 384;

    struct Noise(u64);

    impl Noise {
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % 2001) as f32 / 1000.0 - 1.0
        }

        /// A unit vector near `topic` (vectors of real text cluster by
        /// what they are about).
        fn near(&mut self, topic: &[f32], spread: f32) -> Vec<f32> {
            let mut v: Vec<f32> = topic.iter().map(|x| x + spread * self.next()).collect();
            embed::normalise(&mut v);
            v
        }
    }

    /// `rows` vectors around 50 topics; every fifth row high-sensitivity,
    /// rows in sessions of 100.
    /// A row as [`TenantVectors::push`] takes it.
    type Row = (Position, Class, Filtered, Vec<f32>);

    fn clustered(rows: i64) -> (Vec<Vec<f32>>, Vec<Row>) {
        let mut noise = Noise(0x2545_f491_4f6c_dd1d);
        let topics: Vec<Vec<f32>> = (0..50)
            .map(|_| (0..DIMENSIONS).map(|_| noise.next()).collect())
            .collect();
        let rows = (1..=rows)
            .map(|seq| {
                let topic = &topics[(seq as usize * 7919) % topics.len()];
                let sensitivity = if seq % 5 == 0 {
                    Sensitivity::High
                } else {
                    Sensitivity::None
                };
                (
                    (seq, 0),
                    (Channel::Public, sensitivity, Kind::Message, None),
                    Filtered {
                        ts_us: seq * 1_000_000,
                        session: format!("s{}", seq / 100),
                        ..Filtered::default()
                    },
                    noise.near(topic, 0.6),
                )
            })
            .collect();
        (topics, rows)
    }

    #[test]
    fn similarities_of_many_positions_are_each_ones_similarity_in_any_order() {
        let (topics, rows) = clustered(3_000);
        let vectors = load(&rows);
        let query = Noise(7).near(&topics[3], 0.2);
        // Newest first as a pool is, with positions the index lacks among
        // them (not embedded, or never a chunk), then in no order at all.
        let mut positions: Vec<Position> = (0..900_i64)
            .map(|i| (3_100 - i * 7 % 3_200, (i % 4 == 0) as i32))
            .collect();
        positions.sort_unstable_by(|a, b| b.cmp(a));
        positions.dedup();
        let scrambled: Vec<Position> = (0..positions.len())
            .map(|i| positions[i * 389 % positions.len()])
            .collect();
        for positions in [&positions, &scrambled] {
            let each: Vec<Option<f32>> = positions
                .iter()
                .map(|position| vectors.similarity(*position, &query))
                .collect();
            assert_eq!(vectors.similarities(positions, &query), each);
            assert!(each.iter().any(Option::is_none) && each.iter().any(Option::is_some));
        }
    }

    fn load(rows: &[Row]) -> TenantVectors {
        let mut vectors = TenantVectors::with_tuning(SMALL);
        for (position, class, filtered, vector) in rows {
            vectors.push(*position, class.clone(), filtered.clone(), vector);
        }
        vectors.settle();
        vectors
    }

    fn seqs(found: &[Neighbour]) -> Vec<i64> {
        found.iter().map(|n| n.position.0).collect()
    }

    #[test]
    fn lists_find_nearly_what_a_full_scan_finds_and_read_a_slice() {
        let (topics, rows) = clustered(6_000);
        let vectors = load(&rows);
        let lists = vectors.lists.as_ref().expect("6,000 rows have lists");
        assert_eq!((lists.level, lists.len()), (4096, 64));
        let mut noise = Noise(99);
        let (mut same, mut total) = (0, 0);
        for topic in &topics {
            let query = noise.near(topic, 0.6);
            let exact = seqs(
                &vectors
                    .search_by(
                        Method::Exact,
                        &query,
                        10,
                        Visibility::new(Channel::Public),
                        &Scope::default(),
                    )
                    .neighbours,
            );
            let listed = seqs(&vectors.search(
                &query,
                10,
                Visibility::new(Channel::Public),
                &Scope::default(),
            ));
            assert_eq!(listed.len(), 10);
            total += exact.len();
            same += listed.iter().filter(|seq| exact.contains(seq)).count();
        }
        let recall = same as f64 / total as f64;
        assert!(
            recall >= 0.9,
            "recall of the lists against a full scan: {recall}"
        );
        // What a search reads: the closest 16 lists of 64, give or take.
        let query = noise.near(&topics[0], 0.6);
        let allowed = vectors.classes.each(|class| class.1 == Sensitivity::None);
        let signs: Vec<u64> = sign_words(&query).collect();
        let (_, read) = vectors.probe(
            lists,
            &signs,
            lists::PROBE_SHARE,
            &allowed,
            &RowTest::new(&vectors, &Scope::default()),
            40,
        );
        assert!(read < 6_000 / 3, "{read} rows read");
        assert!(read >= 4 * 40, "{read} rows read");
    }

    #[test]
    fn a_public_channel_never_finds_sensitive_vectors_through_lists() {
        let (topics, rows) = clustered(3_000);
        let vectors = load(&rows);
        assert!(vectors.lists.is_some());
        for topic in &topics {
            let found = vectors.search(
                topic,
                20,
                Visibility::new(Channel::Public),
                &Scope::default(),
            );
            assert_eq!(found.len(), 20);
            assert!(found.iter().all(|n| n.position.0 % 5 != 0), "{found:?}");
        }
    }

    #[test]
    fn a_filter_that_hides_most_rows_still_gets_its_nearest() {
        let (topics, rows) = clustered(3_000);
        let vectors = load(&rows);
        // Session s7 holds 100 rows of 3,000, spread over every topic.
        let scope = Scope {
            filters: RetrievalFilters {
                sessions: vec!["s7".into()],
                ..RetrievalFilters::default()
            },
            ..Scope::default()
        };
        for topic in topics.iter().take(10) {
            let listed = vectors.search(topic, 30, Visibility::new(Channel::Public), &scope);
            let exact = vectors
                .search_by(
                    Method::Exact,
                    topic,
                    30,
                    Visibility::new(Channel::Public),
                    &scope,
                )
                .neighbours;
            assert_eq!(seqs(&listed), seqs(&exact));
            assert!(listed.iter().all(|n| n.position.0 / 100 == 7));
        }
    }

    #[test]
    fn an_index_grown_row_by_row_answers_as_one_loaded_at_once() {
        let (topics, rows) = clustered(5_000);
        let at_once = load(&rows);
        let mut grown = TenantVectors::with_tuning(SMALL);
        for (i, (position, class, filtered, vector)) in rows.iter().enumerate() {
            grown.push(*position, class.clone(), filtered.clone(), vector);
            if i % 700 == 0 {
                grown.settle();
            }
        }
        grown.settle();
        // An erasure leaves both with the lists of what is left, as a
        // daemon that loads the rest from the table would build them.
        let erased: HashSet<i64> = (1..=1_500).filter(|seq| seq % 3 == 0).collect();
        let mut after = at_once;
        after.remove_events(&erased);
        let rest: Vec<_> = rows
            .iter()
            .filter(|row| !erased.contains(&row.0.0))
            .cloned()
            .collect();
        let fresh = load(&rest);
        let mut noise = Noise(5);
        for topic in &topics {
            let query = noise.near(topic, 0.6);
            let search = |v: &TenantVectors| {
                seqs(&v.search(
                    &query,
                    10,
                    Visibility::new(Channel::Public),
                    &Scope::default(),
                ))
            };
            assert_eq!(search(&grown), search(&load(&rows)));
            assert_eq!(search(&after), search(&fresh));
            assert!(search(&after).iter().all(|seq| !erased.contains(seq)));
        }
    }

    /// Searches as bundles make them, and afresh, for every channel and
    /// agent below, the question's own search made first.
    fn assert_searches_answer_as_new_ones(vectors: &TenantVectors, queries: &[Vec<f32>]) {
        let visibilities = [
            Visibility::new(Channel::Public),
            Visibility::new(Channel::Private).for_agent(Some("alpha")),
            Visibility::new(Channel::Private).for_agent(Some("beta")),
            Visibility::new(Channel::Private),
        ];
        for query in queries {
            for visibility in visibilities {
                let remembered = vectors.search(query, 25, visibility, &Scope::default());
                let fresh = vectors
                    .search_by(Method::Lists, query, 25, visibility, &Scope::default())
                    .neighbours;
                assert_eq!(remembered, fresh, "{visibility:?}");
            }
        }
    }

    /// `rows` as [`clustered`] makes them, a third of them recorded in the
    /// private channel by agent alpha or beta.
    fn with_private(rows: i64) -> (Vec<Vec<f32>>, Vec<Row>) {
        let (topics, mut rows) = clustered(rows);
        for (i, row) in rows.iter_mut().enumerate() {
            let owner = match i % 6 {
                1 => "alpha",
                4 => "beta",
                _ => continue,
            };
            row.1 = (
                Channel::Private,
                Sensitivity::None,
                Kind::Message,
                Some(owner.into()),
            );
        }
        (topics, rows)
    }

    #[test]
    fn a_search_through_an_earlier_seq_finds_what_the_index_held_at_it() {
        // A bundle that read the projection's cursor at seq 2,000, searching
        // an index another bundle has since brought to 3,000.
        let (topics, rows) = with_private(3_000);
        let through = 2_000;
        let (mut now, mut then) = (TenantVectors::default(), TenantVectors::default());
        let (mut now_lists, mut then_lists) = (
            TenantVectors::with_tuning(SMALL),
            TenantVectors::with_tuning(SMALL),
        );
        for (position, class, filtered, vector) in &rows {
            for index in [&mut now, &mut now_lists] {
                index.push(*position, class.clone(), filtered.clone(), vector);
            }
            if position.0 <= through {
                for index in [&mut then, &mut then_lists] {
                    index.push(*position, class.clone(), filtered.clone(), vector);
                }
            }
        }
        for index in [&mut now, &mut then, &mut now_lists, &mut then_lists] {
            index.settle();
        }
        assert!(now.lists.is_none() && now_lists.lists.is_some());
        let alpha = Visibility::new(Channel::Private).for_agent(Some("alpha"));
        let scope = Scope::default();
        let mut noise = Noise(23);
        let mut newer_were_nearest = 0;
        for topic in topics.iter().take(12) {
            let query = noise.near(topic, 0.6);
            let newest = now.search(&query, 25, alpha, &scope);
            newer_were_nearest += newest.iter().filter(|n| n.position.0 > through).count();
            // By a full scan, exactly the earlier index's answer.
            let found = now.searched_through(&query, 25, alpha, &scope, through);
            assert_eq!(found.neighbours, then.search(&query, 25, alpha, &scope));
            // By lists, nothing past the seq either.
            let listed = now_lists.searched_through(&query, 25, alpha, &scope, through);
            assert!(!listed.neighbours.is_empty());
            assert!(listed.neighbours.iter().all(|n| n.position.0 <= through));
            // Through the newest row (or past it), the usual search.
            for seq in [3_000, i64::MAX] {
                let all = now.searched_through(&query, 25, alpha, &scope, seq);
                assert_eq!(all.neighbours, newest);
            }
        }
        assert!(
            newer_were_nearest > 0,
            "the rows left out were among the nearest"
        );
    }

    #[test]
    fn a_question_asked_again_reads_only_what_was_added_and_finds_what_a_new_search_finds() {
        let (topics, rows) = with_private(3_000);
        let mut vectors = TenantVectors::default();
        for (position, class, filtered, vector) in &rows[..2_000] {
            vectors.push(*position, class.clone(), filtered.clone(), vector);
        }
        vectors.settle();
        assert!(vectors.lists.is_none(), "every row is scanned");
        let mut noise = Noise(17);
        let queries: Vec<Vec<f32>> = topics.iter().take(8).map(|t| noise.near(t, 0.6)).collect();
        let alpha = Visibility::new(Channel::Private).for_agent(Some("alpha"));
        let first = vectors.searched(&queries[0], 25, alpha, &Scope::default());
        assert_eq!(first.rows_read, 2_000);
        let again = vectors.searched(&queries[0], 25, alpha, &Scope::default());
        assert_eq!(again.rows_read, 0, "nothing was added");
        assert_eq!(again.neighbours, first.neighbours);
        // Another agent asking the same question scans for itself, and
        // never finds alpha's private memory.
        let beta = Visibility::new(Channel::Private).for_agent(Some("beta"));
        let theirs = vectors.searched(&queries[0], 25, beta, &Scope::default());
        assert_eq!(theirs.rows_read, 2_000);
        assert!(
            theirs
                .neighbours
                .iter()
                .all(|n| (n.position.0 - 1) % 6 != 1),
            "alpha's private rows"
        );
        assert_searches_answer_as_new_ones(&vectors, &queries);
        // Asked once more: the most recently used of a small index's few.
        vectors.searched(&queries[0], 25, alpha, &Scope::default());

        // Rows arrive, some of them closer to the questions than any before.
        for (position, class, filtered, vector) in &rows[2_000..] {
            vectors.push(*position, class.clone(), filtered.clone(), vector);
        }
        vectors.settle();
        let added = vectors.searched(&queries[0], 25, alpha, &Scope::default());
        assert_eq!(added.rows_read, 1_000, "only the rows added");
        assert!(added.neighbours.iter().any(|n| n.position.0 > 2_000));
        assert_searches_answer_as_new_ones(&vectors, &queries);

        // An erasure forgets every search: rows are numbered anew.
        let erased: HashSet<i64> = added.neighbours.iter().map(|n| n.position.0).collect();
        vectors.remove_events(&erased);
        let after = vectors.searched(&queries[0], 25, alpha, &Scope::default());
        assert_eq!(after.rows_read, vectors.len());
        assert!(
            after
                .neighbours
                .iter()
                .all(|n| !erased.contains(&n.position.0))
        );
        assert_searches_answer_as_new_ones(&vectors, &queries);
    }

    #[test]
    fn with_lists_a_question_asked_again_is_answered_as_before_until_rows_arrive() {
        let (topics, rows) = with_private(5_000);
        let mut vectors = load(&rows[..4_500]);
        assert!(vectors.lists.is_some());
        let mut noise = Noise(23);
        let queries: Vec<Vec<f32>> = topics.iter().take(8).map(|t| noise.near(t, 0.6)).collect();
        let public = Visibility::new(Channel::Public);
        let first = vectors.searched(&queries[0], 25, public, &Scope::default());
        assert!(first.rows_read > 0 && first.rows_read < 4_500);
        let again = vectors.searched(&queries[0], 25, public, &Scope::default());
        assert_eq!((again.rows_read, &again.neighbours), (0, &first.neighbours));
        assert_searches_answer_as_new_ones(&vectors, &queries);
        for (position, class, filtered, vector) in &rows[4_500..] {
            vectors.push(*position, class.clone(), filtered.clone(), vector);
        }
        vectors.settle();
        let added = vectors.searched(&queries[0], 25, public, &Scope::default());
        assert!(added.rows_read > 0, "the lists changed: read again");
        assert_searches_answer_as_new_ones(&vectors, &queries);
    }
}
