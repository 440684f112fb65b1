//! `chunks`: the retrieval units. One event gives one chunk, or several
//! ~400-token parts when its text is long (tool outputs keep the line range
//! each part covers).

use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use super::tokens::TokenCounter;
use crate::{
    projector::{BoxFuture, Projector, Table},
    render, retraction,
};
use memd_core::{
    content::{Content, Message, Summary, ToolOutput},
    dedupe,
    event::{ActorType, Channel, Kind, Sensitivity, StoredEvent},
};

/// Parts aim at this many tokens. Splitting estimates 4 bytes per token;
/// the stored `token_est` is the exact count of the part as a bundle renders
/// it (its meta line and body, see [`render`]).
pub const TARGET_TOKENS: usize = 400;
const BYTES_PER_TOKEN: usize = 4;

const TABLES: &[Table] = &[Table {
    name: "chunks",
    key: &["tenant_id", "chunk_id"],
}];

/// Tags that pin a memory: its chunks get the importance bonus.
const PINNED_TAGS: &[&str] = &["pinned", "pin", "important"];

/// Files that say what a project is and how it starts: a README, a package
/// manifest, an entrypoint. Reading one is worth more than an arbitrary file.
const KEY_FILE_NAMES: &[&str] = &[
    "readme",
    "package.json",
    "cargo.toml",
    "pyproject.toml",
    "setup.py",
    "requirements.txt",
    "go.mod",
    "pom.xml",
    "build.gradle",
    "gemfile",
    "composer.json",
    "makefile",
    "dockerfile",
    "docker-compose.yml",
];
const ENTRYPOINT_STEMS: &[&str] = &["main", "index", "app", "server", "cli", "__main__", "lib"];

pub struct ChunkProjector {
    tokens: TokenCounter,
    /// The chunks of the batches a replay said come next, being derived on
    /// a thread while the current batch's rows are written: the newest
    /// [`PREPARED_KEPT`], since the one after the current batch is prepared
    /// before the current one is applied.
    prepared: std::sync::Mutex<std::collections::VecDeque<Prepared>>,
}

const PREPARED_KEPT: usize = 2;

/// Chunks derived ahead for a run of events, known by its first and last
/// event ids (unique across tenants: the projector serves every tenant's
/// workers, and one must never take another's rows) and its length.
struct Prepared {
    first: String,
    last: String,
    len: usize,
    chunks: std::thread::JoinHandle<Vec<Vec<Chunk>>>,
}

impl Prepared {
    fn covers(&self, events: &[StoredEvent]) -> bool {
        events.len() == self.len
            && events.first().map(|e| e.event_id.as_str()) == Some(self.first.as_str())
            && events.last().map(|e| e.event_id.as_str()) == Some(self.last.as_str())
    }
}

impl ChunkProjector {
    /// 2: `token_est` counts the chunk as a bundle renders it.
    /// 3: `word_hashes`, the chunk's content words for dedupe.
    /// 4: tool calls are chunked (tool and arguments), so what an agent
    /// asked a tool is retrievable.
    /// 5: a message's source is its speaker ([`speaker`]), searched with
    /// its words.
    /// 6: a turn's `previous_turn`, the seq of the turn before it in its
    /// session, read from the log.
    /// 7: `token_est` counts the meta line with the time of day only (a
    /// bundle shows chunks under the heading of their day).
    const BASE_VERSION: i32 = 7;

    pub fn new(tokens: TokenCounter) -> Self {
        Self {
            tokens,
            prepared: std::sync::Mutex::default(),
        }
    }

    /// The chunks derived ahead for exactly `events`, if any.
    fn take_prepared(&self, events: &[StoredEvent]) -> Option<Vec<Vec<Chunk>>> {
        let prepared = {
            let mut kept = self.prepared.lock().ok()?;
            let index = kept.iter().position(|p| p.covers(events))?;
            kept.remove(index)?
        };
        Some(
            prepared
                .chunks
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        )
    }
}

