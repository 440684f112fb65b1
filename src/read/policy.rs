//! A tenant's bundle policy: section caps and priorities (PRD §8.1), scoring
//! weights (§8.2), the bounds of retrieval, the fast-path intents. Stored
//! per tenant in `policies`, edited through `PUT /api/v1/policy`, exported
//! as the JSON document `GET /api/v1/policy` returns.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;

use super::retention::Retention;
use crate::domain::{FieldError, parse_json};

/// No bundle is ever larger than this, whatever the policy says.
pub const MAX_BUNDLE_TOKENS: u32 = 65_000;

/// At most this many views may have a limit (`view_limits`).
const MAX_VIEW_LIMITS: usize = 256;
/// The PRD's bounds on retrieval.
pub const MAX_CANDIDATE_POOL: u32 = 2_000;
pub const MAX_RETRIEVED: u32 = 200;
/// A receiving agent's bundle holds at most this many evidence chunks (A6).
pub const MAX_HANDOFF_EVIDENCE: u32 = 20;

/// The sections of a bundle, in the order they are rendered.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SectionName {
    Identity,
    Rules,
    HandoffPacket,
    TaskState,
    DecisionLedger,
    RetrievedEvidence,
    RecentWindow,
}

impl SectionName {
    pub const ALL: [SectionName; 7] = [
        Self::Identity,
        Self::Rules,
        Self::HandoffPacket,
        Self::TaskState,
        Self::DecisionLedger,
        Self::RetrievedEvidence,
        Self::RecentWindow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Rules => "rules",
            Self::HandoffPacket => "handoff_packet",
            Self::TaskState => "task_state",
            Self::DecisionLedger => "decision_ledger",
            Self::RetrievedEvidence => "retrieved_evidence",
            Self::RecentWindow => "recent_window",
        }
    }

    /// The letter of its items' handles (`[E3]`): one per section, so no
    /// two items of a bundle share a handle.
    pub fn handle_prefix(self) -> char {
        match self {
            Self::Identity => 'I',
            Self::Rules => 'V',
            Self::HandoffPacket => 'H',
            Self::TaskState => 'T',
            Self::DecisionLedger => 'D',
            Self::RetrievedEvidence => 'E',
            Self::RecentWindow => 'R',
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionPolicy {
    /// Tokens at the policy's full budget; scaled down with smaller ones.
    pub cap: u32,
    /// Higher is filled first.
    pub priority: u8,
}

const fn section(cap: u32, priority: u8) -> SectionPolicy {
    SectionPolicy { cap, priority }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
#[schema(default)]
pub struct Sections {
    pub identity: SectionPolicy,
    pub rules: SectionPolicy,
    pub task_state: SectionPolicy,
    pub decision_ledger: SectionPolicy,
    pub retrieved_evidence: SectionPolicy,
    pub recent_window: SectionPolicy,
    pub handoff_packet: SectionPolicy,
}

impl Default for Sections {
    /// PRD §8.1.
    fn default() -> Self {
        Self {
            identity: section(1_200, 10),
            rules: section(6_000, 9),
            task_state: section(3_000, 8),
            decision_ledger: section(4_000, 7),
            retrieved_evidence: section(28_000, 6),
            recent_window: section(8_000, 5),
            handoff_packet: section(6_000, 7),
        }
    }
}

impl Sections {
    pub fn get(&self, name: SectionName) -> SectionPolicy {
        match name {
            SectionName::Identity => self.identity,
            SectionName::Rules => self.rules,
            SectionName::HandoffPacket => self.handoff_packet,
            SectionName::TaskState => self.task_state,
            SectionName::DecisionLedger => self.decision_ledger,
            SectionName::RetrievedEvidence => self.retrieved_evidence,
            SectionName::RecentWindow => self.recent_window,
        }
    }
}

/// `score = alpha·relevance + beta·recency + gamma·importance` (PRD §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
#[schema(default)]
pub struct Scoring {
    pub alpha: f64,
    pub beta: f64,
    pub gamma: f64,
    /// Recency halves every this many hours of age, counted back from the
    /// tenant's newest event.
    pub recency_half_life_hours: f64,
    /// Candidates less relevant than this share of the best one are not
    /// retrieved: recency and importance reorder relevant memory, they do
    /// not bring in memory that merely shares a common word.
    pub min_relevance: f64,
    /// How relevance fuses the lexical (BM25) and semantic (embedding)
    /// scores: `weighted` adds each score normalised over the pool,
    /// `rrf` adds reciprocal ranks (k = 60).
    pub fusion: Fusion,
    /// The lexical score's weight in relevance; 0 ranks by meaning alone.
    pub lexical_weight: f64,
    /// The semantic score's weight in relevance; 0 is lexical retrieval
    /// alone (no vector candidates either).
    pub semantic_weight: f64,
    /// How relevance, recency and importance make the score: `gated`
    /// (default) scales relevance by them, `sum` adds them (PRD §8.2 as
    /// written).
    pub combine: Combine,
    /// Nearest chunks by meaning added to the candidate pool, at most half
    /// of `candidate_pool_max` (the lexical candidates get the rest).
    pub semantic_candidates: u32,
    /// The absolute floor of meaning: a candidate that shares no word with
    /// the question is evidence only if its cosine similarity reaches this.
    /// `null` (default): the embedder's calibrated value (0.2 for MiniLM:
    /// texts of unrelated meaning stay under it), which
    /// `provenance.semantic.similarity_floor` shows. `min_relevance` is
    /// relative to the best candidate; this one is not, so a question about
    /// nothing the tenant holds gets no evidence.
    #[schema(minimum = -1.0, maximum = 1.0)]
    pub min_similarity: Option<f64>,
    /// How much a better ranked neighbour (the turn before or after in the
    /// same session, when the question found it too) lifts a candidate in
    /// the rerank stage, as a share of the neighbour's rank weight, never
    /// past it: a reply is found through the turn it answers. 0 turns the
    /// stage off.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub neighbour_weight: f64,
    /// How the question is embedded: `int8` (default) in 8-bit integers,
    /// about three times as cheap; `exact` in the model's own f32
    /// arithmetic, as the stored vectors are, for semantic rankings equal
    /// to an exact cosine search with the model (the 8-bit vector is
    /// within a cosine of 0.999 of it, which reorders near ties).
    pub question_precision: QuestionPrecision,
}

/// How a bundle's question is embedded.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum QuestionPrecision {
    /// In 8-bit integers ([`memd_embedder::Embedder::embed_questions`]).
    #[default]
    Int8,
    /// As the tenant's stored vectors are computed
    /// ([`memd_embedder::Embedder::embed`]).
    Exact,
}

/// How relevance, recency and importance become one score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// `relevance · (α + β·recency + γ·importance) / (α + β + γ)`: recency
    /// and importance reorder relevant memory (a recent, important chunk
    /// counts up to (α+β+γ)/α times as much as an old, unimportant one of
    /// the same relevance) and never lift irrelevant memory.
    #[default]
    Gated,
    /// `α·relevance + β·recency + γ·importance`: a recent chunk of little
    /// relevance can outrank an older one of much more.
    Sum,
}

/// How the lexical and semantic scores become one relevance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// `(lexical_weight·bm25/best + semantic_weight·cos_norm) / (sum of
    /// weights)`, with the cosine min-max normalised over the pool.
    #[default]
    Weighted,
    /// `sum of weight/(60 + rank)`, over each score's ranking of the pool.
    Rrf,
}

