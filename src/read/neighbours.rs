//! The rerank stage: a candidate is lifted by its neighbours, the turns
//! just before and after it in its session, when the question found them
//! too.
//!
//! In a conversation the words of a question are often in one turn and
//! the answer in the next ("what did you paint?" then "a sunset, with my
//! kids!"), and evidence spreads over a few turns in a row. Each turn is a
//! chunk of its own, ranked alone, so the reply that shares little with the
//! question ranks low while the turn that asked it ranks high. After the
//! rank stage, each of the best ranked candidates gains a share of the rank
//! weight of a better ranked neighbour in the pool, and moves up towards
//! it, never past it: what ranked first stays first.
//!
//! The stage works on ranks (`1 / (60 + rank)`, as reciprocal rank fusion),
//! not on scores, so it means the same under every fusion and combination a
//! policy chooses. Only what the pool holds lifts: a neighbour the question
//! did not find, or the asking channel may not see, lifts nothing and is
//! not brought in.
//!
//! Which candidates are neighbours comes from the candidates themselves:
//! the chunks projection stores with each turn the seq of the turn before
//! it in its session (`previous_turn`, read from the log), so the stage
//! reads nothing more from PostgreSQL.

use std::collections::HashMap;

use super::retrieve::Candidate;

/// Only this many of the best ranked candidates are reranked: a bundle
/// keeps a few dozen, and what ranked below stays below.
pub const DEPTH: usize = 100;

/// The rank constant, as in reciprocal rank fusion: a rank's weight is
/// `1 / (RANK_K + rank)`.
const RANK_K: f64 = 60.0;

/// What `provenance.neighbours` says of the stage.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, utoipa::ToSchema)]
pub struct NeighbourReport {
    /// Candidates reranked (the best ranked, at most 100).
    pub considered: usize,
    /// Of those, how many a better ranked neighbour lifted.
    pub lifted: usize,
}

