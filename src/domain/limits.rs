//! Size limits for what a client may send. Each is a decision documented in
//! docs/api.md ("Limits"); a request over any of them is refused with a 4xx naming
//! the field, and nothing of it is stored.

/// Bytes of a whole request body (`--max-body-bytes` overrides it).
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How far ahead of the daemon's clock an event's `ts` may be by default:
/// ordinary clock skew, not a date a client invented (one event dated 2099
/// would otherwise age every other memory of its tenant).
pub const DEFAULT_MAX_CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(5 * 60);
/// Events in one `{"events": [...]}` batch.
pub const MAX_BATCH_EVENTS: usize = 1000;
/// Bytes of `session_id`, `actor.id` and `idempotency_key`.
pub const MAX_ID_BYTES: usize = 256;
/// Number of tags, and bytes of each tag.
pub const MAX_TAGS: usize = 64;
pub const MAX_TAG_BYTES: usize = 128;
/// Number of refs, and bytes of each ref.
pub const MAX_REFS: usize = 256;
pub const MAX_REF_BYTES: usize = 256;
/// Bytes of `content` serialized as JSON, for every kind but `tool_result`
/// (whose output may be larger: the excess goes to an artifact).
pub const MAX_CONTENT_BYTES: usize = 1024 * 1024;
/// Bytes of a tool result's excerpt kept in the event itself (PRD §7.4).
pub const TOOL_EXCERPT_BYTES: usize = 64 * 1024;