impl Default for Scoring {
    fn default() -> Self {
        Self {
            alpha: 0.6,
            beta: 0.3,
            gamma: 0.1,
            recency_half_life_hours: 24.0 * 7.0,
            min_relevance: 0.2,
            fusion: Fusion::default(),
            combine: Combine::default(),
            lexical_weight: 0.5,
            semantic_weight: 0.5,
            semantic_candidates: 200,
            min_similarity: None,
            neighbour_weight: 0.25,
            question_precision: QuestionPrecision::default(),
        }
    }
}

/// A tenant's bundle policy. Fields left out of a `PUT` take these defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
#[schema(default)]
pub struct Policy {
    /// The largest `max_tokens` a request may ask for, and the default.
    pub max_tokens: u32,
    #[serde(deserialize_with = "crate::domain::object")]
    pub sections: Sections,
    /// Headroom left free for the caller's own payload, at the full budget.
    pub reserve: u32,
    #[serde(deserialize_with = "crate::domain::object")]
    pub scoring: Scoring,
    pub candidate_pool_max: u32,
    pub retrieved_max: u32,
    /// Intents answered from views, tasks, decisions and the recent window
    /// only, without retrieval.
    pub fast_path_intents: Vec<String>,
    /// Events of the session read for the recent window.
    pub recent_window_events: u32,
    /// Two chunks whose word sets overlap at least this much (Jaccard) are
    /// the same fact said twice; only the better ranked one is kept.
    pub duplicate_similarity: f64,
    /// How long `"consistency": "strong"` waits for projections.
    #[schema(maximum = 30_000)]
    pub strong_consistency_timeout_ms: u64,
    pub handoff_evidence_max: u32,
    /// What memory stops being retrievable as it ages (none by default).
    #[serde(deserialize_with = "crate::domain::object")]
    pub retention: Retention,
    /// Memory blocks: the most tokens a view may hold, by view name
    /// (`{"persona": 500}`). A `view_update` whose text is longer is
    /// refused. Views not named have no limit of their own.
    #[serde(deserialize_with = "crate::domain::object")]
    pub view_limits: BTreeMap<String, u32>,
    /// The stored policy's version (raised by every change; 0: the
    /// defaults). Not part of the document: it says which one this is.
    #[serde(skip)]
    #[schema(ignore)]
    pub version: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_tokens: MAX_BUNDLE_TOKENS,
            sections: Sections::default(),
            reserve: 8_800,
            scoring: Scoring::default(),
            candidate_pool_max: MAX_CANDIDATE_POOL,
            retrieved_max: MAX_RETRIEVED,
            fast_path_intents: ["continue", "acknowledge", "ack", "resume", "thanks"]
                .map(str::to_owned)
                .to_vec(),
            recent_window_events: 50,
            duplicate_similarity: 0.6,
            strong_consistency_timeout_ms: 2_000,
            handoff_evidence_max: MAX_HANDOFF_EVIDENCE,
            retention: Retention::default(),
            view_limits: BTreeMap::new(),
            version: 0,
        }
    }
}

