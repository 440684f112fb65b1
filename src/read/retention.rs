//! Retention: what a tenant's memory stops offering as it ages, by policy.
//!
//! Forgetting is a rule over the projections, applied where privacy and
//! filters are (every candidate statement, the vector scan, pinned memory),
//! never a change to the log. A chunk's rows stay in the projection, so
//! forgetting is a pure function of the log and the policy: a rebuild gives
//! the same bundles, a looser policy brings memory back at once, and a
//! bundle can still name what retention kept from it (`omissions`, reason
//! `retention`). Why not delete the rows: a projection is a function of the
//! log alone (that is what rebuild and the drift check verify), and the
//! policy is configuration outside the log. Erasure, which must destroy
//! content, is a different mechanism.
//!
//! Age is measured back from the tenant's newest `ts` (never later than its
//! last append time: one event a client dated in the future cannot age the
//! rest, one dated in the past cannot freshen it), as recency is: the same
//! log and policy forget the same memory whenever the bundle is built. Pinned memory (tags `pinned`, `pin`) is never
//! forgotten.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::domain::{FieldError, event::Kind};

/// Tags that pin memory: a bundle holds the newest pinned chunks the
/// channel may see whatever the question, while they fit.
pub const PIN_TAGS: [&str; 2] = ["pinned", "pin"];

/// [`PIN_TAGS`] as the partial index `chunks_pinned` states them: written
/// into the statement, not bound, so that the planner can prove the index
/// applies (a test checks the two agree).
pub(super) const PINNED: &str = "c.tags && '{pinned,pin}'::text[]";

// Pinned memory is kept whatever retention says.

/// The most days an age limit may say (a century).
const MAX_DAYS: u32 = 36_500;
/// The most sessions `sessions_kept` may keep.
const MAX_SESSIONS_KEPT: u32 = 100_000;
/// The most chunks `max_chunks` may keep.
const MAX_CHUNKS: u32 = 100_000_000;

/// A tenant's retention rules (policy `retention`). Every rule is optional;
/// without any, nothing is forgotten.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// Days each kind of memory stays retrievable, counted back from the
    /// tenant's newest event. Decisions have no age limit: see
    /// `superseded_decisions_grace_days`.
    #[serde(deserialize_with = "crate::domain::object")]
    pub max_age_days: MaxAgeDays,
    /// A superseded decision stays retrievable (with history) this many
    /// days after the decision that superseded it; decisions in force are
    /// kept.
    pub superseded_decisions_grace_days: Option<u32>,
    /// Only the memory of the N most recently active sessions.
    pub sessions_kept: Option<u32>,
    /// Only the tenant's newest N chunks (by position in the log; every
    /// part of the event at the boundary is kept).
    pub max_chunks: Option<u32>,
}

/// Days per kind of memory; absent: no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MaxAgeDays {
    pub message: Option<u32>,
    pub tool_result: Option<u32>,
    pub summary: Option<u32>,
    pub task_update: Option<u32>,
}

impl MaxAgeDays {
    /// The kinds with an age limit, in the order [`SQL`] binds them.
    pub const KINDS: [Kind; 4] = [
        Kind::Message,
        Kind::ToolResult,
        Kind::Summary,
        Kind::TaskUpdate,
    ];

    fn days(&self) -> [Option<u32>; 4] {
        [
            self.message,
            self.tool_result,
            self.summary,
            self.task_update,
        ]
    }
}

impl Retention {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the bounds; errors name the field as `retention.<name>`.
    pub fn check(&self) -> Result<(), FieldError> {
        let at_most = |field: &str, value: Option<u32>, low: u32, high: u32| match value {
            Some(value) if !(low..=high).contains(&value) => Err(FieldError::new(
                format!("retention.{field}"),
                format!("must be between {low} and {high}"),
            )),
            _ => Ok(()),
        };
        for (kind, days) in MaxAgeDays::KINDS.iter().zip(self.max_age_days.days()) {
            at_most(
                &format!("max_age_days.{}", kind.as_str()),
                days,
                0,
                MAX_DAYS,
            )?;
        }
        at_most(
            "superseded_decisions_grace_days",
            self.superseded_decisions_grace_days,
            0,
            MAX_DAYS,
        )?;
        at_most("sessions_kept", self.sessions_kept, 1, MAX_SESSIONS_KEPT)?;
        at_most("max_chunks", self.max_chunks, 1, MAX_CHUNKS)
    }
}

