//! Appending events for one tenant, as one transaction.
//!
//! The transaction locks the tenant's head row (`tenant_heads`) first. While
//! it is held no other append of that tenant can take a sequence number, so:
//! - `seq` is gap-free, and a higher `seq` never commits before a lower one
//!   (projectors reading "above my cursor" cannot miss a late commit);
//! - the hash chain always extends the true head;
//! - an idempotency key can be checked without a race.
//!
//! Two ways to one outcome:
//! - **One statement**, when the writer knows the head its previous append
//!   left (the usual case: one writer task per tenant, see `group_commit`).
//!   It hashes in memd, with content rendered as PostgreSQL renders `jsonb`
//!   (`domain::jsonb_text`), and sends a single INSERT whose head update
//!   only matches if the head is still the one it extended, no event has
//!   any of its idempotency keys, and PostgreSQL renders every content as
//!   memd did. Otherwise nothing is stored and the append goes the long way.
//! - **Four round trips** otherwise: BEGIN, lock (which also returns
//!   PostgreSQL's rendering of each content and the last event's time),
//!   earlier events with the same idempotency keys (only when there are
//!   keys), one INSERT of all rows plus the head update and `pg_notify`,
//!   COMMIT.
//!
//! `created_at` comes from memd's clock, never earlier than the tenant's
//! previous event, so both ways can hash it before the statement runs.

use std::collections::HashMap;

use chrono::{DateTime, SubsecRound, Utc};
use memd_core::{
    StoredEvent,
    seal::{Keyring, Sealer},
};
use memd_projectors::projections::chunks;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool, Row};

use crate::domain::{
    event::{NewArtifact, NewEvent},
    jsonb_text,
    tenant::TenantId,
};

use memd_core::hash_chain::{ChainedEvent, GENESIS};

/// Channel on which each commit announces `<tenant>:<head seq>`; the
/// projector runtime listens on it.
pub const NOTIFY_CHANNEL: &str = memd_projectors::EVENTS_CHANNEL;

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("tenant {0} does not exist")]
    UnknownTenant(String),
    #[error("the tenant's writer stopped before answering")]
    WriterStopped,
    #[error("data subject {0} was erased")]
    SubjectErased(String),
    /// The event at `index` of the append reuses `key` with another request
    /// than the one stored under it (or than an earlier event of the same
    /// append): nothing was stored.
    #[error("idempotency key {key} was used for another request")]
    IdempotencyConflict { index: usize, key: String },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What the caller gets back for each event, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Appended {
    /// `evt_` + a ULID.
    pub event_id: String,
    /// The event's place in its tenant's log: 1, 2, 3, ... with no gap.
    pub seq: i64,
    /// When it was appended: the daemon's clock, never earlier than the
    /// tenant's previous event.
    pub created_at: DateTime<Utc>,
    /// True when an event with this idempotency key already existed: nothing
    /// was stored and these are the original's id, seq and time.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Where a truncated tool result's whole output went, so the caller
    /// can cite or fetch it without a lookup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
    /// The retrieval units the event becomes (`chk_<ulid>_<part>`), as the
    /// chunks projection will write them: cite them before it has. None for
    /// kinds that are not retrieved; left out for a replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_ids: Option<Vec<String>>,
}

/// An earlier event with a key this append repeats: key, event id, seq,
/// commit time, artifact id, request digest (hex; None before digests).
type Replay = (
    String,
    String,
    i64,
    DateTime<Utc>,
    Option<String>,
    Option<String>,
);

/// The original event an idempotency key names, and the digest of the
/// request that stored it (None when it was stored without one).
type Original = (Appended, Option<Vec<u8>>);