impl Policy {
    /// Parses and checks a policy document; absent fields take their
    /// defaults. Errors name the field.
    pub fn parse(document: Value) -> Result<Self, FieldError> {
        let policy: Policy = parse_json("", document)?;
        policy.check()?;
        Ok(policy)
    }

    // Long on purpose: one bound per field, in the document's order, each
    // naming its field; split, the list would be harder to check against
    // the policy's fields.
    fn check(&self) -> Result<(), FieldError> {
        let within = |field: &str, value: f64, low: f64, high: f64| {
            if value.is_finite() && (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(FieldError::new(
                    field,
                    format!("must be between {low} and {high}"),
                ))
            }
        };
        within(
            "max_tokens",
            self.max_tokens.into(),
            256.0,
            MAX_BUNDLE_TOKENS.into(),
        )?;
        for name in SectionName::ALL {
            let cap = self.sections.get(name).cap;
            within(
                &format!("sections.{}.cap", name.as_str()),
                cap.into(),
                0.0,
                MAX_BUNDLE_TOKENS.into(),
            )?;
        }
        within(
            "reserve",
            self.reserve.into(),
            0.0,
            MAX_BUNDLE_TOKENS.into(),
        )?;
        let Scoring {
            alpha,
            beta,
            gamma,
            recency_half_life_hours,
            min_relevance,
            fusion: _,
            combine: _,
            lexical_weight,
            semantic_weight,
            semantic_candidates,
            min_similarity,
            neighbour_weight,
            question_precision: _,
        } = self.scoring;
        within("scoring.neighbour_weight", neighbour_weight, 0.0, 1.0)?;
        if let Some(floor) = min_similarity {
            within("scoring.min_similarity", floor, -1.0, 1.0)?;
        }
        within("scoring.lexical_weight", lexical_weight, 0.0, 1.0)?;
        within("scoring.semantic_weight", semantic_weight, 0.0, 1.0)?;
        if lexical_weight + semantic_weight <= 0.0 {
            return Err(FieldError::new(
                "scoring",
                "lexical_weight and semantic_weight cannot both be 0",
            ));
        }
        within(
            "scoring.semantic_candidates",
            semantic_candidates.into(),
            0.0,
            (MAX_CANDIDATE_POOL / 2).into(),
        )?;
        within("scoring.min_relevance", min_relevance, 0.0, 1.0)?;
        within("scoring.alpha", alpha, 0.0, 1.0)?;
        within("scoring.beta", beta, 0.0, 1.0)?;
        within("scoring.gamma", gamma, 0.0, 1.0)?;
        if alpha + beta + gamma <= 0.0 {
            return Err(FieldError::new(
                "scoring",
                "alpha, beta and gamma cannot all be 0",
            ));
        }
        within(
            "scoring.recency_half_life_hours",
            recency_half_life_hours,
            0.01,
            1e7,
        )?;
        within(
            "candidate_pool_max",
            self.candidate_pool_max.into(),
            1.0,
            MAX_CANDIDATE_POOL.into(),
        )?;
        within(
            "retrieved_max",
            self.retrieved_max.into(),
            1.0,
            self.candidate_pool_max.min(MAX_RETRIEVED).into(),
        )?;
        if self.fast_path_intents.len() > 64 {
            return Err(FieldError::new(
                "fast_path_intents",
                "at most 64 intents allowed",
            ));
        }
        for (index, intent) in self.fast_path_intents.iter().enumerate() {
            if intent.trim().is_empty() || intent.len() > 64 {
                return Err(FieldError::new(
                    format!("fast_path_intents[{index}]"),
                    "must be 1-64 bytes",
                ));
            }
        }
        within(
            "recent_window_events",
            self.recent_window_events.into(),
            0.0,
            500.0,
        )?;
        within("duplicate_similarity", self.duplicate_similarity, 0.05, 1.0)?;
        within(
            "strong_consistency_timeout_ms",
            self.strong_consistency_timeout_ms as f64,
            0.0,
            30_000.0,
        )?;
        within(
            "handoff_evidence_max",
            self.handoff_evidence_max.into(),
            0.0,
            MAX_HANDOFF_EVIDENCE.into(),
        )?;
        if self.view_limits.len() > MAX_VIEW_LIMITS {
            return Err(FieldError::new(
                "view_limits",
                format!("at most {MAX_VIEW_LIMITS} views may have a limit"),
            ));
        }
        for (view, limit) in &self.view_limits {
            // Named as views are: a limit on any other name limits nothing.
            let field = match view.is_empty() {
                true => "view_limits".to_owned(),
                false => format!("view_limits.{view}"),
            };
            crate::domain::event::check_view_name(&field, view)?;
            within(
                &format!("view_limits.{view}"),
                (*limit).into(),
                1.0,
                MAX_BUNDLE_TOKENS.into(),
            )?;
        }
        self.retention.check()
    }

