//! Building one Active Context Bundle, as a pipeline of stages, each a
//! function of its own module:
//!
//! 1. **plan** ([`plan`]): where the log and projections stand and the
//!    query's lexemes, in one round trip (with `"consistency": "strong"`,
//!    after waiting, bounded, for projections to reach the head); the
//!    packet waiting for a receiving agent; whether to retrieve, and the
//!    question's vector started on its own task.
//! 2. **standing** ([`standing`]): the tenant's views, tasks and decisions
//!    from the cache, and the session's recent window from the log
//!    ([`crate::read::recent`]: only what an earlier bundle did not keep).
//! 3. **gather**, **rank**, **choose** ([`evidence`]): unless the path is
//!    fast, the candidate pool ([`crate::read::hybrid`]), its ranking
//!    ([`crate::read::retrieve::rank`]), and the choice
//!    ([`crate::read::choose`]), which leaves out what is superseded,
//!    rejected, conflicting, already shown or a near-duplicate.
//! 4. **pack** and **render** ([`crate::read::bundle`]): the sections by
//!    priority under the budget, and the prompt.
//!
//! Privacy filters apply at every source before anything is ranked; every
//! stage reads the same [`Context`].

mod evidence;
mod plan;
mod standing;

use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use super::omissions::Omission;
use super::omissions::Omissions;

use self::{evidence::Retrieval, plan::Plan, standing::StandingReport};
use super::{
    Reader,
    bundle::{self, Candidates, Section},
    filters::RetrievalFilters,
    hybrid::{SemanticReport, SemanticWork},
    policy::{Policy, Scoring, SectionName},
    privacy::{Filters, Visibility},
    recent::RecentReport,
};
use crate::domain::{FieldError, event::Channel, limits};

/// Longest `query_text` accepted.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// The request (PRD §7.2, plus `render`, `consistency`, `include_history`,
/// `handoff_id`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcbRequest {
    /// Optional: the tenant comes from the bearer token.
    pub tenant_id: Option<String>,
    /// The conversation: its recent events form the recent window.
    #[schema(min_length = 1, max_length = 256)]
    pub session_id: Option<String>,
    /// The agent the bundle is for: finds handoff packets addressed to it,
    /// and another agent's private memory is not its to see. An agent's
    /// token sets it (and refuses another); without one the bundle is the
    /// operator's, every agent's private memory included.
    pub agent_id: Option<String>,
    /// The channel the bundle will be used in; decides what it may hold.
    #[serde(default = "private")]
    #[schema(default = "private")]
    pub channel: Channel,
    /// At most 256 bytes. A fast-path intent (policy `fast_path_intents`:
    /// continue, acknowledge, ack, resume, thanks) skips retrieval.
    pub intent: Option<String>,
    /// What retrieval looks for, at most 16 KiB; none means no retrieval.
    pub query_text: Option<String>,
    /// Defaults to, and may not exceed, the policy's `max_tokens`.
    #[schema(minimum = 1)]
    pub max_tokens: Option<u32>,
    /// Also return the bundle as one prompt string.
    #[serde(default)]
    pub render: bool,
    #[serde(default)]
    pub consistency: Consistency,
    /// Show superseded decisions too. Default: when the query asks about
    /// history ("previously", "changed", "used to", ...).
    pub include_history: Option<bool>,
    /// A specific handoff packet for `agent_id` in `session_id`.
    pub handoff_id: Option<String>,
    /// A seq an append of the tenant answered with: the bundle reads a copy
    /// of the log that holds it (with a standby, waits for the standby to
    /// have replayed it, or reads the primary).
    #[schema(minimum = 1)]
    pub after: Option<i64>,
    /// Narrow retrieved evidence (lexical, semantic and pinned) to a time
    /// range, agents, sessions, kinds or tags. Standing sections (rules,
    /// decisions in force, tasks, the recent window) are not narrowed.
    #[serde(default, deserialize_with = "crate::domain::object")]
    pub filters: RetrievalFilters,
    /// A search rather than a bundle ([`super::search`]): at most this
    /// many memories, ranked and chosen as evidence is, decisions in force
    /// among them, with no other section and no budget.
    #[serde(skip)]
    pub search: Option<usize>,
}

