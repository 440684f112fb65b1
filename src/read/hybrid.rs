//! The candidates stage of a bundle: the union of lexical candidates
//! (full-text, [`retrieve::candidate_pool`]) and semantic ones (nearest
//! vectors, [`super::vectors`]), every one carrying both scores where it
//! has them, bounded by the policy's `candidate_pool_max`.
//!
//! Chunks not embedded yet (the embeddings projection lags the log) come
//! from the lexical side alone; when semantic retrieval is off for the
//! tenant (no model, or `semantic_weight` 0) the pool is the lexical one,
//! and `provenance.semantic` says why.

use std::{collections::HashMap, sync::Arc};

use memd_embedder::EmbedError;

use memd_projectors::projections::embeddings;
use serde::Serialize;

use super::{
    Reader,
    policy::{Fusion, Policy, QuestionPrecision},
    privacy::Visibility,
    retrieve::{self, Candidate, QueryLexemes, Scope},
    vectors::{Current, Neighbour, Position, SharedVectors},
};

/// `provenance.semantic`: what the semantic side did for this bundle.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct SemanticReport {
    /// Whether vector candidates and semantic scores were used.
    pub used: bool,
    /// The tenant's embedder.
    pub embedder: Option<&'static str>,
    /// Why not used, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How the two scores were fused, when both were used.
    pub fusion: Option<Fusion>,
    /// How the question was embedded (the policy's
    /// `scoring.question_precision`), when semantic scores were used.
    pub question_precision: Option<QuestionPrecision>,
    /// How far the embeddings projection has applied the log; chunks past
    /// it are found by their words only.
    pub embedded_seq: i64,
    /// Events of the log past `embedded_seq`.
    pub lag_events: i64,
    /// Vectors searched (the tenant's chunks embedded so far).
    pub vectors: usize,
    /// Nearest chunks found by meaning, and how many of them the lexical
    /// side had not found.
    pub semantic_candidates: usize,
    pub semantic_only: usize,
    /// The cosine a candidate sharing no word with the question had to
    /// reach to be evidence (the policy's `min_similarity`, or the
    /// embedder's calibrated value), when semantic scores were used.
    pub similarity_floor: Option<f64>,
    /// What the search cost this time: `provenance.diagnostics`.
    #[serde(skip)]
    pub work: SemanticWork,
}

/// `provenance.diagnostics`: what the semantic side's work cost for this
/// bundle, which caches and idle cores make differ between two builds of
/// the same bundle (everything else in `provenance`, but the timings and
/// `cache`, is the same for the same log, policy and request).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct SemanticWork {
    /// Of the vectors searched, how many the question was compared with:
    /// all of them, or the lists read (a large tenant), or only those added
    /// since the same search last ran (a question asked again).
    pub vectors_compared: usize,
    /// Whether the rows of the chunks found by meaning were read beside the
    /// lexical statement (a core was idle) rather than after it.
    pub read_beside_lexical: bool,
    /// Of the rows of chunks found by meaning that the bundle needed, how
    /// many the vector index remembered from an earlier search, rather
    /// than read from PostgreSQL.
    pub rows_remembered: usize,
    /// How many it read from PostgreSQL.
    pub rows_read: usize,
    /// Whether the question's vector was computed for this bundle (the
    /// model ran), rather than found among the questions asked recently.
    pub question_embedded: bool,
}

/// Where the tenant's embeddings stand, read with the log's head.
#[derive(Debug, Clone, Default)]
pub struct EmbeddingHead {
    /// The tenant's embedder: its choice, or the daemon's default.
    pub embedder: Option<String>,
    /// Its projection's cursor, when it has one.
    pub seq: i64,
    pub version: Option<i32>,
}

/// The candidate pool of one question, and the lexemes that were common.
pub struct Pool {
    pub candidates: Vec<Candidate>,
    pub common: Vec<bool>,
    pub semantic: SemanticReport,
}

/// The question's vector and its nearest chunks, started as soon as a
/// bundle knows it retrieves: the model and then the vector search run on
/// their own task while PostgreSQL answers the bundle's statements and the
/// lexical candidate statement, instead of after them.
pub struct Question {
    nearest: Aborting<Result<Nearest, Failure>>,
}