/// One row of `chunks`, before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub chunk_id: String,
    pub event_id: String,
    pub seq: i64,
    pub part: i32,
    pub source: Option<String>,
    pub line_start: Option<i32>,
    pub line_end: Option<i32>,
    pub text: String,
    pub token_est: i32,
    pub importance: f32,
    pub content_hash: Vec<u8>,
    /// Its content words ([`memd_core::dedupe::words`]), encoded.
    pub word_hashes: Vec<u8>,
}

/// The excerpt of a normalized long text (a tool output, a document) and
/// the line it starts at.
fn excerpt(text: Option<&str>, first_line: Option<i64>) -> Option<(String, i32)> {
    Some((text?.to_owned(), first_line.unwrap_or(1) as i32))
}

/// The text an event contributes to retrieval, where its first line is,
/// and a short label of where it came from. `None` for kinds that are not
/// retrieval units (tool calls, view updates, handoffs).
fn retrievable(content: &Content<'_>) -> Option<(String, Option<i32>, Option<String>)> {
    match content {
        Content::Message(Message { text }) | Content::Summary(Summary { text, .. }) => {
            Some(((*text)?.to_owned(), None, None))
        }
        Content::ToolResult(content) => {
            let (text, first_line) = excerpt(content.excerpt_text, content.first_line)?;
            let tool = content.tool.unwrap_or("tool");
            let source = match content.path {
                Some(path) => format!("{tool} {path}"),
                None => tool.to_owned(),
            };
            Some((text, Some(first_line), Some(source)))
        }
        Content::Artifact(content) => {
            let (text, first_line) = excerpt(content.excerpt_text, content.first_line)?;
            let source = content.name.map(|name| format!("artifact {name}"));
            Some((text, Some(first_line), source))
        }
        Content::Decision(decision) => {
            let mut text = decision.decision?.to_owned();
            for (label, items) in [
                ("Rationale", &decision.rationale),
                ("Constraints", &decision.constraints),
                ("Alternatives", &decision.alternatives),
                ("Consequences", &decision.consequences),
            ] {
                if !items.is_empty() {
                    text.push_str(&format!("\n{label}: {}", items.join("; ")));
                }
            }
            let source = decision.key.map(|key| format!("decision {key}"));
            Some((text, None, source))
        }
        Content::TaskUpdate(update) => {
            let task = update.task_id?;
            let status = update.status.unwrap_or("open");
            let mut text = format!("Task {task} ({status})");
            if let Some(title) = update.title {
                text.push_str(": ");
                text.push_str(title);
            }
            if let Some(details) = update.details {
                text.push('\n');
                text.push_str(details);
            }
            Some((text, None, Some(format!("task {task}"))))
        }
        Content::ToolCall(call) => {
            let tool = call.tool?;
            let text = match &call.args {
                Some(args) if !args.is_null() => format!("{tool} {args}"),
                _ => tool.to_owned(),
            };
            Some((text, None, Some(format!("tool_call {tool}"))))
        }
        Content::ViewUpdate(_) | Content::Handoff(_) | Content::Retraction(_) | Content::Other => {
            None
        }
    }
}

/// How much a chunk matters regardless of the query: decisions > tasks >
/// summaries > messages > tool output, key project files above other tool
/// output, and a bonus for pinned tags. In [0, 1]. `content` is the
/// event's, as [`StoredEvent::shape`] reads it.
pub fn importance(event: &StoredEvent, content: &Content<'_>) -> f32 {
    let base: f32 = match event.kind {
        Kind::Decision => 0.9,
        Kind::TaskUpdate => 0.7,
        Kind::Summary => 0.6,
        Kind::Message if event.actor_type == ActorType::Human => 0.5,
        Kind::Message => 0.4,
        Kind::ToolResult
            if matches!(content, Content::ToolResult(ToolOutput { path: Some(path), .. })
                if is_key_file(path)) =>
        {
            0.6
        }
        Kind::ToolResult => 0.3,
        Kind::Artifact => 0.5,
        Kind::ToolCall | Kind::ViewUpdate | Kind::Handoff | Kind::Erasure | Kind::Retraction => 0.2,
    };
    let pinned = event
        .tags
        .iter()
        .any(|tag| PINNED_TAGS.contains(&tag.to_ascii_lowercase().as_str()));
    if pinned { (base + 0.3).min(1.0) } else { base }
}