/// Reorders the first [`DEPTH`] of `ranked` (best first): a candidate
/// whose neighbour (a candidate of the turn before or after, any of its
/// parts) ranked better gains `weight` times that neighbour's rank weight,
/// `1/(60 + rank)`, but never passes it. So the best ranked candidate stays
/// first, and a reply the question found moves up to follow the turn it
/// answers. Ties keep the rank stage's order; the rest follow unchanged.
/// `weight` 0 turns the stage off: nothing is considered or moved.
pub fn rerank(mut ranked: Vec<Candidate>, weight: f64) -> (Vec<Candidate>, NeighbourReport) {
    if weight <= 0.0 {
        return (ranked, NeighbourReport::default());
    }
    let depth = ranked.len().min(DEPTH);
    let mut report = NeighbourReport {
        considered: depth,
        lifted: 0,
    };
    let weight_of = |rank: usize| 1.0 / (RANK_K + rank as f64);
    // The best rank of each turn (of any of its parts), by its seq, and of
    // the turn after each turn: the one whose previous turn it is.
    let (mut best_rank, mut best_after) = (HashMap::new(), HashMap::new());
    for (rank, candidate) in ranked.iter().enumerate() {
        best_rank.entry(candidate.seq).or_insert(rank);
        if let Some(previous) = candidate.previous_turn {
            best_after.entry(previous).or_insert(rank);
        }
    }
    let mut scored: Vec<(f64, usize)> = ranked[..depth]
        .iter()
        .enumerate()
        .map(|(rank, candidate)| {
            let own = weight_of(rank);
            let before = candidate
                .previous_turn
                .and_then(|seq| best_rank.get(&seq).copied());
            let after = best_after.get(&candidate.seq).copied();
            let lifter = [before, after]
                .into_iter()
                .flatten()
                .filter(|neighbour| *neighbour < rank)
                .min();
            let Some(lifter) = lifter else {
                return (own, rank);
            };
            report.lifted += 1;
            // Just under the lifter: ranks are at least 1e-5 apart.
            let under = weight_of(lifter) - 1e-9;
            ((own + weight * weight_of(lifter)).min(under), rank)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut head: Vec<Option<Candidate>> = ranked.drain(..depth).map(Some).collect();
    let mut reordered: Vec<Candidate> = scored
        .into_iter()
        .map(|(_, rank)| head[rank].take().expect("each rank is taken once"))
        .collect();
    reordered.append(&mut ranked);
    (reordered, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::retrieve::tests::candidate;

    /// A turn at `seq` of one session whose turns are 1, 2, 3, ...: its
    /// previous turn is `seq - 1` (the test candidates' seq is 1000 less
    /// their age).
    fn turn(seq: i64) -> Candidate {
        let mut turn = candidate(&format!("c{seq}"), &[0], 5, 1_000 - seq, 0.5);
        turn.previous_turn = (seq > 1).then_some(seq - 1);
        turn
    }

    fn seqs(ranked: &[Candidate]) -> Vec<i64> {
        ranked.iter().map(|c| c.seq).collect()
    }

    #[test]
    fn a_reply_is_lifted_by_the_question_it_answers() {
        // Ranked best first: 3 asked what the question asks, 8 is far off,
        // 4 (the reply to 3) ranked last.
        let ranked: Vec<Candidate> = [3, 8, 6, 1, 4].into_iter().map(turn).collect();
        let (reranked, report) = rerank(ranked, 0.25);
        // 4 gains a quarter of rank 0's weight: above 8, 6 and 1, none of
        // which has a neighbour in the pool.
        assert_eq!(seqs(&reranked), vec![3, 4, 8, 6, 1]);
        assert_eq!(report.considered, 5);
        // 3 ranked better than its neighbour: nothing lifts it.
        assert_eq!(report.lifted, 1);
    }

    #[test]
    fn a_turn_is_lifted_by_the_reply_that_follows_it_too() {
        // 7 answered 6; the question found the answer first.
        let ranked: Vec<Candidate> = [7, 2, 9, 6].into_iter().map(turn).collect();
        let (reranked, report) = rerank(ranked, 0.25);
        assert_eq!(seqs(&reranked), vec![7, 6, 2, 9]);
        assert_eq!(report.lifted, 1);
    }

    #[test]
    fn a_lifted_candidate_never_passes_the_neighbour_that_lifted_it() {
        // 5 and 6 are adjacent, ranked second and third; 1 leads alone.
        let ranked: Vec<Candidate> = [1, 5, 6, 9].into_iter().map(turn).collect();
        // Even lifted by all of 5's weight, 6 stays under 5, and 5 under 1.
        for weight in [0.25, 1.0] {
            let (reranked, report) = rerank(ranked.clone(), weight);
            assert_eq!(seqs(&reranked), vec![1, 5, 6, 9]);
            assert_eq!(report.lifted, 1);
        }
    }

    #[test]
    fn without_neighbours_or_weight_the_order_is_the_rank_stages() {
        let ranked: Vec<Candidate> = [3, 8, 6, 1, 4].into_iter().map(turn).collect();
        let (same, report) = rerank(ranked.clone(), 0.0);
        assert_eq!(seqs(&same), vec![3, 8, 6, 1, 4]);
        assert_eq!(report.considered, 0);
        // Turns of other sessions, or other kinds: no previous turn.
        let alone: Vec<Candidate> = ranked
            .into_iter()
            .map(|mut c| {
                c.previous_turn = None;
                c
            })
            .collect();
        let (same, report) = rerank(alone, 0.25);
        assert_eq!(seqs(&same), vec![3, 8, 6, 1, 4]);
        assert_eq!(report.lifted, 0);
    }

    #[test]
    fn only_the_first_hundred_are_reranked() {
        let mut ranked: Vec<Candidate> = (1..=DEPTH as i64 + 1).map(|seq| turn(seq * 10)).collect();
        // The last one follows the leader, but it ranked past the depth.
        ranked.last_mut().unwrap().previous_turn = Some(10);
        let last = ranked.last().unwrap().seq;
        let (reranked, report) = rerank(ranked, 0.25);
        assert_eq!(reranked.last().unwrap().seq, last);
        assert_eq!(reranked.len(), DEPTH + 1);
        assert_eq!(report.considered, DEPTH);
    }
}