/// A spawned task that stops when what waits for it is dropped (the bundle
/// failed first, or its request went away), so that no core or connection
/// goes on working for a bundle nobody will build.
struct Aborting<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for Aborting<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// What the semantic side found before the two sides meet.
struct Nearest {
    vector: Arc<Vec<f32>>,
    /// Whether `vector` was computed for this question.
    embedded: bool,
    found: Found,
}

enum Found {
    /// The tenant's vectors (to score lexical candidates by meaning too),
    /// how many there are, and the nearest visible ones.
    Searched {
        index: SharedVectors,
        vectors: usize,
        compared: usize,
        neighbours: Vec<Neighbour>,
        /// The neighbours' rows, when read beside the lexical statement,
        /// and where they came from.
        rows: Option<(Vec<Candidate>, RowsFrom)>,
    },
    /// The index is loading in the background; lexical candidates only.
    Loading { behind: i64 },
}

enum Failure {
    /// The bundle goes on with lexical candidates, and says why.
    Embedding(EmbedError),
    Database(sqlx::Error),
}

/// Starts embedding `query` with the tenant's embedder and searching its
/// vectors as `visibility` and `scope` allow, or says why the bundle's
/// retrieval is lexical only. While a core is idle ([`Reader::building`]),
/// the task then reads the neighbours' rows too (holding the query's
/// `lexemes`), beside the lexical statement.
#[allow(clippy::too_many_arguments)]
pub fn start_question(
    reader: &Reader,
    tenant: &str,
    query: &str,
    lexemes: &[String],
    embedding: &EmbeddingHead,
    policy: &Policy,
    visibility: Visibility<'_>,
    scope: &Scope,
) -> Result<Question, String> {
    if policy.scoring.semantic_weight <= 0.0 || semantic_wanted(policy) == 0 {
        return Err(
            "semantic_weight or semantic_candidates is 0 in the tenant's policy".to_owned(),
        );
    }
    if let Some(reason) = reader.semantic.unavailable(embedding.embedder.as_deref()) {
        return Err(reason);
    }
    let Some(embedder) = embedding
        .embedder
        .as_deref()
        .and_then(|name| reader.semantic.embedder(name))
        .map(|e| e.name())
    else {
        return Err("no embedder".to_owned());
    };
    let search = Search {
        semantic: reader.semantic.clone(),
        pool: reader.pool.clone(),
        keyring: reader.keyring.clone(),
        tenant: tenant.to_owned(),
        embedder,
        precision: policy.scoring.question_precision,
        table: embeddings::projector_name(embedder).expect("a loaded embedder has a table"),
        query: query.to_owned(),
        lexemes: lexemes.to_vec(),
        beside: reader.building.spare_core(),
        channel: visibility.channel,
        agent: visibility.agent.map(str::to_owned),
        scope: scope.clone(),
        seq: embedding.seq,
        version: embedding.version.unwrap_or(0),
        wanted: semantic_wanted(policy),
    };
    Ok(Question {
        nearest: Aborting(tokio::spawn(search.run())),
    })
}

/// What the question's own task needs, owned: it outlives the borrow of
/// the bundle that started it.
struct Search {
    semantic: Arc<super::semantic::Semantic>,
    pool: sqlx::PgPool,
    keyring: memd_core::seal::Keyring,
    tenant: String,
    embedder: &'static str,
    precision: QuestionPrecision,
    table: &'static str,
    query: String,
    lexemes: Vec<String>,
    /// Whether to read the rows of the chunks found beside the lexical
    /// statement (a core is idle).
    beside: bool,
    channel: crate::domain::event::Channel,
    agent: Option<String>,
    scope: Scope,
    seq: i64,
    version: i32,
    wanted: usize,
}