/// The INSERT of a batch's rows, `FROM` whatever `$from` names before the
/// unnest of their columns: shared by the two append statements.
macro_rules! insert_event_rows {
    ($from:literal) => {
        concat!(
            "
    INSERT INTO events (tenant_id, seq, event_id, created_at, ts, session_id, channel, actor_type,
                        actor_id, kind, sensitivity, tags, content, refs, idempotency_key,
                        artifact_id, prev_hash, hash, agent_id, subject_id, request_digest)
    SELECT $1, u.seq, u.event_id, $2, u.ts, u.session_id, u.channel, u.actor_type,
           u.actor_id, u.kind, u.sensitivity,
           ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb)), u.content::jsonb,
           ARRAY(SELECT jsonb_array_elements_text(u.refs::jsonb)), u.idempotency_key,
           u.artifact_id, u.prev_hash, u.hash, u.agent_id, u.subject_id, u.request_digest
      FROM ",
            $from,
            " unnest($3::bigint[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::text[],
                  $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                  $15::text[], $16::text[], $17::bytea[], $18::bytea[], $22::text[], $23::text[],
                  $24::bytea[])
           AS u (seq, event_id, ts, session_id, channel, actor_type, actor_id, kind, sensitivity,
                 tags, content, refs, idempotency_key, artifact_id, prev_hash, hash, agent_id,
                 subject_id, request_digest)
    RETURNING 1"
        )
    };
}

const INSERT_EVENTS: &str = concat!(
    "WITH inserted AS (",
    insert_event_rows!(""),
    "
), head AS (
    UPDATE tenant_heads SET seq = $19, hash = $20, created_at = $2,
                            newest_ts = greatest(newest_ts, (SELECT max(t) FROM unnest($5::timestamptz[]) t))
     WHERE tenant_id = $1
)
SELECT count(*) AS inserted, pg_notify($21, $1 || ':' || $19::text) FROM inserted"
);

/// [`INSERT_EVENTS`] in one autocommitted statement, storing nothing unless
/// the head is still `($25, $26)` and PostgreSQL renders each content
/// exactly as sent; `$keys_taken` adds a condition on the idempotency keys.
macro_rules! insert_events_after_head {
    ($keys_taken:literal) => {
        concat!(
            "WITH head AS (
    UPDATE tenant_heads SET seq = $19, hash = $20, created_at = $2,
                            newest_ts = greatest(newest_ts, (SELECT max(t) FROM unnest($5::timestamptz[]) t))
     WHERE tenant_id = $1 AND seq = $25 AND hash = $26",
            $keys_taken,
            "
       AND (SELECT bool_and(c::jsonb::text = c) FROM unnest($13::text[]) AS c)
    RETURNING pg_notify($21, $1 || ':' || $19::text)
), inserted AS (",
            insert_event_rows!("head,"),
            "
)
SELECT count(*) AS inserted FROM inserted"
        )
    };
}

/// [`insert_events_after_head`] for events without an idempotency key: no
/// key to look up. Single events run it on sessions that plan it once for
/// any values (`db::for_appends`), and a plan for any keys may look them up
/// by scanning the tenant's whole log in the `(tenant_id, idempotency_key)`
/// index (PostgreSQL prices a parameter array at ten elements): one append
/// then read the index entry, and often the row, of every earlier event of
/// its tenant (`lab/results/2026-12-04-profile/`).
const INSERT_EVENTS_AFTER_HEAD: &str = insert_events_after_head!("");

/// [`insert_events_after_head`] when some event has a key: stores nothing
/// if any key is taken. Planned for its values (`AppendPools`), which look
/// each key up in the index.
const INSERT_EVENTS_AFTER_HEAD_KEYED: &str = insert_events_after_head!(
    "
       AND NOT EXISTS (SELECT 1 FROM events e
                        WHERE e.tenant_id = $1 AND e.idempotency_key = ANY ($15::text[]))"
);

/// The columns of the new rows, one vector per column, for `unnest`.
#[derive(Default)]
struct Columns {
    seq: Vec<i64>,
    event_id: Vec<String>,
    ts: Vec<DateTime<Utc>>,
    session_id: Vec<String>,
    channel: Vec<&'static str>,
    actor_type: Vec<&'static str>,
    actor_id: Vec<String>,
    agent_id: Vec<Option<String>>,
    subject_id: Vec<Option<String>>,
    kind: Vec<&'static str>,
    sensitivity: Vec<&'static str>,
    tags: Vec<String>,
    content: Vec<String>,
    refs: Vec<String>,
    idempotency_key: Vec<Option<String>>,
    artifact_id: Vec<Option<String>>,
    prev_hash: Vec<Vec<u8>>,
    hash: Vec<Vec<u8>>,
    request_digest: Vec<Option<Vec<u8>>>,
}

/// What numbering and chaining gave one new event: its row's columns
/// beside the request's own.
struct Chained {
    seq: i64,
    event_id: String,
    ts: DateTime<Utc>,
    /// The stored content, rendered.
    content: String,
    artifact_id: Option<String>,
    prev_hash: [u8; 32],
    hash: [u8; 32],
    request_digest: Option<Vec<u8>>,
}