/// What retention forgets for one bundle: the rules made concrete against
/// the tenant's memory as it stands ([`Forgetting::of`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Forgetting {
    /// Per kind of [`MaxAgeDays::KINDS`]: memory before this is forgotten.
    pub cutoffs: [Option<DateTime<Utc>>; 4],
    /// Seqs of superseded decisions past their grace, ascending.
    pub superseded: Option<Vec<i64>>,
    /// The sessions kept (all others forgotten).
    pub sessions: Option<Vec<String>>,
    /// Chunks before this seq are forgotten.
    pub seq_floor: Option<i64>,
}

/// Whether chunk row `c` is retained, as the candidate statements bind it
/// (`$13` to `$16` the cutoffs of [`MaxAgeDays::KINDS`], `$17` superseded
/// decisions' seqs, `$18` the sessions kept, `$19` the seq floor; NULL: no
/// such rule). Planned with the values, so rules not set cost nothing.
pub fn sql() -> String {
    format!(
        "({PINNED} OR (
            c.ts >= coalesce(CASE c.kind WHEN 'message' THEN $13::timestamptz
                                         WHEN 'tool_result' THEN $14::timestamptz
                                         WHEN 'summary' THEN $15::timestamptz
                                         WHEN 'task_update' THEN $16::timestamptz END,
                             '-infinity'::timestamptz)
            AND ($17::bigint[] IS NULL OR c.kind <> 'decision' OR NOT (c.seq = ANY ($17)))
            AND ($18::text[] IS NULL OR c.session_id = ANY ($18))
            AND ($19::bigint IS NULL OR c.seq >= $19)))"
    )
}

impl Forgetting {
    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.cutoffs.iter().all(Option::is_none)
            && self.superseded.is_none()
            && self.sessions.is_none()
            && self.seq_floor.is_none()
    }

    /// The rules of `retention` against the tenant's memory: cutoffs from
    /// its newest event's time `newest`, and (one statement, only for the
    /// rules set) the superseded decisions past their grace, the sessions
    /// most recently active, and the position of the newest `max_chunks`.
    pub async fn of(
        pool: &PgPool,
        tenant: &str,
        retention: &Retention,
        newest: DateTime<Utc>,
    ) -> Result<Self, sqlx::Error> {
        let before = |days: Option<u32>| days.map(|d| newest - Duration::days(d.into()));
        let days = retention.max_age_days.days();
        let mut forgetting = Self {
            cutoffs: days.map(before),
            ..Self::default()
        };
        let grace = before(retention.superseded_decisions_grace_days);
        if grace.is_none() && retention.sessions_kept.is_none() && retention.max_chunks.is_none() {
            return Ok(forgetting);
        }
        let row = sqlx::query!(
            "SELECT CASE WHEN $2::timestamptz IS NOT NULL THEN ARRAY(
                        SELECT d.seq FROM projections.decisions d
                          JOIN projections.decisions s
                            ON s.tenant_id = d.tenant_id AND s.decision_id = d.superseded_by
                         WHERE d.tenant_id = $1 AND d.status = 'superseded' AND s.ts < $2
                         ORDER BY d.seq) END AS superseded,
                    CASE WHEN $3::bigint IS NOT NULL THEN ARRAY(
                        SELECT c.session_id FROM projections.chunks c WHERE c.tenant_id = $1
                         GROUP BY c.session_id ORDER BY max(c.seq) DESC, c.session_id
                         LIMIT $3) END AS sessions,
                    CASE WHEN $4::bigint IS NOT NULL THEN (
                        SELECT c.seq FROM projections.chunks c WHERE c.tenant_id = $1
                         ORDER BY c.seq DESC OFFSET $4 - 1 LIMIT 1) END AS seq_floor",
            tenant,
            grace,
            retention.sessions_kept.map(i64::from),
            retention.max_chunks.map(i64::from)
        )
        .fetch_one(pool)
        .await?;
        forgetting.superseded = row.superseded;
        forgetting.sessions = row.sessions;
        forgetting.seq_floor = row.seq_floor;
        Ok(forgetting)
    }

    /// Whether a chunk with these fields is forgotten (the vector scan's
    /// test; [`sql`] says the same for the candidate statements).
    pub fn forgets(&self, chunk: &ChunkFields<'_>) -> bool {
        if chunk.tags.iter().any(|t| t == "pinned" || t == "pin") {
            return false;
        }
        let aged = MaxAgeDays::KINDS
            .iter()
            .position(|kind| *kind == chunk.kind)
            .and_then(|index| self.cutoffs[index])
            .is_some_and(|cutoff| chunk.ts_us < cutoff.timestamp_micros());
        aged || (chunk.kind == Kind::Decision
            && self
                .superseded
                .as_ref()
                .is_some_and(|seqs| seqs.binary_search(&chunk.seq).is_ok()))
            || self
                .sessions
                .as_ref()
                .is_some_and(|kept| !kept.iter().any(|s| s == chunk.session))
            || self.seq_floor.is_some_and(|floor| chunk.seq < floor)
    }
}

