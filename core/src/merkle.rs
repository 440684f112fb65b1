//! A Merkle tree over each tenant's log, in the style of RFC 6962 (and
//! RFC 9162): the leaves are the events' chain hashes in seq order, so an
//! auditor holding a signed tree head can check that one event is in the
//! log ([`inclusion_path`], [`verify_inclusion`]) or that a later log
//! extends an earlier one ([`consistency_proof`], [`verify_consistency`])
//! from a handful of hashes, without reading any other event.
//!
//! Hashes: a leaf is `SHA-256(0x00 ‖ event hash)`, an inner node
//! `SHA-256(0x01 ‖ left ‖ right)`; a tree of `n` leaves splits at the
//! largest power of two below `n`, as the RFC says.
//!
//! The functions that build proofs ask for the hashes of *complete aligned
//! subtrees* only (`2^level` leaves starting at `index · 2^level`), through
//! a lookup the caller provides: the `event_tree` projection stores those
//! of [`STORED_LEVEL`] and above, and the rest are computed from leaves.
//! [`needed`] runs an algorithm with a recording lookup, so the caller can
//! fetch exactly what it will ask for.

use std::{cell::RefCell, collections::BTreeSet};

use sha2::{Digest, Sha256};

pub type Hash = [u8; 32];

/// Complete subtrees of `2^STORED_LEVEL` leaves and larger are stored by
/// the `event_tree` projection (about one row per eight events); smaller
/// ones are computed from at most that many event hashes.
pub const STORED_LEVEL: u32 = 4;

/// A complete aligned subtree: `2^level` leaves from `index · 2^level`.
pub type Subtree = (u32, u64);

pub fn leaf_hash(event_hash: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0]);
    hasher.update(event_hash);
    hasher.finalize().into()
}

pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The root of complete leaves (their count a power of two).
pub fn complete_root(leaves: &[Hash]) -> Hash {
    debug_assert!(leaves.len().is_power_of_two());
    let mut level: Vec<Hash> = leaves.to_vec();
    while level.len() > 1 {
        level = level
            .chunks_exact(2)
            .map(|pair| node_hash(&pair[0], &pair[1]))
            .collect();
    }
    level[0]
}

/// The largest power of two strictly below `n` (`n` ≥ 2).
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// The hash of leaves `start..end`, as RFC 6962's recursion meets them
/// (`start` is a multiple of the largest power of two not above the size).
pub fn subtree_hash(start: u64, end: u64, complete: &impl Fn(Subtree) -> Hash) -> Hash {
    let size = end - start;
    if size.is_power_of_two() && start.is_multiple_of(size) {
        let level = size.trailing_zeros();
        return complete((level, start >> level));
    }
    let k = split(size);
    node_hash(
        &subtree_hash(start, start + k, complete),
        &subtree_hash(start + k, end, complete),
    )
}

/// The root of a tree of `size` leaves (`size` ≥ 1).
pub fn root(size: u64, complete: &impl Fn(Subtree) -> Hash) -> Hash {
    subtree_hash(0, size, complete)
}

/// RFC 6962 `PATH(m, D[start:end])`: the audit path of leaf `m` (counted
/// from `start`).
fn path(m: u64, start: u64, end: u64, complete: &impl Fn(Subtree) -> Hash) -> Vec<Hash> {
    let n = end - start;
    if n <= 1 {
        return Vec::new();
    }
    let k = split(n);
    if m < k {
        let mut proof = path(m, start, start + k, complete);
        proof.push(subtree_hash(start + k, end, complete));
        proof
    } else {
        let mut proof = path(m - k, start + k, end, complete);
        proof.push(subtree_hash(start, start + k, complete));
        proof
    }
}

/// The audit path of leaf `index` in a tree of `size` leaves.
pub fn inclusion_path(index: u64, size: u64, complete: &impl Fn(Subtree) -> Hash) -> Vec<Hash> {
    assert!(index < size, "leaf {index} is not in a tree of {size}");
    path(index, 0, size, complete)
}

