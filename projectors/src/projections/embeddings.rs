//! `embeddings_<embedder>`: one vector per chunk, for semantic retrieval.
//!
//! Each embedder has its own table, projector and cursor, so a second
//! embedder's projection can be built beside the one bundles use, and
//! dropped without touching it (`memd embedder use`). The projector reads
//! events, not the `chunks` table: it cuts the same retrieval units
//! ([`chunks::texts_of`]) and embeds them, so it can run behind or ahead of
//! the chunks projector, on its own worker, without ever holding up the
//! other projections or the write path.
//!
//! Each row keeps what the read side filters on (channel, sensitivity,
//! kind, owner, and for retrieval filters time, session and tags), so the
//! in-memory vector index needs no other table. Vectors are
//! little-endian f32s; an embedder gives the same vector for the same text
//! in any batch, so a rebuild reproduces every byte.

use std::{collections::HashMap, sync::Arc};

use sqlx::PgConnection;

use super::chunks;
use crate::{
    projector::{BoxFuture, Projector, Table},
    retraction,
};
use memd_core::event::{Channel, Kind, Sensitivity, StoredEvent};
use memd_embedder as embed;
use memd_embedder::{Embedder, HashedEmbedder, MiniLm, Model, MpNet};

const KEY: &[&str] = &["tenant_id", "chunk_id"];
const MINILM_TABLES: &[Table] = &[Table {
    name: "embeddings_minilm",
    key: KEY,
}];
const MINILM_INT8_TABLES: &[Table] = &[Table {
    name: "embeddings_minilm_int8",
    key: KEY,
}];
const MPNET_TABLES: &[Table] = &[Table {
    name: "embeddings_mpnet",
    key: KEY,
}];
const HASHED_TABLES: &[Table] = &[Table {
    name: "embeddings_hashed",
    key: KEY,
}];

/// The projector name (and table) of an embedder's projection.
pub fn projector_name(embedder: &str) -> Option<&'static str> {
    tables(embedder).map(|tables| tables[0].name)
}

/// The projector version of an embedder's projection (what its cursor
/// must hold for its vectors to be current), without loading the model.
pub fn projector_version(embedder: &str) -> Option<i32> {
    let version = match embedder {
        MiniLm::NAME => MiniLm::VERSION,
        MiniLm::INT8_NAME => MiniLm::INT8_VERSION,
        MpNet::NAME => MpNet::VERSION,
        HashedEmbedder::NAME => HashedEmbedder::VERSION,
        _ => return None,
    };
    Some(EmbeddingProjector::BASE_VERSION * 1000 + version)
}

fn tables(embedder: &str) -> Option<&'static [Table]> {
    match embedder {
        MiniLm::NAME => Some(MINILM_TABLES),
        MiniLm::INT8_NAME => Some(MINILM_INT8_TABLES),
        MpNet::NAME => Some(MPNET_TABLES),
        HashedEmbedder::NAME => Some(HASHED_TABLES),
        _ => None,
    }
}

/// Events embedded per projection batch: an embedding batch holds the
/// tenant's cursor lock, and a short one lets bundles see new vectors soon.
pub const BATCH_EVENTS: i64 = 256;

pub struct EmbeddingProjector {
    embedder: Arc<dyn Embedder>,
    tables: &'static [Table],
}

impl EmbeddingProjector {
    /// 1: the chunk alone. 3: a message: the mean of its vector alone and
    /// read after the message before it. 4: a message as a transcript
    /// line, with its speaker (and the message before it with its own).
    const BASE_VERSION: i32 = 4;

    /// `None` for an embedder without a table.
    pub fn new(embedder: Arc<dyn Embedder>) -> Option<Self> {
        Some(Self {
            tables: tables(embedder.name())?,
            embedder,
        })
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }
}

