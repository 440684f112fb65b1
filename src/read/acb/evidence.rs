//! Retrieved evidence: what comes first (a packet's evidence or pinned
//! memory), then the stages of retrieval: gather the candidate pool, rank
//! it, rerank it by the neighbours of what ranked best, and choose (in
//! [`crate::read::choose`]) what the bundle keeps.

use serde_json::{Map, json};

use super::{
    Clock, Context,
    plan::{Head, Plan},
    standing::Standing,
};
use crate::{
    domain::event::Channel,
    read::{
        choose::Evidence,
        hybrid::{self, Question, SemanticReport},
        neighbours::{self, NeighbourReport},
        omissions::{OMISSION_IDS_SHOWN, Omissions, details},
        policy::{Policy, SectionName},
        retrieve::{self, Candidate, LeftOut},
    },
};

impl Retrieval {
    /// What a bundle that does not retrieve reports.
    pub(super) fn fast_path() -> Self {
        Self {
            semantic: SemanticReport {
                reason: Some("fast path: no retrieval".to_owned()),
                ..SemanticReport::default()
            },
            ..Self::default()
        }
    }
}

/// The choose stage's state for this bundle: a search keeps its `k` best
/// results, decisions included; a bundle keeps the policy's number of
/// items within its budget, beside what its other sections show.
pub(super) fn chooser(ctx: &Context<'_>, plan: &Plan, standing: &Standing) -> Evidence {
    let policy = ctx.policy;
    match ctx.request.search {
        Some(k) => Evidence::new(
            k,
            usize::MAX,
            policy,
            plan.history,
            Default::default(),
            Default::default(),
            standing.state.clone(),
        )
        .keeping_decisions(),
        None => Evidence::new(
            match &plan.handoff {
                Some(_) => policy.handoff_evidence_max as usize,
                None => policy.retrieved_max as usize,
            },
            ctx.max_tokens,
            policy,
            plan.history,
            standing.recent.iter().map(|item| item.id.clone()).collect(),
            standing.tasks.iter().map(|task| task.id.clone()).collect(),
            standing.state.clone(),
        ),
    }
}

/// What comes first, on either path, while it fits: a receiving agent's
/// packet evidence, otherwise the tenant's pinned memory (not in a search:
/// what it finds is what the question matches).
pub(super) async fn first(
    ctx: &Context<'_>,
    plan: &Plan,
    standing: &Standing,
) -> Result<Vec<Candidate>, sqlx::Error> {
    let (reader, tenant, visibility) = (ctx.reader, ctx.tenant, ctx.visibility);
    Ok(match &plan.handoff {
        Some(packet) => retrieve::by_refs(&reader.pool, tenant, &packet.refs, visibility).await?,
        None if standing.state.any_pinned && ctx.request.search.is_none() => {
            let limit = (ctx.policy.retrieved_max / 2).max(1).into();
            retrieve::pinned(&reader.pool, tenant, visibility, &plan.scope, limit).await?
        }
        None => Vec::new(),
    })
}

/// Retrieval for the question: gather the candidate pool, rank it, and
/// let `evidence` choose from it; then name what the question matched but
/// the bundle may not show. Each stage's time goes to `clock`.
pub(super) async fn retrieve(
    ctx: &Context<'_>,
    plan: &Plan,
    standing: &Standing,
    question: Result<Question, String>,
    evidence: &mut Evidence,
    clock: &mut Clock,
    omissions: &mut Omissions,
) -> Result<Retrieval, sqlx::Error> {
    clock.times.prepare = clock.lap();
    let pool = gather(ctx, plan, standing, question).await?;
    clock.times.candidates = clock.lap();
    let similarity_floor = ctx.policy.scoring.min_similarity.or_else(|| {
        let embedder = plan.head.embedding.embedder.as_deref()?;
        ctx.reader.semantic.unrelated_similarity(embedder)
    });
    let (ranked, mut retrieval) = rank(pool, &plan.head, ctx.policy, similarity_floor);
    clock.times.rank = clock.lap();
    let ranked = rerank(ctx, ranked, &mut retrieval);
    clock.times.rerank = clock.lap();
    if ranked.is_empty() {
        omissions.nothing_relevant(details(&[
            ("unrelated", json!(retrieval.unrelated.dropped)),
            (
                "similarity_floor",
                json!(retrieval.semantic.similarity_floor),
            ),
            (
                "best_similarity",
                json!(
                    retrieval
                        .unrelated
                        .best_similarity
                        .map(|s| (s * 1000.0).round() / 1000.0)
                ),
            ),
        ]));
    }
    evidence
        .consider(ctx.reader, ctx.tenant, ctx.visibility, ranked, omissions)
        .await?;
    kept_out_of_retrieval(ctx, plan, !standing.state.retracted.is_empty(), omissions).await?;
    Ok(retrieval)
}

