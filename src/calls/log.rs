//! Reading the log back: `GET /api/v1/events` (a tenant's events in log
//! order, filterable and paged) and `GET /api/v1/events/{id}`, so that what
//! was recorded can be shown, cited and checked (each event carries its
//! chain hashes; `memd verify` proves the chain), and `GET
//! /api/v1/chunks/{id}`, the retrieval unit a bundle cites.

use chrono::{DateTime, Utc};
use memd_core::seal::{Keyring, Opened};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiState, error::CallError, page_limit, require_scope};
use crate::{
    domain::{
        FieldError,
        event::{ActorType, Channel, Kind, Sensitivity},
        tenant::Scope,
    },
    read::{
        privacy::{event_row_condition, owner_condition},
        retrieve::every_word_query,
    },
    tenants::Caller,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1_000;
/// Characters of the log's text filter: words to find, not a document.
const MAX_TEXT_FILTER_CHARS: usize = 500;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Only events of this session.
    pub session_id: Option<String>,
    /// Only events of this kind.
    #[param(value_type = Option<Kind>)]
    pub kind: Option<String>,
    /// Only events after this seq (paging in log order: pass `next_after_seq`).
    pub after_seq: Option<i64>,
    /// Only events before this seq. Without `after_seq`, the page is the
    /// `limit` events just before it (in the order asked for); pass
    /// `next_before_seq` for the page before that.
    pub before_seq: Option<i64>,
    /// `asc` (log order, the default) or `desc` (newest first).
    #[param(pattern = "^(asc|desc)$")]
    pub order: Option<String>,
    /// Only events of this actor (`actor.id`).
    pub actor_id: Option<String>,
    /// Only events that happened (`ts`) at or after this time, RFC 3339.
    pub since: Option<DateTime<Utc>>,
    /// Only events that happened before this time, RFC 3339.
    pub until: Option<DateTime<Utc>>,
    /// Only events with this tag.
    pub tag: Option<String>,
    /// Only events whose text holds every word of this (English stems, in
    /// any order, as retrieval matches them): messages, tool output,
    /// decisions, summaries, tasks and documents, sealed ones included. At
    /// most 500 characters.
    #[param(max_length = 500)]
    pub text: Option<String>,
    /// At most this many, in log order.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// A page of the log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventPage {
    /// In log order (ascending `seq`), or newest first with `order=desc`.
    pub events: Vec<StoredEvent>,
    /// The `after_seq` of the next page in log order; null once a page
    /// comes back short (a full last page is followed by an empty one), and
    /// with `order=desc`.
    #[schema(required = true)]
    pub next_after_seq: Option<i64>,
    /// The `before_seq` of the next (older) page, with `order=desc` or
    /// when this page was read back from a `before_seq`; null once a page
    /// comes back short, and when paging forward.
    #[schema(required = true)]
    pub next_before_seq: Option<i64>,
}

