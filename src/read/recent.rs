//! The recent window: a session's newest events, read from the log itself,
//! so that it is always fresh, even when projections lag.
//!
//! Reading the whole window (fifty events and their chunks) on every bundle
//! was most of what a fast-path bundle cost, and a fifth of a retrieval
//! bundle under load, though consecutive bundles of a session share all but
//! their newest events. So the part of a window that projections had
//! reached is kept in the read cache ([`super::cache::ReadCache::window`]),
//! and a bundle reads from the log only the session's events past it: none
//! when nothing was appended, the agent's own last turn when it was.
//!
//! That is exact, not a guess, because the log is append-only and a
//! tenant's seqs commit in order: an event at or below a seq that
//! projections have reached never changes, and no event can appear below
//! it later; a newer event can only push older ones out of the window.
//! What is kept is the event as shown from its chunks, which only a
//! rebuild changes (a new chunker, an erasure), and a rebuild's
//! notification drops the tenant's windows with the rest of what the cache
//! holds for it. An event projections have not reached is read, opened and
//! chunked again by every bundle until they do, as before.

use std::{collections::HashMap, sync::Arc};

use memd_core::{
    StoredEvent,
    event::{Channel, Kind, Sensitivity},
};

use memd_projectors::render;
use serde::Serialize;
use serde_json::json;

use super::{
    Reader,
    bundle::Item,
    omissions::{Omissions, details},
    policy::{Policy, SectionName},
    privacy::Visibility,
};

/// The kinds of event the recent window shows, as an SQL list.
pub const WINDOW_KINDS: &str = "('message', 'tool_result', 'decision', 'summary', 'task_update')";

/// Parts (~400 tokens each) of one tool output the recent window shows.
const RECENT_TOOL_OUTPUT_PARTS: usize = 1;

/// `provenance.recent_window`: how the bundle's recent window was read.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct RecentReport {
    /// Events of the session in the window, before privacy filters.
    pub events: usize,
    /// Of those, how many were read from the log for this bundle; the
    /// others were kept in memory from an earlier bundle of the session.
    pub read: usize,
}

/// An event of a recent window, shown as whoever may see it is shown it:
/// made once per event, and kept with the window once projected.
#[derive(Debug)]
pub struct WindowEvent {
    seq: i64,
    event_id: String,
    channel: Channel,
    sensitivity: Sensitivity,
    agent_id: Option<String>,
    /// One per part shown, newest first (an event's later parts before its
    /// earlier ones).
    items: Vec<Item>,
    /// The parts of a long tool output the window does not show.
    hidden: Option<HiddenParts>,
}

#[derive(Debug)]
struct HiddenParts {
    chunk_ids: Vec<String>,
    parts: usize,
    artifact_id: Option<String>,
}

impl WindowEvent {
    /// Bytes held, roughly: what the cache's budget counts.
    pub fn heap_bytes(&self) -> usize {
        let item = |item: &Item| {
            item.id.len()
                + item.meta.len()
                + item.text.len()
                + item.refs.iter().map(String::len).sum::<usize>()
                + 512
        };
        std::mem::size_of::<Self>()
            + self.event_id.len()
            + self.items.iter().map(item).sum::<usize>()
            + self
                .hidden
                .as_ref()
                .map_or(0, |h| h.chunk_ids.iter().map(String::len).sum())
    }
}

/// Which window: a session's newest `events` events after seq `after` (a
/// receiving agent's window starts after its handoff packet).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowKey {
    pub tenant: String,
    pub session: String,
    pub after: i64,
    pub events: u32,
}

/// The part of a window that projections had reached when it was read.
#[derive(Debug)]
pub struct KeptWindow {
    /// The session's events were read up to here (seqs commit in order, so
    /// none can appear at or below it later); a bundle reads those past it.
    pub through: i64,
    /// The window's events at or below `through`, newest first.
    pub events: Vec<Arc<WindowEvent>>,
}

impl KeptWindow {
    fn heap_bytes(&self) -> usize {
        self.events.iter().map(|e| e.heap_bytes()).sum()
    }
}