impl Columns {
    fn push(&mut self, event: NewEvent, chained: Chained) {
        self.seq.push(chained.seq);
        self.event_id.push(chained.event_id);
        self.ts.push(chained.ts);
        self.session_id.push(event.session_id);
        self.channel.push(event.channel.as_str());
        self.actor_type.push(event.actor_type.as_str());
        self.actor_id.push(event.actor_id);
        self.agent_id.push(event.agent_id);
        self.subject_id.push(event.subject_id);
        self.kind.push(event.kind.as_str());
        self.sensitivity.push(event.sensitivity.as_str());
        self.tags
            .push(serde_json::to_string(&event.tags).expect("strings serialize"));
        self.content.push(chained.content);
        self.refs
            .push(serde_json::to_string(&event.refs).expect("strings serialize"));
        self.idempotency_key.push(event.idempotency_key);
        self.artifact_id.push(chained.artifact_id);
        self.prev_hash.push(chained.prev_hash.to_vec());
        self.hash.push(chained.hash.to_vec());
        self.request_digest.push(chained.request_digest);
    }
}

#[derive(Default)]
struct ArtifactColumns {
    artifact_id: Vec<String>,
    event_id: Vec<String>,
    media_type: Vec<&'static str>,
    sha256: Vec<Vec<u8>>,
    bytes: Vec<Vec<u8>>,
    meta: Vec<String>,
    kind: Vec<&'static str>,
}

impl ArtifactColumns {
    fn push(&mut self, artifact: NewArtifact, event_id: &str) {
        self.artifact_id.push(artifact.artifact_id);
        self.event_id.push(event_id.to_owned());
        self.media_type.push(artifact.media_type);
        self.sha256.push(artifact.sha256.to_vec());
        self.bytes.push(artifact.bytes);
        self.meta.push(artifact.meta.to_string());
        self.kind.push(artifact.kind);
    }
}

/// What the log gives an event beside what the client sent: its place in
/// the tenant's chain, its id and its times.
struct Numbered<'a> {
    seq: i64,
    event_id: &'a str,
    created_at: DateTime<Utc>,
    ts: DateTime<Utc>,
    artifact_id: Option<&'a str>,
}

impl Numbered<'_> {
    /// The event's link in the hash chain, after `prev_hash`.
    fn chain_hash(
        &self,
        tenant: &TenantId,
        event: &NewEvent,
        content_text: &str,
        prev_hash: &[u8; 32],
    ) -> [u8; 32] {
        ChainedEvent {
            tenant_id: tenant.as_str(),
            seq: self.seq,
            event_id: self.event_id,
            created_at_us: self.created_at.timestamp_micros(),
            ts_us: self.ts.timestamp_micros(),
            session_id: &event.session_id,
            channel: event.channel.as_str(),
            actor_type: event.actor_type.as_str(),
            actor_id: &event.actor_id,
            agent_id: event.agent_id.as_deref(),
            subject_id: event.subject_id.as_deref(),
            kind: event.kind.as_str(),
            sensitivity: event.sensitivity.as_str(),
            tags: &event.tags,
            refs: &event.refs,
            idempotency_key: event.idempotency_key.as_deref(),
            artifact_id: self.artifact_id,
            content_text,
        }
        .hash(prev_hash)
    }

    /// The event as projectors will read it; takes its content.
    fn stored(&self, event: &mut NewEvent, hash: [u8; 32]) -> StoredEvent {
        StoredEvent {
            seq: self.seq,
            event_id: self.event_id.to_owned(),
            created_at: self.created_at,
            ts: self.ts,
            session_id: event.session_id.clone(),
            channel: event.channel,
            actor_type: event.actor_type,
            actor_id: event.actor_id.clone(),
            agent_id: event.agent_id.clone(),
            subject_id: event.subject_id.clone(),
            kind: event.kind,
            sensitivity: event.sensitivity,
            tags: event.tags.clone(),
            content: std::mem::take(&mut event.content),
            refs: event.refs.clone(),
            artifact_id: self.artifact_id.map(str::to_owned),
            hash: hash.to_vec(),
            sealer: None,
            keyring: Keyring::none(),
            erased: false,
        }
    }
}

