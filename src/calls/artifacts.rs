//! Reading an artifact (the full output behind a truncated tool result),
//! whole or a byte range, opened when sealed.

use std::borrow::Cow;

use memd_core::seal::{SEALED_PREFIX, SealError};
use sqlx::Row;

use super::{
    ApiState,
    error::{CallError, Failure},
    require_scope,
};
use crate::{domain::tenant::Scope, tenants::Caller};

/// A stored tool output, whole.
pub(crate) struct Artifact {
    pub bytes: Vec<u8>,
    pub media_type: String,
    /// The `tool_result` event that recorded it.
    pub event_id: String,
    /// Hex SHA-256 of the bytes as stored, as the event's hash chain
    /// covers it: of the sealed form, for a sealed artifact.
    pub sha256: String,
    /// Whether it is sealed at rest (`bytes` are shown opened).
    pub sealed: bool,
}

/// A row's stored `bytes` opened for the caller (a data subject's, named by
/// its `subject_id`, with the subject's key), and whether they were sealed.
/// An erased subject's artifact is gone: 410.
async fn opened(
    state: &ApiState,
    caller: &Caller,
    row: &sqlx::postgres::PgRow,
) -> Result<(Vec<u8>, bool), CallError> {
    let subject: Option<String> = row.try_get("subject_id")?;
    let stored: Vec<u8> = row.try_get("bytes")?;
    let tenant = caller.tenant.as_str();
    let keyring = memd_core::event::subject_keyring(
        &state.reader.pool,
        &state.reader.keyring,
        tenant,
        subject.as_deref(),
    )
    .await?;
    match keyring.open_bytes(tenant, &stored) {
        Ok(Cow::Borrowed(_)) => Ok((stored, false)),
        Ok(Cow::Owned(plain)) => Ok((plain, true)),
        Err(SealError::Erased(_)) if subject.is_some() => Err(CallError::new(
            Failure::Gone,
            "erased",
            "the artifact's data subject was erased: its content can never be opened again",
        )),
        Err(other) => Err(sqlx::Error::from(other).into()),
    }
}

/// The data subject of an artifact's event, as the statements read it.
const SUBJECT: &str = "(SELECT e.subject_id FROM events e
                        WHERE e.tenant_id = a.tenant_id AND e.event_id = a.event_id) AS subject_id";

/// The artifact `$2` of tenant `$1`, unless its event is another agent's
/// private memory (`$3`: the caller's agent, if any).
const VISIBLE_ARTIFACT: &str = "artifacts a WHERE tenant_id = $1 AND artifact_id = $2
            AND NOT EXISTS (SELECT FROM events e
                             WHERE e.tenant_id = a.tenant_id AND e.event_id = a.event_id
                               AND NOT (e.channel <> 'private' OR e.agent_id IS NULL
                                        OR $3::text IS NULL OR e.agent_id = $3))";

/// The caller's artifact `artifact_id`: shared by HTTP and MCP. Another
/// tenant's is a 404 exactly like a missing one.
pub(crate) async fn fetch(
    state: &ApiState,
    caller: &Caller,
    artifact_id: &str,
) -> Result<Artifact, CallError> {
    require_scope(caller, Scope::Read)?;
    let row = state
        .read_log(move |pool| async move {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT bytes, media_type, event_id, encode(sha256, 'hex') AS sha256, {SUBJECT}
                   FROM {VISIBLE_ARTIFACT}",
            )))
            .bind(caller.tenant.as_str())
            .bind(artifact_id)
            .bind(&caller.agent)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| CallError::not_found(format!("no artifact {artifact_id}")))
        })
        .await?;
    let (bytes, sealed) = opened(state, caller, &row).await?;
    Ok(Artifact {
        bytes,
        media_type: row.try_get("media_type")?,
        event_id: row.try_get("event_id")?,
        sha256: row.try_get("sha256")?,
        sealed,
    })
}

/// A byte range of the caller's artifact `artifact_id`, cut in the
/// database (a page of a large output moves only that page), and the
/// artifact's whole length. Another tenant's is a 404 exactly like a
/// missing one.
pub(crate) async fn fetch_range(
    state: &ApiState,
    caller: &Caller,
    artifact_id: &str,
    offset: usize,
    len: usize,
) -> Result<(Artifact, usize), CallError> {
    require_scope(caller, Scope::Read)?;
    let row = state
        .read_log(move |pool| async move {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                // A sealed artifact is opened whole, then cut.
                "SELECT CASE WHEN substring(bytes FROM 1 FOR $6) = $7 THEN bytes
                     ELSE substring(bytes FROM $4 FOR $5) END AS bytes,
                length(bytes) AS total, media_type,
                event_id, encode(sha256, 'hex') AS sha256, {SUBJECT}
           FROM {VISIBLE_ARTIFACT}",
            )))
            .bind(caller.tenant.as_str())
            .bind(artifact_id)
            .bind(&caller.agent)
            .bind(i32::try_from(offset.saturating_add(1)).unwrap_or(i32::MAX))
            .bind(i32::try_from(len).unwrap_or(i32::MAX))
            .bind(SEALED_PREFIX.len() as i32)
            .bind(SEALED_PREFIX.as_bytes())
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| CallError::not_found(format!("no artifact {artifact_id}")))
        })
        .await?;
    let total: i32 = row.try_get("total")?;
    let (bytes, sealed) = opened(state, caller, &row).await?;
    let (bytes, total) = if sealed {
        let end = offset.saturating_add(len).min(bytes.len());
        (
            bytes.get(offset..end).unwrap_or_default().to_vec(),
            bytes.len(),
        )
    } else {
        (bytes, total.max(0) as usize)
    };
    Ok((
        Artifact {
            bytes,
            media_type: row.try_get("media_type")?,
            event_id: row.try_get("event_id")?,
            sha256: row.try_get("sha256")?,
            sealed,
        },
        total,
    ))
}