/// Windows kept, at most about [`MAX_WINDOW_BYTES`] in all: two
/// generations, the newer taking what is kept or used, the older dropped
/// whole when the newer fills, so a window in use survives and one nobody
/// asks for goes within two fills.
#[derive(Default)]
pub struct Windows {
    newer: HashMap<WindowKey, Arc<KeptWindow>>,
    older: HashMap<WindowKey, Arc<KeptWindow>>,
    newer_bytes: usize,
}

/// What the windows kept may hold, in all (two generations of half).
const MAX_WINDOW_BYTES: usize = 64 << 20;
/// Windows kept per generation, whatever their size.
const MAX_WINDOWS: usize = 4_096;

impl Windows {
    pub fn get(&mut self, key: &WindowKey) -> Option<Arc<KeptWindow>> {
        if let Some(window) = self.newer.get(key) {
            return Some(window.clone());
        }
        let window = self.older.remove(key)?;
        self.put(key.clone(), window.clone());
        Some(window)
    }

    /// Keeps `window`, unless one kept for the same key reaches further.
    pub fn keep(&mut self, key: WindowKey, window: KeptWindow) {
        let further = |kept: &Arc<KeptWindow>| kept.through > window.through;
        if self.newer.get(&key).is_some_and(further) || self.older.get(&key).is_some_and(further) {
            return;
        }
        self.older.remove(&key);
        self.put(key, Arc::new(window));
    }

    fn put(&mut self, key: WindowKey, window: Arc<KeptWindow>) {
        let bytes = window.heap_bytes();
        if bytes > MAX_WINDOW_BYTES / 2 {
            return;
        }
        if self.newer_bytes + bytes > MAX_WINDOW_BYTES / 2 || self.newer.len() >= MAX_WINDOWS {
            self.older = std::mem::take(&mut self.newer);
            self.newer_bytes = 0;
        }
        self.newer_bytes += bytes;
        if let Some(replaced) = self.newer.insert(key, window) {
            self.newer_bytes -= replaced.heap_bytes().min(self.newer_bytes);
        }
    }