/// RFC 6962 `SUBPROOF(m, D[start:end], b)`.
fn subproof(
    m: u64,
    start: u64,
    end: u64,
    whole: bool,
    complete: &impl Fn(Subtree) -> Hash,
) -> Vec<Hash> {
    let n = end - start;
    if m == n {
        return if whole {
            Vec::new()
        } else {
            vec![subtree_hash(start, end, complete)]
        };
    }
    let k = split(n);
    if m <= k {
        let mut proof = subproof(m, start, start + k, whole, complete);
        proof.push(subtree_hash(start + k, end, complete));
        proof
    } else {
        let mut proof = subproof(m - k, start + k, end, false, complete);
        proof.push(subtree_hash(start, start + k, complete));
        proof
    }
}

/// The proof that the tree of `second` leaves extends the tree of its
/// first `first` leaves (`0 < first ≤ second`).
pub fn consistency_proof(
    first: u64,
    second: u64,
    complete: &impl Fn(Subtree) -> Hash,
) -> Vec<Hash> {
    assert!(
        0 < first && first <= second,
        "first {first}, second {second}"
    );
    if first == second {
        return Vec::new();
    }
    subproof(first, 0, second, true, complete)
}

/// The complete subtrees `algorithm` asks for: run it with this, fetch
/// them, run it again with the real lookup.
pub fn needed<T>(algorithm: impl FnOnce(&dyn Fn(Subtree) -> Hash) -> T) -> BTreeSet<Subtree> {
    let asked = RefCell::new(BTreeSet::new());
    let record = |subtree: Subtree| {
        asked.borrow_mut().insert(subtree);
        [0; 32]
    };
    algorithm(&record);
    asked.into_inner()
}

/// The root of a tree grown one leaf at a time, holding only the roots of
/// its complete subtrees (one per set bit of the size): what an auditor
/// uses to recompute a root from the log itself, in one pass and without
/// the `event_tree` projection.
#[derive(Debug, Clone, Default)]
pub struct Frontier {
    /// Complete subtrees, largest (leftmost) first: (level, root).
    subtrees: Vec<(u32, Hash)>,
    size: u64,
}

impl Frontier {
    /// Adds the leaf of `event_hash`.
    pub fn push(&mut self, event_hash: &[u8]) {
        let (mut level, mut hash) = (0, leaf_hash(event_hash));
        while let Some(&(last_level, left)) = self.subtrees.last() {
            if last_level != level {
                break;
            }
            self.subtrees.pop();
            hash = node_hash(&left, &hash);
            level += 1;
        }
        self.subtrees.push((level, hash));
        self.size += 1;
    }

    /// Leaves pushed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// RFC 6962's root of the leaves pushed so far (`None` for none): the
    /// complete subtrees joined right to left, as the RFC's split at the
    /// largest power of two meets them.
    pub fn root(&self) -> Option<Hash> {
        let mut subtrees = self.subtrees.iter().rev();
        let mut root = subtrees.next()?.1;
        for (_, left) in subtrees {
            root = node_hash(left, &root);
        }
        Some(root)
    }
}

/// RFC 9162 §2.1.3.2: whether `path` proves that `leaf` (a leaf hash) is
/// leaf `index` of the tree of `size` leaves whose root is `root`.
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, path: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    s == 0 && r == *root
}

