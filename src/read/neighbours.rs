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

use std::collections::HashMap;

use sqlx::PgPool;

use super::retrieve::Candidate;
use memd_projectors::event::Kind;

/// Only this many of the best ranked candidates are reranked (and their
/// neighbours looked up): a bundle keeps a few dozen, and what ranked
/// below stays below.
pub const DEPTH: usize = 100;

/// The rank constant, as in reciprocal rank fusion: a rank's weight is
/// `1 / (RANK_K + rank)`.
const RANK_K: f64 = 60.0;

/// Kinds that take turns in a session: a neighbour of one of them is the
/// previous or next event of these kinds in the same session.
const TURN_KINDS: [Kind; 3] = [Kind::Message, Kind::ToolCall, Kind::ToolResult];

/// What `provenance.neighbours` says of the stage.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, utoipa::ToSchema)]
pub struct NeighbourReport {
    /// Candidates reranked (the best ranked, at most 100).
    pub considered: usize,
    /// Of those, how many had a neighbour in the pool that lifted them.
    pub lifted: usize,
}

/// Each turn's neighbours in its session, by the turn's seq: the seq of the
/// turn before it and of the turn after it, where there is one.
pub type Adjacency = HashMap<i64, (Option<i64>, Option<i64>)>;

/// The neighbours of the turns among the first [`DEPTH`] of `ranked`, read
/// from the log (seqs only; what a neighbour says is never read here).
pub async fn adjacency(
    pool: &PgPool,
    tenant: &str,
    ranked: &[Candidate],
) -> Result<Adjacency, sqlx::Error> {
    let mut seqs: Vec<i64> = ranked
        .iter()
        .take(DEPTH)
        .filter(|c| c.kind.is_some_and(|kind| TURN_KINDS.contains(&kind)))
        .map(|c| c.seq)
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    if seqs.is_empty() {
        return Ok(Adjacency::new());
    }
    let kinds: Vec<&str> = TURN_KINDS.iter().map(|kind| kind.as_str()).collect();
    let rows: Vec<(i64, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT e.seq,
                (SELECT p.seq FROM events p
                  WHERE p.tenant_id = $1 AND p.session_id = e.session_id AND p.seq < e.seq
                    AND p.kind = ANY($3)
                  ORDER BY p.seq DESC LIMIT 1),
                (SELECT n.seq FROM events n
                  WHERE n.tenant_id = $1 AND n.session_id = e.session_id AND n.seq > e.seq
                    AND n.kind = ANY($3)
                  ORDER BY n.seq ASC LIMIT 1)
           FROM events e
          WHERE e.tenant_id = $1 AND e.seq = ANY($2)",
    )
    .bind(tenant)
    .bind(&seqs)
    .bind(&kinds)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, before, after)| (seq, (before, after)))
        .collect())
}