impl Search {
    /// Embeds the question, searches the index as it stands at `seq`, and,
    /// when `beside`, reads the rows of what it found.
    async fn run(self) -> Result<Nearest, Failure> {
        let (vector, embedded) = self
            .semantic
            .query_vector(self.embedder, self.precision, &self.query)
            .await
            .map_err(Failure::Embedding)?;
        let current = self
            .semantic
            .index
            .current(&self.pool, &self.tenant, self.table, self.seq, self.version)
            .await
            .map_err(Failure::Database)?;
        let found = match current {
            Current::Ready(index) => {
                let visibility = Visibility::new(self.channel).for_agent(self.agent.as_deref());
                let vectors = index.read().await;
                let searched = vectors.searched_through(
                    &vector,
                    self.wanted,
                    visibility,
                    &self.scope,
                    self.seq,
                );
                let (neighbours, compared) = (searched.neighbours, searched.rows_read);
                let count = vectors.len();
                drop(vectors);
                let rows = if self.beside {
                    let positions: Vec<(i64, i32)> =
                        neighbours.iter().map(|n| n.position).collect();
                    let rows = found_candidates(
                        &self.pool,
                        &self.tenant,
                        &index,
                        &positions,
                        &QueryLexemes::new(&self.lexemes, &self.keyring),
                        visibility,
                        &self.scope,
                    )
                    .await
                    .map_err(Failure::Database)?;
                    Some(rows)
                } else {
                    None
                };
                Found::Searched {
                    index,
                    vectors: count,
                    compared,
                    neighbours,
                    rows,
                }
            }
            Current::Loading { behind } => Found::Loading { behind },
        };
        Ok(Nearest {
            vector,
            embedded,
            found,
        })
    }
}

/// The chunks at `positions` (found by meaning) that `visibility` may see,
/// as candidates for a question of `lexemes`, in the order of `positions`:
/// those the index remembers from earlier searches from memory, the
/// others read from PostgreSQL ([`retrieve::at_positions`]) and
/// remembered. And how many came from either. Either way a chunk's
/// candidate is the same: its lexemes are matched in one place.
async fn found_candidates(
    pool: &sqlx::PgPool,
    tenant: &str,
    index: &SharedVectors,
    positions: &[Position],
    lexemes: &QueryLexemes,
    visibility: Visibility<'_>,
    scope: &Scope,
) -> Result<(Vec<Candidate>, RowsFrom), sqlx::Error> {
    let remembered = index.read().await.found_rows(positions);
    let missing: Vec<Position> = positions
        .iter()
        .zip(&remembered)
        .filter(|(_, row)| row.is_none())
        .map(|(position, _)| *position)
        .collect();
    let read = retrieve::at_positions(pool, tenant, &missing, visibility, scope).await?;
    let mut read_rows = read.iter().peekable();
    let mut candidates = Vec::with_capacity(positions.len());
    for (position, row) in positions.iter().zip(&remembered) {
        let row = match row {
            Some(row) => Some(&**row),
            // Read rows come in the order of `missing`; a position the
            // channel may not see has none.
            None => read_rows.next_if(|row| row.position() == *position),
        };
        candidates.extend(row.and_then(|row| row.candidate(lexemes, visibility)));
    }
    index.read().await.remember_found(read);
    let from = RowsFrom {
        memory: positions.len() - missing.len(),
        database: missing.len(),
    };
    Ok((candidates, from))
}

/// Where the rows of chunks found by meaning came from.
#[derive(Debug, Clone, Copy)]
struct RowsFrom {
    /// The vector index's memory of earlier searches.
    memory: usize,
    /// PostgreSQL.
    database: usize,
}