impl Projector for EmbeddingProjector {
    fn name(&self) -> &'static str {
        self.tables[0].name
    }

    fn version(&self) -> i32 {
        Self::BASE_VERSION * 1000 + self.embedder.version()
    }

    fn tables(&self) -> &'static [Table] {
        self.tables
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let previous = previous_messages(tx, tenant, events).await?;
            let mut rows = Rows::default();
            let mut inputs = Vec::new();
            // (row, index of its in-context input) for messages with one.
            let mut in_context = Vec::new();
            for event in events {
                for text in chunks::texts_of(event) {
                    let own = text.embedding_input(event.kind);
                    // A message also read after the one it answers.
                    if let Some(before) = previous.get(&event.seq)
                        && event.kind == Kind::Message
                        && text.part == 0
                    {
                        in_context.push((rows.chunk_id.len(), after_previous(before, &own)));
                    }
                    inputs.push(own);
                    rows.chunk_id.push(text.chunk_id);
                    rows.seq.push(event.seq);
                    rows.part.push(text.part);
                    rows.channel.push(event.channel);
                    rows.sensitivity.push(event.sensitivity);
                    rows.kind.push(event.kind);
                    rows.agent_id.push(event.agent_id.clone());
                    rows.ts.push(event.ts);
                    rows.session_id.push(event.session_id.clone());
                    rows.tags
                        .push(serde_json::to_string(&event.tags).expect("strings serialize"));
                }
            }
            if !inputs.is_empty() {
                self.insert(tx, tenant, &rows, inputs, in_context).await?;
            }
            for retraction in events.iter().filter(|e| retraction::withdrawn(e).is_some()) {
                forget_events(&mut *tx, self.name(), tenant, &retraction.refs).await?;
            }
            Ok(())
        })
    }
}

impl EmbeddingProjector {
    /// Embeds `inputs` (a row's own text, then the in-context inputs of
    /// `in_context`'s rows) and writes `rows` with their vectors.
    async fn insert(
        &self,
        tx: &mut PgConnection,
        tenant: &str,
        rows: &Rows,
        mut inputs: Vec<String>,
        in_context: Vec<(usize, String)>,
    ) -> Result<(), sqlx::Error> {
        let rows_count = inputs.len();
        inputs.extend(in_context.iter().map(|(_, input)| input.clone()));
        let mut vectors = embed_detached(self.embedder.clone(), inputs)
            .await
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        let contextual = vectors.split_off(rows_count);
        for ((row, _), context) in in_context.iter().zip(contextual) {
            with_context(&mut vectors[*row], &context);
        }
        let vectors: Vec<Vec<u8>> = vectors.iter().map(|v| embed::encode(v)).collect();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {} (tenant_id, chunk_id, seq, part, channel, sensitivity, kind, vector,
                                 agent_id, ts, session_id, tags)
                 SELECT $1, u.chunk_id, u.seq, u.part, u.channel, u.sensitivity, u.kind, u.vector,
                        u.agent_id, u.ts, u.session_id,
                        ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb))
                   FROM unnest($2::text[], $3::bigint[], $4::int[], $5::text[], $6::text[],
                               $7::text[], $8::bytea[], $9::text[], $10::timestamptz[],
                               $11::text[], $12::text[])
                        AS u (chunk_id, seq, part, channel, sensitivity, kind, vector, agent_id,
                              ts, session_id, tags)",
            self.name()
        )))
        .bind(tenant)
        .bind(&rows.chunk_id)
        .bind(&rows.seq)
        .bind(&rows.part)
        .bind(&rows.channel)
        .bind(&rows.sensitivity)
        .bind(&rows.kind)
        .bind(&vectors)
        .bind(&rows.agent_id)
        .bind(&rows.ts)
        .bind(&rows.session_id)
        .bind(&rows.tags)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

/// Deletes from the embeddings table `table` the vectors of `tenant`'s
/// events `event_ids` (withdrawn by a retraction).
async fn forget_events(
    tx: &mut PgConnection,
    table: &str,
    tenant: &str,
    event_ids: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM {table} v USING public.events e
          WHERE v.tenant_id = $1 AND e.tenant_id = $1 AND e.seq = v.seq
            AND e.event_id = ANY ($2)"
    )))
    .bind(tenant)
    .bind(event_ids)
    .execute(tx)
    .await?;
    Ok(())
}

/// [`Embedder::embed_background`] on a thread of its own. Not
/// `spawn_blocking`: a batch abandoned at shutdown (see
/// [`memd_embedder::worker`]) may still be computing, at the lowest CPU
/// priority on a busy machine for minutes, and a runtime waits for its
/// blocking tasks before it ends; a detached thread ends with the process.
async fn embed_detached(
    embedder: Arc<dyn Embedder>,
    inputs: Vec<String>,
) -> Result<Vec<Vec<f32>>, embed::EmbedError> {
    let (sent, computed) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("memd-embed-batch".to_owned())
        .spawn(move || {
            let texts: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let _ = sent.send(embedder.embed_background(&texts));
        })
        .map_err(|e| embed::EmbedError::Run(format!("starting the embedding thread: {e}")))?;
    computed
        .await
        .map_err(|_| embed::EmbedError::Run("the embedding thread panicked".to_owned()))?
}