/// What seals the event's content: its data subject's key (from
/// `subjects`) when it names one, else the tenant's when `keyring` seals
/// its sensitivity; None: stored as it is.
fn sealer_of(
    keyring: &Keyring,
    tenant: &TenantId,
    subjects: &HashMap<String, Sealer>,
    event: &NewEvent,
) -> Option<Sealer> {
    match &event.subject_id {
        Some(subject) => Some(
            subjects
                .get(subject)
                .expect("every subject's key was loaded")
                .clone(),
        ),
        None if event.sensitivity.is_sealed() => keyring.sealer(tenant.as_str()),
        None => None,
    }
}

/// The content as stored when `sealer` seals it. Seals its artifact too
/// (whose digest, in the event, becomes the sealed bytes'). `event.content`
/// stays the plaintext.
fn sealed_content(sealer: &Sealer, event: &mut NewEvent) -> Value {
    seal_artifact(sealer, event);
    sealer.seal_content(&event.content)
}

/// The request digest kept beside an idempotency key (None without a key):
/// keyed when the content is sealed, since a plain digest of a short sealed
/// text could be confirmed by guessing the text (and under a subject's key
/// it is gone with the key).
fn stored_digest(sealer: Option<&Sealer>, event: &NewEvent) -> Option<Vec<u8>> {
    event.idempotency_key.as_ref()?;
    Some(match sealer {
        Some(sealer) => sealer.keyed_digest(&event.request_digest),
        None => event.request_digest.to_vec(),
    })
}

/// The sealers of the data subjects `events` name: each subject's key,
/// made on its first event (wrapped by the master key, in `subject_keys`).
/// A subject that was erased takes nothing more.
async fn subject_sealers(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &TenantId,
    events: &[NewEvent],
) -> Result<HashMap<String, Sealer>, AppendError> {
    let mut subjects: Vec<&str> = events
        .iter()
        .filter_map(|e| e.subject_id.as_deref())
        .collect();
    if subjects.is_empty() {
        return Ok(HashMap::new());
    }
    subjects.sort_unstable();
    subjects.dedup();
    let wrapped: Vec<Vec<u8>> = subjects
        .iter()
        .map(|subject| {
            keyring
                .new_subject_key(tenant.as_str(), subject)
                .expect("the API refuses subjects without a key file")
        })
        .collect();
    // Made if missing (a concurrent first event of the same subject keeps
    // whichever key was stored first), then read back.
    let rows = sqlx::query!(
        r#"WITH made AS (
               INSERT INTO subject_keys (tenant_id, subject_id, wrapped)
               SELECT $1, u.subject, u.wrapped
                 FROM unnest($2::text[], $3::bytea[]) AS u (subject, wrapped)
               ON CONFLICT (tenant_id, subject_id) DO NOTHING
               RETURNING subject_id, wrapped)
           SELECT subject_id AS "subject_id!", wrapped FROM made
           UNION ALL
           SELECT k.subject_id, k.wrapped FROM subject_keys k
            WHERE k.tenant_id = $1 AND k.subject_id = ANY ($2)
              AND k.subject_id NOT IN (SELECT subject_id FROM made)"#,
        tenant.as_str(),
        &subjects as &[&str],
        &wrapped
    )
    .fetch_all(pool)
    .await?;
    let mut sealers = HashMap::with_capacity(rows.len());
    for row in rows {
        let (subject, wrapped) = (row.subject_id, row.wrapped);
        let wrapped = wrapped.ok_or_else(|| AppendError::SubjectErased(subject.clone()))?;
        let sealer = keyring
            .subject_sealer(tenant.as_str(), &subject, &wrapped)
            .map_err(sqlx::Error::from)?;
        sealers.insert(subject, sealer);
    }
    Ok(sealers)
}

fn seal_artifact(sealer: &Sealer, event: &mut NewEvent) {
    let Some(artifact) = &mut event.artifact else {
        return;
    };
    artifact.bytes = sealer.seal_bytes(&artifact.bytes).into_bytes();
    artifact.sha256 = Sha256::digest(&artifact.bytes).into();
    if let Some(digest) = event.content.get_mut("artifact_sha256") {
        *digest = hex::encode(artifact.sha256).into();
    }
}