fn is_key_file(path: &str) -> bool {
    let name = path
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(path)
        .to_ascii_lowercase();
    if KEY_FILE_NAMES
        .iter()
        .any(|key| name == *key || (key == &"readme" && name.starts_with("readme")))
    {
        return true;
    }
    let stem = name.split('.').next().unwrap_or(&name);
    ENTRYPOINT_STEMS.contains(&stem) && name.contains('.')
}

/// SHA-256 of the text with case and whitespace runs folded, so the same
/// fact recorded twice dedupes.
pub fn content_hash(text: &str) -> Vec<u8> {
    let mut hasher = Sha256::new();
    let mut first = true;
    for word in text.split_whitespace() {
        if !first {
            hasher.update(b" ");
        }
        first = false;
        hasher.update(word.to_lowercase().as_bytes());
    }
    hasher.finalize().to_vec()
}

/// A part of a long text: its text and the (1-based, inclusive) lines it
/// covers, relative to the text.
#[derive(Debug, PartialEq)]
pub struct Part<'a> {
    pub text: &'a str,
    pub first_line: usize,
    pub last_line: usize,
}

/// Splits `text` into parts of about `target_bytes`, on line boundaries. A
/// single line longer than the target is cut on char boundaries.
pub fn split(text: &str, target_bytes: usize) -> Vec<Part<'_>> {
    if text.len() <= target_bytes {
        return vec![Part {
            text,
            first_line: 1,
            last_line: text.lines().count().max(1),
        }];
    }
    let mut parts = Vec::new();
    let mut start = 0; // byte offset of the current part
    let mut first_line = 1;
    let mut line = 1;
    let mut offset = 0;
    for raw_line in text.split_inclusive('\n') {
        let end = offset + raw_line.len();
        if end - start > target_bytes && offset > start {
            parts.push(Part {
                text: &text[start..offset],
                first_line,
                last_line: line - 1,
            });
            start = offset;
            first_line = line;
        }
        while end - start > target_bytes {
            let mut cut = floor_char_boundary(text, start + target_bytes);
            if cut == start {
                // The target is smaller than this one character.
                cut = start + text[start..].chars().next().map_or(1, char::len_utf8);
            }
            parts.push(Part {
                text: &text[start..cut],
                first_line: line,
                last_line: line,
            });
            start = cut;
            first_line = line;
        }
        offset = end;
        line += 1;
    }
    if start < text.len() {
        parts.push(Part {
            text: &text[start..],
            first_line,
            last_line: line - 1,
        });
    }
    parts
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// One retrieval unit of an event, before anything is derived from it:
/// what both the chunks and the embeddings projections start from.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkText {
    pub chunk_id: String,
    pub part: i32,
    pub source: Option<String>,
    pub line_start: Option<i32>,
    pub line_end: Option<i32>,
    pub text: String,
}

impl ChunkText {
    /// What an embedder reads: where the chunk came from, then its text;
    /// a message as a transcript line, `<speaker>: <text>`.
    pub fn embedding_input(&self, kind: Kind) -> String {
        match (&self.source, kind) {
            (Some(speaker), Kind::Message) => transcript_line(speaker, &self.text),
            (Some(source), _) => format!("{source}\n{}", self.text),
            (None, _) => self.text.clone(),
        }
    }
}

/// The retrieval units of one event, in part order (none for kinds that
/// are not retrieved).
pub fn texts_of(event: &StoredEvent) -> Vec<ChunkText> {
    texts_read(event, &event.shape())
}

