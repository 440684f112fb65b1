//! Events as projectors read them from the log.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;

/// One row of `events`, minus the hash chain.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    pub seq: i64,
    pub event_id: String,
    pub created_at: DateTime<Utc>,
    pub ts: DateTime<Utc>,
    pub session_id: String,
    pub channel: String,
    pub actor_type: String,
    pub actor_id: String,
    /// The agent whose memory it is, if any.
    pub agent_id: Option<String>,
    pub kind: String,
    pub sensitivity: String,
    pub tags: Vec<String>,
    pub content: Value,
    pub refs: Vec<String>,
    pub artifact_id: Option<String>,
}

impl StoredEvent {
    /// A string field of `content`, when present and a string.
    pub fn text(&self, field: &str) -> Option<&str> {
        self.content.get(field).and_then(Value::as_str)
    }

    /// A list-of-strings field of `content`; anything else reads as empty.
    pub fn strings(&self, field: &str) -> Vec<String> {
        self.content
            .get(field)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Reads up to `limit` events of `tenant` with `after < seq <= until`, in seq
/// order.
pub async fn read_after(
    conn: &mut PgConnection,
    tenant: &str,
    after: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id, agent_id, kind,
                sensitivity, tags, content, refs, artifact_id
           FROM public.events
          WHERE tenant_id = $1 AND seq > $2 AND seq <= $3
          ORDER BY seq
          LIMIT $4",
    )
    .bind(tenant)
    .bind(after)
    .bind(until)
    .bind(limit)
    .fetch_all(conn)
    .await
}
