//! Erasure of a data subject by crypto-shredding (GDPR's right to
//! erasure on an append-only log).
//!
//! Events that name a `subject_id` have their content (and artifact) sealed
//! in the log under that subject's own key, held in `subject_keys` wrapped
//! by the master key, which is not in the database. Erasing destroys the
//! wrapped key: the content can never be opened again, by anyone, while
//! the stored bytes, and so the hash chain, stay as they were (`memd
//! verify` passes). An `erasure` event records who erased which subject and
//! when, not what. The projections still hold what was derived from the
//! subject's events (sealed under the master key) until they are rebuilt:
//! the rebuild that follows finds those events erased and derives nothing
//! from them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;

use memd_core::seal::Keyring;

use memd_projectors::projections::embeddings;

use crate::{
    domain::{
        event::{ActorType, Channel, Kind, NewEvent, Sensitivity},
        tenant::TenantId,
    },
    write::{AppendError, append},
};

/// The session erasure records are appended to.
pub const ERASURE_SESSION: &str = "memd-erasure";

/// What an erasure did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Erasure {
    pub subject_id: String,
    pub erased_at: DateTime<Utc>,
    pub erased_by: String,
    /// Events of the subject whose content is now unreadable.
    pub events: i64,
    /// The `erasure` event recording it.
    pub erasure_event_id: String,
    pub erasure_seq: i64,
    /// Embedding vectors of the subject's events deleted (a rebuild of the
    /// other projections derives nothing more from them).
    pub vectors_deleted: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    #[error("no data subject {0} in this tenant")]
    Unknown(String),
    #[error("data subject {0} was already erased")]
    AlreadyErased(String),
    #[error(
        "the key of {subject} was destroyed, but the erasure record was not appended: {source}"
    )]
    Record {
        subject: String,
        source: AppendError,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Destroys `subject`'s key in `tenant`, then appends the erasure record.
/// The key goes first: if the record cannot be appended, the subject is
/// erased all the same (and the error says so).
pub async fn erase(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &TenantId,
    subject: &str,
    by: &str,
) -> Result<Erasure, EraseError> {
    let erased: Option<(DateTime<Utc>, i64)> = sqlx::query!(
        r#"UPDATE subject_keys SET wrapped = NULL, erased_at = now(), erased_by = $3
            WHERE tenant_id = $1 AND subject_id = $2 AND wrapped IS NOT NULL
           RETURNING erased_at AS "erased_at!",
                     (SELECT count(*) FROM events WHERE tenant_id = $1 AND subject_id = $2)
                       AS "events!""#,
        tenant.as_str(),
        subject,
        by
    )
    .fetch_optional(pool)
    .await?
    .map(|row| (row.erased_at, row.events));
    let Some((erased_at, events)) = erased else {
        let known: bool = sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM subject_keys WHERE tenant_id = $1 AND subject_id = $2)
                 AS "known!""#,
            tenant.as_str(),
            subject
        )
        .fetch_one(pool)
        .await?;
        return Err(if known {
            EraseError::AlreadyErased(subject.into())
        } else {
            EraseError::Unknown(subject.into())
        });
    };
    let record = NewEvent {
        session_id: ERASURE_SESSION.into(),
        channel: Channel::Private,
        actor_type: ActorType::System,
        actor_id: by.into(),
        agent_id: None,
        subject_id: None,
        kind: Kind::Erasure,
        sensitivity: Sensitivity::None,
        tags: vec!["erasure".into()],
        content: json!({"subject_id": subject, "erased_by": by, "events": events}),
        refs: Vec::new(),
        idempotency_key: None,
        ts: Some(erased_at),
        artifact: None,
        // No idempotency key: nothing compares it.
        request_digest: [0; 32],
    };
    let appended = append(pool, keyring, tenant, vec![record])
        .await
        .map_err(|source| EraseError::Record {
            subject: subject.into(),
            source,
        })?;
    let appended = &appended[0];
    let vectors_deleted = embeddings::forget_subject(pool, tenant.as_str(), subject).await?;
    Ok(Erasure {
        subject_id: subject.into(),
        erased_at,
        erased_by: by.into(),
        events,
        erasure_event_id: appended.event_id.clone(),
        erasure_seq: appended.seq,
        vectors_deleted,
    })
}