/// [`texts_of`], its content already read.
fn texts_read(event: &StoredEvent, content: &Content<'_>) -> Vec<ChunkText> {
    let Some((text, first_line, mut source)) = retrievable(content) else {
        return Vec::new();
    };
    if event.kind == Kind::Message && source.is_none() {
        source = speaker(&event.actor_id, &text).map(str::to_owned);
    }
    let ulid = event
        .event_id
        .strip_prefix("evt_")
        .unwrap_or(&event.event_id);
    split(&text, TARGET_TOKENS * BYTES_PER_TOKEN)
        .into_iter()
        .filter(|part| !part.text.trim().is_empty())
        .enumerate()
        .map(|(index, part)| ChunkText {
            chunk_id: format!("chk_{ulid}_{index}"),
            part: index as i32,
            source: source.clone(),
            line_start: first_line.map(|first| first + part.first_line as i32 - 1),
            line_end: first_line.map(|first| first + part.last_line as i32 - 1),
            text: part.text.to_owned(),
        })
        .collect()
}

/// Who said a message, as part of what it means: "what did Caroline
/// paint?" is answered by a message Caroline recorded as "I painted a
/// sunset", so the speaker is searched and embedded with the words. `None`
/// when the text already opens with the speaker's name (a transcript line,
/// `Caroline: ...`), so that a conversation gives the same retrieval units
/// however it was recorded: speaker as the actor, or in the text.
pub fn speaker<'a>(actor_id: &'a str, text: &str) -> Option<&'a str> {
    let actor = actor_id.trim();
    let text = text.trim_start();
    // The name as a whole word: actor "al" does not open "Alright".
    let opens_with = text
        .get(..actor.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(actor))
        && !text[actor.len()..]
            .chars()
            .next()
            .is_some_and(char::is_alphanumeric);
    (!actor.is_empty() && !opens_with).then_some(actor)
}

/// A message as it reads in a transcript, `<speaker>: <text>`, unless the
/// text names its speaker already ([`speaker`]).
pub fn said(actor_id: &str, text: &str) -> String {
    match speaker(actor_id, text) {
        Some(speaker) => transcript_line(speaker, text),
        None => text.to_owned(),
    }
}

fn transcript_line(speaker: &str, text: &str) -> String {
    format!("{speaker}: {text}")
}

/// Batches at least this long are chunked on several threads.
const PARALLEL_FROM: usize = 64;

