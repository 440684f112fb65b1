//! Inverted lists over the sign bits (IVF): how a search of a large tenant
//! reads a slice of its vectors instead of all of them.
//!
//! Below [`Tuning::approximate_from`] rows a search scans every vector
//! (exact). From there the rows are split into lists, one per centroid,
//! each row in the list of the centroid its sign bits are closest to
//! (Hamming distance). A search reads the lists whose centroids are closest
//! to the question: at least one in [`PROBE_SHARE`], and more until it has
//! found enough rows the channel and the request's filters let through, so
//! that a filter hiding most rows still gets its nearest (every list read
//! is an exact scan).
//!
//! **A function of the rows alone.** The centroids are trained on the first
//! `level` rows in position order (`level` is the largest power of two not
//! above the row count), sampled by a fixed permutation, seeded from fixed
//! samples, with ties to the lower index. A daemon that grew its index row
//! by row and one that loaded it from the table after a restart hold the
//! same lists, so the same log and question give the same bundle. Dropping
//! rows (an erasure) trains them again from what is left.

use super::cpu;

/// Lists a search reads at least: one in this many, the closest first.
/// One in four finds 0.93 of a full scan's 200 nearest of MiniLM vectors
/// of chat (0.68 for one in sixteen; `memd-bench vectors --tenant`, 92k
/// vectors with lists forced from 16,384).
pub const PROBE_SHARE: usize = 4;
/// Rows of the training sample per list.
const TRAINING_PER_LIST: usize = 32;
/// Rounds of k-modes (majority-bit centroids) over the sample.
const TRAINING_ROUNDS: usize = 6;

/// When lists are built, and how large they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Rows from which a search reads lists instead of every row; a power
    /// of two.
    pub approximate_from: usize,
    /// Rows per list at a level's start (twice as many just before the
    /// next); a power of two.
    pub rows_per_list: usize,
}

impl Tuning {
    /// Exact below 262,144 rows (a scan of that many takes about a
    /// millisecond on two cores), then lists of 256 to 512 rows. Finer
    /// lists route a question better: at a quarter of the rows read,
    /// lists of 1,024 found 0.89 of MiniLM's 200 nearest, of 512 0.92, of
    /// 256 0.93, of 128 0.95; but placing a row compares it with every
    /// centroid, and 128 cost a million rows 3 s more than 256.
    pub const DEFAULT: Tuning = Tuning {
        approximate_from: 1 << 18,
        rows_per_list: 1 << 8,
    };

    /// Never lists: every search scans every row.
    pub const EXACT: Tuning = Tuning {
        approximate_from: usize::MAX,
        rows_per_list: 1 << 10,
    };