/// RFC 9162 §2.1.4.2: whether `proof` shows that the tree of `second`
/// leaves (root `second_root`) extends the tree of `first` leaves (root
/// `first_root`).
pub fn verify_consistency(
    first: u64,
    second: u64,
    first_root: &Hash,
    second_root: &Hash,
    proof: &[Hash],
) -> bool {
    if first == 0 || first > second {
        return false;
    }
    if first == second {
        return proof.is_empty() && first_root == second_root;
    }
    let mut proof: Vec<Hash> = proof.to_vec();
    if first.is_power_of_two() {
        proof.insert(0, *first_root);
    }
    let Some((head, rest)) = proof.split_first() else {
        return false;
    };
    let (mut f, mut s) = (first - 1, second - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*head, *head);
    for c in rest {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    fr == *first_root && sr == *second_root && s == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_le_bytes())).collect()
    }

    /// RFC 6962's MTH, written straight from its definition.
    fn reference_root(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
            }
        }
    }

    fn lookup(leaves: &[Hash]) -> impl Fn(Subtree) -> Hash + '_ {
        |(level, index): Subtree| {
            let width = 1usize << level;
            let start = index as usize * width;
            complete_root(&leaves[start..start + width])
        }
    }

    #[test]
    fn roots_match_the_rfc_definition_for_every_size_up_to_70() {
        let all = leaves(70);
        for n in 1..=70 {
            let tree = &all[..n as usize];
            assert_eq!(root(n, &lookup(tree)), reference_root(tree), "size {n}");
        }
    }

    #[test]
    fn a_frontier_grown_leaf_by_leaf_has_the_rfc_root_at_every_size() {
        let mut frontier = Frontier::default();
        assert_eq!(frontier.root(), None);
        let all = leaves(70);
        for n in 1..=70_u64 {
            frontier.push(&(n - 1).to_le_bytes());
            assert_eq!(frontier.size(), n);
            assert_eq!(
                frontier.root(),
                Some(reference_root(&all[..n as usize])),
                "size {n}"
            );
        }
    }

    #[test]
    fn every_inclusion_path_verifies_and_a_changed_one_does_not() {
        let all = leaves(37);
        for n in 1..=37 {
            let tree = &all[..n as usize];
            let root = reference_root(tree);
            for m in 0..n {
                let path = inclusion_path(m, n, &lookup(tree));
                assert!(path.len() <= 64 - (n.leading_zeros() as usize) + 1);
                assert!(
                    verify_inclusion(m, n, &tree[m as usize], &path, &root),
                    "{m} of {n}"
                );
                // Another leaf, another index, a changed sibling: refused.
                let other = leaf_hash(b"not in the log");
                assert!(!verify_inclusion(m, n, &other, &path, &root));
                if n > 1 {
                    assert!(!verify_inclusion(
                        (m + 1) % n,
                        n,
                        &tree[m as usize],
                        &path,
                        &root
                    ));
                    let mut changed = path.clone();
                    changed[0][0] ^= 1;
                    assert!(!verify_inclusion(m, n, &tree[m as usize], &changed, &root));
                }
            }
        }
    }

    #[test]
    fn every_consistency_proof_verifies_and_a_rewritten_history_does_not() {
        let all = leaves(33);
        for second in 1..=33 {
            let tree = &all[..second as usize];
            let second_root = reference_root(tree);
            for first in 1..=second {
                let first_root = reference_root(&tree[..first as usize]);
                let proof = consistency_proof(first, second, &lookup(tree));
                assert!(
                    verify_consistency(first, second, &first_root, &second_root, &proof),
                    "{first} -> {second}"
                );
                // The earlier tree as it would be had leaf 0 been rewritten.
                let mut rewritten = tree[..first as usize].to_vec();
                rewritten[0] = leaf_hash(b"rewritten");
                let forged_root = reference_root(&rewritten);
                assert!(!verify_consistency(
                    first,
                    second,
                    &forged_root,
                    &second_root,
                    &proof
                ));
            }
        }
    }

    #[test]
    fn proofs_ask_only_for_complete_aligned_subtrees_a_logarithmic_few() {
        let asked = needed(|lookup| inclusion_path(5, 1_000_000, &lookup));
        assert!(asked.len() <= 2 * 20, "{}", asked.len());
        for (level, index) in asked {
            assert!((index + 1) << level <= 1_000_000);
        }
    }
}
