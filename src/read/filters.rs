//! Retrieval filters: what a bundle request narrows its evidence to (a
//! time range, agents, sessions, kinds, tags). They are part of the
//! candidate statements and of the vector scan, exactly like privacy: a
//! chunk outside them is never a candidate, so it cannot crowd out one
//! inside them, and the pool is filled from what they allow.
//!
//! They narrow *retrieval* (lexical and semantic candidates, and pinned
//! memory). What stands whatever the question (rules, views, the decisions
//! in force, tasks, the session's recent window, a handoff packet's own
//! evidence) is not retrieved, and is not narrowed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::{
    FieldError,
    event::Kind,
    limits::{MAX_ID_BYTES, MAX_TAG_BYTES},
};

/// Entries one list of a filter may hold.
pub const MAX_FILTER_VALUES: usize = 64;

/// Optional filters on a bundle's retrieved evidence. Every list is "any
/// of" but `tags_all`; every field given must hold (they combine with AND).
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct RetrievalFilters {
    /// Only memory at or after this time (RFC 3339; the event's `ts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub since: Option<DateTime<Utc>>,
    /// Only memory before this time (RFC 3339, exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub until: Option<DateTime<Utc>>,
    /// Only memory owned by one of these agents (the events' `agent_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub agents: Vec<String>,
    /// Only memory of one of these sessions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub sessions: Vec<String>,
    /// Only memory of one of these kinds (`message`, `tool_result`,
    /// `decision`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub kinds: Vec<Kind>,
    /// Only memory carrying every one of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub tags_all: Vec<String>,
    /// Only memory carrying at least one of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub tags_any: Vec<String>,
}

impl RetrievalFilters {
    /// Whether nothing is filtered.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the bounds; errors name the field as `filters.<name>`.
    pub fn check(&self) -> Result<(), FieldError> {
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(FieldError::new(
                "filters.until",
                "must be later than filters.since",
            ));
        }
        for (field, values, max_bytes) in [
            ("filters.agents", &self.agents, MAX_ID_BYTES),
            ("filters.sessions", &self.sessions, MAX_ID_BYTES),
            ("filters.tags_all", &self.tags_all, MAX_TAG_BYTES),
            ("filters.tags_any", &self.tags_any, MAX_TAG_BYTES),
        ] {
            if values.len() > MAX_FILTER_VALUES {
                return Err(FieldError::new(
                    field,
                    format!("has {} entries; at most {MAX_FILTER_VALUES}", values.len()),
                ));
            }
            if values.iter().any(|v| v.is_empty() || v.len() > max_bytes) {
                return Err(FieldError::new(
                    field,
                    format!("entries must be 1-{max_bytes} bytes"),
                ));
            }
        }
        if self.kinds.len() > MAX_FILTER_VALUES {
            return Err(FieldError::new(
                "filters.kinds",
                format!("at most {MAX_FILTER_VALUES} entries"),
            ));
        }
        Ok(())
    }

    /// The kinds as the chunks table spells them.
    pub fn kind_names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|kind| kind.as_str()).collect()
    }

    /// Whether a chunk of this time (microseconds since the epoch) passes.
    pub fn allows_time(&self, ts_us: i64) -> bool {
        self.since
            .is_none_or(|since| ts_us >= since.timestamp_micros())
            && self
                .until
                .is_none_or(|until| ts_us < until.timestamp_micros())
    }

    pub fn allows_agent(&self, agent: Option<&str>) -> bool {
        self.agents.is_empty() || agent.is_some_and(|a| self.agents.iter().any(|x| x == a))
    }

    pub fn allows_session(&self, session: &str) -> bool {
        self.sessions.is_empty() || self.sessions.iter().any(|s| s == session)
    }

    pub fn allows_kind(&self, kind: Kind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }

    pub fn allows_tags(&self, tags: &[String]) -> bool {
        self.tags_all.iter().all(|t| tags.contains(t))
            && (self.tags_any.is_empty() || self.tags_any.iter().any(|t| tags.contains(t)))
    }
}