    /// The most tokens `view` may hold, if the policy limits it.
    pub fn view_limit(&self, view: &str) -> Option<usize> {
        self.view_limits.get(view).map(|limit| *limit as usize)
    }

    pub fn is_fast_path(&self, intent: Option<&str>) -> bool {
        intent.is_some_and(|intent| {
            self.fast_path_intents
                .iter()
                .any(|fast| fast.eq_ignore_ascii_case(intent.trim()))
        })
    }
}

/// The tenant's stored policy, or the defaults.
pub async fn load(pool: &PgPool, tenant: &str) -> Result<Policy, sqlx::Error> {
    let stored = sqlx::query!(
        "SELECT policy, version FROM policies WHERE tenant_id = $1",
        tenant
    )
    .fetch_optional(pool)
    .await?;
    Ok(stored
        .and_then(|stored| {
            let version = stored.version;
            Policy::parse(stored.policy)
                .inspect_err(
                    |err| tracing::error!(tenant, %err, "stored policy is invalid; using defaults"),
                )
                .ok()
                .map(|policy| Policy { version, ..policy })
        })
        .unwrap_or_default())
}

/// Channel on which a policy change is announced (`<tenant>`), so every
/// daemon drops its cached copy.
pub const POLICY_CHANNEL: &str = "memd_policy";