/// What [`Forgetting::forgets`] reads of a chunk.
pub struct ChunkFields<'a> {
    pub seq: i64,
    pub ts_us: i64,
    pub kind: Kind,
    pub session: &'a str,
    pub tags: &'a [String],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_predicate_names_every_pin_tag() {
        let listed = format!("'{{{}}}'", PIN_TAGS.join(","));
        assert!(PINNED.contains(&listed), "{PINNED} vs {listed}");
    }

    fn chunk(seq: i64, days_ago: i64, kind: Kind, tags: &[String]) -> ChunkFields<'_> {
        ChunkFields {
            seq,
            ts_us: (newest() - Duration::days(days_ago)).timestamp_micros(),
            kind,
            session: "s1",
            tags,
        }
    }

    fn newest() -> DateTime<Utc> {
        "2026-11-26T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn kinds_fade_at_their_own_age_and_pins_never_do() {
        let forgetting = Forgetting {
            cutoffs: [
                Some(newest() - Duration::days(30)),
                Some(newest() - Duration::days(7)),
                None,
                None,
            ],
            ..Forgetting::default()
        };
        assert!(!forgetting.forgets(&chunk(1, 20, Kind::Message, &[])));
        assert!(forgetting.forgets(&chunk(1, 31, Kind::Message, &[])));
        assert!(forgetting.forgets(&chunk(1, 8, Kind::ToolResult, &[])));
        assert!(
            !forgetting.forgets(&chunk(1, 400, Kind::Summary, &[])),
            "no limit"
        );
        assert!(!forgetting.forgets(&chunk(1, 400, Kind::Decision, &[])));
        let pinned = ["pinned".to_owned()];
        assert!(!forgetting.forgets(&chunk(1, 400, Kind::Message, &pinned)));
    }

    #[test]
    fn superseded_decisions_sessions_and_the_cap() {
        let forgetting = Forgetting {
            superseded: Some(vec![3, 9]),
            sessions: Some(vec!["s1".into()]),
            seq_floor: Some(5),
            ..Forgetting::default()
        };
        assert!(forgetting.forgets(&chunk(9, 0, Kind::Decision, &[])));
        assert!(!forgetting.forgets(&chunk(10, 0, Kind::Decision, &[])));
        assert!(
            !forgetting.forgets(&chunk(9, 0, Kind::Message, &[])),
            "only decisions"
        );
        assert!(
            forgetting.forgets(&chunk(4, 0, Kind::Message, &[])),
            "under the floor"
        );
        let mut other = chunk(20, 0, Kind::Message, &[]);
        other.session = "s2";
        assert!(forgetting.forgets(&other));
    }

    #[test]
    fn bounds_are_checked_by_field() {
        let retention = Retention {
            sessions_kept: Some(0),
            ..Retention::default()
        };
        assert_eq!(
            retention.check().unwrap_err().field,
            "retention.sessions_kept"
        );
        let retention = Retention {
            max_age_days: MaxAgeDays {
                tool_result: Some(40_000),
                ..MaxAgeDays::default()
            },
            ..Retention::default()
        };
        assert_eq!(
            retention.check().unwrap_err().field,
            "retention.max_age_days.tool_result"
        );
        assert!(Retention::default().check().is_ok());
    }
}