/// The lexical side of the pool: which of the question's terms are common
/// in the tenant's chunks up to [`retrieve::judged_through`] the projected
/// seq (verdicts the read cache kept for that seq are not asked again),
/// then the candidates.
async fn lexical_pool(
    reader: &Reader,
    tenant: &str,
    lexemes: &[String],
    visibility: Visibility<'_>,
    scope: &Scope,
    pool_max: usize,
    projected_seq: i64,
) -> Result<(Vec<bool>, Vec<Candidate>), sqlx::Error> {
    let through = retrieve::judged_through(projected_seq);
    let queries = retrieve::lexeme_queries(lexemes, &reader.keyring);
    let share = retrieve::share(queries.len(), pool_max);
    // Filters and retention narrow which chunks count, per request: their
    // verdicts are not kept. Nor while projections are being rebuilt (no
    // seq to hold them to, so none bounds the statement either).
    let kept_here = scope.is_whole() && through > 0;
    let (kept, drops) = if kept_here {
        let cache = &reader.cache;
        cache.common_terms(tenant, through, visibility, share, &queries)
    } else {
        (vec![None; queries.len()], 0)
    };
    let asked: Vec<String> = queries
        .iter()
        .zip(&kept)
        .filter(|(_, kept)| kept.is_none())
        .map(|(query, _)| query.clone())
        .collect();
    let found = retrieve::common_lexemes(
        &reader.pool,
        tenant,
        &asked,
        visibility,
        scope,
        share,
        if through > 0 { through } else { i64::MAX },
    )
    .await?;
    if kept_here {
        let verdicts = asked.iter().zip(found.iter().copied());
        reader
            .cache
            .keep_common(tenant, through, visibility, share, verdicts, drops);
    }
    let mut found = found.into_iter();
    let common: Vec<bool> = kept
        .into_iter()
        .map(|kept| kept.or_else(|| found.next()).unwrap_or(false))
        .collect();
    let found = retrieve::candidates(
        &reader.pool,
        tenant,
        &queries,
        &common,
        visibility,
        scope,
        pool_max,
    )
    .await?;
    Ok((common, found))
}

/// Vector candidates a bundle asks for: the policy's, at most half the pool.
fn semantic_wanted(policy: &Policy) -> usize {
    (policy.scoring.semantic_candidates as usize).min(policy.candidate_pool_max as usize / 2)
}

#[allow(clippy::too_many_arguments)]
pub async fn candidates(
    reader: &Reader,
    tenant: &str,
    question: Result<Question, String>,
    lexemes: &[String],
    (head_seq, projected_seq): (i64, i64),
    embedding: &EmbeddingHead,
    visibility: Visibility<'_>,
    scope: &Scope,
    policy: &Policy,
) -> Result<Pool, sqlx::Error> {
    let pool_max = policy.candidate_pool_max as usize;
    let mut report = SemanticReport {
        embedder: embedding
            .embedder
            .as_deref()
            .and_then(|name| reader.semantic.embedder(name).map(|e| e.name())),
        embedded_seq: embedding.seq.min(head_seq),
        lag_events: (head_seq - embedding.seq).max(0),
        ..SemanticReport::default()
    };
    let wanted = semantic_wanted(policy);
    let lexical_max = if question.is_ok() {
        pool_max - wanted
    } else {
        pool_max
    };
    let lexical = lexical_pool(
        reader,
        tenant,
        lexemes,
        visibility,
        scope,
        lexical_max,
        projected_seq,
    );
    let question = match question {
        Ok(question) => question,
        Err(reason) => {
            let (common, candidates) = lexical.await?;
            report.reason = Some(reason);
            return Ok(Pool {
                candidates,
                common,
                semantic: report,
            });
        }
    };
    let (lexical, nearest) = tokio::join!(lexical, question.nearest);
    let (common, mut candidates) = lexical?;
    let nearest = match nearest {
        Ok(nearest) => nearest,
        Err(join) => Err(Failure::Embedding(EmbedError::Run(join.to_string()))),
    };
    let Some(searched) = usable(nearest, &mut report, policy, tenant)? else {
        return Ok(Pool {
            candidates,
            common,
            semantic: report,
        });
    };
    let added = searched
        .join(
            reader,
            tenant,
            lexemes,
            visibility,
            scope,
            &mut candidates,
            &mut report,
        )
        .await?;
    report.semantic_only = added.len();
    candidates.extend(added);
    retrieve::in_pool_order(&mut candidates);
    Ok(Pool {
        candidates,
        common,
        semantic: report,
    })
}