    /// The level lists are trained at for `rows` rows, if any.
    pub fn level(&self, rows: usize) -> Option<usize> {
        (rows >= self.approximate_from).then(|| 1 << rows.ilog2())
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The lists of one tenant's vectors.
pub struct Lists {
    /// Rows the centroids were trained from.
    pub level: usize,
    words: usize,
    /// `words` sign words per centroid: what rows are placed by, and
    /// questions routed by. (Routing a question's float vector by the
    /// lists' float means instead found 0.72 rather than 0.70 of MiniLM's
    /// 200 nearest, and 0.03 rather than 1.00 of the hashed embedder's,
    /// whose vectors have no negative parts: a routing that differs from
    /// the placement misleads.)
    centroids: Vec<u64>,
    /// Per list, its rows in ascending order.
    members: Vec<Vec<u32>>,
    /// Per list, its rows' sign words in the same order: a search reads a
    /// list's in one sweep instead of one cache miss per row scattered
    /// over the whole index (48 MB at a million rows).
    signs: Vec<Vec<u64>>,
    /// Per list, its rows' classes (privacy), likewise.
    classes: Vec<Vec<u32>>,
    /// Rows `0..assigned` are in a list; later ones are scanned on every
    /// search until [`Lists::assign`] places them.
    pub assigned: usize,
}

impl Lists {
    /// Trains `level / rows_per_list` centroids on the first `level` rows
    /// of `signs` and places every row.
    pub fn train(
        signs: &[u64],
        classes: &[u32],
        words: usize,
        level: usize,
        tuning: Tuning,
    ) -> Lists {
        let count = (level / tuning.rows_per_list).max(1);
        let sample_rows = (count * TRAINING_PER_LIST).min(level);
        // Rows `i × an odd constant` modulo the level (a power of two): a
        // permutation, so no row twice, and unlike a fixed stride it does
        // not sample one turn in two of a conversation that alternates
        // speakers.
        let sample: Vec<u64> = (0..sample_rows)
            .map(|i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize & (level - 1))
            .flat_map(|r| row(signs, words, r).iter().copied())
            .collect();
        // Seeds: the first samples, as spread as the rest.
        let mut centroids: Vec<u64> = sample[..count.min(sample_rows) * words].to_vec();
        centroids.resize(count * words, 0);
        for _ in 0..TRAINING_ROUNDS {
            let nearest = nearest_centroids(&sample, words, &centroids);
            let mut ones = vec![0_u32; count * words * 64];
            let mut members = vec![0_u32; count];
            for (i, list) in nearest.iter().enumerate() {
                let list = *list as usize;
                members[list] += 1;
                for (w, word) in row(&sample, words, i).iter().enumerate() {
                    let mut bits = *word;
                    while bits != 0 {
                        ones[(list * words + w) * 64 + bits.trailing_zeros() as usize] += 1;
                        bits &= bits - 1;
                    }
                }
            }
            for (list, size) in members.iter().enumerate() {
                // An empty list keeps its centroid.
                if *size == 0 {
                    continue;
                }
                for w in 0..words {
                    let counts = &ones[(list * words + w) * 64..][..64];
                    centroids[list * words + w] = counts
                        .iter()
                        .enumerate()
                        .filter(|(_, ones)| 2 * **ones > *size)
                        .fold(0, |word, (bit, _)| word | 1 << bit);
                }
            }
        }
        let mut lists = Lists {
            level,
            words,
            centroids,
            members: vec![Vec::new(); count],
            signs: vec![Vec::new(); count],
            classes: vec![Vec::new(); count],
            assigned: 0,
        };
        lists.assign(signs, classes);
        lists
    }

    /// Places the rows of `signs` (with their `classes`) not yet in a
    /// list.
    pub fn assign(&mut self, signs: &[u64], classes: &[u32]) {
        let rows = signs.len() / self.words;
        if rows <= self.assigned {
            return;
        }
        let fresh = &signs[self.assigned * self.words..];
        for (offset, list) in nearest_centroids(fresh, self.words, &self.centroids)
            .into_iter()
            .enumerate()
        {
            self.members[list as usize].push((self.assigned + offset) as u32);
            self.signs[list as usize].extend_from_slice(row(fresh, self.words, offset));
            self.classes[list as usize].push(classes[self.assigned + offset]);
        }
        self.assigned = rows;
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The lists, closest centroid to `query` first (ties to the lower
    /// index).
    pub fn closest_first(&self, query: &[u64]) -> Vec<usize> {
        let mut order: Vec<(u16, usize)> = self
            .centroids
            .chunks_exact(self.words)
            .map(|centroid| distance(centroid, query))
            .zip(0..)
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, list)| list).collect()
    }

    pub fn members(&self, list: usize) -> &[u32] {
        &self.members[list]
    }

    /// Adds to `found` each row of `list` that `keep` keeps (given the
    /// row and its class), with its Hamming distance to `query`.
    pub fn scan(
        &self,
        list: usize,
        query: &[u64],
        keep: impl Fn(u32, u32) -> bool,
        found: &mut Vec<(u32, u16)>,
    ) {
        let rows = Rows {
            members: &self.members[list],
            classes: &self.classes[list],
            signs: &self.signs[list],
            words: self.words,
        };
        cpu::with_popcnt(
            #[inline(always)]
            || scan_rows(rows, query, keep, found),
        )
    }

    pub fn heap_bytes(&self) -> usize {
        self.centroids.capacity() * 8
            + self
                .members
                .iter()
                .zip(&self.signs)
                .map(|(m, s)| {
                    m.capacity() * 4 + s.capacity() * 8 + 2 * std::mem::size_of::<Vec<u32>>()
                })
                .sum::<usize>()
    }
}

/// One list's rows, their classes and sign words, side by side.
struct Rows<'a> {
    members: &'a [u32],
    classes: &'a [u32],
    signs: &'a [u64],
    words: usize,
}

#[inline(always)]
fn scan_rows(
    rows: Rows<'_>,
    query: &[u64],
    keep: impl Fn(u32, u32) -> bool,
    found: &mut Vec<(u32, u16)>,
) {
    for ((member, class), signs) in rows
        .members
        .iter()
        .zip(rows.classes)
        .zip(rows.signs.chunks_exact(rows.words))
    {
        if keep(*member, *class) {
            found.push((*member, distance(signs, query)));
        }
    }
}

/// The sign words of `row`, of `words` words each.
pub(super) fn row(signs: &[u64], words: usize, row: usize) -> &[u64] {
    &signs[row * words..(row + 1) * words]
}

#[inline(always)]
pub fn distance(a: &[u64], b: &[u64]) -> u16 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a ^ b).count_ones() as u16)
        .sum()
}