/// Deletes the vectors of `tenant`'s events about data subject `subject`
/// (erased): exactly what a rebuild of every embeddings projection would
/// leave out, without embedding the rest again. A vector depends on its
/// own event and on the previous message's text as stored, which for a
/// subject's (sealed) message is never readable: no other vector changes.
pub async fn forget_subject(
    executor: impl sqlx::PgExecutor<'_> + Copy,
    tenant: &str,
    subject: &str,
) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    for tables in [
        MINILM_TABLES,
        MINILM_INT8_TABLES,
        MPNET_TABLES,
        HASHED_TABLES,
    ] {
        deleted += sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM projections.{} v USING public.events e
              WHERE v.tenant_id = $1 AND e.tenant_id = $1 AND e.seq = v.seq
                AND e.subject_id = $2",
            tables[0].name
        )))
        .bind(tenant)
        .bind(subject)
        .execute(executor)
        .await?
        .rows_affected();
    }
    Ok(deleted)
}

/// The message before each message of `events` in its session, by the
/// later message's seq, read from the log: in a conversation a reply
/// ("a sunset, with my kids!") means little without what it answers
/// ("what did you paint?"), so a message is embedded after the one before
/// it. Only the log is read, so a rebuild sees the same.
async fn previous_messages(
    tx: &mut PgConnection,
    tenant: &str,
    events: &[StoredEvent],
) -> Result<HashMap<i64, String>, sqlx::Error> {
    let (sessions, seqs): (Vec<&str>, Vec<i64>) = events
        .iter()
        .filter(|e| e.kind == Kind::Message)
        .map(|e| (e.session_id.as_str(), e.seq))
        .unzip();
    if seqs.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(i64, String, String)> = sqlx::query!(
        r#"SELECT u.seq AS "seq!", p.actor_id, p.text AS "text!"
           FROM unnest($2::text[], $3::bigint[]) AS u (session_id, seq)
          CROSS JOIN LATERAL (
                SELECT e.actor_id, e.content ->> 'text' AS text FROM public.events e
                 WHERE e.tenant_id = $1 AND e.session_id = u.session_id AND e.seq < u.seq
                   AND e.kind = 'message'
                 ORDER BY e.seq DESC LIMIT 1) AS p
          WHERE p.text IS NOT NULL"#,
        tenant,
        &sessions as &[&str],
        &seqs,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.seq, row.actor_id, row.text))
    .collect();
    Ok(rows
        .into_iter()
        .map(|(seq, actor_id, text)| (seq, chunks::said(&actor_id, &text)))
        .collect())
}

/// At most this much of the previous message is read before a message.
const PREVIOUS_CHARS: usize = 400;

/// What a message is embedded as after the one before it: the previous
/// message's transcript line ([`chunks::said`], its first
/// [`PREVIOUS_CHARS`] characters), then its own.
pub fn after_previous(previous: &str, own: &str) -> String {
    let before: String = previous.chars().take(PREVIOUS_CHARS).collect();
    format!("{before}\n{own}")
}

/// A message's vector, from its vector `alone` and its vector read
/// [`after_previous`]: their normalised sum (the mean, in direction).
pub fn with_context(alone: &mut [f32], in_context: &[f32]) {
    for (x, c) in alone.iter_mut().zip(in_context) {
        *x += c;
    }
    embed::normalise(alone);
}

#[derive(Default)]
struct Rows {
    chunk_id: Vec<String>,
    seq: Vec<i64>,
    part: Vec<i32>,
    channel: Vec<Channel>,
    sensitivity: Vec<Sensitivity>,
    kind: Vec<Kind>,
    agent_id: Vec<Option<String>>,
    ts: Vec<chrono::DateTime<chrono::Utc>>,
    session_id: Vec<String>,
    // text[][] must be rectangular, so tags travel as JSON arrays.
    tags: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_known_without_a_model_is_the_projectors() {
        let projector = EmbeddingProjector::new(Arc::new(HashedEmbedder)).unwrap();
        assert_eq!(
            projector_version(HashedEmbedder::NAME),
            Some(projector.version())
        );
        assert_eq!(
            projector_version(MiniLm::NAME),
            Some(EmbeddingProjector::BASE_VERSION * 1000 + MiniLm::VERSION)
        );
        assert_eq!(projector_version("nope"), None);
    }
}