/// A tenant's head as an append left it: what the next append extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub seq: i64,
    pub hash: [u8; 32],
    /// The last event's `created_at`; the next is never earlier.
    pub created_at: DateTime<Utc>,
}

/// Appends `events` for `tenant`, all or nothing, and returns, in order, each
/// event's id, sequence number and commit time.
pub async fn append(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &TenantId,
    events: Vec<NewEvent>,
) -> Result<Vec<Appended>, AppendError> {
    append_after(pool, keyring, tenant, events, None)
        .await
        .map(|(appended, _)| appended)
}

/// [`append`], in one statement when `known` is the tenant's head (as the
/// previous append returned it); also returns the head this append left.
#[tracing::instrument(skip_all, fields(tenant = %tenant, events = events.len()))]
pub async fn append_after(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &TenantId,
    mut events: Vec<NewEvent>,
    known: Option<Head>,
) -> Result<(Vec<Appended>, Head), AppendError> {
    // Sealed before hashing: the chain covers what is stored, so `memd
    // verify` needs no key.
    let subjects = subject_sealers(pool, keyring, tenant, &events).await?;
    let mut digests = Vec::with_capacity(events.len());
    let sealed: Vec<Option<Value>> = events
        .iter_mut()
        .map(|event| {
            let sealer = sealer_of(keyring, tenant, &subjects, event);
            digests.push(stored_digest(sealer.as_ref(), event));
            sealer.map(|sealer| sealed_content(&sealer, event))
        })
        .collect();
    let stored = || {
        events
            .iter()
            .zip(&sealed)
            .map(|(event, sealed)| sealed.as_ref().unwrap_or(&event.content))
    };
    if let Some(head) = known
        && events.iter().all(|e| e.artifact.is_none())
        && let Some(rendered) = stored()
            .map(jsonb_text::render)
            .collect::<Option<Vec<String>>>()
    {
        let now = clock(head.created_at);
        let batch = Batch::build(
            tenant,
            events.clone(),
            rendered,
            digests.clone(),
            head,
            now,
            HashMap::new(),
        )?;
        if let Some(batch) = batch.insert_if_head(pool, tenant, &head).await? {
            return Ok(batch.finish());
        }
        // The head moved (another daemon appended), a key was taken, or
        // PostgreSQL renders a content differently: the long way decides.
        tracing::debug!("the one-statement append stored nothing; appending under the lock");
    }
    let contents: Vec<String> = stored().map(Value::to_string).collect();
    append_locked(pool, tenant, events, contents, digests).await
}

/// The time for a new event: memd's clock, to PostgreSQL's microseconds,
/// never before the tenant's previous event.
fn clock(last: DateTime<Utc>) -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6).max(last)
}

async fn append_locked(
    pool: &PgPool,
    tenant: &TenantId,
    events: Vec<NewEvent>,
    contents: Vec<String>,
    digests: Vec<Option<Vec<u8>>>,
) -> Result<(Vec<Appended>, Head), AppendError> {
    let keys: Vec<&str> = events
        .iter()
        .filter_map(|e| e.idempotency_key.as_deref())
        .collect();
    let mut tx = memd_projectors::transaction::begin(pool).await?;
    let row = sqlx::query!(
        r#"SELECT h.seq, h.hash, h.created_at AS last_created_at,
                  (SELECT coalesce(array_agg(c::jsonb::text ORDER BY o), '{}')
                     FROM unnest($2::text[]) WITH ORDINALITY AS u (c, o)) AS "contents!"
             FROM tenant_heads h
            WHERE h.tenant_id = $1
              FOR UPDATE OF h"#,
        tenant.as_str(),
        &contents
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| AppendError::UnknownTenant(tenant.to_string()))?;
    let head = Head {
        seq: row.seq,
        hash: row.hash.try_into().unwrap_or(GENESIS),
        created_at: row.last_created_at.unwrap_or(DateTime::<Utc>::MIN_UTC),
    };
    let content_texts = row.contents;
    let by_key = originals(&mut tx, tenant, &keys).await?;

    let now = clock(head.created_at);
    let batch = Batch::build(tenant, events, content_texts, digests, head, now, by_key)?;
    if batch.rows.seq.is_empty() {
        // Every event was a replay: nothing to store, nothing to announce.
        tx.rollback().await?;
        return Ok(batch.finish());
    }
    batch
        .bind_rows(sqlx::query(INSERT_EVENTS), tenant)
        .fetch_one(&mut *tx)
        .await?;
    insert_artifacts(&mut tx, tenant, batch.now, &batch.artifacts).await?;
    tx.commit().await?;
    Ok(batch.finish())
}