/// The closest centroid of each row (ties to the lower index), on every
/// core: placing a million rows among 512 lists is 3 billion word
/// comparisons.
fn nearest_centroids(signs: &[u64], words: usize, centroids: &[u64]) -> Vec<u32> {
    use rayon::prelude::*;
    const PIECE: usize = 4_096;
    signs
        .par_chunks(PIECE * words)
        .flat_map_iter(|piece| nearest_on_this_thread(piece, words, centroids))
        .collect()
}

fn nearest_on_this_thread(signs: &[u64], words: usize, centroids: &[u64]) -> Vec<u32> {
    cpu::with_popcnt(
        #[inline(always)]
        || nearest_rows(signs, words, centroids),
    )
}

// A loop that pushes, not `collect`, as in `each_distance`.
#[inline(always)]
fn nearest_rows(signs: &[u64], words: usize, centroids: &[u64]) -> Vec<u32> {
    let mut nearest = Vec::with_capacity(signs.len() / words);
    for row in signs.chunks_exact(words) {
        let mut best = (u16::MAX, 0_u32);
        for (list, centroid) in centroids.chunks_exact(words).enumerate() {
            let d = distance(row, centroid);
            if d < best.0 {
                best = (d, list as u32);
            }
        }
        nearest.push(best.1);
    }
    nearest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo_random(rows: usize, words: usize, mut state: u64) -> Vec<u64> {
        (0..rows * words)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            })
            .collect()
    }

    /// Lists of 64 from 1,024 rows: a few thousand rows reach them.
    const SMALL: Tuning = Tuning {
        approximate_from: 1024,
        rows_per_list: 64,
    };

    /// Three classes, row by row.
    fn classes(rows: usize) -> Vec<u32> {
        (0..rows as u32).map(|row| row % 3).collect()
    }

    #[test]
    fn levels_are_powers_of_two_from_the_threshold() {
        let tuning = SMALL;
        assert_eq!(tuning.level(1023), None);
        assert_eq!(tuning.level(1024), Some(1024));
        assert_eq!(tuning.level(2047), Some(1024));
        assert_eq!(tuning.level(2048), Some(2048));
        assert_eq!(Tuning::EXACT.level(usize::MAX / 2), None);
    }

    #[test]
    fn every_row_is_in_exactly_one_list_its_closest() {
        let (rows, words) = (3_000, 2);
        let signs = pseudo_random(rows, words, 7);
        let (tuning, classes) = (SMALL, classes(rows));
        let lists = Lists::train(&signs, &classes, words, 2048, tuning);
        assert_eq!(lists.len(), 32);
        assert_eq!(lists.assigned, rows);
        let mut seen: Vec<u32> = (0..lists.len())
            .flat_map(|l| lists.members(l).to_vec())
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..rows as u32).collect::<Vec<_>>());
        for list in 0..lists.len() {
            let members = lists.members(list);
            assert!(members.windows(2).all(|w| w[0] < w[1]), "ascending");
            for member in members {
                let r = row(&signs, words, *member as usize);
                assert_eq!(
                    nearest_rows(r, words, &lists.centroids),
                    [list as u32],
                    "row {member}"
                );
            }
        }
    }

    #[test]
    fn lists_grown_row_by_row_equal_lists_trained_at_once() {
        let (rows, words) = (2_500, 3);
        let signs = pseudo_random(rows, words, 11);
        let (tuning, classes) = (SMALL, classes(rows));
        let at_once = Lists::train(&signs, &classes, words, 2048, tuning);
        let mut grown = Lists::train(
            &signs[..2048 * words],
            &classes[..2048],
            words,
            2048,
            tuning,
        );
        grown.assign(&signs[..2200 * words], &classes[..2200]);
        grown.assign(&signs, &classes);
        assert_eq!(grown.centroids, at_once.centroids);
        assert_eq!(grown.members, at_once.members);
        assert_eq!(grown.signs, at_once.signs);
        assert_eq!(grown.classes, at_once.classes);
        for list in 0..at_once.len() {
            let mut found = Vec::new();
            at_once.scan(list, &signs[..words], |_, class| class != 1, &mut found);
            let members: Vec<u32> = found.iter().map(|(member, _)| *member).collect();
            let kept: Vec<u32> = at_once
                .members(list)
                .iter()
                .copied()
                .filter(|m| m % 3 != 1)
                .collect();
            assert_eq!(members, kept);
            for (member, d) in found {
                assert_eq!(
                    d,
                    distance(row(&signs, words, member as usize), &signs[..words])
                );
            }
        }
    }
}
