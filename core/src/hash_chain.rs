//! The per-tenant hash chain that makes the log tamper-evident.
//!
//! `hash = SHA-256(prev_hash ‖ canonical(event))`, where the first event of a
//! tenant chains from [`GENESIS`]. The canonical form is one line of compact
//! JSON holding every envelope field in a fixed order, then `\n`, then the
//! content exactly as PostgreSQL renders the stored `jsonb` (`content::text`).
//! Using PostgreSQL's own rendering means the hash is computed over what is
//! stored, whatever number formatting or key order the client sent, and
//! `memd verify` can recompute it from the table alone.

use sha2::{Digest, Sha256};

/// The `prev_hash` of a tenant's first event.
pub const GENESIS: [u8; 32] = [0; 32];

/// Version tag inside the canonical form, so the format can evolve.
const FORMAT: &str = "memd-event-v1";
/// The form of an event that names its agent: v1's head, then `agent_id`.
/// Events without one keep v1, so every older chain still verifies.
const FORMAT_AGENT: &str = "memd-event-v2";
/// The form of an event that names its data subject: v1's head, then
/// `agent_id` (or null), then `subject_id`. Events without one keep their
/// earlier form.
const FORMAT_SUBJECT: &str = "memd-event-v3";

/// Every stored field of an event that the hash covers.
#[derive(Debug, Clone, Copy)]
pub struct ChainedEvent<'a> {
    pub tenant_id: &'a str,
    pub seq: i64,
    pub event_id: &'a str,
    /// Microseconds since the Unix epoch, as PostgreSQL stores them.
    pub created_at_us: i64,
    pub ts_us: i64,
    pub session_id: &'a str,
    pub channel: &'a str,
    pub actor_type: &'a str,
    pub actor_id: &'a str,
    pub agent_id: Option<&'a str>,
    /// The data subject whose key seals its content, if any.
    pub subject_id: Option<&'a str>,
    pub kind: &'a str,
    pub sensitivity: &'a str,
    pub tags: &'a [String],
    pub refs: &'a [String],
    pub idempotency_key: Option<&'a str>,
    pub artifact_id: Option<&'a str>,
    /// `content::text` as PostgreSQL renders it.
    pub content_text: &'a str,
}

impl ChainedEvent<'_> {
    pub fn canonical(&self) -> Vec<u8> {
        let mut head = serde_json::json!([
            match (self.agent_id, self.subject_id) {
                (_, Some(_)) => FORMAT_SUBJECT,
                (Some(_), None) => FORMAT_AGENT,
                (None, None) => FORMAT,
            },
            self.tenant_id,
            self.seq,
            self.event_id,
            self.created_at_us,
            self.ts_us,
            self.session_id,
            self.channel,
            self.actor_type,
            self.actor_id,
            self.kind,
            self.sensitivity,
            self.tags,
            self.refs,
            self.idempotency_key,
            self.artifact_id,
        ]);
        if let Some(head) = head.as_array_mut() {
            match (self.agent_id, self.subject_id) {
                (agent, Some(subject)) => {
                    head.push(agent.into());
                    head.push(subject.into());
                }
                (Some(agent), None) => head.push(agent.into()),
                (None, None) => {}
            }
        }
        // Compact JSON escapes every newline, so the first '\n' ends the head.
        let mut out = serde_json::to_vec(&head).expect("a JSON value serializes");
        out.push(b'\n');
        out.extend_from_slice(self.content_text.as_bytes());
        out
    }

    pub fn hash(&self, prev_hash: &[u8; 32]) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(prev_hash);
        hasher.update(self.canonical());
        hasher.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(tags: &'a [String], content: &'a str) -> ChainedEvent<'a> {
        ChainedEvent {
            tenant_id: "t",
            seq: 1,
            event_id: "evt_1",
            created_at_us: 1,
            ts_us: 1,
            session_id: "s",
            channel: "private",
            actor_type: "human",
            actor_id: "u",
            agent_id: None,
            subject_id: None,
            kind: "message",
            sensitivity: "none",
            tags,
            refs: &[],
            idempotency_key: None,
            artifact_id: None,
            content_text: content,
        }
    }

    #[test]
    fn every_field_and_the_previous_hash_change_the_hash() {
        let tags = vec!["a".to_string()];
        let base = event(&tags, r#"{"text": "hi"}"#);
        let h = base.hash(&GENESIS);
        assert_ne!(h, base.hash(&[1; 32]));
        assert_ne!(h, ChainedEvent { seq: 2, ..base }.hash(&GENESIS));
        assert_ne!(
            h,
            ChainedEvent {
                actor_id: "v",
                ..base
            }
            .hash(&GENESIS)
        );
        assert_ne!(
            h,
            ChainedEvent {
                idempotency_key: Some("k"),
                ..base
            }
            .hash(&GENESIS)
        );
        assert_ne!(
            h,
            ChainedEvent {
                agent_id: Some("a"),
                ..base
            }
            .hash(&GENESIS)
        );
        assert_ne!(h, event(&[], r#"{"text": "hi"}"#).hash(&GENESIS));
        assert_ne!(h, event(&tags, r#"{"text": "ho"}"#).hash(&GENESIS));
        assert_eq!(h, base.hash(&GENESIS));
    }

    #[test]
    fn events_without_an_agent_keep_the_first_format() {
        // Chains written before agents existed must verify unchanged.
        let canonical = event(&[], "{}").canonical();
        assert!(canonical.starts_with(br#"["memd-event-v1","t",1,"evt_1""#));
        let owned = ChainedEvent {
            agent_id: Some("a"),
            ..event(&[], "{}")
        }
        .canonical();
        assert!(owned.starts_with(br#"["memd-event-v2","t",1,"evt_1""#));
        assert!(owned.ends_with(b",\"a\"]\n{}"));
        // A data subject: v3, the agent (or null) and the subject.
        let subject = ChainedEvent {
            subject_id: Some("alice"),
            ..event(&[], "{}")
        };
        assert!(subject.canonical().starts_with(br#"["memd-event-v3""#));
        assert!(subject.canonical().ends_with(b",null,\"alice\"]\n{}"));
        assert_ne!(
            subject.hash(&GENESIS),
            ChainedEvent {
                subject_id: Some("bob"),
                ..subject
            }
            .hash(&GENESIS)
        );
    }

    #[test]
    fn fields_cannot_bleed_into_each_other() {
        // "a" + "b,c" vs "a,b" + "c": separators are escaped by the JSON head.
        let one = ChainedEvent {
            session_id: "a\",\"b",
            actor_id: "c",
            ..event(&[], "{}")
        };
        let two = ChainedEvent {
            session_id: "a",
            actor_id: "b\",\"c",
            ..event(&[], "{}")
        };
        assert_ne!(one.canonical(), two.canonical());
        let newline = ChainedEvent {
            actor_id: "x\n{}",
            ..event(&[], "")
        };
        assert_eq!(
            newline.canonical().iter().filter(|b| **b == b'\n').count(),
            1
        );
    }
}