/// The filters over chunk rows `c`, as the candidate statements bind them
/// (`$6` since, `$7` until, `$8` agents, `$9` sessions, `$10` kinds, `$11`
/// tags all, `$12` tags any; a NULL is no filter). The candidate
/// statements are planned with their values, so an unset filter costs
/// nothing.
pub const SQL: &str = "($6::timestamptz IS NULL OR c.ts >= $6) \
     AND ($7::timestamptz IS NULL OR c.ts < $7) \
     AND ($8::text[] IS NULL OR c.agent_id = ANY ($8)) \
     AND ($9::text[] IS NULL OR c.session_id = ANY ($9)) \
     AND ($10::text[] IS NULL OR c.kind = ANY ($10)) \
     AND ($11::text[] IS NULL OR c.tags @> $11) \
     AND ($12::text[] IS NULL OR c.tags && $12)";

/// A list as [`SQL`] binds it: NULL when empty.
pub fn list<T: Clone>(values: &[T]) -> Option<Vec<T>> {
    (!values.is_empty()).then(|| values.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test the vector scan makes of a row, field by field.
    fn allows(filters: &RetrievalFilters, ts_us: i64, session: &str, tags: &[String]) -> bool {
        filters.allows_time(ts_us)
            && filters.allows_agent(Some("planner"))
            && filters.allows_session(session)
            && filters.allows_kind(Kind::Message)
            && filters.allows_tags(tags)
    }

    #[test]
    fn no_filter_allows_everything() {
        let filters = RetrievalFilters::default();
        assert!(filters.is_empty());
        assert!(allows(&filters, 0, "s", &[]));
    }

    #[test]
    fn every_field_given_must_hold() {
        let tags = vec!["db".to_owned(), "ops".to_owned()];
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let filters = RetrievalFilters {
            since: Some(at("2026-01-01T00:00:00Z")),
            until: Some(at("2026-02-01T00:00:00Z")),
            sessions: vec!["s1".into()],
            tags_all: vec!["db".into()],
            tags_any: vec!["ops".into(), "infra".into()],
            ..RetrievalFilters::default()
        };
        let inside = at("2026-01-15T00:00:00Z").timestamp_micros();
        assert!(allows(&filters, inside, "s1", &tags));
        assert!(!allows(&filters, inside, "s2", &tags), "other session");
        let until = at("2026-02-01T00:00:00Z").timestamp_micros();
        assert!(!allows(&filters, until, "s1", &tags), "until is exclusive");
        assert!(
            !allows(&filters, inside, "s1", &["ops".to_owned()]),
            "tags_all"
        );
        assert!(
            !allows(&filters, inside, "s1", &["db".to_owned()]),
            "tags_any"
        );
        let agents = RetrievalFilters {
            agents: vec!["coder".into()],
            ..RetrievalFilters::default()
        };
        assert!(!agents.allows_agent(Some("planner")));
        assert!(
            !agents.allows_agent(None),
            "memory without an owner is no agent's"
        );
    }

    #[test]
    fn bad_filters_name_their_field() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let backwards = RetrievalFilters {
            since: Some(at("2026-02-01T00:00:00Z")),
            until: Some(at("2026-01-01T00:00:00Z")),
            ..RetrievalFilters::default()
        };
        assert_eq!(backwards.check().unwrap_err().field, "filters.until");
        let many = RetrievalFilters {
            sessions: (0..65).map(|i| format!("s{i}")).collect(),
            ..RetrievalFilters::default()
        };
        assert_eq!(many.check().unwrap_err().field, "filters.sessions");
        let empty_tag = RetrievalFilters {
            tags_any: vec![String::new()],
            ..RetrievalFilters::default()
        };
        assert_eq!(empty_tag.check().unwrap_err().field, "filters.tags_any");
    }
}
