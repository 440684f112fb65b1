//! The plan stage of a bundle: the head of the log and projections, the
//! packet waiting for a receiving agent, and whether and what to retrieve.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::Row;

use super::{AcbError, Consistency, Context};
use crate::read::{
    PROJECTED_SEQ, handoff,
    hybrid::{self, EmbeddingHead, Question},
    omissions::{Omissions, details},
    policy::SectionName,
    recent::WINDOW_KINDS,
    retention::Forgetting,
    retrieve::{self, Scope},
};

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

/// What the bundle will be, decided from the request and the head before
/// anything else is read.
pub(super) struct Plan {
    pub(super) head: Head,
    /// How long strong consistency waited for projections.
    pub(super) waited: Duration,
    /// The packet a receiving agent's bundle shows.
    pub(super) handoff: Option<handoff::Handoff>,
    /// No retrieval: a fast-path intent, no question, or a question of
    /// stop words alone.
    pub(super) fast: bool,
    /// What retrieval may read: kinds left out, the request's filters, and
    /// what the tenant's retention forgot.
    pub(super) scope: Scope,
    /// Whether superseded decisions are shown too.
    pub(super) history: bool,
    /// Started when the bundle retrieves: the question's vector and its
    /// nearest chunks, computed while the rest of the bundle is read.
    pub(super) question: Option<Result<Question, String>>,
}

/// The plan stage: where the log and projections stand (waiting for them
/// under strong consistency), the packet a receiving agent gets, whether
/// and what to retrieve.
pub(super) async fn plan(ctx: &Context<'_>, omissions: &mut Omissions) -> Result<Plan, AcbError> {
    let (request, policy) = (ctx.request, ctx.policy);
    let query = request.query_text.as_deref().unwrap_or("").trim();
    // Strong consistency waits first: everything read below (the handoff
    // packet, views, tasks, decisions, chunks) reflects the log as of the
    // request.
    let (mut head, waited) = match request.consistency {
        Consistency::Strong => {
            let timeout = Duration::from_millis(policy.strong_consistency_timeout_ms);
            head_caught_up(ctx, query, timeout).await?
        }
        Consistency::Eventual => (self::head(ctx, query).await?, Duration::ZERO),
    };
    let search = request.search;
    let handoff = match search {
        Some(_) => None,
        None => received_handoff(ctx, &head, omissions).await?,
    };
    // A receiving agent's evidence is about its packet's task.
    let retrieval_query = match (&handoff, query.is_empty()) {
        (Some(packet), true) => packet.task.as_str(),
        _ => query,
    };
    if retrieval_query != query {
        let target = head.head_seq;
        head = self::head(ctx, retrieval_query).await?;
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
            Forgetting::of(&ctx.reader.pool, ctx.tenant, &policy.retention, head.newest).await?
        },
    };
    let question = (!fast).then(|| {
        hybrid::start_question(
            ctx.reader,
            ctx.tenant,
            retrieval_query,
            &head.lexemes,
            &head.embedding,
            policy,
            ctx.visibility,
            &scope,
        )
    });
    let history = request
        .include_history
        .unwrap_or_else(|| asks_for_history(query));
    Ok(Plan {
        head,
        waited,
        handoff,
        fast,
        scope,
        history,
        question,
    })
}

/// Where the tenant's log and projections stand, and the query's lexemes.
pub(super) struct Head {
    pub(super) head_seq: i64,
    /// What recency and retention count age from: the tenant's newest
    /// `ts` among events not dated after they were recorded (kept on the
    /// head row by appends), so one event dated in the future (stored
    /// before `ts` was bounded) cannot age the rest, and one dated in the
    /// past cannot freshen it.
    pub(super) newest: DateTime<Utc>,
    pub(super) projected_seq: i64,
    pub(super) lexemes: Vec<String>,
    pub(super) embedding: EmbeddingHead,
    /// The handoff packet the requesting agent's bundle shows (the one the
    /// request names, if it names one): its newest pending packet, from any
    /// session (its inbox), before the newest packet of the bundle's own
    /// session. Read with the head, so that a bundle with none, nearly
    /// every bundle, spends no round trip of its own on it.
    pub(super) handoff_id: Option<String>,
    /// The seq of the session's newest event the recent window could
    /// show (0: none): a window kept that far needs nothing from the log.
    pub(super) session_seq: i64,
}

async fn head(ctx: &Context<'_>, query: &str) -> Result<Head, sqlx::Error> {
    let (reader, request) = (ctx.reader, ctx.request);
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
    .bind(ctx.tenant)
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
    ctx: &Context<'_>,
    query: &str,
    timeout: Duration,
) -> Result<(Head, Duration), sqlx::Error> {
    let mut head = head(ctx, query).await?;
    let target = head.head_seq;
    if head.projected_seq >= target {
        return Ok((head, Duration::ZERO));
    }
    let started = Instant::now();
    let deadline = started + timeout;
    while head.projected_seq < target && Instant::now() < deadline {
        let slice = (deadline - Instant::now()).min(Duration::from_millis(25));
        ctx.reader
            .cache
            .wait_projected(ctx.tenant, target, slice)
            .await;
        head = self::head(ctx, query).await?;
        // Report against the head the request saw, not later appends.
        head.head_seq = target;
    }
    Ok((head, started.elapsed()))
}

/// The handoff packet the head found waiting for the requesting agent in
/// its session ([`Head::handoff_id`]), when the channel may see it;
/// otherwise a privacy omission.
async fn received_handoff(
    ctx: &Context<'_>,
    head: &Head,
    omissions: &mut Omissions,
) -> Result<Option<handoff::Handoff>, sqlx::Error> {
    let Some(waiting) = &head.handoff_id else {
        return Ok(None);
    };
    let packet = handoff::by_id(&ctx.reader.pool, &ctx.reader.keyring, ctx.tenant, waiting).await?;
    Ok(match packet {
        Some(packet) if ctx.visibility.allows(packet.channel, packet.sensitivity) => Some(packet),
        Some(packet) => {
            omissions.privacy(SectionName::HandoffPacket, packet.handoff_id);
            None
        }
        None => None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