impl ChunkProjector {
    /// The chunks of each event, in order. A long batch (a rebuild's, a
    /// worker catching up) is split across up to four threads: counting
    /// tokens with the BPE and hashing words are most of memd's CPU in a
    /// rebuild, and PostgreSQL sits idle meanwhile (nothing else runs in
    /// the transaction), so another core would otherwise wait too.
    pub fn chunks_of_all(&self, events: &[StoredEvent]) -> Vec<Vec<Chunk>> {
        static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let threads = *THREADS
            .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)));
        if events.len() < PARALLEL_FROM || threads < 2 {
            return events.iter().map(|event| self.chunks_of(event)).collect();
        }
        std::thread::scope(|scope| {
            let parts: Vec<_> = events
                .chunks(events.len().div_ceil(threads))
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|event| self.chunks_of(event))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            parts
                .into_iter()
                .flat_map(|part| {
                    part.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }

    /// The chunks of one event.
    pub fn chunks_of(&self, event: &StoredEvent) -> Vec<Chunk> {
        chunk_event(self.tokens, event)
    }
}

fn chunk_event(tokens: TokenCounter, event: &StoredEvent) -> Vec<Chunk> {
    let content = event.shape();
    let importance = importance(event, &content);
    texts_read(event, &content)
        .into_iter()
        .map(|part| {
            let rendered = render::chunk_meta(
                &event.actor_id,
                event.kind.as_str(),
                part.source.as_deref(),
                part.line_start.zip(part.line_end),
                event.ts,
            ) + &render::body(&part.text);
            Chunk {
                token_est: tokens.count(&rendered) as i32,
                importance,
                content_hash: content_hash(&part.text),
                word_hashes: dedupe::encode(&dedupe::words(&part.text)),
                chunk_id: part.chunk_id,
                event_id: event.event_id.clone(),
                seq: event.seq,
                part: part.part,
                source: part.source,
                line_start: part.line_start,
                line_end: part.line_end,
                text: part.text,
            }
        })
        .collect()
}

impl Projector for ChunkProjector {
    fn name(&self) -> &'static str {
        "chunks"
    }

    fn version(&self) -> i32 {
        Self::BASE_VERSION * 10 + self.tokens.encoding().version_digit()
    }

    fn tables(&self) -> &'static [Table] {
        TABLES
    }

    /// One thread, not [`ChunkProjector::chunks_of_all`]'s several: it runs
    /// while PostgreSQL writes the current batch, on the other core.
    fn prepare(&self, events: &std::sync::Arc<[StoredEvent]>) {
        let (tokens, ahead) = (self.tokens, events.clone());
        let chunks = std::thread::spawn(move || {
            ahead
                .iter()
                .map(|event| chunk_event(tokens, event))
                .collect()
        });
        if let (Ok(mut kept), Some(first), Some(last)) =
            (self.prepared.lock(), events.first(), events.last())
        {
            // An older one nobody took (a replay that failed) is dropped;
            // its thread finishes on its own.
            if kept.len() == PREPARED_KEPT {
                kept.pop_front();
            }
            kept.push_back(Prepared {
                first: first.event_id.clone(),
                last: last.event_id.clone(),
                len: events.len(),
                chunks,
            });
        }
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let chunks = self
                .take_prepared(events)
                .unwrap_or_else(|| self.chunks_of_all(events));
            let mut rows = Rows::default();
            for (event, chunks) in events.iter().zip(chunks) {
                for chunk in chunks {
                    rows.push(event, chunk);
                }
            }
            if !rows.chunk_id.is_empty() {
                rows.insert(tx, tenant, events).await?;
            }
            // A retraction names earlier events only: their chunks are in.
            for retraction in events.iter().filter(|e| retraction::withdrawn(e).is_some()) {
                sqlx::query!(
                    "UPDATE chunks SET retracted_by = $2
                      WHERE tenant_id = $1 AND event_id = ANY ($3) AND retracted_by IS NULL",
                    tenant,
                    &retraction.event_id,
                    &retraction.refs
                )
                .execute(&mut *tx)
                .await?;
            }
            Ok(())
        })
    }
}

/// Column arrays for one multi-row INSERT.
#[derive(Default)]
struct Rows {
    chunk_id: Vec<String>,
    event_id: Vec<String>,
    seq: Vec<i64>,
    part: Vec<i32>,
    ts: Vec<chrono::DateTime<chrono::Utc>>,
    session_id: Vec<String>,
    channel: Vec<Channel>,
    sensitivity: Vec<Sensitivity>,
    actor_type: Vec<ActorType>,
    actor_id: Vec<String>,
    agent_id: Vec<Option<String>>,
    kind: Vec<Kind>,
    // text[][] must be rectangular, so tags travel as JSON arrays; `None`
    // for none, the usual case, which then costs PostgreSQL no JSON parse
    // (0.6 s of CPU per million chunks).
    tags: Vec<Option<String>>,
    source: Vec<Option<String>>,
    line_start: Vec<Option<i32>>,
    line_end: Vec<Option<i32>>,
    text: Vec<String>,
    token_est: Vec<i32>,
    importance: Vec<f32>,
    content_hash: Vec<Vec<u8>>,
    word_hashes: Vec<Vec<u8>>,
    /// What PostgreSQL derives a sealed chunk's lexemes from (its source and
    /// plaintext), for the blind index; `None` for chunks kept in the clear.
    sealed_search_text: Vec<Option<String>>,
}