    /// Drops the tenant's windows (a rebuild changed its chunks).
    pub fn forget(&mut self, tenant: &str) {
        self.older.retain(|key, _| key.tenant != tenant);
        let before = self.newer.len();
        self.newer.retain(|key, _| key.tenant != tenant);
        if self.newer.len() != before {
            self.newer_bytes = self.newer.values().map(|w| w.heap_bytes()).sum();
        }
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The session's newest events, newest first, as items (one per chunk),
/// and how they were read. A receiving agent sees only what came after its
/// packet (`after_seq`); events past `projected_seq` are shown from their
/// content, chunked now as the projections will chunk them. `session_seq`
/// is the session's newest event of the kinds shown, as the bundle's head
/// found it: when a kept window reaches it, the log is not asked.
#[allow(clippy::too_many_arguments)]
pub(super) async fn recent_window(
    reader: &Reader,
    tenant: &str,
    session: &str,
    after_seq: i64,
    policy: &Policy,
    visibility: Visibility<'_>,
    (projected_seq, session_seq): (i64, i64),
    omissions: &mut Omissions,
) -> Result<(Vec<Item>, RecentReport), sqlx::Error> {
    let limit = policy.recent_window_events;
    if limit == 0 {
        return Ok((Vec::new(), RecentReport::default()));
    }
    let key = WindowKey {
        tenant: tenant.to_owned(),
        session: session.to_owned(),
        after: after_seq,
        events: limit,
    };
    let (kept, drops) = reader.cache.window(&key);
    // Kept by a bundle that read further ahead than this one can (the
    // primary, where this one reads a standby that has not replayed it).
    let kept = kept.filter(|kept| kept.through <= projected_seq);
    let from = kept
        .as_ref()
        .map_or(after_seq, |kept| kept.through.max(after_seq));
    let read = if kept.is_some() && session_seq <= from {
        Vec::new()
    } else {
        read_events(reader, tenant, session, from, limit, projected_seq).await?
    };
    let report_read = read.len();
    let events: Vec<Arc<WindowEvent>> = read
        .into_iter()
        .chain(kept.iter().flat_map(|kept| kept.events.iter().cloned()))
        .take(limit as usize)
        .collect();
    if kept.is_none() || projected_seq > from {
        let window = KeptWindow {
            through: projected_seq,
            events: events
                .iter()
                .filter(|event| event.seq <= projected_seq)
                .cloned()
                .collect(),
        };
        reader.cache.keep_window(key, window, drops);
    }
    let report = RecentReport {
        events: events.len(),
        read: report_read,
    };
    Ok((shown(&events, visibility, omissions), report))
}

/// What `visibility` may see of `events`, as items, newest first; what it
/// may not see is a privacy omission, except another agent's private
/// memory, which is not even named.
fn shown(
    events: &[Arc<WindowEvent>],
    visibility: Visibility<'_>,
    omissions: &mut Omissions,
) -> Vec<Item> {
    let mut visible = Vec::with_capacity(events.len());
    for event in events {
        if !visibility.owner_allows(event.channel, event.agent_id.as_deref()) {
            continue;
        }
        if !visibility.allows(event.channel, event.sensitivity) {
            omissions.privacy(SectionName::RecentWindow, event.event_id.clone());
            continue;
        }
        visible.push(event);
    }
    let mut items = Vec::new();
    for event in visible {
        if let Some(hidden) = &event.hidden {
            for chunk_id in &hidden.chunk_ids {
                omissions.add(
                    "truncated_tool_output",
                    Some(SectionName::RecentWindow),
                    chunk_id.clone(),
                    details(&[
                        ("event_id", json!(event.event_id)),
                        ("parts_shown", json!(RECENT_TOOL_OUTPUT_PARTS)),
                        ("parts", json!(hidden.parts)),
                        ("artifact_id", json!(hidden.artifact_id)),
                    ]),
                );
            }
        }
        items.extend(event.items.iter().cloned());
    }
    items
}

/// The session's newest `limit` events after seq `after`, newest first,
/// shown: those projections have reached (up to `projected_seq`) from their
/// chunks, read in the same statement (one round trip, not two), the
/// others from their content (a tool result's is up to 64 KiB), opened and
/// chunked here. An event whose data subject was erased, or that a
/// retraction withdrew, and which projections have not reached, is left
/// out (once they have, the bundle (`acb::standing`) leaves it out, naming it).
async fn read_events(
    reader: &Reader,
    tenant: &str,
    session: &str,
    after: i64,
    limit: u32,
    projected_seq: i64,
) -> Result<Vec<Arc<WindowEvent>>, sqlx::Error> {
    let rows: Vec<RecentEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT e.*, c.chunk_ids, c.texts, c.token_ests, c.sources, c.line_starts, c.line_ends
           FROM (SELECT seq, event_id, created_at, ts, session_id, channel, actor_type,
                        actor_id, agent_id, subject_id, kind, sensitivity, tags,
                        CASE WHEN seq > $5 THEN content ELSE 'null' END AS content, refs,
                        artifact_id
                   FROM public.events ev
                  WHERE tenant_id = $1 AND session_id = $2 AND seq > $3
                    AND kind IN {WINDOW_KINDS}
                    AND (seq <= $5 OR NOT EXISTS (
                         SELECT FROM public.events r
                          WHERE r.tenant_id = $1 AND r.kind = 'retraction'
                            AND r.refs @> ARRAY[ev.event_id]::text[]))
                  ORDER BY seq DESC LIMIT $4) AS e
           LEFT JOIN LATERAL (
                SELECT array_agg(c.chunk_id ORDER BY c.part) AS chunk_ids,
                       array_agg(c.text ORDER BY c.part) AS texts,
                       array_agg(c.token_est ORDER BY c.part) AS token_ests,
                       array_agg(c.source ORDER BY c.part) AS sources,
                       array_agg(c.line_start ORDER BY c.part) AS line_starts,
                       array_agg(c.line_end ORDER BY c.part) AS line_ends
                  FROM projections.chunks c
                 WHERE c.tenant_id = $1 AND c.event_id = e.event_id AND e.seq <= $5) AS c ON true
          ORDER BY e.seq DESC"
    )))
    .bind(tenant)
    .bind(session)
    .bind(after)
    .bind(i64::from(limit))
    .bind(projected_seq)
    .fetch_all(&reader.pool)
    .await?;
    let keyring = memd_core::event::subject_keyring(
        &reader.pool,
        &reader.keyring,
        tenant,
        rows.iter()
            .filter(|row| row.event.seq > projected_seq)
            .filter_map(|row| row.event.subject_id.as_deref()),
    )
    .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let mut event = row.event;
        let parts = if event.seq > projected_seq {
            memd_core::event::open(&keyring, tenant, &mut event)?;
            if event.erased {
                continue;
            }
            // Projected events have their chunks, counted at projection;
            // the others are chunked and counted now, the same way.
            reader
                .chunker
                .chunks_of(&event)
                .into_iter()
                .map(|chunk| StoredChunk {
                    chunk_id: chunk.chunk_id,
                    text: chunk.text,
                    token_est: chunk.token_est,
                    source: chunk.source,
                    line_start: chunk.line_start,
                    line_end: chunk.line_end,
                })
                .collect()
        } else {
            row.chunks.opened(reader, tenant)?
        };
        events.push(Arc::new(window_event(event, parts, projected_seq)));
    }
    Ok(events)
}

