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
//! kind), so the in-memory vector index needs no other table. Vectors are
//! little-endian f32s; an embedder gives the same vector for the same text
//! in any batch, so a rebuild reproduces every byte.

use std::sync::Arc;

use sqlx::PgConnection;

use super::chunks;
use crate::{
    embed::{self, Embedder, HashedEmbedder, MiniLm},
    event::StoredEvent,
    projector::{BoxFuture, Projector, Table},
};

const KEY: &[&str] = &["tenant_id", "chunk_id"];
const MINILM_TABLES: &[Table] = &[Table {
    name: "embeddings_minilm",
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

fn tables(embedder: &str) -> Option<&'static [Table]> {
    match embedder {
        MiniLm::NAME => Some(MINILM_TABLES),
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
    /// 1: first version; the embedder's own version is added below it.
    const BASE_VERSION: i32 = 1;

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
            let mut rows = Rows::default();
            let mut inputs = Vec::new();
            for event in events {
                for text in chunks::texts_of(event) {
                    inputs.push(text.embedding_input());
                    rows.chunk_id.push(text.chunk_id);
                    rows.seq.push(event.seq);
                    rows.part.push(text.part);
                    rows.channel.push(event.channel.clone());
                    rows.sensitivity.push(event.sensitivity.clone());
                    rows.kind.push(event.kind.clone());
                }
            }
            if inputs.is_empty() {
                return Ok(());
            }
            let embedder = self.embedder.clone();
            let vectors = tokio::task::spawn_blocking(move || {
                let texts: Vec<&str> = inputs.iter().map(String::as_str).collect();
                embedder.embed(&texts)
            })
            .await
            .map_err(|e| sqlx::Error::Protocol(format!("embedding task: {e}")))?
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            let vectors: Vec<Vec<u8>> = vectors.iter().map(|v| embed::encode(v)).collect();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {} (tenant_id, chunk_id, seq, part, channel, sensitivity, kind, vector)
                 SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::int[], $5::text[],
                                          $6::text[], $7::text[], $8::bytea[])",
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
            .execute(&mut *tx)
            .await?;
            Ok(())
        })
    }
}

#[derive(Default)]
struct Rows {
    chunk_id: Vec<String>,
    seq: Vec<i64>,
    part: Vec<i32>,
    channel: Vec<String>,
    sensitivity: Vec<String>,
    kind: Vec<String>,
}