/// The events stored earlier under any of `keys`, by key. A statement of
/// its own, after the head's lock: a subquery of the locking statement
/// would read the snapshot from before it waited, and miss a key committed
/// meanwhile.
async fn originals(
    tx: &mut PgConnection,
    tenant: &TenantId,
    keys: &[&str],
) -> Result<HashMap<String, Original>, sqlx::Error> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let found = sqlx::query_scalar!(
        r#"SELECT coalesce(jsonb_agg(jsonb_build_array(
                      e.idempotency_key, e.event_id, e.seq, e.created_at, e.artifact_id,
                      encode(e.request_digest, 'hex'))), '[]') AS "found!"
             FROM events e
            WHERE e.tenant_id = $1 AND e.idempotency_key = ANY ($2::text[])"#,
        tenant.as_str(),
        keys as &[&str]
    )
    .fetch_one(&mut *tx)
    .await?;
    let replays: Vec<Replay> =
        serde_json::from_value(found).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    Ok(replays
        .into_iter()
        .map(|(key, event_id, seq, created_at, artifact_id, digest)| {
            let original = Appended {
                event_id,
                seq,
                created_at,
                replayed: true,
                artifact_id,
                chunk_ids: None,
            };
            let digest = digest.and_then(|hex| hex::decode(hex).ok());
            (key, (original, digest))
        })
        .collect())
}

/// The batch's artifacts, stored beside their events.
async fn insert_artifacts(
    tx: &mut PgConnection,
    tenant: &TenantId,
    now: DateTime<Utc>,
    artifacts: &ArtifactColumns,
) -> Result<(), sqlx::Error> {
    if artifacts.artifact_id.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "INSERT INTO artifacts (artifact_id, tenant_id, event_id, created_at, kind, media_type,
                                sha256, bytes, meta)
         SELECT u.artifact_id, $1, u.event_id, $2, u.kind, u.media_type, u.sha256, u.bytes,
                u.meta::jsonb
           FROM unnest($3::text[], $4::text[], $5::text[], $6::bytea[], $7::bytea[],
                       $8::text[], $9::text[])
                AS u (artifact_id, event_id, media_type, sha256, bytes, meta, kind)",
        tenant.as_str(),
        now,
        &artifacts.artifact_id,
        &artifacts.event_id,
        &artifacts.media_type as &[&str],
        &artifacts.sha256,
        &artifacts.bytes,
        &artifacts.meta,
        &artifacts.kind as &[&str]
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// One append's new rows, hashed onto a head.
struct Batch {
    now: DateTime<Utc>,
    results: Vec<Appended>,
    /// (index in results, the event as projectors will read it), for its
    /// chunk ids once the rows are stored.
    stored: Vec<(usize, StoredEvent)>,
    rows: Columns,
    artifacts: ArtifactColumns,
    /// The head after these rows.
    head: Head,
}