impl Rows {
    fn push(&mut self, event: &StoredEvent, chunk: Chunk) {
        self.chunk_id.push(chunk.chunk_id);
        self.event_id.push(chunk.event_id);
        self.seq.push(chunk.seq);
        self.part.push(chunk.part);
        self.ts.push(event.ts);
        self.session_id.push(event.session_id.clone());
        self.channel.push(event.channel);
        self.sensitivity.push(event.sensitivity);
        self.actor_type.push(event.actor_type);
        self.actor_id.push(event.actor_id.clone());
        self.agent_id.push(event.agent_id.clone());
        self.kind.push(event.kind);
        self.tags.push(
            (!event.tags.is_empty())
                .then(|| serde_json::to_string(&event.tags).expect("strings serialize")),
        );
        self.line_start.push(chunk.line_start);
        self.line_end.push(chunk.line_end);
        self.token_est.push(chunk.token_est);
        self.importance.push(chunk.importance);
        match &event.sealer {
            None => {
                self.text.push(chunk.text);
                self.content_hash.push(chunk.content_hash);
                self.word_hashes.push(chunk.word_hashes);
                self.sealed_search_text.push(None);
            }
            Some(sealer) => {
                let mut words: Vec<u64> = dedupe::decode(&chunk.word_hashes)
                    .into_iter()
                    .map(|word| sealer.keyed_word(word))
                    .collect();
                words.sort_unstable();
                self.text.push(sealer.seal(&chunk.text));
                self.content_hash
                    .push(sealer.keyed_digest(&chunk.content_hash));
                self.word_hashes.push(dedupe::encode(&words));
                // As the search vector reads a chunk: source, then text.
                self.sealed_search_text.push(Some(format!(
                    "{} {}",
                    chunk.source.as_deref().unwrap_or_default(),
                    chunk.text
                )));
            }
        }
        self.source.push(chunk.source);
    }