/// An event as stored: the envelope, the content as kept (redacted, tool
/// outputs normalized), and its place in the hash chain.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct StoredEvent {
    pub event_id: String,
    /// Its place in the tenant's log: 1, 2, 3, ... with no gap.
    pub seq: i64,
    /// Commit time.
    pub created_at: DateTime<Utc>,
    /// When it happened (the request's `ts`, else the commit time).
    pub ts: DateTime<Utc>,
    pub session_id: String,
    pub channel: Channel,
    pub actor_type: ActorType,
    pub actor_id: String,
    /// The agent whose memory it is, if any.
    #[schema(required = true)]
    pub agent_id: Option<String>,
    /// The data subject whose own key seals the content, if any.
    #[schema(required = true)]
    pub subject_id: Option<String>,
    pub kind: Kind,
    pub sensitivity: Sensitivity,
    pub tags: Vec<String>,
    pub refs: Vec<String>,
    /// As stored: redacted, a tool result normalized (`excerpt_text`, ...).
    /// A `sealed` event's content is shown opened.
    pub content: Value,
    /// Whether the content is sealed at rest (a `high` or `secret` event on
    /// a daemon with a key file). `hash` covers the sealed form, as stored;
    /// `memd verify` checks it without the key.
    #[sqlx(skip)]
    pub sealed: bool,
    /// Its data subject was erased (`memd erase`): the content, sealed
    /// under the destroyed key, can never be opened again and shows as `{}`.
    /// `hash` still covers it as stored, so the chain verifies.
    #[sqlx(skip)]
    pub erased: bool,
    #[schema(required = true)]
    pub idempotency_key: Option<String>,
    /// Where a truncated tool output is kept whole.
    #[schema(required = true)]
    pub artifact_id: Option<String>,
    /// The retraction that withdrew it (`POST /api/v1/events/{id}/correct`,
    /// or a `retraction` event naming it), if one did: no bundle, search
    /// or view shows it since. The log keeps both.
    #[schema(required = true)]
    pub retracted_by: Option<String>,
    /// Hex SHA-256 of the previous event's hash and this event.
    pub hash: String,
    pub prev_hash: String,
}

impl StoredEvent {
    /// Opens sealed content for the caller (whom the route already
    /// allowed), a data subject's with its key.
    fn open(&mut self, keyring: &Keyring, tenant: &str) -> Result<(), sqlx::Error> {
        let opened =
            keyring.open_event_content(tenant, &mut self.content, self.subject_id.is_some())?;
        self.sealed = opened != Opened::Clear;
        self.erased = opened == Opened::Erased;
        Ok(())
    }
}

/// `events` opened for the caller, with the keys of the data subjects they
/// name.
async fn open_all(
    state: &ApiState,
    tenant: &str,
    events: &mut [StoredEvent],
) -> Result<(), sqlx::Error> {
    let keyring = memd_core::event::subject_keyring(
        &state.reader.pool,
        &state.reader.keyring,
        tenant,
        events.iter().filter_map(|e| e.subject_id.as_deref()),
    )
    .await?;
    for event in events {
        event.open(&keyring, tenant)?;
    }
    Ok(())
}

const EVENT_COLUMNS: &str = "event_id, seq, created_at, ts, session_id, channel, actor_type, \
     actor_id, agent_id, subject_id, kind, sensitivity, tags, refs, content, idempotency_key, \
     artifact_id, \
     (SELECT r.event_id FROM events r WHERE r.tenant_id = events.tenant_id \
         AND r.kind = 'retraction' AND r.refs @> ARRAY[events.event_id]::text[] \
       ORDER BY r.seq LIMIT 1) AS retracted_by, \
     encode(hash, 'hex') AS hash, encode(prev_hash, 'hex') AS prev_hash";

/// A retrieval unit: part of an event's text, as projected.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Chunk {
    /// `chk_<event ulid>_<part>`.
    pub chunk_id: String,
    pub event_id: String,
    pub seq: i64,
    /// Which part of the event's text (long texts are split on lines).
    pub part: i32,
    pub ts: DateTime<Utc>,
    pub session_id: String,
    pub channel: Channel,
    pub sensitivity: Sensitivity,
    pub actor_type: ActorType,
    pub actor_id: String,
    pub kind: Kind,
    pub tags: Vec<String>,
    /// The file or tool a tool output came from.
    #[schema(required = true)]
    pub source: Option<String>,
    #[schema(required = true)]
    pub line_start: Option<i32>,
    #[schema(required = true)]
    pub line_end: Option<i32>,
    pub text: String,
    /// Tokens of the chunk as a bundle renders it.
    pub token_est: i32,
    /// Weight in retrieval, 0 to 1.
    pub importance: f32,
    /// The retraction that withdrew its event, if one did: it is never
    /// retrieved since.
    #[schema(required = true)]
    pub retracted_by: Option<String>,
}

