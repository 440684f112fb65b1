//! Building one Active Context Bundle.
//!
//! 1. Read where the log and the projections are (and the query's lexemes)
//!    in one round trip; with `"consistency": "strong"`, wait (bounded) for
//!    projections to reach the log's head first.
//! 2. Take the tenant's views, active decisions and tasks from the cache.
//! 3. Read the session's recent events from the log itself
//!    ([`super::recent`]: only those past what an earlier bundle kept).
//! 4. Unless the intent is a fast-path one (or there is no query), retrieve
//!    evidence in three stages: the candidate pool ([`super::hybrid`]), its
//!    ranking ([`super::retrieve::rank`]), and the choice
//!    ([`super::choose`]), which leaves out what is superseded, rejected,
//!    conflicting, already shown or a near-duplicate.
//! 5. Pack the sections by priority under the budget; render.
//!
//! Privacy filters apply at every source before anything is ranked.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sqlx::Row;

use super::{
    PROJECTED_SEQ, Reader,
    bundle::{self, Candidates, Item, Section},
    cache::{DecisionRow, TenantState, Visible},
    choose::Evidence,
    filters::RetrievalFilters,
    handoff,
    hybrid::{self, EmbeddingHead, SemanticReport, SemanticWork},
    policy::{Policy, Scoring, SectionName},
    privacy::{Filters, Visibility},
    recent::{self, RecentReport, WINDOW_KINDS},
    retention::Forgetting,
    retrieve::{self, Candidate, LeftOut, Scope},
};
use crate::domain::{FieldError, event::Channel, limits};

/// Longest `query_text` accepted.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;
/// Ids listed per omission; `count` says how many there were.
const OMISSION_IDS_SHOWN: usize = 100;
/// Words that make a query ask for how decisions changed, not just what
/// holds now.
const HISTORY_WORDS: &[&str] = &[
    "history",
    "historical",
    "previous",
    "previously",
    "earlier",
    "formerly",
    "originally",
    "supersede",
    "superseded",
    "used to",
    "changed",
    "over time",
    "evolved",
    "evolution",
    "before",
];

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

/// Something left out, and why: `budget`, `privacy`, `retention`,
/// `retracted`, `duplicate`, `superseded`, `rejected`, `conflict`, or
/// `truncated_tool_output` (the
/// item is in, but its full output is only in the artifact).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Omission {
    pub reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<SectionName>)]
    pub section: Option<&'static str>,
    /// The ids left out, at most 100.
    pub candidates: Vec<String>,
    /// How many were left out.
    pub count: usize,
    /// By reason: `kept` or `kept_in` (duplicate), `decision_id` and
    /// `superseded_by` (superseded), `conflicts` (conflict), ...
    #[serde(flatten)]
    pub details: Map<String, Value>,
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
/// vector included); `rank`: scoring; `choose`: filters, standing, dedupe,
/// the decisions and evidence kept; `pack`: the token budget; `render`: the
/// prompt text (0 when not asked for).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct StageTimes {
    pub prepare: f64,
    pub candidates: f64,
    pub rank: f64,
    pub choose: f64,
    pub pack: f64,
    pub render: f64,
}

/// Times the stages of one bundle, one after the other.
struct Stopwatch(Instant);