fn private() -> Channel {
    Channel::Private
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Consistency {
    /// Use the projections as they are; provenance says how far behind.
    #[default]
    Eventual,
    /// Wait (up to the policy's timeout) until projections reach the log's
    /// head as of the request.
    Strong,
}

impl AcbRequest {
    /// Checks the fields and returns the budget.
    fn check(&self, policy: &Policy) -> Result<usize, FieldError> {
        for (field, value) in [
            ("session_id", &self.session_id),
            ("agent_id", &self.agent_id),
            ("handoff_id", &self.handoff_id),
        ] {
            if let Some(value) = value
                && (value.is_empty() || value.len() > limits::MAX_ID_BYTES)
            {
                return Err(FieldError::new(field, "must be 1-256 bytes"));
            }
        }
        if self.intent.as_ref().is_some_and(|i| i.len() > 256) {
            return Err(FieldError::new("intent", "must be at most 256 bytes"));
        }
        if let Some(query) = &self.query_text
            && query.len() > MAX_QUERY_BYTES
        {
            return Err(FieldError::new(
                "query_text",
                format!(
                    "is {} bytes; at most {MAX_QUERY_BYTES} allowed",
                    query.len()
                ),
            ));
        }
        self.filters.check()?;
        if self.after.is_some_and(|seq| seq < 1) {
            return Err(FieldError::new("after", "must be a seq, 1 or more"));
        }
        if self.handoff_id.is_some() && (self.agent_id.is_none() || self.session_id.is_none()) {
            return Err(FieldError::new(
                "handoff_id",
                "needs agent_id and session_id (the receiving agent and session)",
            ));
        }
        match self.max_tokens {
            None => Ok(policy.max_tokens as usize),
            Some(0) => Err(FieldError::new("max_tokens", "must be at least 1")),
            Some(asked) if asked > policy.max_tokens => Err(FieldError::new(
                "max_tokens",
                format!(
                    "is {asked}; this tenant's policy allows at most {}",
                    policy.max_tokens
                ),
            )),
            Some(asked) => Ok(asked as usize),
        }
    }
}

/// The response.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Acb {
    pub acb_id: String,
    pub budget_tokens: usize,
    /// Exact tokens of the rendered bundle (`prompt`), in the tenant's
    /// encoding.
    pub token_used_est: usize,
    pub sections: Vec<Section>,
    pub omissions: Vec<Omission>,
    pub provenance: Provenance,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Provenance {
    pub intent: Option<String>,
    /// `fast` (no retrieval) or `retrieval`.
    pub path: &'static str,
    /// The query's lexemes (PostgreSQL's English stems, at most 24).
    pub query_terms: Vec<String>,
    /// Those common in the tenant's memory (matching more chunks the channel
    /// may see than their share of the pool, or held by 2% of its newest
    /// 200): fetched together, as the newest chunks holding any of them,
    /// rather than each on its own.
    pub common_terms: Vec<String>,
    /// The semantic side of retrieval: embedder, its projection's lag,
    /// vector candidates, or why it was not used.
    pub semantic: SemanticReport,
    pub candidate_pool_size: usize,
    pub candidate_pool_max: u32,
    /// The rerank stage: how many of the best ranked candidates it
    /// considered, and how many their neighbours lifted.
    pub neighbours: crate::read::neighbours::NeighbourReport,
    /// Evidence chunks that survived filtering and dedupe, before packing.
    pub retrieved: usize,
    pub filters: Filters,
    /// The request's retrieval filters, as applied (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrieval_filters: Option<RetrievalFilters>,
    pub scoring: Scoring,
    pub dedupe: DedupeReport,
    pub history: bool,
    pub handoff_id: Option<String>,
    /// The log's head seq for the tenant.
    pub head_seq: i64,
    /// Every projection has applied the log up to here.
    pub projected_seq: i64,
    pub lag_events: i64,
    pub consistency: ConsistencyReport,
    /// Whether the tenant's views, decisions and tasks came from memory.
    pub cache: &'static str,
    /// How the recent window was read: its events, and how many of them
    /// came from the log rather than memory.
    pub recent_window: RecentReport,
    pub encoding: &'static str,
    pub elapsed_ms: f64,
    /// Where `elapsed_ms` went, stage by stage.
    pub stages_ms: StageTimes,
    /// What the semantic side's work cost this time (vectors compared,
    /// rows read or remembered, whether the model ran): unlike the rest of
    /// the provenance but the timings, `cache`, `recent_window` and
    /// `consistency`, it differs between two builds of the same bundle.
    pub diagnostics: SemanticWork,
    /// The version of the tenant's policy that built it (`GET /api/v1/policy`
    /// shows the current one; 0: the defaults, never changed).
    pub policy_version: i64,
    /// Which database it read (the primary, or a standby), and why.
    pub read: super::replica::ReadReport,
}

/// Milliseconds per stage of building a bundle. `prepare`: the log's head,
/// the tenant's views, tasks and decisions, the recent window;
/// `candidates`: the lexical and vector candidate pool (the question's
/// vector included); `rank`: scoring; `rerank`: the neighbours' lift;
/// `choose`: filters, standing, dedupe,
/// the decisions and evidence kept; `pack`: the token budget; `render`: the
/// prompt text (0 when not asked for).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct StageTimes {
    pub prepare: f64,
    pub candidates: f64,
    pub rank: f64,
    pub rerank: f64,
    pub choose: f64,
    pub pack: f64,
    pub render: f64,
}