const CHUNK_COLUMNS: &str = "chunk_id, event_id, seq, part, ts, session_id, channel, \
     sensitivity, actor_type, actor_id, kind, tags, source, line_start, line_end, text, \
     token_est, importance, retracted_by";

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChunkList {
    /// In part order.
    pub chunks: Vec<Chunk>,
}

/// A page of the log, as `query` asks and `caller` may see it.
pub(crate) async fn events(
    state: &ApiState,
    caller: &Caller,
    query: &EventQuery,
) -> Result<EventPage, CallError> {
    require_scope(caller, Scope::Read)?;
    let Checked {
        limit,
        newest_first,
        text,
    } = Checked::of(query)?;
    // Both directions walk the (tenant_id, seq) key: a page of a
    // million-event log costs what a page of a small one does. The text
    // filter reads the chunks' full-text index instead, then the events it
    // names.
    // `before_seq` alone asks for the events just before it (the page that
    // ends there), whichever order they are answered in: read newest first
    // from it, then turned around for `asc`.
    let back_from_before = query.before_seq.is_some() && query.after_seq.is_none();
    let direction = if newest_first || back_from_before {
        "DESC"
    } else {
        "ASC"
    };
    let (caller, query, keyring) = (caller, query, &state.reader.keyring);
    let mut events: Vec<StoredEvent> = state
        .read_log(move |pool| async move {
            let words = match text {
                None => None,
                Some(text) => Some(every_word_query(pool, keyring, text).await?.ok_or_else(
                    || {
                        CallError::invalid(FieldError::new(
                            "text",
                            "holds no searchable word (only stop words or punctuation)",
                        ))
                    },
                )?),
            };
            let events = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {EVENT_COLUMNS} FROM events
                  WHERE tenant_id = $1
                    AND ($2::text IS NULL OR session_id = $2)
                    AND ($3::text IS NULL OR kind = $3)
                    AND seq > coalesce($4, 0)
                    AND ($10::bigint IS NULL OR seq < $10)
                    AND ($11::text IS NULL OR actor_id = $11)
                    AND ($7::timestamptz IS NULL OR ts >= $7)
                    AND ($8::timestamptz IS NULL OR ts < $8)
                    AND ($9::text IS NULL OR tags @> ARRAY[$9])
                    AND ($12::tsquery IS NULL
                         OR event_id IN (SELECT c.event_id FROM projections.chunks c
                                          WHERE c.tenant_id = $1 AND c.tsv @@ $12::tsquery))
                    AND {owner}
                  ORDER BY seq {direction} LIMIT $5",
                owner = event_row_condition(6)
            )))
            .bind(caller.tenant.as_str())
            .bind(&query.session_id)
            .bind(&query.kind)
            .bind(query.after_seq)
            .bind(limit)
            .bind(&caller.agent)
            .bind(query.since)
            .bind(query.until)
            .bind(&query.tag)
            .bind(query.before_seq)
            .bind(&query.actor_id)
            .bind(words)
            .fetch_all(pool)
            .await?;
            Ok(events)
        })
        .await?;
    open_all(state, caller.tenant.as_str(), &mut events).await?;
    let full = events.len() as i64 == limit;
    // The next page goes on the way this one was read: further back for a
    // page read back from a seq, forward otherwise.
    let (next_after_seq, next_before_seq) = if newest_first || back_from_before {
        (None, full.then(|| events.last().map(|e| e.seq)).flatten())
    } else {
        (full.then(|| events.last().map(|e| e.seq)).flatten(), None)
    };
    if back_from_before && !newest_first {
        events.reverse();
    }
    Ok(EventPage {
        events,
        next_after_seq,
        next_before_seq,
    })
}

/// What an [`EventQuery`] asks, checked: each bad field is named.
struct Checked<'q> {
    limit: i64,
    newest_first: bool,
    /// The text filter, trimmed; `None` if empty.
    text: Option<&'q str>,
}