impl Stopwatch {
    /// Milliseconds since the last lap (or the start), and a new lap.
    fn lap(&mut self) -> f64 {
        let now = Instant::now();
        let ms = (now - self.0).as_secs_f64() * 1e3;
        self.0 = now;
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

/// Omissions, merged by reason, section and details.
#[derive(Default)]
pub(super) struct Omissions {
    list: Vec<Omission>,
    /// By reason and section, then by what tells the details apart: looked
    /// up without building a key, as a pool of near-duplicates looks up the
    /// same few omissions a thousand times.
    index: foldhash::HashMap<(&'static str, Option<SectionName>), foldhash::HashMap<String, usize>>,
}

impl Omissions {
    pub(super) fn add(
        &mut self,
        reason: &'static str,
        section: Option<SectionName>,
        id: String,
        details: Map<String, Value>,
    ) {
        let key = serde_json::to_string(&details).unwrap_or_default();
        if let Some(listed) = self.counted(reason, section, &key, || details) {
            listed.push(id);
        }
    }

    /// [`Omissions::add`] for callers that know what tells their details
    /// apart (`key`): the details are built only for a new omission, and
    /// the id copied only while the omission still lists ids. A bundle may
    /// collapse a thousand near-duplicates into a few kept items.
    pub(super) fn add_keyed(
        &mut self,
        reason: &'static str,
        section: Option<SectionName>,
        id: &str,
        key: &str,
        details: impl FnOnce() -> Map<String, Value>,
    ) {
        if let Some(listed) = self.counted(reason, section, key, details) {
            listed.push(id.to_owned());
        }
    }

    /// Counts one more id left out for `reason` in `section` with the
    /// details `key` tells apart, and gives the ids listed when there is
    /// room for it.
    fn counted(
        &mut self,
        reason: &'static str,
        section: Option<SectionName>,
        key: &str,
        details: impl FnOnce() -> Map<String, Value>,
    ) -> Option<&mut Vec<String>> {
        let index = self.index.entry((reason, section)).or_default();
        let at = match index.get(key) {
            Some(at) => *at,
            None => {
                self.list.push(Omission {
                    reason,
                    section: section.map(SectionName::as_str),
                    candidates: Vec::new(),
                    count: 0,
                    details: details(),
                });
                index.insert(key.to_owned(), self.list.len() - 1);
                self.list.len() - 1
            }
        };
        let omission = &mut self.list[at];
        omission.count += 1;
        (omission.candidates.len() < OMISSION_IDS_SHOWN).then_some(&mut omission.candidates)
    }

    pub(super) fn privacy(&mut self, section: SectionName, id: String) {
        self.add("privacy", Some(section), id, Map::new());
    }

    /// Retrieval found nothing that shares a word or a meaning with the
    /// question: the evidence is empty on purpose, and `details` say why
    /// (how many candidates were unrelated, the floor, the best of them).
    pub(super) fn nothing_relevant(&mut self, details: Map<String, Value>) {
        self.list.push(Omission {
            reason: "nothing_relevant",
            section: Some(SectionName::RetrievedEvidence.as_str()),
            candidates: Vec::new(),
            count: 0,
            details,
        });
    }
}

pub(super) fn details(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// Where the tenant's log and projections stand, and the query's lexemes.
struct Head {
    head_seq: i64,
    /// What recency and retention count age from: the tenant's newest
    /// `ts` among events not dated after they were recorded (kept on the
    /// head row by appends), so one event dated in the future (stored
    /// before `ts` was bounded) cannot age the rest, and one dated in the
    /// past cannot freshen it.
    newest: DateTime<Utc>,
    projected_seq: i64,
    lexemes: Vec<String>,
    embedding: EmbeddingHead,
    /// The handoff packet the requesting agent's bundle shows (the one the
    /// request names, if it names one): its newest pending packet, from any
    /// session (its inbox), before the newest packet of the bundle's own
    /// session. Read with the head, so that a bundle with none, nearly
    /// every bundle, spends no round trip of its own on it.
    handoff_id: Option<String>,
    /// The seq of the session's newest event the recent window could
    /// show (0: none): a window kept that far needs nothing from the log.
    session_seq: i64,
}

async fn head(
    reader: &Reader,
    tenant: &str,
    request: &AcbRequest,
    query: &str,
) -> Result<Head, sqlx::Error> {
    let names: Vec<&str> = reader.projectors.iter().map(|(n, _)| *n).collect();
    let versions: Vec<i32> = reader.projectors.iter().map(|(_, v)| *v).collect();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT h.seq AS head_seq,
                h.newest_ts AS newest,
                ({PROJECTED_SEQ}) AS projected_seq,
                ARRAY(SELECT l FROM unnest(tsvector_to_array(
                          to_tsvector('english', projections.searchable($4)))) AS l
                       LIMIT $5) AS lexemes,
                e.embedder, ec.seq AS embedded_seq, ec.version AS embedded_version,
                (SELECT p.handoff_id FROM projections.handoffs p
                  WHERE p.tenant_id = h.tenant_id AND p.to_agent = $7
                    AND CASE WHEN $9::text IS NULL
                             THEN p.session_id = $8 OR p.accepted_seq IS NULL
                             ELSE p.handoff_id = $9 END
                  ORDER BY p.accepted_seq IS NULL DESC, p.session_id = $8 DESC, p.seq DESC
                  LIMIT 1) AS handoff_id,
                (SELECT max(e.seq) FROM public.events e
                  WHERE e.tenant_id = h.tenant_id AND e.session_id = $8
                    AND e.kind IN {WINDOW_KINDS}) AS session_seq
           FROM public.tenant_heads h
           LEFT JOIN public.embedder_choice ch ON ch.tenant_id = h.tenant_id
           CROSS JOIN LATERAL (SELECT coalesce(ch.active, $6) AS embedder) AS e
           LEFT JOIN projections.cursors ec
             ON ec.tenant_id = h.tenant_id AND ec.projector = 'embeddings_' || e.embedder
          WHERE h.tenant_id = $1"
    )))
    .bind(tenant)
    .bind(&names)
    .bind(&versions)
    .bind(query)
    .bind(retrieve::MAX_LEXEMES as i64)
    .bind(reader.semantic.default_embedder())
    .bind(request.agent_id.as_deref())
    .bind(request.session_id.as_deref())
    .bind(request.handoff_id.as_deref())
    .fetch_one(&reader.pool)
    .await?;
    Ok(Head {
        embedding: EmbeddingHead {
            embedder: row.try_get("embedder")?,
            seq: row.try_get::<Option<i64>, _>("embedded_seq")?.unwrap_or(0),
            version: row.try_get("embedded_version")?,
        },
        head_seq: row.try_get("head_seq")?,
        newest: row
            .try_get::<Option<DateTime<Utc>>, _>("newest")?
            .unwrap_or(DateTime::UNIX_EPOCH),
        projected_seq: row.try_get::<Option<i64>, _>("projected_seq")?.unwrap_or(0),
        lexemes: row.try_get("lexemes")?,
        handoff_id: row.try_get("handoff_id")?,
        session_seq: row.try_get::<Option<i64>, _>("session_seq")?.unwrap_or(0),
    })
}

/// [`head`], once projections have applied the log up to the head as the
/// request found it, or `timeout` has passed; and how long that took.
async fn head_caught_up(
    reader: &Reader,
    tenant: &str,
    request: &AcbRequest,
    query: &str,
    timeout: Duration,
) -> Result<(Head, Duration), sqlx::Error> {
    let mut head = head(reader, tenant, request, query).await?;
    let target = head.head_seq;
    if head.projected_seq >= target {
        return Ok((head, Duration::ZERO));
    }
    let started = Instant::now();
    let deadline = started + timeout;
    while head.projected_seq < target && Instant::now() < deadline {
        let slice = (deadline - Instant::now()).min(Duration::from_millis(25));
        reader.cache.wait_projected(tenant, target, slice).await;
        head = self::head(reader, tenant, request, query).await?;
        // Report against the head the request saw, not later appends.
        head.head_seq = target;
    }
    Ok((head, started.elapsed()))
}

/// The handoff packet the head found waiting for the requesting agent in
/// its session ([`Head::handoff_id`]), when the channel may see it;
/// otherwise a privacy omission.
async fn received_handoff(
    reader: &Reader,
    tenant: &str,
    head: &Head,
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> Result<Option<handoff::Handoff>, sqlx::Error> {
    let Some(waiting) = &head.handoff_id else {
        return Ok(None);
    };
    let packet = handoff::by_id(&reader.pool, &reader.keyring, tenant, waiting).await?;
    Ok(match packet {
        Some(packet) if visibility.allows(&packet.channel, &packet.sensitivity) => Some(packet),
        Some(packet) => {
            omissions.privacy(SectionName::HandoffPacket, packet.handoff_id);
            None
        }
        None => None,
    })
}

/// Builds the bundle `request` asks for from `reader`'s database.
pub async fn build_acb(
    reader: &Reader,
    tenant: &str,
    request: AcbRequest,
) -> Result<Acb, AcbError> {
    let _building = reader.building.start();
    let started = Instant::now();
    let mut stopwatch = Stopwatch(started);
    let mut stages = StageTimes::default();
    let policy = reader.cache.policy(&reader.policy_pool, tenant).await?;
    let max_tokens = request.check(&policy).map_err(AcbError::Invalid)?;
    let visibility = Visibility::new(request.channel).for_agent(request.agent_id.as_deref());
    let mut omissions = Omissions::default();

    let query = request.query_text.as_deref().unwrap_or("").trim();
    // Strong consistency waits first: everything read below (the handoff
    // packet, views, tasks, decisions, chunks) reflects the log as of the
    // request.
    let (mut head, waited) = match request.consistency {
        Consistency::Strong => {
            let timeout = Duration::from_millis(policy.strong_consistency_timeout_ms);
            head_caught_up(reader, tenant, &request, query, timeout).await?
        }
        Consistency::Eventual => (
            self::head(reader, tenant, &request, query).await?,
            Duration::ZERO,
        ),
    };
    let search = request.search;
    let handoff = match search {
        Some(_) => None,
        None => received_handoff(reader, tenant, &head, visibility, &mut omissions).await?,
    };
    // A receiving agent's evidence is about its packet's task.
    let retrieval_query = match (&handoff, query.is_empty()) {
        (Some(packet), true) => packet.task.as_str(),
        _ => query,
    };
    if retrieval_query != query {
        let target = head.head_seq;
        head = self::head(reader, tenant, &request, retrieval_query).await?;
        head.head_seq = target;
    }

    // A question of stop words alone ("the and of it") names nothing to
    // search for: its nearest chunks by meaning would be noise.
    let no_terms = !retrieval_query.is_empty() && head.lexemes.is_empty();
    let fast = (search.is_none() && policy.is_fast_path(request.intent.as_deref()))
        || retrieval_query.is_empty()
        || no_terms;
    if no_terms && !policy.is_fast_path(request.intent.as_deref()) {
        omissions.nothing_relevant(details(&[(
            "why",
            json!("the question has no word to search for (stop words only)"),
        )]));
    }
    // A receiving agent's bundle takes no chat messages as evidence.
    let scope = Scope {
        excluded_kinds: if handoff.is_some() {
            vec!["message"]
        } else {
            Vec::new()
        },
        filters: request.filters.clone(),
        // Pinned memory, all the fast path retrieves, is never forgotten.
        forgetting: if fast || policy.retention.is_empty() {
            Forgetting::default()
        } else {
            Forgetting::of(&reader.pool, tenant, &policy.retention, head.newest).await?
        },
    };
    let question = (!fast).then(|| {
        hybrid::start_question(
            reader,
            tenant,
            retrieval_query,
            &head.lexemes,
            &head.embedding,
            &policy,
            visibility,
            &scope,
        )
    });

    let (state, cached) = reader
        .cache
        .state(
            &reader.pool,
            &reader.keyring,
            &reader.counter,
            tenant,
            head.projected_seq,
        )
        .await?;

    // A search shows evidence only: no standing section, and no omission
    // of one.
    let mut sections: Vec<Candidates> = match search {
        Some(_) => Vec::new(),
        None => view_sections(&state, visibility, &mut omissions).into(),
    };

    // Handoff packet.
    if let Some(packet) = &handoff
        && let Some(item) = packet.item(&reader.counter)
    {
        sections.push(Candidates {
            name: SectionName::HandoffPacket,
            items: vec![item],
            chronological: false,
        });
    }

    let tasks = match search {
        Some(_) => Vec::new(),
        None => task_items(&state, handoff.as_ref(), visibility, &mut omissions),
    };
    let task_ids: HashSet<String> = tasks.iter().map(|t| t.id.clone()).collect();

    // The recent window, from the log.
    let (recent, recent_report) = match &request.session_id {
        Some(session) => {
            recent::recent_window(
                reader,
                tenant,
                session,
                // The session's history from before its own packet is the
                // sender's; a packet from another session hides nothing.
                handoff
                    .as_ref()
                    .filter(|h| h.session_id == *session)
                    .map_or(0, |h| h.seq),
                &policy,
                visibility,
                (head.projected_seq, head.session_seq),
                &mut omissions,
            )
            .await?
        }
        None => Default::default(),
    };
    let recent = recent::without_stale(reader, tenant, &state, recent, &mut omissions).await?;
    let recent_chunks: foldhash::HashSet<String> =
        recent.iter().map(|item| item.id.clone()).collect();

    // Retrieval.
    let history = request
        .include_history
        .unwrap_or_else(|| asks_for_history(query));
    let mut retrieval = Retrieval {
        semantic: SemanticReport {
            reason: fast.then(|| "fast path: no retrieval".to_owned()),
            ..SemanticReport::default()
        },
        ..Retrieval::default()
    };
    let mut evidence = match search {
        Some(k) => Evidence::new(
            k,
            usize::MAX,
            &policy,
            history,
            Default::default(),
            Default::default(),
            state.clone(),
        )
        .keeping_decisions(),
        None => Evidence::new(
            match &handoff {
                Some(_) => policy.handoff_evidence_max as usize,
                None => policy.retrieved_max as usize,
            },
            max_tokens,
            &policy,
            history,
            recent_chunks,
            task_ids,
            state.clone(),
        ),
    };
    // What comes first, on either path, while it fits: a receiving agent's
    // packet evidence, otherwise the tenant's pinned memory (not in a
    // search: what it finds is what the question matches).
    let first = match &handoff {
        Some(packet) => retrieve::by_refs(&reader.pool, tenant, &packet.refs, visibility).await?,
        None if state.any_pinned && search.is_none() => {
            let limit = (policy.retrieved_max / 2).max(1).into();
            retrieve::pinned(&reader.pool, tenant, visibility, &scope, limit).await?
        }
        None => Vec::new(),
    };
    evidence
        .consider(reader, tenant, first, &mut omissions)
        .await?;
    if let Some(question) = question {
        stages.prepare = stopwatch.lap();
        let mut pool = hybrid::candidates(
            reader,
            tenant,
            question,
            &head.lexemes,
            (head.head_seq, head.projected_seq),
            &head.embedding,
            visibility,
            &scope,
            &policy,
        )
        .await?;
        // The embeddings projection may not have folded a retraction the
        // chunks projection has (it runs apart, behind it): a withdrawn
        // chunk's vector, and the row the vector index remembers for it,
        // can still be found by meaning until it does.
        if !state.retracted.is_empty() {
            pool.candidates
                .retain(|candidate| !state.retracted.contains(candidate.event_id()));
        }
        stages.candidates = stopwatch.lap();
        let ranked;
        let similarity_floor = policy.scoring.min_similarity.or_else(|| {
            let embedder = head.embedding.embedder.as_deref()?;
            reader.semantic.unrelated_similarity(embedder)
        });
        (ranked, retrieval) = rank_pool(pool, &head, &policy, similarity_floor);
        stages.rank = stopwatch.lap();
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
            .consider(reader, tenant, ranked, &mut omissions)
            .await?;
        kept_out_of_retrieval(
            reader,
            tenant,
            &head.lexemes,
            (request.channel, !state.retracted.is_empty()),
            visibility,
            &scope,
            &mut omissions,
        )
        .await?;
    }

    let decisions = match search {
        Some(_) => Vec::new(),
        None => {
            decision_items(
                reader,
                tenant,
                &state,
                handoff.as_ref(),
                &evidence,
                history,
                visibility,
                &mut omissions,
            )
            .await?
        }
    };
    sections.push(Candidates {
        name: SectionName::TaskState,
        items: tasks,
        chronological: false,
    });
    sections.push(Candidates {
        name: SectionName::DecisionLedger,
        items: decisions,
        chronological: false,
    });
    evidence.finish(reader, tenant, &mut omissions).await?;
    if fast {
        stages.prepare = stopwatch.lap();
    } else {
        stages.choose = stopwatch.lap();
    }
    let retrieved = evidence.items.len();
    let collapsed = evidence.collapsed;
    sections.push(Candidates {
        name: SectionName::RetrievedEvidence,
        items: evidence.items,
        chronological: false,
    });
    sections.push(Candidates {
        name: SectionName::RecentWindow,
        items: recent,
        chronological: true,
    });

    let (sections, token_used_est, left) = match search {
        // Only what the question found, all of it: no budget to pack into.
        Some(_) => bundle::unbudgeted(
            &reader.costs,
            sections
                .into_iter()
                .filter(|c| c.name == SectionName::RetrievedEvidence)
                .collect(),
        ),
        None => bundle::pack(&policy, max_tokens, &reader.costs, sections),
    };
    stages.pack = stopwatch.lap();
    for left in left {
        for id in left.ids {
            omissions.add("budget", Some(left.section), id, Map::new());
        }
    }
    let prompt = request.render.then(|| bundle::render(&sections));
    stages.render = stopwatch.lap();
    let diagnostics = std::mem::take(&mut retrieval.semantic.work);
    let acb = Acb {
        acb_id: crate::domain::new_id("acb"),
        budget_tokens: max_tokens,
        token_used_est,
        sections,
        omissions: omissions.list,
        provenance: Provenance {
            intent: request.intent,
            path: if fast { "fast" } else { "retrieval" },
            query_terms: head.lexemes,
            common_terms: retrieval.common_terms,
            semantic: retrieval.semantic,
            candidate_pool_size: retrieval.pool_size,
            candidate_pool_max: policy.candidate_pool_max,
            retrieved,
            filters: visibility.filters(),
            retrieval_filters: (!request.filters.is_empty()).then(|| request.filters.clone()),
            scoring: policy.scoring,
            dedupe: DedupeReport {
                collapsed,
                similarity: policy.duplicate_similarity,
            },
            history,
            handoff_id: handoff.map(|h| h.handoff_id),
            head_seq: head.head_seq,
            projected_seq: head.projected_seq.min(head.head_seq),
            lag_events: (head.head_seq - head.projected_seq).max(0),
            consistency: ConsistencyReport {
                requested: request.consistency,
                caught_up: head.projected_seq >= head.head_seq,
                waited_ms: waited.as_secs_f64() * 1e3,
            },
            cache: if cached { "hit" } else { "miss" },
            recent_window: recent_report,
            encoding: reader.counter.encoding().name(),
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
            stages_ms: stages,
            diagnostics,
            policy_version: policy.version,
            read: super::replica::ReadReport::primary(),
        },
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

/// Identity (the `identity` view) and rules (every other view), as far as
/// the channel may see them.
fn view_sections(
    state: &TenantState,
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> [Candidates; 2] {
    let mut identity = Vec::new();
    let mut rules = Vec::new();
    // Each view once: the requesting agent's own version where it has one
    // (its private `view_update`s), else the shared one. Another agent's
    // version is neither shown nor named.
    let own = |name: &str| {
        visibility.agent.is_some_and(|agent| {
            state
                .views
                .iter()
                .any(|v| v.view == name && v.visible.owner.as_deref() == Some(agent))
        })
    };
    for view in &state.views {
        let shown_version = match (&view.visible.owner, visibility.agent) {
            (Some(owner), Some(agent)) => owner == agent,
            (Some(_), None) => false,
            (None, _) => !own(&view.view),
        };
        if !shown_version {
            continue;
        }
        let is_identity = view.view == "identity";
        if !visibility.allows_view(&view.view, &view.visible.sensitivity) {
            let section = if is_identity {
                SectionName::Identity
            } else {
                SectionName::Rules
            };
            omissions.privacy(section, view.visible.item.id.clone());
        } else if is_identity {
            identity.push(view.visible.item.clone());
        } else {
            rules.push(view.visible.item.clone());
        }
    }
    [
        Candidates {
            name: SectionName::Identity,
            items: identity,
            chronological: false,
        },
        Candidates {
            name: SectionName::Rules,
            items: rules,
            chronological: false,
        },
    ]
}

/// The active tasks the channel may see (a receiving agent: its packet's
/// task only).
fn task_items(
    state: &TenantState,
    handoff: Option<&handoff::Handoff>,
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> Vec<Item> {
    let mut tasks = Vec::new();
    for task in &state.tasks {
        if let Some(packet) = handoff
            && packet.task_id.as_deref() != Some(task.item.id.as_str())
        {
            continue;
        }
        if visible(visibility, task) {
            tasks.push(task.item.clone());
        } else if nameable(visibility, task) {
            omissions.privacy(SectionName::TaskState, task.item.id.clone());
        }
    }
    tasks
}

/// The decision ledger's items: a receiving agent's are its packet's;
/// otherwise the active ones, those the query retrieved first (best
/// first), then the newest; with history, superseded ones the query
/// retrieved too.
#[allow(clippy::too_many_arguments)]
async fn decision_items(
    reader: &Reader,
    tenant: &str,
    state: &TenantState,
    handoff: Option<&handoff::Handoff>,
    evidence: &Evidence,
    history: bool,
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> Result<Vec<Item>, sqlx::Error> {
    let mut decisions: Vec<(usize, i64, Item)> = Vec::new();
    match handoff {
        Some(packet) => {
            for (position, row) in decision_rows(reader, tenant, &packet.decision_ids)
                .await?
                .into_iter()
                .enumerate()
            {
                let seq = row.seq;
                let Some(visible_row) = row.into_visible(&reader.counter) else {
                    continue;
                };
                if visible(visibility, &visible_row) {
                    decisions.push((position, seq, visible_row.item));
                } else if nameable(visibility, &visible_row) {
                    omissions.privacy(SectionName::DecisionLedger, visible_row.item.id);
                }
            }
        }
        None => {
            for decision in &state.decisions {
                if !visible(visibility, &decision.visible) {
                    if nameable(visibility, &decision.visible) {
                        omissions
                            .privacy(SectionName::DecisionLedger, decision.decision_id.clone());
                    }
                    continue;
                }
                let rank = evidence
                    .decision_rank
                    .get(&decision.decision_id)
                    .copied()
                    .unwrap_or(usize::MAX);
                decisions.push((rank, decision.seq, decision.visible.item.clone()));
            }
            if history && !evidence.history.is_empty() {
                for row in decision_rows(reader, tenant, &evidence.history).await? {
                    let rank = evidence
                        .decision_rank
                        .get(&row.decision_id)
                        .copied()
                        .unwrap_or(usize::MAX);
                    let seq = row.seq;
                    if let Some(visible_row) = row.into_visible(&reader.counter)
                        && visible(visibility, &visible_row)
                    {
                        decisions.push((rank, seq, visible_row.item));
                    }
                }
            }
        }
    }
    decisions.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    Ok(decisions.into_iter().map(|(_, _, item)| item).collect())
}

/// What the question would have retrieved but the channel may not see
/// (`privacy`), the tenant's retention forgot (`retention`) or a
/// retraction withdrew (`retracted`, asked only of a tenant with any):
/// omissions, ids only.
async fn kept_out_of_retrieval(
    reader: &Reader,
    tenant: &str,
    lexemes: &[String],
    (channel, any_retracted): (Channel, bool),
    visibility: Visibility<'_>,
    scope: &Scope,
    omissions: &mut Omissions,
) -> Result<(), sqlx::Error> {
    let asked = [
        (channel != Channel::Private, LeftOut::Withheld),
        (!scope.forgetting.is_empty(), LeftOut::Forgotten),
        (any_retracted, LeftOut::Retracted),
    ];
    for (_, why) in asked.into_iter().filter(|(asked, _)| *asked) {
        let ids = retrieve::left_out(
            &reader.pool,
            &reader.keyring,
            tenant,
            lexemes,
            visibility,
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
struct Retrieval {
    semantic: SemanticReport,
    pool_size: usize,
    common_terms: Vec<String>,
    /// Candidates that shared nothing with the question.
    unrelated: retrieve::Unrelated,
}

/// The rank stage: the candidates that share something with the question
/// ([`retrieve::related`]: a word, or a meaning above `similarity_floor`),
/// scored and ordered, best first, and what provenance says of the pool.
fn rank_pool(
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

fn visible(visibility: Visibility<'_>, item: &Visible) -> bool {
    visibility.allows(&item.channel, &item.sensitivity)
        && visibility.owner_allows(&item.channel, item.owner.as_deref())
}

/// Whether an item the bundle leaves out may be named in its omissions:
/// another agent's private memory is not even named (its id would tell
/// that it exists), whatever the channel allows.
fn nameable(visibility: Visibility<'_>, item: &Visible) -> bool {
    visibility.owner_allows(&item.channel, item.owner.as_deref())
}

fn asks_for_history(query: &str) -> bool {
    let query = query.to_lowercase();
    let words: Vec<&str> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let joined = format!(" {} ", words.join(" "));
    HISTORY_WORDS
        .iter()
        .any(|word| joined.contains(&format!(" {word} ")))
}

async fn decision_rows(
    reader: &Reader,
    tenant: &str,
    ids: &[String],
) -> Result<Vec<DecisionRow>, sqlx::Error> {
    let mut rows: Vec<DecisionRow> = sqlx::query_as(
        "SELECT decision_id, seq, ts, channel, sensitivity, status, key, scope, decision,
                rationale, constraints, alternatives, consequences, confidence, refs,
                supersedes, superseded_by,
                (SELECT e.agent_id FROM public.events e WHERE e.tenant_id = d.tenant_id AND e.seq = d.seq) AS owner
           FROM projections.decisions d WHERE tenant_id = $1 AND decision_id = ANY ($2)",
    )
    .bind(tenant)
    .bind(ids)
    .fetch_all(&reader.pool)
    .await?;
    for row in &mut rows {
        row.open(&reader.keyring, tenant)?;
    }
    rows.sort_by_key(|row| ids.iter().position(|id| *id == row.decision_id));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn history_is_asked_for_in_words() {
        assert!(asks_for_history("What did we use before PostgreSQL?"));
        assert!(asks_for_history("how has the policy changed"));
        assert!(asks_for_history("which db we used to have"));
        assert!(asks_for_history(
            "How did the storage policy change over time?"
        ));
        assert!(!asks_for_history("what do we use to deploy"));
        assert!(!asks_for_history("What's the policy now?"));
        assert!(!asks_for_history("beforehand notes"));
        assert!(!asks_for_history("what changes does export.rs need?"));
    }

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