impl Batch {
    /// Numbers and hashes `events` (whose stored contents render as
    /// `content_texts`, whose requests' digests are `digests`) after
    /// `head`; an event whose idempotency key is in `by_key` is a replay of
    /// that one if its request is the one stored there, a conflict if not.
    fn build(
        tenant: &TenantId,
        events: Vec<NewEvent>,
        content_texts: Vec<String>,
        digests: Vec<Option<Vec<u8>>>,
        head: Head,
        now: DateTime<Utc>,
        mut by_key: HashMap<String, Original>,
    ) -> Result<Self, AppendError> {
        let mut seq = head.seq;
        let mut prev_hash = head.hash;
        let mut results = Vec::with_capacity(events.len());
        let mut stored = Vec::new();
        let mut rows = Columns::default();
        let mut artifacts = ArtifactColumns::default();
        let inputs = events.into_iter().zip(content_texts).zip(digests);
        for (index, ((mut event, content_text), digest)) in inputs.enumerate() {
            if let Some(key) = &event.idempotency_key
                && let Some((original, stored)) = by_key.get(key)
            {
                if stored.is_some() && *stored != digest {
                    return Err(AppendError::IdempotencyConflict {
                        index,
                        key: key.clone(),
                    });
                }
                results.push(Appended {
                    replayed: true,
                    ..original.clone()
                });
                continue;
            }
            seq += 1;
            let event_id = crate::domain::new_id("evt");
            // PostgreSQL keeps microseconds; hash exactly what it will store.
            // Nothing happens after it is recorded: a time ahead of ours
            // (a client's skew, within what the API allows) is ours, so no
            // event can age every other memory of its tenant.
            let ts = event.ts.map_or(now, |t| t.trunc_subsecs(6).min(now));
            let artifact_id = event.artifact.as_ref().map(|a| a.artifact_id.clone());
            let numbered = Numbered {
                seq,
                event_id: &event_id,
                created_at: now,
                ts,
                artifact_id: artifact_id.as_deref(),
            };
            let hash = numbered.chain_hash(tenant, &event, &content_text, &prev_hash);

            let appended = Appended {
                event_id: event_id.clone(),
                seq,
                created_at: now,
                replayed: false,
                artifact_id: artifact_id.clone(),
                chunk_ids: None,
            };
            if let Some(key) = &event.idempotency_key {
                // A key repeated within one batch refers to its first occurrence.
                by_key.insert(key.clone(), (appended.clone(), digest.clone()));
            }
            results.push(appended);
            stored.push((results.len() - 1, numbered.stored(&mut event, hash)));
            if let Some(artifact) = event.artifact.take() {
                artifacts.push(artifact, &event_id);
            }
            rows.push(
                event,
                Chained {
                    seq,
                    event_id,
                    ts,
                    content: content_text,
                    artifact_id,
                    prev_hash,
                    hash,
                    request_digest: digest,
                },
            );
            prev_hash = hash;
        }
        let head = if rows.seq.is_empty() {
            head
        } else {
            Head {
                seq,
                hash: prev_hash,
                created_at: now,
            }
        };
        Ok(Self {
            now,
            results,
            stored,
            rows,
            artifacts,
            head,
        })
    }

    /// Binds the parameters [`INSERT_EVENTS`] and [`insert_events_after_head`] share.
    fn bind_rows<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        tenant: &'q TenantId,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let rows = &self.rows;
        query
            .bind(tenant.as_str())
            .bind(self.now)
            .bind(&rows.seq)
            .bind(&rows.event_id)
            .bind(&rows.ts)
            .bind(&rows.session_id)
            .bind(&rows.channel)
            .bind(&rows.actor_type)
            .bind(&rows.actor_id)
            .bind(&rows.kind)
            .bind(&rows.sensitivity)
            .bind(&rows.tags)
            .bind(&rows.content)
            .bind(&rows.refs)
            .bind(&rows.idempotency_key)
            .bind(&rows.artifact_id)
            .bind(&rows.prev_hash)
            .bind(&rows.hash)
            .bind(self.head.seq)
            .bind(self.head.hash.to_vec())
            .bind(NOTIFY_CHANNEL)
            .bind(&rows.agent_id)
            .bind(&rows.subject_id)
            .bind(&rows.request_digest)
    }

    /// Stores the rows in one statement if `head` is still the tenant's;
    /// None (nothing stored) otherwise.
    async fn insert_if_head(
        self,
        pool: &PgPool,
        tenant: &TenantId,
        head: &Head,
    ) -> Result<Option<Self>, AppendError> {
        if self.rows.seq.is_empty() {
            return Ok(Some(self));
        }
        let statement = if self.rows.idempotency_key.iter().any(Option::is_some) {
            INSERT_EVENTS_AFTER_HEAD_KEYED
        } else {
            INSERT_EVENTS_AFTER_HEAD
        };
        let inserted: i64 = self
            .bind_rows(sqlx::query(statement), tenant)
            .bind(head.seq)
            .bind(head.hash.to_vec())
            .fetch_one(pool)
            .await?
            .try_get("inserted")?;
        Ok((inserted > 0).then_some(self))
    }

    /// The caller's answer (with chunk ids, computed once the tenant's
    /// lock is no longer held) and the new head.
    fn finish(mut self) -> (Vec<Appended>, Head) {
        for (index, event) in self.stored {
            self.results[index].chunk_ids = Some(
                chunks::texts_of(&event)
                    .into_iter()
                    .map(|text| text.chunk_id)
                    .collect(),
            );
        }
        (self.results, self.head)
    }
}