/// `event` shown as `parts`. A long tool output shows its head, not all of
/// it: one large read must not crowd the rest of the conversation out of
/// the window. Its other parts stay retrievable as evidence.
fn window_event(
    event: StoredEvent,
    mut parts: Vec<StoredChunk>,
    projected_seq: i64,
) -> WindowEvent {
    let hidden =
        (event.kind == Kind::ToolResult && parts.len() > RECENT_TOOL_OUTPUT_PARTS).then(|| {
            HiddenParts {
                parts: parts.len(),
                chunk_ids: parts
                    .drain(RECENT_TOOL_OUTPUT_PARTS..)
                    .map(|part| part.chunk_id)
                    .collect(),
                artifact_id: event.artifact_id.clone(),
            }
        });
    // Newest first overall: an event's later parts before its earlier ones.
    parts.reverse();
    // A chunk the projections have not written yet cannot be looked up:
    // such an item cites its event alone, which can.
    let chunk_exists = event.seq <= projected_seq;
    let items = parts
        .into_iter()
        .map(|part| {
            let chunk_id = part.chunk_id;
            let refs = if chunk_exists {
                vec![chunk_id.clone(), event.event_id.clone()]
            } else {
                vec![event.event_id.clone()]
            };
            let meta = render::chunk_meta(
                &event.actor_id,
                event.kind.as_str(),
                part.source.as_deref(),
                part.line_start.zip(part.line_end),
                event.ts,
            );
            Item {
                kind: "event",
                id: chunk_id.clone(),
                meta,
                text: render::body(&part.text),
                tokens: part.token_est.max(0) as usize,
                at: Some(event.ts),
                refs,
                fields: details(&[
                    ("chunk_id", json!(chunk_id)),
                    ("event_id", json!(event.event_id)),
                    ("kind", json!(event.kind)),
                    (
                        "actor",
                        json!({"type": event.actor_type, "id": event.actor_id}),
                    ),
                    ("seq", json!(event.seq)),
                    ("ts", json!(event.ts)),
                ]),
            }
        })
        .collect();
    WindowEvent {
        seq: event.seq,
        event_id: event.event_id,
        channel: event.channel,
        sensitivity: event.sensitivity,
        agent_id: event.agent_id,
        items,
        hidden,
    }
}

/// A recent event, and its chunks' columns (by part) once projected.
#[derive(Debug, sqlx::FromRow)]
struct RecentEvent {
    #[sqlx(flatten)]
    event: StoredEvent,
    #[sqlx(flatten)]
    chunks: ChunkColumns,
}

#[derive(Debug, sqlx::FromRow)]
struct ChunkColumns {
    chunk_ids: Option<Vec<String>>,
    texts: Option<Vec<String>>,
    token_ests: Option<Vec<i32>>,
    sources: Option<Vec<Option<String>>>,
    line_starts: Option<Vec<Option<i32>>>,
    line_ends: Option<Vec<Option<i32>>>,
}

impl ChunkColumns {
    /// The chunks, by part, their texts opened (none when the event has
    /// none: an erased subject's, after the rebuild).
    fn opened(self, reader: &Reader, tenant: &str) -> Result<Vec<StoredChunk>, sqlx::Error> {
        let (Some(ids), Some(texts), Some(tokens), Some(sources), Some(starts), Some(ends)) = (
            self.chunk_ids,
            self.texts,
            self.token_ests,
            self.sources,
            self.line_starts,
            self.line_ends,
        ) else {
            return Ok(Vec::new());
        };
        let mut chunks = Vec::with_capacity(ids.len());
        for (((((chunk_id, mut text), token_est), source), line_start), line_end) in ids
            .into_iter()
            .zip(texts)
            .zip(tokens)
            .zip(sources)
            .zip(starts)
            .zip(ends)
        {
            reader.keyring.open_in_place(tenant, &mut text)?;
            chunks.push(StoredChunk {
                chunk_id,
                text,
                token_est,
                source,
                line_start,
                line_end,
            });
        }
        Ok(chunks)
    }
}