/// The vector side's findings, when bundles can use them; otherwise why
/// not, in `report` (the index still loading, the model failing: the
/// bundle is lexical only). A database failure fails the bundle.
fn usable(
    nearest: Result<Nearest, Failure>,
    report: &mut SemanticReport,
    policy: &Policy,
    tenant: &str,
) -> Result<Option<Searched>, sqlx::Error> {
    let (query_vector, index, vectors, compared, neighbours, rows) = match nearest {
        Ok(Nearest {
            vector,
            embedded,
            found:
                Found::Searched {
                    index,
                    vectors,
                    compared,
                    neighbours,
                    rows,
                },
        }) => {
            report.work.question_embedded = embedded;
            (vector, index, vectors, compared, neighbours, rows)
        }
        Ok(Nearest {
            found: Found::Loading { behind },
            ..
        }) => {
            report.reason = Some(format!(
                "vector index loading in the background ({behind} events of projection behind)"
            ));
            return Ok(None);
        }
        Err(Failure::Embedding(err)) => {
            tracing::warn!(tenant, error = %err, "embedding the question failed; lexical only");
            report.reason = Some(format!("embedding the question failed: {err}"));
            return Ok(None);
        }
        Err(Failure::Database(err)) => return Err(err),
    };
    report.used = true;
    report.fusion = Some(policy.scoring.fusion);
    report.question_precision = Some(policy.scoring.question_precision);
    report.vectors = vectors;
    report.work.vectors_compared = compared;
    report.semantic_candidates = neighbours.len();
    Ok(Some(Searched {
        index,
        query_vector,
        neighbours,
        rows,
    }))
}

/// What the vector side found for a question.
struct Searched {
    index: SharedVectors,
    query_vector: Arc<Vec<f32>>,
    neighbours: Vec<Neighbour>,
    rows: Option<(Vec<Candidate>, RowsFrom)>,
}

impl Searched {
    /// Scores the lexical side's `candidates` by their similarity to the
    /// question, and returns the neighbours it did not find, scored too:
    /// the candidates only the vector side brought.
    #[allow(clippy::too_many_arguments)]
    async fn join(
        self,
        reader: &Reader,
        tenant: &str,
        lexemes: &[String],
        visibility: Visibility<'_>,
        scope: &Scope,
        candidates: &mut [Candidate],
        report: &mut SemanticReport,
    ) -> Result<Vec<Candidate>, sqlx::Error> {
        let Self {
            index,
            query_vector,
            neighbours,
            rows,
        } = self;
        let vectors = index.read().await;
        // The lexical side's pool is newest first, as `similarities` is
        // quickest with.
        let positions: Vec<Position> = candidates.iter().map(|c| (c.seq, c.part)).collect();
        for (candidate, similarity) in candidates
            .iter_mut()
            .zip(vectors.similarities(&positions, &query_vector))
        {
            candidate.semantic = similarity.map(f64::from);
        }
        let found: HashMap<(i64, i32), f32> = neighbours
            .iter()
            .map(|n| (n.position, n.similarity))
            .collect();
        // `positions` is the pool's order, newest first.
        let known = |position: &Position| positions.binary_search_by(|p| position.cmp(p)).is_ok();
        drop(vectors);
        report.work.read_beside_lexical = rows.is_some();
        let mut added = match rows {
            // The same rows as below, in the same order: those of the
            // neighbours the lexical side did not find.
            Some((rows, from)) => {
                (report.work.rows_remembered, report.work.rows_read) = (from.memory, from.database);
                rows.into_iter()
                    .filter(|c| !known(&(c.seq, c.part)))
                    .collect()
            }
            None => {
                let missing: Vec<(i64, i32)> = neighbours
                    .iter()
                    .map(|n| n.position)
                    .filter(|position| !known(position))
                    .collect();
                let (rows, from) = found_candidates(
                    &reader.pool,
                    tenant,
                    &index,
                    &missing,
                    &QueryLexemes::new(lexemes, &reader.keyring),
                    visibility,
                    scope,
                )
                .await?;
                (report.work.rows_remembered, report.work.rows_read) = (from.memory, from.database);
                rows
            }
        };
        for candidate in &mut added {
            candidate.semantic = found
                .get(&(candidate.seq, candidate.part))
                .map(|s| f64::from(*s));
        }
        Ok(added)
    }
}