/// Stores `policy` as the tenant's and announces it; returns its version.
pub async fn store(pool: &PgPool, tenant: &str, policy: &Policy) -> Result<i64, sqlx::Error> {
    let document = serde_json::to_value(policy).expect("a policy serializes");
    let mut tx = memd_projectors::transaction::begin(pool).await?;
    let version: i64 = sqlx::query_scalar!(
        "INSERT INTO policies (tenant_id, policy) VALUES ($1, $2)
         ON CONFLICT (tenant_id) DO UPDATE
            SET policy = EXCLUDED.policy, version = policies.version + 1, updated_at = now()
         RETURNING version",
        tenant,
        document
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!("SELECT pg_notify($1, $2)", POLICY_CHANNEL, tenant)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_section_has_its_own_handle_letter() {
        let mut letters: Vec<char> = SectionName::ALL.iter().map(|s| s.handle_prefix()).collect();
        letters.sort_unstable();
        letters.dedup();
        assert_eq!(letters.len(), SectionName::ALL.len());
    }

    #[test]
    fn defaults_follow_the_prd() {
        let policy = Policy::default();
        let caps: u32 = SectionName::ALL
            .iter()
            .map(|s| policy.sections.get(*s).cap)
            .sum();
        assert_eq!(caps + policy.reserve, 65_000);
        assert_eq!(policy.sections.retrieved_evidence.cap, 28_000);
        assert_eq!(
            (
                policy.scoring.alpha,
                policy.scoring.beta,
                policy.scoring.gamma
            ),
            (0.6, 0.3, 0.1)
        );
        assert_eq!(Policy::parse(json!({})).unwrap(), policy);
    }

    #[test]
    fn partial_documents_keep_the_other_defaults() {
        let policy = Policy::parse(
            json!({"scoring": {"beta": 0.0}, "sections": {"rules": {"cap": 100, "priority": 1}}}),
        )
        .unwrap();
        assert_eq!(policy.scoring.beta, 0.0);
        assert_eq!(policy.scoring.alpha, 0.6);
        assert_eq!(policy.scoring.question_precision, QuestionPrecision::Int8);
        let exact = Policy::parse(json!({"scoring": {"question_precision": "exact"}})).unwrap();
        assert_eq!(exact.scoring.question_precision, QuestionPrecision::Exact);
        assert_eq!(exact.scoring.lexical_weight, 0.5);
        assert_eq!(policy.sections.rules, section(100, 1));
        assert_eq!(policy.sections.identity, section(1_200, 10));
    }

    #[test]
    fn bad_values_are_named() {
        let field = |document| Policy::parse(document).unwrap_err().field;
        assert_eq!(field(json!({"max_tokens": 100_000})), "max_tokens");
        assert_eq!(
            field(json!({"candidate_pool_max": 5000})),
            "candidate_pool_max"
        );
        assert_eq!(field(json!({"retrieved_max": 300})), "retrieved_max");
        assert_eq!(field(json!({"scoring": {"alpha": 2.0}})), "scoring.alpha");
        assert_eq!(
            field(json!({"scoring": {"neighbour_weight": -0.5}})),
            "scoring.neighbour_weight"
        );
        assert_eq!(
            field(json!({"scoring": {"question_precision": "f16"}})),
            "scoring.question_precision"
        );
        assert_eq!(
            field(json!({"scoring": {"alpha": 0.0, "beta": 0.0, "gamma": 0.0}})),
            "scoring"
        );
        assert_eq!(
            field(json!({"sections": {"rules": {"cap": 1}}})),
            "sections.rules.priority"
        );
        assert_eq!(
            field(json!({"fast_path_intents": [""]})),
            "fast_path_intents[0]"
        );
        assert_eq!(
            field(json!({"handoff_evidence_max": 21})),
            "handoff_evidence_max"
        );
        assert_eq!(field(json!({"colour": "blue"})), "colour");
    }

    #[test]
    fn fast_path_intents_match_case_insensitively() {
        let policy = Policy::default();
        assert!(policy.is_fast_path(Some("Continue")));
        assert!(!policy.is_fast_path(Some("repo_onboarding")));
        assert!(!policy.is_fast_path(None));
    }
}
