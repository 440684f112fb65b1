//! `memd verify`: recompute every tenant's hash chain from the stored rows and
//! name the first link that does not hold.
//!
//! Checked for each event, in `seq` order: the sequence has no gap, `prev_hash`
//! is the previous event's hash, `hash` matches the canonical form of the row
//! as stored, and the artifact it points to exists with the digest the event
//! recorded. Finally the tenant's head row must point at the last event.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::tenant::TenantId;

use memd_core::hash_chain::{ChainedEvent, GENESIS};

const PAGE: i64 = 5_000;

/// An event row as the chain check reads it: its columns in the clear (a
/// chain is checked over the stored text, not over the event model's
/// values), and its artifact's hashes.
struct LogRow {
    seq: i64,
    event_id: String,
    created_at: DateTime<Utc>,
    ts: DateTime<Utc>,
    session_id: String,
    channel: String,
    actor_type: String,
    actor_id: String,
    agent_id: Option<String>,
    subject_id: Option<String>,
    kind: String,
    sensitivity: String,
    tags: Vec<String>,
    refs: Vec<String>,
    idempotency_key: Option<String>,
    artifact_id: Option<String>,
    prev_hash: Vec<u8>,
    hash: Vec<u8>,
    content_text: String,
    recorded_artifact_sha256: Option<String>,
    artifact_sha256: Option<String>,
    artifact_bytes_sha256: Option<String>,
}

/// The first broken link of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    pub seq: i64,
    pub event_id: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    pub tenant: String,
    /// Events whose link was checked and held.
    pub events_ok: i64,
    pub head_hash: String,
    pub broken: Option<ChainBreak>,
}

/// Verifies the chain of `tenant`, or of every tenant.
pub async fn verify_chains(
    pool: &PgPool,
    tenant: Option<&TenantId>,
) -> Result<Vec<ChainReport>, sqlx::Error> {
    let tenants: Vec<String> = match tenant {
        Some(t) => vec![t.to_string()],
        None => {
            sqlx::query_scalar!("SELECT tenant_id FROM tenants ORDER BY tenant_id")
                .fetch_all(pool)
                .await?
        }
    };
    let mut reports = Vec::with_capacity(tenants.len());
    for tenant in tenants {
        reports.push(verify_tenant(pool, &tenant).await?);
    }
    Ok(reports)
}

async fn verify_tenant(pool: &PgPool, tenant: &str) -> Result<ChainReport, sqlx::Error> {
    verify_from(pool, tenant, 0, GENESIS).await
}

/// [`verify_chains`] for `tenant`'s events after `from_seq`, whose hash is
/// taken to be `from_hash` (a signed checkpoint's): links, recomputed
/// hashes and artifacts, then the head.
pub async fn verify_from(
    pool: &PgPool,
    tenant: &str,
    from_seq: i64,
    from_hash: [u8; 32],
) -> Result<ChainReport, sqlx::Error> {
    let mut report = ChainReport {
        tenant: tenant.to_string(),
        events_ok: 0,
        head_hash: hex::encode(from_hash),
        broken: None,
    };
    let mut last_seq = from_seq;
    let mut last_hash = from_hash;
    'pages: loop {
        let rows = sqlx::query_as!(
            LogRow,
            r#"SELECT e.seq, e.event_id, e.created_at, e.ts, e.session_id, e.channel,
                      e.actor_type, e.actor_id, e.agent_id, e.subject_id, e.kind, e.sensitivity,
                      e.tags, e.refs, e.idempotency_key, e.artifact_id, e.prev_hash, e.hash,
                      e.content::text AS "content_text!",
                      e.content ->> 'artifact_sha256' AS recorded_artifact_sha256,
                      encode(a.sha256, 'hex') AS artifact_sha256,
                      encode(sha256(a.bytes), 'hex') AS artifact_bytes_sha256
                 FROM events e
                 LEFT JOIN artifacts a ON a.artifact_id = e.artifact_id AND a.tenant_id = e.tenant_id
                WHERE e.tenant_id = $1 AND e.seq > $2
                ORDER BY e.seq
                LIMIT $3"#,
            tenant,
            last_seq,
            PAGE
        )
        .fetch_all(pool)
        .await?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            if let Some(reason) = check_link(&row, tenant, last_seq, &last_hash) {
                report.broken = Some(ChainBreak {
                    seq: row.seq,
                    event_id: Some(row.event_id),
                    reason,
                });
                break 'pages;
            }
            last_seq = row.seq;
            last_hash = row.hash.try_into().expect("checked to be 32 bytes");
            report.events_ok += 1;
        }
    }
    report.head_hash = hex::encode(last_hash);
    if report.broken.is_none() {
        let head = sqlx::query!(
            "SELECT seq, hash FROM tenant_heads WHERE tenant_id = $1",
            tenant
        )
        .fetch_optional(pool)
        .await?;
        let (head_seq, head_hash) = match head {
            Some(row) => (row.seq, row.hash),
            None => (-1, Vec::new()),
        };
        if head_seq != last_seq || head_hash != last_hash {
            report.broken = Some(ChainBreak {
                seq: head_seq,
                event_id: None,
                reason: format!(
                    "tenant head says seq {head_seq} hash {}, but the log ends at seq {last_seq} hash {}",
                    hex::encode(&head_hash),
                    hex::encode(last_hash)
                ),
            });
        }
    }
    Ok(report)
}

/// Why this row does not extend the chain ending at (`last_seq`, `last_hash`), if it does not.
fn check_link(row: &LogRow, tenant: &str, last_seq: i64, last_hash: &[u8; 32]) -> Option<String> {
    let seq = row.seq;
    if seq != last_seq + 1 {
        return Some(format!("sequence gap: seq {} is missing", last_seq + 1));
    }
    if row.prev_hash != last_hash {
        return Some(format!(
            "prev_hash {} is not the previous event's hash {}",
            hex::encode(&row.prev_hash),
            hex::encode(last_hash)
        ));
    }
    let recomputed = ChainedEvent {
        tenant_id: tenant,
        seq,
        event_id: &row.event_id,
        created_at_us: row.created_at.timestamp_micros(),
        ts_us: row.ts.timestamp_micros(),
        session_id: &row.session_id,
        channel: &row.channel,
        actor_type: &row.actor_type,
        actor_id: &row.actor_id,
        agent_id: row.agent_id.as_deref(),
        subject_id: row.subject_id.as_deref(),
        kind: &row.kind,
        sensitivity: &row.sensitivity,
        tags: &row.tags,
        refs: &row.refs,
        idempotency_key: row.idempotency_key.as_deref(),
        artifact_id: row.artifact_id.as_deref(),
        content_text: &row.content_text,
    }
    .hash(last_hash);
    if row.hash != recomputed {
        return Some(format!(
            "stored hash {} does not match the event's content (recomputed {}): the row was altered",
            hex::encode(&row.hash),
            hex::encode(recomputed)
        ));
    }
    if let Some(artifact_id) = &row.artifact_id {
        let recorded = &row.recorded_artifact_sha256;
        let actual = &row.artifact_bytes_sha256;
        if actual.is_none() {
            return Some(format!("artifact {artifact_id} is missing"));
        }
        if recorded != actual || row.artifact_sha256 != *actual {
            return Some(format!(
                "artifact {artifact_id} bytes hash to {}, the event recorded {}",
                actual.as_deref().unwrap_or_default(),
                recorded.as_deref().unwrap_or_default()
            ));
        }
    }
    None
}