    /// The blind index of each sealed chunk (`None` for the others): the
    /// lexemes PostgreSQL derives, as the search vector would, each blinded
    /// with its position kept (cover-density ranking reads positions).
    async fn sealed_tsvs(
        &self,
        tx: &mut PgConnection,
        events: &[StoredEvent],
    ) -> Result<Vec<Option<String>>, sqlx::Error> {
        let Some(sealer) = events.iter().find_map(|e| e.sealer.clone()) else {
            return Ok(vec![None; self.chunk_id.len()]);
        };
        let rows = sqlx::query!(
            r#"SELECT u.o AS "ordinal!", t.lexeme AS "lexeme!",
                      coalesce(t.positions, '{}') AS "positions!"
                 FROM unnest($1::text[]) WITH ORDINALITY AS u (doc, o)
                CROSS JOIN LATERAL unnest(to_tsvector('english', projections.searchable(u.doc))) AS t
                WHERE u.doc IS NOT NULL"#,
            &self.sealed_search_text as &[Option<String>]
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut tsvs: Vec<Option<String>> = self
            .sealed_search_text
            .iter()
            .map(|doc| doc.as_ref().map(|_| String::new()))
            .collect();
        for row in rows {
            let (ordinal, lexeme, positions) = (row.ordinal, row.lexeme, row.positions);
            let tsv = tsvs[ordinal as usize - 1]
                .as_mut()
                .expect("rows come only for sealed chunks");
            if !tsv.is_empty() {
                tsv.push(' ');
            }
            tsv.push('\'');
            tsv.push_str(&sealer.blind(&lexeme));
            tsv.push('\'');
            for (index, position) in positions.iter().enumerate() {
                tsv.push(if index == 0 { ':' } else { ',' });
                tsv.push_str(&position.to_string());
            }
        }
        Ok(tsvs)
    }

    async fn insert(
        self,
        tx: &mut PgConnection,
        tenant: &str,
        events: &[StoredEvent],
    ) -> Result<(), sqlx::Error> {
        let sealed_tsvs = self.sealed_tsvs(tx, events).await?;
        sqlx::query!(
            "INSERT INTO chunks (tenant_id, chunk_id, event_id, seq, part, ts, session_id, channel,
                                 sensitivity, actor_type, actor_id, kind, tags, source, line_start,
                                 line_end, text, token_est, importance, content_hash, word_hashes,
                                 agent_id, sealed_tsv, previous_turn)
             SELECT $1, u.chunk_id, u.event_id, u.seq, u.part, u.ts, u.session_id, u.channel,
                    u.sensitivity, u.actor_type, u.actor_id, u.kind,
                    CASE WHEN u.tags IS NULL THEN '{}'::text[]
                         ELSE ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb)) END,
                    u.source, u.line_start,
                    u.line_end, u.text, u.token_est, u.importance, u.content_hash, u.word_hashes,
                    u.agent_id, u.sealed_tsv::tsvector,
                    -- The turn before it in its session, from the log (so a
                    -- rebuild finds the same), whoever may see that turn.
                    CASE WHEN u.kind = ANY ($24) THEN
                        (SELECT p.seq FROM public.events p
                          WHERE p.tenant_id = $1 AND p.session_id = u.session_id
                            AND p.seq < u.seq AND p.kind = ANY ($24)
                          ORDER BY p.seq DESC LIMIT 1)
                    END
               FROM unnest($2::text[], $3::text[], $4::bigint[], $5::int[], $6::timestamptz[],
                           $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                           $12::text[], $13::text[], $14::text[], $15::int[], $16::int[],
                           $17::text[], $18::int[], $19::real[], $20::bytea[], $21::bytea[],
                           $22::text[], $23::text[])
                    AS u (chunk_id, event_id, seq, part, ts, session_id, channel, sensitivity,
                          actor_type, actor_id, kind, tags, source, line_start, line_end, text,
                          token_est, importance, content_hash, word_hashes, agent_id, sealed_tsv)",
            tenant,
            &self.chunk_id,
            &self.event_id,
            &self.seq,
            &self.part,
            &self.ts,
            &self.session_id,
            &self.channel as &[Channel],
            &self.sensitivity as &[Sensitivity],
            &self.actor_type as &[ActorType],
            &self.actor_id,
            &self.kind as &[Kind],
            &self.tags as &[Option<String>],
            &self.source as &[Option<String>],
            &self.line_start as &[Option<i32>],
            &self.line_end as &[Option<i32>],
            &self.text,
            &self.token_est,
            &self.importance,
            &self.content_hash,
            &self.word_hashes,
            &self.agent_id as &[Option<String>],
            &sealed_tsvs as &[Option<String>],
            Kind::TURNS as &[Kind],
        )
        .execute(tx)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn messages(count: i64, id_prefix: &str) -> Vec<StoredEvent> {
        (1..=count)
            .map(|seq| {
                let text = format!("message {seq}: ").repeat(seq as usize);
                StoredEvent::test_message(seq, format!("evt_{id_prefix}{seq:020}"), &text)
            })
            .collect()
    }

    #[test]
    fn a_message_is_searched_and_embedded_with_its_speaker_once() {
        let said = |actor: &str, text: &str| {
            let mut event = StoredEvent::test_message(1, "evt_1".into(), text);
            event.actor_id = actor.into();
            texts_of(&event).remove(0)
        };
        let recorded = said("Caroline", "I painted a sunset last week.");
        assert_eq!(recorded.source.as_deref(), Some("Caroline"));
        assert_eq!(recorded.text, "I painted a sunset last week.");
        assert_eq!(
            recorded.embedding_input(Kind::Message),
            "Caroline: I painted a sunset last week."
        );
        // A transcript line names its speaker already: the same unit.
        let transcript = said("Caroline", "caroline: I painted a sunset last week.");
        assert_eq!(transcript.source, None);
        assert_eq!(
            transcript.embedding_input(Kind::Message),
            "caroline: I painted a sunset last week."
        );
        // Other kinds keep their own source, read on a line of its own.
        let mut tool = StoredEvent::test_message(2, "evt_2".into(), "");
        tool.kind = Kind::TaskUpdate;
        tool.content = serde_json::json!({"task_id": "t1", "title": "ship"});
        let task = texts_of(&tool).remove(0);
        assert_eq!(task.source.as_deref(), Some("task t1"));
        assert_eq!(
            task.embedding_input(Kind::TaskUpdate),
            "task t1\nTask t1 (open): ship"
        );
        assert_eq!(speaker(" ", "text"), None);
        assert_eq!(speaker("al", "Alright, see you."), Some("al"));
        assert_eq!(speaker("al", "Al: see you."), None);
        assert_eq!(speaker("al", "al"), None);
    }

    #[test]
    fn chunks_prepared_ahead_serve_only_the_very_same_events() {
        let projector = ChunkProjector::new(TokenCounter::new(Default::default()));
        let ours: std::sync::Arc<[StoredEvent]> = messages(70, "OURS").into();
        // Another tenant's events, at the same seqs.
        let theirs = messages(70, "THEIRS");
        let next: std::sync::Arc<[StoredEvent]> = messages(3, "NEXT").into();
        // A replay prepares the batch after the one it is about to apply.
        projector.prepare(&ours);
        projector.prepare(&next);
        assert_eq!(projector.take_prepared(&theirs), None);
        assert_eq!(
            projector.take_prepared(&ours),
            Some(projector.chunks_of_all(&ours))
        );
        assert_eq!(projector.take_prepared(&ours), None, "taken once");
        assert_eq!(
            projector.take_prepared(&next),
            Some(projector.chunks_of_all(&next))
        );
    }

    #[test]
    fn a_long_batch_chunks_on_threads_exactly_as_one_by_one() {
        let projector = ChunkProjector::new(TokenCounter::new(Default::default()));
        let events = messages(PARALLEL_FROM as i64 * 3 + 1, "");
        let one_by_one: Vec<Vec<Chunk>> = events.iter().map(|e| projector.chunks_of(e)).collect();
        assert!(
            one_by_one.iter().any(|chunks| chunks.len() > 1),
            "some split"
        );
        assert_eq!(projector.chunks_of_all(&events), one_by_one);
    }

    #[test]
    fn short_text_is_one_part() {
        let parts = split("one\ntwo\n", 100);
        assert_eq!(
            parts,
            vec![Part {
                text: "one\ntwo\n",
                first_line: 1,
                last_line: 2
            }]
        );
    }

    #[test]
    fn long_text_splits_on_lines_and_keeps_ranges() {
        let text: String = (1..=10).map(|i| format!("line {i:02}\n")).collect();
        // Each line is 8 bytes; 20 bytes hold two lines.
        let parts = split(&text, 20);
        assert_eq!(parts.len(), 5);
        assert_eq!(parts[0].text, "line 01\nline 02\n");
        assert_eq!((parts[0].first_line, parts[0].last_line), (1, 2));
        assert_eq!((parts[4].first_line, parts[4].last_line), (9, 10));
    }

    #[test]
    fn key_files_are_recognised() {
        for path in [
            "README.md",
            "repo/package.json",
            "src/main.rs",
            "src/index.ts",
            "Cargo.toml",
        ] {
            assert!(is_key_file(path), "{path}");
        }
        for path in ["src/util.rs", "docs/notes.md", "main"] {
            assert!(!is_key_file(path), "{path}");
        }
    }

    #[test]
    fn content_hash_ignores_case_and_spacing() {
        assert_eq!(
            content_hash("We use  Postgres\n"),
            content_hash("we use postgres")
        );
        assert_ne!(
            content_hash("we use postgres"),
            content_hash("we use mysql")
        );
    }

    proptest! {
        /// Parts cover the text exactly, in order, and none is far above the
        /// target.
        #[test]
        fn parts_cover_the_text(text in "(\\PC{0,30}\n?){0,60}", target in 8usize..200) {
            let parts = split(&text, target);
            let joined: String = parts.iter().map(|p| p.text).collect();
            prop_assert_eq!(joined, text.clone());
            for part in &parts {
                prop_assert!(part.text.len() <= target.max(4) || parts.len() == 1);
                prop_assert!(part.first_line <= part.last_line);
            }
        }
    }
}