/// A chunk of a recent event.
#[derive(Debug)]
struct StoredChunk {
    chunk_id: String,
    text: String,
    token_est: i32,
    source: Option<String>,
    line_start: Option<i32>,
    line_end: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn key(tenant: &str, session: &str) -> WindowKey {
        WindowKey {
            tenant: tenant.to_owned(),
            session: session.to_owned(),
            after: 0,
            events: 50,
        }
    }

    fn event(seq: i64, text_bytes: usize) -> Arc<WindowEvent> {
        Arc::new(WindowEvent {
            seq,
            event_id: format!("evt_{seq}"),
            channel: Channel::Private,
            sensitivity: Sensitivity::None,
            agent_id: None,
            items: vec![Item {
                kind: "event",
                id: format!("chk_{seq}_0"),
                meta: String::new(),
                text: "x".repeat(text_bytes),
                tokens: 1,
                at: None,
                refs: Vec::new(),
                fields: Map::new(),
            }],
            hidden: None,
        })
    }

    fn window(through: i64, events: Vec<Arc<WindowEvent>>) -> KeptWindow {
        KeptWindow { through, events }
    }

    #[test]
    fn a_window_kept_further_is_not_replaced_by_one_read_before_it() {
        let mut windows = Windows::default();
        windows.keep(key("t", "s"), window(20, vec![event(20, 10)]));
        windows.keep(key("t", "s"), window(10, vec![event(10, 10)]));
        assert_eq!(windows.get(&key("t", "s")).expect("kept").through, 20);
        windows.keep(key("t", "s"), window(30, vec![event(30, 10)]));
        assert_eq!(windows.get(&key("t", "s")).expect("kept").through, 30);
    }

    #[test]
    fn forgetting_a_tenant_keeps_the_other_tenants_windows() {
        let mut windows = Windows::default();
        windows.keep(key("a", "s"), window(1, vec![event(1, 10)]));
        windows.keep(key("b", "s"), window(1, vec![event(1, 10)]));
        windows.forget("a");
        assert!(windows.get(&key("a", "s")).is_none());
        assert!(windows.get(&key("b", "s")).is_some());
        windows.clear();
        assert!(windows.get(&key("b", "s")).is_none());
    }

    #[test]
    fn windows_past_the_budget_go_oldest_first_and_one_in_use_survives() {
        let mut windows = Windows::default();
        // Each window a little over a sixteenth of the budget: a generation
        // holds seven, so twenty windows fill it three times.
        let bytes = MAX_WINDOW_BYTES / 16;
        windows.keep(key("t", "used"), window(1, vec![event(1, bytes)]));
        for i in 0..20 {
            windows.keep(key("t", &format!("s{i}")), window(1, vec![event(1, bytes)]));
            // The window in use is asked for between the others.
            assert!(windows.get(&key("t", "used")).is_some(), "after {i}");
        }
        assert!(windows.get(&key("t", "s0")).is_none(), "the oldest went");
        assert!(windows.get(&key("t", "s19")).is_some(), "the newest stays");
        let held: usize = windows
            .newer
            .values()
            .chain(windows.older.values())
            .map(|w| w.heap_bytes())
            .sum();
        assert!(held <= MAX_WINDOW_BYTES, "{held} bytes held");
        assert_eq!(
            windows.newer_bytes,
            windows
                .newer
                .values()
                .map(|w| w.heap_bytes())
                .sum::<usize>()
        );
    }

    #[test]
    fn a_window_larger_than_a_generation_is_not_kept() {
        let mut windows = Windows::default();
        windows.keep(
            key("t", "s"),
            window(1, vec![event(1, MAX_WINDOW_BYTES / 2 + 1)]),
        );
        assert!(windows.get(&key("t", "s")).is_none());
    }
}