/// The gather stage: the lexical and vector candidates of the question.
async fn gather(
    ctx: &Context<'_>,
    plan: &Plan,
    standing: &Standing,
    question: Result<Question, String>,
) -> Result<hybrid::Pool, sqlx::Error> {
    let head = &plan.head;
    let mut pool = hybrid::candidates(
        ctx.reader,
        ctx.tenant,
        question,
        &head.lexemes,
        (head.head_seq, head.projected_seq),
        &head.embedding,
        ctx.visibility,
        &plan.scope,
        ctx.policy,
    )
    .await?;
    // The embeddings projection may not have folded a retraction the
    // chunks projection has (it runs apart, behind it): a withdrawn
    // chunk's vector, and the row the vector index remembers for it, can
    // still be found by meaning until it does.
    let retracted = &standing.state.retracted;
    if !retracted.is_empty() {
        pool.candidates
            .retain(|candidate| !retracted.contains(candidate.event_id()));
    }
    Ok(pool)
}

/// The rerank stage: the best ranked candidates lifted by their neighbours
/// in the pool ([`neighbours`]), as much as the policy weighs them.
fn rerank(ctx: &Context<'_>, ranked: Vec<Candidate>, retrieval: &mut Retrieval) -> Vec<Candidate> {
    let (reranked, report) = neighbours::rerank(ranked, ctx.policy.scoring.neighbour_weight);
    retrieval.neighbours = report;
    reranked
}

/// What the question would have retrieved but the channel may not see
/// (`privacy`), the tenant's retention forgot (`retention`) or a
/// retraction withdrew (`retracted`, asked only of a tenant with any):
/// omissions, ids only.
async fn kept_out_of_retrieval(
    ctx: &Context<'_>,
    plan: &Plan,
    any_retracted: bool,
    omissions: &mut Omissions,
) -> Result<(), sqlx::Error> {
    let (channel, scope) = (ctx.request.channel, &plan.scope);
    let asked = [
        (channel != Channel::Private, LeftOut::Withheld),
        (!scope.forgetting.is_empty(), LeftOut::Forgotten),
        (any_retracted, LeftOut::Retracted),
    ];
    for (_, why) in asked.into_iter().filter(|(asked, _)| *asked) {
        let ids = retrieve::left_out(
            &ctx.reader.pool,
            &ctx.reader.keyring,
            ctx.tenant,
            &plan.head.lexemes,
            ctx.visibility,
            scope,
            why,
            OMISSION_IDS_SHOWN as i64,
        )
        .await?;
        for id in ids {
            omissions.add(
                why.reason(),
                Some(SectionName::RetrievedEvidence),
                id,
                Map::new(),
            );
        }
    }
    Ok(())
}

/// What the retrieval path reports in `provenance`.
#[derive(Default)]
pub(super) struct Retrieval {
    pub(super) semantic: SemanticReport,
    pub(super) pool_size: usize,
    pub(super) common_terms: Vec<String>,
    /// Candidates that shared nothing with the question.
    pub(super) unrelated: retrieve::Unrelated,
    pub(super) neighbours: NeighbourReport,
}

/// The rank stage: the candidates that share something with the question
/// ([`retrieve::related`]: a word, or a meaning above `similarity_floor`),
/// scored and ordered, best first, and what provenance says of the pool.
fn rank(
    mut pool: hybrid::Pool,
    head: &Head,
    policy: &Policy,
    similarity_floor: Option<f64>,
) -> (Vec<Candidate>, Retrieval) {
    let floor = pool.semantic.used.then_some(similarity_floor).flatten();
    pool.semantic.similarity_floor = floor;
    let pool_size = pool.candidates.len();
    let (related, unrelated) = retrieve::related(pool.candidates, floor);
    let retrieval = Retrieval {
        neighbours: NeighbourReport::default(),
        semantic: pool.semantic,
        pool_size,
        unrelated,
        common_terms: head
            .lexemes
            .iter()
            .zip(&pool.common)
            .filter(|(_, common)| **common)
            .map(|(lexeme, _)| lexeme.clone())
            .collect(),
    };
    let ranked = retrieve::rank(
        related,
        head.lexemes.len(),
        head.head_seq,
        head.newest,
        &policy.scoring,
    );
    (ranked, retrieval)
}