impl<'q> Checked<'q> {
    fn of(query: &'q EventQuery) -> Result<Self, CallError> {
        let limit = page_limit(query.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
        if let Some(kind) = &query.kind
            && Kind::parse(kind).is_none()
        {
            return Err(CallError::invalid(FieldError::new(
                "kind",
                format!("{kind:?} is not an event kind"),
            )));
        }
        let newest_first = match query.order.as_deref() {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(other) => {
                return Err(CallError::invalid(FieldError::new(
                    "order",
                    format!("{other:?} is neither asc nor desc"),
                )));
            }
        };
        let text = query
            .text
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        if let Some(text) = text
            && text.chars().count() > MAX_TEXT_FILTER_CHARS
        {
            return Err(CallError::invalid(FieldError::new(
                "text",
                format!("must be at most {MAX_TEXT_FILTER_CHARS} characters"),
            )));
        }
        Ok(Self {
            limit,
            newest_first,
            text,
        })
    }
}

/// One event, as `caller` may see it.
pub(crate) async fn event(
    state: &ApiState,
    caller: &Caller,
    event_id: &str,
) -> Result<StoredEvent, CallError> {
    require_scope(caller, Scope::Read)?;
    let (caller_ref, event_ref) = (caller, event_id);
    let mut event: StoredEvent = state
        .read_log(move |pool| async move {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND event_id = $2 AND {owner}",
                owner = event_row_condition(3)
            )))
            .bind(caller_ref.tenant.as_str())
            .bind(event_ref)
            .bind(&caller_ref.agent)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| CallError::not_found(format!("no event {event_ref}")))
        })
        .await?;
    open_all(
        state,
        caller.tenant.as_str(),
        std::slice::from_mut(&mut event),
    )
    .await?;
    Ok(event)
}

/// The chunks an event produced, when `caller` may see the event.
pub(crate) async fn event_chunks(
    state: &ApiState,
    caller: &Caller,
    event_id: &str,
) -> Result<ChunkList, CallError> {
    require_scope(caller, Scope::Read)?;
    let (caller_ref, event_ref) = (caller, event_id);
    let mut chunks: Vec<Chunk> = state
        .read_log(move |pool| async move {
            let visible: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT EXISTS (SELECT 1 FROM events WHERE tenant_id = $1 AND event_id = $2 AND {owner})",
                owner = event_row_condition(3)
            )))
            .bind(caller_ref.tenant.as_str())
            .bind(event_ref)
            .bind(&caller_ref.agent)
            .fetch_one(pool)
            .await?;
            if !visible {
                return Err(CallError::not_found(format!("no event {event_ref}")));
            }
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {CHUNK_COLUMNS} FROM projections.chunks
                  WHERE tenant_id = $1 AND event_id = $2 ORDER BY part"
            )))
            .bind(caller_ref.tenant.as_str())
            .bind(event_ref)
            .fetch_all(pool)
            .await?)
        })
        .await?;
    for chunk in &mut chunks {
        state
            .reader
            .keyring
            .open_in_place(caller.tenant.as_str(), &mut chunk.text)?;
    }
    Ok(ChunkList { chunks })
}

/// One chunk, as `caller` may see it.
pub(crate) async fn chunk(
    state: &ApiState,
    caller: &Caller,
    chunk_id: &str,
) -> Result<Chunk, CallError> {
    require_scope(caller, Scope::Read)?;
    let (caller_ref, chunk_ref) = (caller, chunk_id);
    let mut chunk: Chunk = state
        .read_log(move |pool| async move {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {CHUNK_COLUMNS}
                   FROM projections.chunks WHERE tenant_id = $1 AND chunk_id = $2 AND {owner}",
                owner = owner_condition(3)
            )))
            .bind(caller_ref.tenant.as_str())
            .bind(chunk_ref)
            .bind(&caller_ref.agent)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| CallError::not_found(format!("no chunk {chunk_ref}")))
        })
        .await?;
    state
        .reader
        .keyring
        .open_in_place(caller.tenant.as_str(), &mut chunk.text)?;
    Ok(chunk)
}