/// Reorders the first [`DEPTH`] of `ranked` (best first): a candidate
/// whose neighbour (a candidate of the turn before or after, any of its
/// parts) ranked better gains `weight` times that neighbour's rank weight,
/// `1/(60 + rank)`, but never passes it. So the best ranked candidate stays
/// first, and a reply the question found moves up to follow the turn it
/// answers. Ties keep the rank stage's order; the rest follow unchanged.
/// `weight` 0 changes nothing.
pub fn rerank(
    mut ranked: Vec<Candidate>,
    adjacency: &Adjacency,
    weight: f64,
) -> (Vec<Candidate>, NeighbourReport) {
    let depth = ranked.len().min(DEPTH);
    let mut report = NeighbourReport {
        considered: depth,
        lifted: 0,
    };
    if weight <= 0.0 || adjacency.is_empty() {
        return (ranked, report);
    }
    let weight_of = |rank: usize| 1.0 / (RANK_K + rank as f64);
    // The best rank of each event's parts.
    let mut best_rank: HashMap<i64, usize> = HashMap::new();
    for (rank, candidate) in ranked.iter().enumerate() {
        best_rank.entry(candidate.seq).or_insert(rank);
    }
    let mut scored: Vec<(f64, usize)> = ranked[..depth]
        .iter()
        .enumerate()
        .map(|(rank, candidate)| {
            let own = weight_of(rank);
            let lifter = adjacency
                .get(&candidate.seq)
                .into_iter()
                .flat_map(|(before, after)| [*before, *after])
                .flatten()
                .filter_map(|seq| best_rank.get(&seq).copied())
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

    /// A message at `seq` (the test candidates' seq is 1000 less their age).
    fn turn(seq: i64) -> Candidate {
        candidate(&format!("c{seq}"), &[0], 5, 1_000 - seq, 0.5)
    }

    fn seqs(ranked: &[Candidate]) -> Vec<i64> {
        ranked.iter().map(|c| c.seq).collect()
    }

    /// Ten turns of one session, seq 1..=10, each next to the one before.
    fn one_session() -> Adjacency {
        (1..=10)
            .map(|seq| {
                let before = (seq > 1).then_some(seq - 1);
                let after = (seq < 10).then_some(seq + 1);
                (seq, (before, after))
            })
            .collect()
    }

    #[test]
    fn a_reply_is_lifted_by_the_question_it_answers() {
        // Ranked best first: 3 asked what the question asks, 8 is far off,
        // 4 (the reply to 3) ranked last.
        let ranked: Vec<Candidate> = [3, 8, 6, 1, 4].into_iter().map(turn).collect();
        let (reranked, report) = rerank(ranked, &one_session(), 0.25);
        // 4 gains a quarter of rank 0's weight: above 8, 6 and 1, none of
        // which has a neighbour in the pool.
        assert_eq!(seqs(&reranked), vec![3, 4, 8, 6, 1]);
        assert_eq!(report.considered, 5);
        // 3 ranked better than its neighbour: nothing lifts it.
        assert_eq!(report.lifted, 1);
    }

    #[test]
    fn a_lifted_candidate_never_passes_the_neighbour_that_lifted_it() {
        // 5 and 6 are adjacent, ranked second and third; 1 leads alone.
        let ranked: Vec<Candidate> = [1, 5, 6, 9].into_iter().map(turn).collect();
        // Even lifted by all of 5's weight, 6 stays under 5, and 5 under 1.
        for weight in [0.25, 1.0] {
            let (reranked, report) = rerank(ranked.clone(), &one_session(), weight);
            assert_eq!(seqs(&reranked), vec![1, 5, 6, 9]);
            assert_eq!(report.lifted, 1);
        }
    }

    #[test]
    fn without_neighbours_or_weight_the_order_is_the_rank_stages() {
        let ranked: Vec<Candidate> = [3, 8, 6, 1, 4].into_iter().map(turn).collect();
        let (same, _) = rerank(ranked.clone(), &one_session(), 0.0);
        assert_eq!(seqs(&same), vec![3, 8, 6, 1, 4]);
        let (same, report) = rerank(ranked, &Adjacency::new(), 0.25);
        assert_eq!(seqs(&same), vec![3, 8, 6, 1, 4]);
        assert_eq!(report.lifted, 0);
    }

    #[test]
    fn turns_of_other_sessions_do_not_lift_each_other() {
        // 3 and 4 are adjacent seqs but of two sessions: neither is the
        // other's neighbour.
        let adjacency: Adjacency = [(3, (None, Some(7))), (4, (Some(2), None))].into();
        let ranked: Vec<Candidate> = [3, 8, 6, 4].into_iter().map(turn).collect();
        let (reranked, report) = rerank(ranked, &adjacency, 0.25);
        assert_eq!(seqs(&reranked), vec![3, 8, 6, 4]);
        assert_eq!(report.lifted, 0);
    }

    #[test]
    fn only_the_first_hundred_are_reranked() {
        let ranked: Vec<Candidate> = (1..=DEPTH as i64 + 1).map(|seq| turn(seq * 10)).collect();
        // The last one's neighbour leads, but it ranked past the depth.
        let last = ranked.last().unwrap().seq;
        let adjacency: Adjacency = [(last, (Some(10), None)), (10, (None, Some(last)))].into();
        let (reranked, _) = rerank(ranked, &adjacency, 0.25);
        assert_eq!(reranked.last().unwrap().seq, last);
        assert_eq!(reranked.len(), DEPTH + 1);
    }
}