/// Times the stages of one bundle, one after the other.
struct Clock {
    started: Instant,
    lap_started: Instant,
    times: StageTimes,
}

impl Clock {
    fn start() -> Self {
        let now = Instant::now();
        Self {
            started: now,
            lap_started: now,
            times: StageTimes::default(),
        }
    }

    /// Milliseconds since the last lap (or the start), and a new lap.
    fn lap(&mut self) -> f64 {
        let now = Instant::now();
        let ms = (now - self.lap_started).as_secs_f64() * 1e3;
        self.lap_started = now;
        ms
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DedupeReport {
    /// Candidates collapsed into a better ranked near-duplicate.
    pub collapsed: usize,
    pub similarity: f64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ConsistencyReport {
    pub requested: Consistency,
    pub caught_up: bool,
    pub waited_ms: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum AcbError {
    #[error("{0}")]
    Invalid(FieldError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What every stage of one bundle reads: whose bundle, what was asked,
/// under which policy and budget, and what the asking channel and agent
/// may see.
struct Context<'a> {
    reader: &'a Reader,
    tenant: &'a str,
    request: &'a AcbRequest,
    policy: &'a Policy,
    max_tokens: usize,
    visibility: Visibility<'a>,
}

/// Builds the bundle `request` asks for from `reader`'s database.
pub async fn build_acb(
    reader: &Reader,
    tenant: &str,
    request: AcbRequest,
) -> Result<Acb, AcbError> {
    let _building = reader.building.start();
    let mut clock = Clock::start();
    let policy = reader.cache.policy(&reader.policy_pool, tenant).await?;
    let ctx = Context {
        reader,
        tenant,
        request: &request,
        policy: &policy,
        max_tokens: request.check(&policy).map_err(AcbError::Invalid)?,
        visibility: Visibility::new(request.channel).for_agent(request.agent_id.as_deref()),
    };
    let mut omissions = Omissions::default();

    let mut plan = plan::plan(&ctx, &mut omissions).await?;
    let standing = standing::standing(&ctx, &plan, &mut omissions).await?;
    let mut evidence = evidence::chooser(&ctx, &plan, &standing);
    let first = evidence::first(&ctx, &plan, &standing).await?;
    evidence
        .consider(reader, tenant, ctx.visibility, first, &mut omissions)
        .await?;
    let retrieval = match plan.question.take() {
        Some(question) => {
            evidence::retrieve(
                &ctx,
                &plan,
                &standing,
                question,
                &mut evidence,
                &mut clock,
                &mut omissions,
            )
            .await?
        }
        None => Retrieval::fast_path(),
    };
    let decisions = match request.search {
        Some(_) => Vec::new(),
        None => {
            standing::decision_items(&ctx, &plan, &standing.state, &evidence, &mut omissions)
                .await?
        }
    };
    evidence.finish(reader, tenant, &mut omissions).await?;
    let lap = clock.lap();
    if plan.fast {
        clock.times.prepare = lap;
    } else {
        clock.times.choose = lap;
    }
    let chosen = Chosen {
        retrieved: evidence.items.len(),
        collapsed: evidence.collapsed,
    };

    let (sections, standing) = standing.into_sections(decisions, evidence.items);
    let (sections, token_used_est, left) = pack(&ctx, sections);
    clock.times.pack = clock.lap();
    omissions.budget(left);
    let prompt = request.render.then(|| bundle::render(&sections));
    clock.times.render = clock.lap();

    let provenance = provenance(&ctx, plan, retrieval, chosen, standing, clock);
    let acb = Acb {
        acb_id: crate::domain::new_id("acb"),
        budget_tokens: ctx.max_tokens,
        token_used_est,
        sections,
        omissions: omissions.into_list(),
        provenance,
        prompt,
    };
    tracing::debug!(
        tenant,
        acb_id = %acb.acb_id,
        tokens = acb.token_used_est,
        path = acb.provenance.path,
        pool = acb.provenance.candidate_pool_size,
        elapsed_ms = acb.provenance.elapsed_ms,
        "bundle built"
    );
    Ok(acb)
}

/// What the choose stage kept, for provenance.
struct Chosen {
    retrieved: usize,
    collapsed: usize,
}

/// The pack stage: a bundle's sections under its budget; a search's
/// evidence whole, with no budget to pack into.
fn pack(ctx: &Context<'_>, sections: Vec<Candidates>) -> (Vec<Section>, usize, Vec<bundle::Left>) {
    match ctx.request.search {
        Some(_) => bundle::unbudgeted(
            &ctx.reader.costs,
            sections
                .into_iter()
                .filter(|c| c.name == SectionName::RetrievedEvidence)
                .collect(),
        ),
        None => bundle::pack(ctx.policy, ctx.max_tokens, &ctx.reader.costs, sections),
    }
}

/// How the bundle was made.
fn provenance(
    ctx: &Context<'_>,
    plan: Plan,
    mut retrieval: Retrieval,
    chosen: Chosen,
    standing: StandingReport,
    clock: Clock,
) -> Provenance {
    let (request, policy, head) = (ctx.request, ctx.policy, plan.head);
    Provenance {
        intent: request.intent.clone(),
        path: if plan.fast { "fast" } else { "retrieval" },
        query_terms: head.lexemes,
        common_terms: retrieval.common_terms,
        diagnostics: std::mem::take(&mut retrieval.semantic.work),
        semantic: retrieval.semantic,
        candidate_pool_size: retrieval.pool_size,
        neighbours: retrieval.neighbours,
        candidate_pool_max: policy.candidate_pool_max,
        retrieved: chosen.retrieved,
        filters: ctx.visibility.filters(),
        retrieval_filters: (!request.filters.is_empty()).then(|| request.filters.clone()),
        scoring: policy.scoring,
        dedupe: DedupeReport {
            collapsed: chosen.collapsed,
            similarity: policy.duplicate_similarity,
        },
        history: plan.history,
        handoff_id: plan.handoff.map(|h| h.handoff_id),
        head_seq: head.head_seq,
        projected_seq: head.projected_seq.min(head.head_seq),
        lag_events: (head.head_seq - head.projected_seq).max(0),
        consistency: ConsistencyReport {
            requested: request.consistency,
            caught_up: head.projected_seq >= head.head_seq,
            waited_ms: plan.waited.as_secs_f64() * 1e3,
        },
        cache: if standing.cached { "hit" } else { "miss" },
        recent_window: standing.recent_window,
        encoding: ctx.reader.counter.encoding().name(),
        elapsed_ms: clock.started.elapsed().as_secs_f64() * 1e3,
        stages_ms: clock.times,
        policy_version: policy.version,
        read: super::replica::ReadReport::primary(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn requests_are_checked_against_the_policy() {
        let policy = Policy::default();
        let request = |body: Value| -> AcbRequest { serde_json::from_value(body).unwrap() };
        assert_eq!(request(json!({})).check(&policy), Ok(65_000));
        assert_eq!(
            request(json!({"max_tokens": 2000})).check(&policy),
            Ok(2_000)
        );
        assert_eq!(
            request(json!({"max_tokens": 70_000}))
                .check(&policy)
                .unwrap_err()
                .field,
            "max_tokens"
        );
        assert_eq!(
            request(json!({"max_tokens": 0}))
                .check(&policy)
                .unwrap_err()
                .field,
            "max_tokens"
        );
        assert_eq!(
            request(json!({"session_id": ""}))
                .check(&policy)
                .unwrap_err()
                .field,
            "session_id"
        );
        assert_eq!(
            request(json!({"query_text": "x".repeat(MAX_QUERY_BYTES + 1)}))
                .check(&policy)
                .unwrap_err()
                .field,
            "query_text"
        );
        assert_eq!(
            request(json!({"handoff_id": "evt_1"}))
                .check(&policy)
                .unwrap_err()
                .field,
            "handoff_id"
        );
    }
}
