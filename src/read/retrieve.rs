//! The retrieval path: full-text candidates from PostgreSQL, bounded, then
//! ranked in Rust.
//!
//! **Candidates.** The query's words are reduced to lexemes by PostgreSQL's
//! `english` configuration, the same that built each chunk's `tsv`. Each
//! lexeme fetches, on its own, the newest chunks that contain it, at most
//! `candidate_pool_max / lexemes` of them, all in one statement planned
//! with the actual lexemes: a common word walks the tenant's newest chunks
//! and stops early, a rare one reads its few matches from the GIN index.
//! The union is the candidate pool: OR semantics (a question matches
//! whatever shares a word with it), bounded by `candidate_pool_max`, and a
//! rare word's old matches are never crowded out by a common word's recent
//! ones. Privacy filters are part of the query, so what the channel may
//! not see is never a candidate.
//!
//! **Ranking.** `score = alpha·relevance + beta·recency + gamma·importance`.
//! Relevance is BM25 over lexemes (IDF from each lexeme's matches in the
//! tenant, exact when under its share of the pool, document length from
//! the chunk's distinct lexemes), divided by the pool's best so it lies in
//! [0, 1]; candidates under `min_relevance` of it are dropped. Recency
//! halves every `recency_half_life_hours` back from the tenant's newest
//! `ts`, capped at its last append time (not the wall clock: the same log
//! gives the same ranking; see `retention`). Importance is the chunk's, set at projection. Ties go to
//! importance, then the newer, then the shorter, then the earlier part.

use std::{cmp::Ordering, collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row, postgres::PgRow};

use memd_core::{
    dedupe,
    event::{Channel, Kind, Sensitivity},
    seal::Keyring,
};

use super::{
    filters::{self, RetrievalFilters},
    policy::{Combine, Fusion, Scoring},
    privacy::{Audience, Visibility},
    retention::{self, Forgetting, PINNED},
};

/// Lexemes of one question beyond this many are ignored (in the order
/// PostgreSQL returns them).
pub const MAX_LEXEMES: usize = 24;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A chunk in the pool, with what ranking needs decoded and what only
/// choosing needs ([`Details`]) left in the row it came in: no text and no
/// display fields, which are read only for the chunks a bundle keeps
/// ([`shown`]).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub seq: i64,
    pub part: i32,
    pub ts: DateTime<Utc>,
    /// `None` for a kind this build does not know (a newer one's).
    pub kind: Option<Kind>,
    pub token_est: i32,
    pub importance: f32,
    /// The seq of the turn before this one in its session, for a turn
    /// ([`Kind::TURNS`]); what makes two candidates neighbours.
    pub previous_turn: Option<i64>,
    /// The query lexemes the chunk contains: bit `i` for lexeme `i` (there
    /// are at most [`MAX_LEXEMES`]).
    pub matched: u32,
    lexeme_count: i32,
    /// BM25 over the query's lexemes, divided by the pool's best.
    pub lexical: f64,
    /// Cosine similarity of the chunk's vector to the question's, when the
    /// chunk is embedded and semantic retrieval is on.
    pub semantic: Option<f64>,
    /// The lexical and semantic scores fused ([`Fusion`]), in [0, 1].
    pub relevance: f64,
    pub recency: f64,
    pub score: f64,
    details: Details,
}

/// The ids, source, content hash and words of a candidate: what only the
/// candidates a bundle considers need (a page of 64 or so of a pool of a
/// thousand). Decoding them into owned strings and vectors for every row
/// was most of the daemon's allocation in a retrieval bundle, so a
/// candidate read by a statement keeps them in that statement's rows,
/// shared by every candidate of it, and decodes them when asked.
#[derive(Clone)]
enum Details {
    /// Row `index` of a statement's rows, whose first columns are
    /// [`CANDIDATE_COLUMNS`]; its ids were checked to be text when the
    /// candidate was made.
    Row { rows: Arc<[PgRow]>, index: usize },
    /// Decoded already (a row the vector index remembers, a test's).
    Owned(Arc<OwnedDetails>),
}

#[derive(Debug)]
struct OwnedDetails {
    chunk_id: String,
    event_id: String,
    source: Option<String>,
    content_hash: [u8; 32],
    words: Vec<u64>,
}

impl std::fmt::Debug for Details {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Details::Row { rows, index } => {
                write!(f, "Row({})", Details::text(&rows[*index], column::CHUNK_ID))
            }
            Details::Owned(owned) => owned.fmt(f),
        }
    }
}

/// Column positions of [`CANDIDATE_COLUMNS`].
mod column {
    pub const CHUNK_ID: usize = 0;
    pub const EVENT_ID: usize = 1;
    pub const SEQ: usize = 2;
    pub const TS: usize = 3;
    pub const KIND: usize = 4;
    pub const SOURCE: usize = 5;
    pub const TOKEN_EST: usize = 6;
    pub const IMPORTANCE: usize = 7;
    pub const CONTENT_HASH: usize = 8;
    pub const WORDS: usize = 9;
    pub const PART: usize = 10;
    pub const PREVIOUS_TURN: usize = 11;
    pub const LEXEME_COUNT: usize = 12;
    /// The lexical statement's mask of the query lexemes a chunk holds
    /// ([`super::matched_mask`]), after its lexeme count.
    pub const MATCHED: usize = 13;
}

impl Details {
    /// A text column checked when the candidate was made.
    fn text(row: &PgRow, column: usize) -> &str {
        row.try_get_unchecked(column)
            .expect("a candidate's ids are checked when it is read")
    }

    fn optional_text(row: &PgRow, column: usize) -> Option<&str> {
        row.try_get_unchecked(column)
            .expect("a candidate's optional text is checked when it is read")
    }

    fn bytes(row: &PgRow, column: usize) -> &[u8] {
        row.try_get_unchecked(column)
            .expect("a candidate's bytes are checked when it is read")
    }
}

impl Candidate {
    /// The kind's name, as bundles show it.
    pub fn kind_name(&self) -> &'static str {
        self.kind.map_or("other", Kind::as_str)
    }

    pub fn chunk_id(&self) -> &str {
        match &self.details {
            Details::Row { rows, index } => Details::text(&rows[*index], column::CHUNK_ID),
            Details::Owned(owned) => &owned.chunk_id,
        }
    }

    pub fn event_id(&self) -> &str {
        match &self.details {
            Details::Row { rows, index } => Details::text(&rows[*index], column::EVENT_ID),
            Details::Owned(owned) => &owned.event_id,
        }
    }

    pub fn source(&self) -> Option<&str> {
        match &self.details {
            Details::Row { rows, index } => Details::optional_text(&rows[*index], column::SOURCE),
            Details::Owned(owned) => owned.source.as_deref(),
        }
    }

    pub fn content_hash(&self) -> [u8; 32] {
        match &self.details {
            Details::Row { rows, index } => Details::bytes(&rows[*index], column::CONTENT_HASH)
                .try_into()
                .expect("a candidate's content hash is checked when it is read"),
            Details::Owned(owned) => owned.content_hash,
        }
    }

    /// Its content words, as projected ([`memd_core::dedupe`]),
    /// into `words` (cleared first).
    pub fn words_into(&self, words: &mut Vec<u64>) {
        words.clear();
        match &self.details {
            Details::Row { rows, index } => {
                dedupe::decode_into(Details::bytes(&rows[*index], column::WORDS), words)
            }
            Details::Owned(owned) => words.extend_from_slice(&owned.words),
        }
    }

    /// Candidates from `rows` (each starting with [`CANDIDATE_COLUMNS`],
    /// then the chunk's lexeme count), with the lexemes `matched(row)`
    /// says each holds. By position, without sqlx's per-value type check
    /// (the statements here fix the types): a bundle decodes up to 2,000
    /// rows, and the checks were a third of their decoding. What choosing
    /// alone needs is checked here and decoded later ([`Details`]).
    fn from_rows(
        rows: Vec<PgRow>,
        matched: impl Fn(&PgRow) -> Result<u32, sqlx::Error>,
    ) -> Result<Vec<Self>, sqlx::Error> {
        let rows: Arc<[PgRow]> = rows.into();
        (0..rows.len())
            .map(|index| Self::checked(&rows, index, Fields::read(&rows[index])?, &matched))
            .collect()
    }

    /// As [`Candidate::from_rows`], in pool order ([`in_pool_order`]) and
    /// each chunk once: a chunk holding several of the question's lexemes
    /// comes back once per branch of the lexical statement, and only the
    /// rows kept have their details checked.
    fn pool_from_rows(
        rows: Vec<PgRow>,
        matched: impl Fn(&PgRow) -> Result<u32, sqlx::Error>,
    ) -> Result<Vec<Self>, sqlx::Error> {
        let rows: Arc<[PgRow]> = rows.into();
        let mut read = (0..rows.len())
            .map(|index| Ok((Fields::read(&rows[index])?, index)))
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        read.sort_unstable_by_key(|(fields, _)| pool_order(fields.seq, fields.part));
        read.dedup_by_key(|(fields, _)| (fields.seq, fields.part));
        read.into_iter()
            .map(|(fields, index)| Self::checked(&rows, index, fields, &matched))
            .collect()
    }

    /// Row `index` of `rows` as a candidate, its details type-checked so
    /// that the accessors may decode them later without failing.
    fn checked(
        rows: &Arc<[PgRow]>,
        index: usize,
        fields: Fields,
        matched: impl Fn(&PgRow) -> Result<u32, sqlx::Error>,
    ) -> Result<Self, sqlx::Error> {
        let row = &rows[index];
        row.try_get_unchecked::<&str, _>(column::CHUNK_ID)?;
        row.try_get_unchecked::<&str, _>(column::EVENT_ID)?;
        row.try_get_unchecked::<Option<&str>, _>(column::SOURCE)?;
        row.try_get_unchecked::<&[u8], _>(column::WORDS)?;
        content_hash(row)?;
        Ok(fields.candidate(
            matched(row)?,
            Details::Row {
                rows: rows.clone(),
                index,
            },
        ))
    }

    /// A candidate from `row`, everything decoded: one to keep beyond the
    /// bundle that read it.
    fn owned(row: &PgRow, matched: u32) -> Result<Self, sqlx::Error> {
        let details = OwnedDetails {
            chunk_id: row.try_get_unchecked(column::CHUNK_ID)?,
            event_id: row.try_get_unchecked(column::EVENT_ID)?,
            source: row.try_get_unchecked(column::SOURCE)?,
            content_hash: content_hash(row)?,
            words: dedupe::decode(row.try_get_unchecked::<&[u8], _>(column::WORDS)?),
        };
        Ok(Fields::read(row)?.candidate(matched, Details::Owned(Arc::new(details))))
    }

    /// Bytes its details hold, roughly, when decoded.
    fn details_heap_bytes(&self) -> usize {
        match &self.details {
            Details::Row { .. } => 0,
            Details::Owned(owned) => {
                std::mem::size_of::<OwnedDetails>()
                    + owned.chunk_id.capacity()
                    + owned.event_id.capacity()
                    + owned.source.as_ref().map_or(0, String::capacity)
                    + owned.words.capacity() * 8
            }
        }
    }
}

fn content_hash(row: &PgRow) -> Result<[u8; 32], sqlx::Error> {
    row.try_get_unchecked::<&[u8], _>(column::CONTENT_HASH)?
        .try_into()
        .map_err(|_| sqlx::Error::Decode("content_hash is not 32 bytes".into()))
}

/// What ranking needs of a candidate's row.
struct Fields {
    seq: i64,
    part: i32,
    ts: DateTime<Utc>,
    kind: Option<Kind>,
    token_est: i32,
    importance: f32,
    previous_turn: Option<i64>,
    lexeme_count: i32,
}

impl Fields {
    fn read(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            seq: row.try_get_unchecked(column::SEQ)?,
            part: row.try_get_unchecked(column::PART)?,
            ts: row.try_get_unchecked(column::TS)?,
            kind: Kind::parse(row.try_get_unchecked(column::KIND)?),
            token_est: row.try_get_unchecked(column::TOKEN_EST)?,
            importance: row.try_get_unchecked(column::IMPORTANCE)?,
            previous_turn: row.try_get_unchecked(column::PREVIOUS_TURN)?,
            lexeme_count: row.try_get_unchecked(column::LEXEME_COUNT)?,
        })
    }

    fn candidate(self, matched: u32, details: Details) -> Candidate {
        Candidate {
            seq: self.seq,
            part: self.part,
            ts: self.ts,
            kind: self.kind,
            token_est: self.token_est,
            importance: self.importance,
            previous_turn: self.previous_turn,
            lexeme_count: self.lexeme_count,
            matched,
            lexical: 0.0,
            semantic: None,
            relevance: 0.0,
            recency: 0.0,
            score: 0.0,
            details,
        }
    }
}

/// A SQL expression of the query lexemes (bound at `first_param` on) the
/// chunk `c` holds, as an int whose bit `i` is lexeme `i`: one column where
/// one boolean per lexeme cost a value to send and decode each.
fn matched_mask(lexemes: usize, first_param: usize) -> String {
    if lexemes == 0 {
        return "0".to_owned();
    }
    (0..lexemes)
        .map(|index| {
            format!(
                "(CASE WHEN c.tsv @@ ${}::tsquery THEN {} ELSE 0 END)",
                index + first_param,
                1_u32 << index
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The columns of a candidate, for the statements that read them.
const CANDIDATE_COLUMNS: &str = "c.chunk_id, c.event_id, c.seq, c.ts, c.kind, c.source, \
     c.token_est, c.importance, c.content_hash, c.word_hashes, c.part, c.previous_turn";

/// The ranked pool.
#[derive(Debug, Default)]
pub struct Pool {
    pub lexemes: Vec<String>,
    /// Best first.
    pub ranked: Vec<Candidate>,
}

/// A lexeme as a one-operand `tsquery` literal.
fn tsquery_literal(lexeme: &str) -> String {
    format!("'{}'", lexeme.replace('\\', "\\\\").replace('\'', "''"))
}

/// How a question's lexeme is looked up: as itself, and with a key also
/// blinded, as the search vectors of sealed chunks hold it.
fn lexeme_query(lexeme: &str, keyring: &Keyring) -> String {
    match keyring.blind(lexeme) {
        Some(blind) => format!("{} | {}", tsquery_literal(lexeme), tsquery_literal(&blind)),
        None => tsquery_literal(lexeme),
    }
}

/// A `tsquery` matching the chunks that hold every word of `text` (its
/// English stems, as the chunks' search vectors hold them; a sealed chunk's
/// by their blinded form): the log's text filter. `None` when `text` has no
/// word a chunk could hold (stop words and punctuation only).
pub async fn every_word_query(
    pool: &PgPool,
    keyring: &Keyring,
    text: &str,
) -> Result<Option<String>, sqlx::Error> {
    let lexemes: Vec<String> = sqlx::query_scalar!(
        r#"SELECT ARRAY(SELECT unnest(tsvector_to_array(
                    to_tsvector('english', projections.searchable($1))))) AS "lexemes!""#,
        text
    )
    .fetch_one(pool)
    .await?;
    Ok((!lexemes.is_empty()).then(|| {
        lexemes
            .iter()
            .map(|l| format!("({})", lexeme_query(l, keyring)))
            .collect::<Vec<_>>()
            .join(" & ")
    }))
}

/// What the pool may contain, beyond privacy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    /// Chunks of these kinds are not candidates (a receiving agent's bundle
    /// takes no chat messages as evidence).
    pub excluded_kinds: Vec<&'static str>,
    /// What the request narrowed retrieval to.
    pub filters: RetrievalFilters,
    /// What the tenant's retention policy forgets.
    pub forgetting: Forgetting,
}

impl Scope {
    /// Whether the pool may hold any chunk privacy lets through: no kind
    /// excluded, no filter, nothing forgotten.
    pub fn is_whole(&self) -> bool {
        self.excluded_kinds.is_empty() && self.filters.is_empty() && self.forgetting.is_empty()
    }
}

/// Which chunks of the scope a statement reads: those a bundle may
/// retrieve, or those it names in `omissions` because retention forgot
/// them or a retraction withdrew them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    Retrievable,
    Forgotten,
    Retracted,
}

/// The chunks of tenant `$1` that the scope allows (`$4`, the filters, `$6`
/// to `$12`) and retention keeps (`$13` to `$19`), as [`bind_scope`] binds
/// them, and, unless `privacy` is false, that the channel (`$2`, `$3`) and
/// the bundle's agent (`$5`) may see ([`Visibility::owner_allows`],
/// [`filters::SQL`], [`retention::sql`]). Filters and retention are written
/// in only when the scope has them: their parameters are always bound, but
/// an unused condition would still cost every statement its planning and
/// every row its test. `kept` says which of them: not withdrawn by a
/// retraction and kept by retention (retrievable), or the chunks retention
/// forgot, or those a retraction withdrew.
fn scoped(scope: &Scope, privacy: bool, kept: Kept) -> String {
    let mut sql = format!(
        "c.tenant_id = $1 AND {} AND NOT (c.kind = ANY ($4)) \
         AND (c.channel <> 'private' OR c.agent_id IS NULL OR $5::text IS NULL OR c.agent_id = $5)",
        if privacy {
            "(c.channel = ANY ($2) AND c.sensitivity = ANY ($3))"
        } else {
            "NOT (c.channel = ANY ($2) AND c.sensitivity = ANY ($3))"
        },
    );
    if !scope.filters.is_empty() {
        sql.push_str(" AND ");
        sql.push_str(filters::SQL);
    }
    let forgetting = !scope.forgetting.is_empty();
    match kept {
        Kept::Retracted => sql.push_str(" AND c.retracted_by IS NOT NULL"),
        Kept::Retrievable if forgetting => sql.push_str(&format!(
            " AND c.retracted_by IS NULL AND {}",
            retention::sql()
        )),
        Kept::Retrievable => sql.push_str(" AND c.retracted_by IS NULL"),
        Kept::Forgotten if forgetting => sql.push_str(&format!(
            " AND c.retracted_by IS NULL AND NOT {}",
            retention::sql()
        )),
        Kept::Forgotten => sql.push_str(" AND false"),
    }
    sql
}

/// [`scoped`]: what a bundle may retrieve.
fn visible(scope: &Scope) -> String {
    scoped(scope, true, Kept::Retrievable)
}

/// Parameters [`bind_scope`] binds; a statement's own start after them.
const SCOPE_PARAMS: usize = 19;

/// Binds `$1` to `$19` of a statement using [`scoped`].
fn bind_scope<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    tenant: &'q str,
    visibility: Visibility<'q>,
    scope: &'q Scope,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let (filters, forgetting) = (&scope.filters, &scope.forgetting);
    query
        .bind(tenant)
        .bind(visibility.channel_names())
        .bind(visibility.sensitivity_names())
        .bind(&scope.excluded_kinds)
        .bind(visibility.agent)
        .bind(filters.since)
        .bind(filters.until)
        .bind(filters::list(&filters.agents))
        .bind(filters::list(&filters.sessions))
        .bind(filters::list(&filters.kind_names()))
        .bind(filters::list(&filters.tags_all))
        .bind(filters::list(&filters.tags_any))
        .bind(forgetting.cutoffs[0])
        .bind(forgetting.cutoffs[1])
        .bind(forgetting.cutoffs[2])
        .bind(forgetting.cutoffs[3])
        .bind(&forgetting.superseded)
        .bind(&forgetting.sessions)
        .bind(forgetting.seq_floor)
}

/// How many of the tenant's newest chunks (that the channel may see) are
/// looked at to tell common query terms from rare ones.
pub const COMMON_SAMPLE: i64 = 200;
/// A term held by at least this share of the sample is common without
/// counting its matches: on its own it would walk thousands of rows of a
/// large tenant to fill its share, while in the shared branch of the newest
/// chunks holding any common term it costs next to nothing.
const COMMON_SHARE: f64 = 0.02;

/// Blocks of chunks at evenly spaced seqs of the tenant's whole history,
/// looked at when the newest did not settle a term: an agent whose recent
/// chunks speak other words than its history (a new task, a long tool
/// output) would otherwise have the history's everyday terms counted, and
/// a GIN index is read only by a bitmap scan, which takes in every match
/// before the count's limit applies (37k of them, 40 ms a term, at 100k
/// events). Blocks of consecutive chunks, not single ones: each block is
/// one walk down the seq index (32 single probes cost 1.2 ms a statement).
const SPREAD_BLOCKS: i64 = 4;
/// Chunks per block: the spread sample is [`SPREAD_BLOCKS`] × this.
const SPREAD_BLOCK: i64 = 8;
/// A term is common by the spread sample when at least this many of its
/// chunks hold it...
const SPREAD_HITS: i64 = 3;
/// ...and the matches they stand for (held share × the history's seqs)
/// exceed the term's share of the pool this many times over: what the
/// spread sample settles is far from the line, and near it the count
/// decides, as before. A tenant of a few thousand chunks never gets there.
const SPREAD_MARGIN: i64 = 4;

/// The candidate pool for `lexemes`, at most `pool_max` chunks, and which
/// lexemes were common (fetched together): [`common_lexemes`], then
/// [`candidates`], every term judged afresh, as `bench acb` has PostgreSQL
/// alone do it (bundles keep their verdicts: `hybrid::lexical_pool`).
pub async fn candidate_pool(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    lexemes: &[String],
    visibility: Visibility<'_>,
    scope: &Scope,
    pool_max: usize,
) -> Result<(Vec<bool>, Vec<Candidate>), sqlx::Error> {
    let queries = lexeme_queries(lexemes, keyring);
    let share = share(queries.len(), pool_max);
    let common = common_lexemes(pool, tenant, &queries, visibility, scope, share, i64::MAX).await?;
    let found = candidates(pool, tenant, &queries, &common, visibility, scope, pool_max).await?;
    Ok((common, found))
}

/// Each lexeme as a tsquery (with its blinded form for sealed chunks), as
/// [`common_lexemes`] and [`candidates`] take them.
pub fn lexeme_queries(lexemes: &[String], keyring: &Keyring) -> Vec<String> {
    lexemes.iter().map(|l| lexeme_query(l, keyring)).collect()
}

/// Whether each lexeme is common in the tenant's memory: it matches more
/// chunks the channel may see than its share of a pool of `pool_max`, so
/// fetching its newest matches on their own would read all of them to keep
/// a few. Held by 2% of the newest [`COMMON_SAMPLE`] chunks settles it at
/// once; else held often enough by chunks spread over the whole history
/// ([`SPREAD_BLOCKS`]); any other term's matches are counted, up to the
/// share + 1 (a rare term's few rows, read again by [`candidates`] from the
/// cache). Read from
/// the tenant's own chunks up to seq `through` only (the same log gives the
/// same answer, and no other tenant's memory has a say), in one statement.
/// `queries` are the lexemes as [`lexeme_query`] writes them; `share` is
/// each one's share of the pool ([`share`]). Each verdict depends on its
/// own lexeme alone, so a caller may ask for some of a question's lexemes
/// and keep the others' from before.
pub async fn common_lexemes(
    pool: &PgPool,
    tenant: &str,
    queries: &[String],
    visibility: Visibility<'_>,
    scope: &Scope,
    share: usize,
    through: i64,
) -> Result<Vec<bool>, sqlx::Error> {
    if queries.is_empty() {
        return Ok(Vec::new());
    }
    // One statement text whatever the lexemes (an array, one row each), so
    // after its first five runs on a connection PostgreSQL keeps a generic
    // plan: written out per lexeme, it was planned on every bundle, which
    // cost more than running it (0.5 ms against 0.4 at 10k events). Nothing
    // in it needs the lexemes' values to plan well: the sample is the
    // tenant's newest chunks, and a term's matches are counted (from the GIN
    // index) only when the sample did not settle it, as a subquery in a
    // CASE branch runs only when that branch is reached.
    let visible = visible(scope);
    // The spread sample, like the sample, is read only if a CASE branch
    // reaches it: when the newest chunks settle every term it costs nothing.
    // Its blocks start at the middles of equal stretches of the history and
    // take each event's first chunk (seq alone orders them, so a block is
    // one walk down the seq index, with no sort).
    let sql = format!(
        "WITH sample AS MATERIALIZED (
              SELECT c.tsv FROM projections.chunks c WHERE {visible} AND c.seq <= ${through}
               ORDER BY c.seq DESC, c.part DESC LIMIT ${sample}),
              span AS MATERIALIZED (
              SELECT min(c.seq) AS lo, max(c.seq) AS hi FROM projections.chunks c
               WHERE c.tenant_id = $1 AND c.seq <= ${through}),
              spread AS MATERIALIZED (
              SELECT s.tsv FROM span CROSS JOIN generate_series(0, {SPREAD_BLOCKS} - 1) AS g (i)
               CROSS JOIN LATERAL (
                   SELECT c.tsv FROM projections.chunks c
                    WHERE {visible} AND c.part = 0
                      AND c.seq <= span.hi - (span.hi - span.lo) * (2 * g.i + 1) / (2 * {SPREAD_BLOCKS})
                    ORDER BY c.seq DESC LIMIT {SPREAD_BLOCK}) AS s)
         SELECT CASE WHEN (SELECT count(*) FROM sample) = ${sample}
                      AND (SELECT count(*) FROM sample WHERE sample.tsv @@ l.q)
                          >= ${sample} * {COMMON_SHARE}
                     THEN true
                     WHEN (SELECT count(*) FROM sample) = ${sample}
                      AND (SELECT count(*) FROM spread WHERE spread.tsv @@ l.q)
                          >= (SELECT greatest({SPREAD_HITS}, ${share}::float8 * {SPREAD_MARGIN}
                                                 * {SPREAD_BLOCKS} * {SPREAD_BLOCK}
                                                 / (span.hi - span.lo + 1))
                                FROM span)
                     THEN true
                     ELSE (SELECT count(*) FROM (SELECT FROM projections.chunks c
                            WHERE {visible} AND c.tsv @@ l.q AND c.seq <= ${through}
                            LIMIT ${share} + 1) AS m)
                          > ${share}
                END
           FROM unnest(${queries}::tsquery[]) WITH ORDINALITY AS l (q, o)
          ORDER BY l.o",
        sample = SCOPE_PARAMS + 1,
        share = SCOPE_PARAMS + 2,
        queries = SCOPE_PARAMS + 3,
        through = SCOPE_PARAMS + 4,
    );
    let rows = bind_scope(
        sqlx::query(sqlx::AssertSqlSafe(sql)),
        tenant,
        visibility,
        scope,
    )
    .bind(COMMON_SAMPLE)
    .bind(share as i64)
    .bind(queries)
    .bind(through)
    .fetch_all(pool)
    .await?;
    rows.iter().map(|row| row.try_get::<bool, _>(0)).collect()
}

/// The seq up to which a tenant's chunks judge which terms are common
/// ([`common_lexemes`]), given its projected seq: rounded down to a step of
/// a 256th of the history (a power of two, at most [`MAX_JUDGED_STEP`]
/// events), exact below 512 events. A verdict is a guess at how often a
/// term occurs, which a few hundred newer events do not change, and it
/// stays a function of the log; what the step buys is that an agent which
/// writes between its questions keeps the verdicts its earlier questions
/// paid for ([`super::cache::ReadCache::common_terms`]) until the step is
/// passed, instead of asking again after every event.
pub fn judged_through(projected_seq: i64) -> i64 {
    if projected_seq <= 0 {
        return projected_seq;
    }
    let magnitude = 1_i64 << (63 - projected_seq.leading_zeros());
    let step = (magnitude / 256).clamp(1, MAX_JUDGED_STEP);
    projected_seq - projected_seq % step
}

/// The largest step of [`judged_through`], in events.
const MAX_JUDGED_STEP: i64 = 256;

/// Each lexeme's share of a pool of `pool_max` candidates.
pub fn share(lexemes: usize, pool_max: usize) -> usize {
    (pool_max / lexemes.max(1)).max(1)
}

/// The candidate pool for `lexemes`, at most `pool_max` chunks. A rare
/// lexeme fetches its newest matches on its own (all of them when they are
/// fewer than its share), so its old matches are never crowded out; the
/// common ones (`common`, from [`common_lexemes`]) share one branch, the
/// newest chunks holding any of them: their matches overlap (a question's
/// everyday words come together), so one branch of half their shares
/// brings more distinct chunks than a branch each, for half the rows read.
/// Every branch orders by seq, then part: the same log gives the same pool.
/// `queries` are the lexemes as [`lexeme_query`] writes them.
pub async fn candidates(
    pool: &PgPool,
    tenant: &str,
    queries: &[String],
    common: &[bool],
    visibility: Visibility<'_>,
    scope: &Scope,
    pool_max: usize,
) -> Result<Vec<Candidate>, sqlx::Error> {
    if queries.is_empty() || pool_max == 0 {
        return Ok(Vec::new());
    }
    let per_lexeme = share(queries.len(), pool_max);
    let visible = visible(scope);
    let branch = |condition: String, limit: usize| {
        format!(
            "(SELECT {CANDIDATE_COLUMNS}, c.tsv FROM projections.chunks c
               WHERE {visible} AND c.tsv @@ {condition}
               ORDER BY c.seq DESC, c.part DESC LIMIT {limit})"
        )
    };
    let is_common = |index: usize| common.get(index).copied().unwrap_or(false);
    let mut branches: Vec<String> = (0..queries.len())
        .filter(|index| !is_common(*index))
        .map(|index| {
            branch(
                format!("${}::tsquery", index + SCOPE_PARAMS + 1),
                per_lexeme,
            )
        })
        .collect();
    let shared: Vec<usize> = (0..queries.len()).filter(|i| is_common(*i)).collect();
    if !shared.is_empty() {
        let any = shared
            .iter()
            .map(|index| format!("${}::tsquery", index + SCOPE_PARAMS + 1))
            .collect::<Vec<_>>()
            .join(" || ");
        branches.push(branch(
            format!("({any})"),
            (per_lexeme * shared.len() / 2).max(per_lexeme),
        ));
    }
    // Which lexemes each candidate holds (for BM25 in `rank`).
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS}, length(c.tsv) AS lexeme_count, {matched} AS matched
           FROM ({branches}) AS c",
        matched = matched_mask(queries.len(), SCOPE_PARAMS + 1),
        branches = branches.join(" UNION ALL ")
    );
    // Not a prepared statement: planned with the actual lexemes, so each
    // branch gets the plan its lexeme's frequency calls for.
    let mut query = bind_scope(
        sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(false),
        tenant,
        visibility,
        scope,
    );
    for literal in queries {
        query = query.bind(literal);
    }
    let rows = query.fetch_all(pool).await?;
    Candidate::pool_from_rows(rows, |row| {
        Ok(row.try_get_unchecked::<i32, _>(column::MATCHED)? as u32)
    })
}

/// The pool's order, whatever order its statements and sides came back
/// in: newest first, by position (`(seq, part)`, unique in a tenant). The
/// same log gives the same order, whatever ids its events were given (a
/// history ingested again gets new ones), and comparing two integers is
/// cheaper than two ids with a long common prefix, for a pool of a
/// thousand.
pub fn in_pool_order(candidates: &mut [Candidate]) {
    candidates.sort_unstable_by_key(|c| pool_order(c.seq, c.part));
}

/// The key of [`in_pool_order`]: newest position first.
fn pool_order(seq: i64, part: i32) -> std::cmp::Reverse<(i64, i32)> {
    std::cmp::Reverse((seq, part))
}

/// A chunk found by meaning, as read once: its candidate (before any
/// question's lexemes are matched), the lexemes its search vector holds
/// (hashed), and who may see it. A chunk's row never changes once
/// projected (erasure drops it from the vector index, and with it from
/// what the index remembers), so the vector index keeps these for the
/// chunks its searches return ([`super::vectors`]), and a question that
/// finds them again reads none of them from PostgreSQL.
#[derive(Debug, Clone)]
pub struct FoundRow {
    candidate: Candidate,
    /// [`lexeme_hash`] of each lexeme of the chunk's `tsv` (blinded for a
    /// sealed chunk, as stored), sorted.
    lexemes: Vec<u64>,
    channel: Channel,
    sensitivity: Sensitivity,
    agent_id: Option<String>,
}

impl FoundRow {
    pub fn position(&self) -> (i64, i32) {
        (self.candidate.seq, self.candidate.part)
    }

    /// Bytes held, roughly.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.candidate.details_heap_bytes()
            + self.lexemes.capacity() * 8
            + self.agent_id.as_ref().map_or(0, String::capacity)
    }

    /// The chunk as a candidate for a question of `lexemes`, if
    /// `visibility` may see it: the rule the statement that read it
    /// applied, applied again, since what the index remembers serves every
    /// channel and agent of the tenant.
    pub fn candidate(
        &self,
        lexemes: &QueryLexemes,
        visibility: Visibility<'_>,
    ) -> Option<Candidate> {
        if !visibility.allows(self.channel, self.sensitivity)
            || !visibility.owner_allows(self.channel, self.agent_id.as_deref())
        {
            return None;
        }
        let mut candidate = self.candidate.clone();
        candidate.matched = lexemes.matched(&self.lexemes);
        Some(candidate)
    }
}

#[cfg(test)]
impl FoundRow {
    /// A row at `(seq, part)`, for tests of what holds rows.
    pub fn at(seq: i64, part: i32) -> Self {
        let mut candidate = tests::candidate("c", &[], 1, 0, 0.5);
        (candidate.seq, candidate.part) = (seq, part);
        Self {
            candidate,
            lexemes: Vec::new(),
            channel: Channel::Private,
            sensitivity: Sensitivity::None,
            agent_id: None,
        }
    }
}

/// A question's lexemes as [`FoundRow`]s are matched against them: each
/// one hashed as itself and, with a key, blinded, as a sealed chunk's
/// search vector holds it. Bit `i` of a match is lexeme `i`, as
/// `c.tsv @@ 'lexeme'` tells it in [`candidates`] (a one-lexeme query
/// matches a search vector holding that lexeme, whatever its positions
/// and weights).
#[derive(Debug, Clone, Default)]
pub struct QueryLexemes(Vec<(u64, Option<u64>)>);

impl QueryLexemes {
    pub fn new(lexemes: &[String], keyring: &Keyring) -> Self {
        Self(
            lexemes
                .iter()
                .take(MAX_LEXEMES)
                .map(|l| (lexeme_hash(l), keyring.blind(l).map(|b| lexeme_hash(&b))))
                .collect(),
        )
    }

    fn matched(&self, chunk: &[u64]) -> u32 {
        let holds = |hash: u64| chunk.binary_search(&hash).is_ok();
        self.0
            .iter()
            .enumerate()
            .filter(|(_, (plain, blind))| holds(*plain) || blind.is_some_and(holds))
            .fold(0, |mask, (index, _)| mask | 1 << index)
    }
}

/// A lexeme as [`FoundRow`] holds it: FNV-1a, the same in every process.
fn lexeme_hash(lexeme: &str) -> u64 {
    memd_core::dedupe::fnv1a(lexeme.as_bytes())
}

/// Each element of a `text[]` value (the lexemes of a chunk's search
/// vector), hashed ([`lexeme_hash`]) where it lies in the row: sqlx decodes
/// an array only into owned strings, one allocation per lexeme of every
/// row found by meaning.
fn hashed_lexemes(value: sqlx::postgres::PgValueRef<'_>) -> Result<Vec<u64>, sqlx::Error> {
    let malformed = |what: &str| sqlx::Error::Decode(format!("lexeme array: {what}").into());
    if value.format() != sqlx::postgres::PgValueFormat::Binary {
        return Err(malformed("not in the binary format"));
    }
    let mut rest = value.as_bytes().map_err(sqlx::Error::Decode)?;
    fn take<'a>(rest: &mut &'a [u8], length: usize) -> Option<&'a [u8]> {
        let (head, tail) = rest.split_at_checked(length)?;
        *rest = tail;
        Some(head)
    }
    let int = |rest: &mut &[u8]| -> Result<i32, sqlx::Error> {
        let bytes = take(rest, 4).ok_or_else(|| malformed("cut short"))?;
        Ok(i32::from_be_bytes(bytes.try_into().expect("4 bytes")))
    };
    // The header: dimensions, a has-nulls flag, the element type.
    let dimensions = int(&mut rest)?;
    let _ = (int(&mut rest)?, int(&mut rest)?);
    let elements = match dimensions {
        0 => 0,
        1 => {
            let (length, _lower_bound) = (int(&mut rest)?, int(&mut rest)?);
            usize::try_from(length).map_err(|_| malformed("negative length"))?
        }
        _ => return Err(malformed("more than one dimension")),
    };
    let mut hashes = Vec::with_capacity(elements);
    for _ in 0..elements {
        let length = usize::try_from(int(&mut rest)?).map_err(|_| malformed("a null lexeme"))?;
        let element = take(&mut rest, length).ok_or_else(|| malformed("cut short"))?;
        let lexeme = std::str::from_utf8(element).map_err(|_| malformed("not UTF-8"))?;
        hashes.push(lexeme_hash(lexeme));
    }
    Ok(hashes)
}

/// The chunks at `positions` (`(seq, part)`, from the vector index) that
/// the channel may see and the scope allows, with what matching a
/// question's lexemes against them takes ([`FoundRow`]), in the order of
/// `positions`. The visibility filter is applied again here, as on the
/// lexical path.
pub async fn at_positions(
    pool: &PgPool,
    tenant: &str,
    positions: &[(i64, i32)],
    visibility: Visibility<'_>,
    scope: &Scope,
) -> Result<Vec<FoundRow>, sqlx::Error> {
    if positions.is_empty() {
        return Ok(Vec::new());
    }
    // A prepared statement, so PostgreSQL plans it once per connection:
    // at this point of a bundle the question's vector has been waited for,
    // and every millisecond shows. Each position is looked up on its own
    // (LATERAL ... LIMIT 1): as a plain join, the first plans of a
    // connection hashed a scan of every chunk of the tenant against the
    // positions (10 ms at 10k chunks, growing with the tenant) where a
    // couple of hundred index lookups take 2. The chunk's lexemes are
    // returned rather than tested against the question's, so that the row
    // serves any later question too.
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS}, length(c.tsv) AS lexeme_count,
                tsvector_to_array(c.tsv), c.channel, c.sensitivity, c.agent_id
           FROM unnest(${seqs}::bigint[], ${parts}::int[]) WITH ORDINALITY AS u (seq, part, o)
          CROSS JOIN LATERAL (SELECT * FROM projections.chunks c
                               WHERE c.tenant_id = $1 AND c.seq = u.seq AND c.part = u.part
                               LIMIT 1) AS c
          WHERE {visible}
          ORDER BY u.o",
        visible = visible(scope),
        seqs = SCOPE_PARAMS + 1,
        parts = SCOPE_PARAMS + 2,
    );
    let (seqs, parts): (Vec<i64>, Vec<i32>) = positions.iter().copied().unzip();
    let rows = bind_scope(
        sqlx::query(sqlx::AssertSqlSafe(sql)),
        tenant,
        visibility,
        scope,
    )
    .bind(seqs)
    .bind(parts)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            // After the candidate's columns and its lexeme count.
            let after = column::LEXEME_COUNT + 1;
            let mut lexemes = hashed_lexemes(row.try_get_raw(after)?)?;
            lexemes.sort_unstable();
            Ok(FoundRow {
                candidate: Candidate::owned(row, 0)?,
                lexemes,
                channel: row.try_get_unchecked(after + 1)?,
                sensitivity: row.try_get_unchecked(after + 2)?,
                agent_id: row.try_get_unchecked(after + 3)?,
            })
        })
        .collect()
}

/// The chunks `refs` name (chunk ids, or event ids for all their chunks)
/// that the channel may see, in the order of `refs`: evidence a handoff
/// packet carries.
pub async fn by_refs(
    pool: &PgPool,
    tenant: &str,
    refs: &[String],
    visibility: Visibility<'_>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {CANDIDATE_COLUMNS}, length(c.tsv) AS lexeme_count, min(r.o) AS position
           FROM unnest($2::text[]) WITH ORDINALITY AS r (ref, o)
           JOIN projections.chunks c
             ON c.tenant_id = $1 AND (c.chunk_id = r.ref OR c.event_id = r.ref)
          WHERE c.channel = ANY ($3) AND c.sensitivity = ANY ($4) AND c.retracted_by IS NULL
            AND (c.channel <> 'private' OR c.agent_id IS NULL OR $5::text IS NULL OR c.agent_id = $5)
          GROUP BY c.tenant_id, c.chunk_id
          ORDER BY position, c.chunk_id"
    )))
    .bind(tenant)
    .bind(refs)
    .bind(visibility.channel_names())
    .bind(visibility.sensitivity_names())
    .bind(visibility.agent)
    .fetch_all(pool)
    .await?;
    ranked_first(rows)
}

/// Rows as candidates that rank above anything retrieved (packet evidence,
/// pinned memory): every score at its top.
fn ranked_first(rows: Vec<PgRow>) -> Result<Vec<Candidate>, sqlx::Error> {
    let mut candidates = Candidate::from_rows(rows, |_| Ok(0))?;
    for candidate in &mut candidates {
        (candidate.relevance, candidate.recency, candidate.score) = (1.0, 1.0, 1.0);
    }
    Ok(candidates)
}

/// Whether the tenant has any pinned chunk ([`PIN_TAGS`]), whoever may see
/// it: a probe of the partial index `chunks_pinned`, which holds pinned
/// chunks only.
pub async fn any_pinned(pool: &PgPool, tenant: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT FROM projections.chunks c WHERE c.tenant_id = $1 AND {PINNED})"
    )))
    .bind(tenant)
    .fetch_one(pool)
    .await
}

/// The newest `limit` pinned chunks ([`PIN_TAGS`]) the bundle may see and
/// the scope allows, as candidates that rank first.
pub async fn pinned(
    pool: &PgPool,
    tenant: &str,
    visibility: Visibility<'_>,
    scope: &Scope,
    limit: i64,
) -> Result<Vec<Candidate>, sqlx::Error> {
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS}, length(c.tsv) AS lexeme_count
           FROM projections.chunks c
          WHERE {visible} AND {PINNED}
          ORDER BY c.seq DESC, c.part LIMIT ${limit}",
        visible = visible(scope),
        limit = SCOPE_PARAMS + 1
    );
    let rows = bind_scope(
        sqlx::query(sqlx::AssertSqlSafe(sql)),
        tenant,
        visibility,
        scope,
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    ranked_first(rows)
}

/// Why chunks a question matches are left out of what it retrieves: the
/// channel may not see them (`privacy`; another agent's private chunks
/// are not even named), retention forgot them (`retention`), or a
/// retraction withdrew them (`retracted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    Withheld,
    Forgotten,
    Retracted,
}

impl LeftOut {
    /// The `omissions` reason.
    pub fn reason(self) -> &'static str {
        match self {
            LeftOut::Withheld => "privacy",
            LeftOut::Forgotten => "retention",
            LeftOut::Retracted => "retracted",
        }
    }

    /// Which chunks of the scope: those privacy hides among the ones
    /// retrieval keeps, or those retention or a retraction took away from
    /// what the channel may see.
    fn condition(self, scope: &Scope) -> String {
        match self {
            LeftOut::Withheld => scoped(scope, false, Kept::Retrievable),
            LeftOut::Forgotten => scoped(scope, true, Kept::Forgotten),
            LeftOut::Retracted => scoped(scope, true, Kept::Retracted),
        }
    }
}

/// Up to `limit` ids of chunks matching any lexeme that a bundle leaves
/// out for `why`: for `omissions`. Never scored.
#[allow(clippy::too_many_arguments)]
pub async fn left_out(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    lexemes: &[String],
    visibility: Visibility<'_>,
    scope: &Scope,
    why: LeftOut,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    let sql = why.condition(scope);
    matching_ids(
        pool, keyring, tenant, lexemes, visibility, scope, &sql, limit,
    )
    .await
}

/// The newest `limit` ids of chunks `condition` ([`scoped`]) holds for that
/// match any of `lexemes`.
#[allow(clippy::too_many_arguments)]
async fn matching_ids(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    lexemes: &[String],
    visibility: Visibility<'_>,
    scope: &Scope,
    condition: &str,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    if lexemes.is_empty() {
        return Ok(Vec::new());
    }
    let query = lexemes
        .iter()
        .map(|l| lexeme_query(l, keyring))
        .collect::<Vec<_>>()
        .join(" | ");
    let sql = format!(
        "SELECT c.chunk_id FROM projections.chunks c
          WHERE {condition} AND c.tsv @@ ${query}::tsquery
          ORDER BY c.seq DESC LIMIT ${limit}",
        query = SCOPE_PARAMS + 1,
        limit = SCOPE_PARAMS + 2,
    );
    let rows = bind_scope(
        sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(false),
        tenant,
        visibility,
        scope,
    )
    .bind(query)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter().map(|row| row.try_get(0)).collect()
}

/// What [`related`] left out: candidates that share nothing with the
/// question.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Unrelated {
    pub dropped: usize,
    /// The most similar of them by meaning, when any had a vector.
    pub best_similarity: Option<f64>,
}

/// The candidates that share something with the question: a word of it
/// (a lexeme it holds), or, with `floor`, a meaning at least that similar
/// (the embedder's calibrated cosine for unrelated texts, or the policy's
/// `min_similarity`). Relevance is normalised over the pool, so without
/// this stage a question about nothing the tenant holds would still rank
/// its nearest noise as evidence. Without `floor` (no semantic scores) a
/// candidate without a word of the question has nothing for it either.
pub fn related(candidates: Vec<Candidate>, floor: Option<f64>) -> (Vec<Candidate>, Unrelated) {
    let mut unrelated = Unrelated::default();
    let kept = candidates
        .into_iter()
        .filter(|c| {
            let means = match (c.semantic, floor) {
                (Some(similarity), Some(floor)) => similarity >= floor,
                _ => false,
            };
            let keep = c.matched != 0 || means;
            if !keep {
                unrelated.dropped += 1;
                if let Some(similarity) = c.semantic {
                    unrelated.best_similarity = Some(
                        unrelated
                            .best_similarity
                            .map_or(similarity, |b| b.max(similarity)),
                    );
                }
            }
            keep
        })
        .collect();
    (kept, unrelated)
}

/// Scores and sorts the candidates. `documents` is the size of the
/// tenant's collection for IDF. A lexeme's document frequency is its
/// matches in the pool: exact when it did not fill its share, and a lower
/// bound that already marks it as common when it did. Candidates with a
/// semantic score have it fused with the lexical one ([`fuse`]); without
/// any, relevance is the lexical score alone.
pub fn rank(
    mut candidates: Vec<Candidate>,
    lexeme_count: usize,
    documents: i64,
    newest: DateTime<Utc>,
    scoring: &Scoring,
) -> Vec<Candidate> {
    bm25(&mut candidates, lexeme_count, documents);
    fuse(&mut candidates, scoring);
    for candidate in &mut candidates {
        let age_hours = (newest - candidate.ts).num_milliseconds().max(0) as f64 / 3_600_000.0;
        candidate.recency = 0.5_f64.powf(age_hours / scoring.recency_half_life_hours);
        candidate.score = score(scoring, candidate);
    }
    // The floor is measured against the best candidate that can become
    // evidence: a decision the question found goes to the decision ledger
    // (when active), so when it leads the pool by far it must not sweep
    // every other candidate under the floor with it.
    let best_evidence = candidates
        .iter()
        .filter(|c| c.kind != Some(Kind::Decision))
        .map(|c| c.relevance)
        .fold(0.0, f64::max);
    candidates.retain(|c| {
        let floor = if c.kind == Some(Kind::Decision) {
            scoring.min_relevance
        } else {
            scoring.min_relevance * best_evidence
        };
        c.relevance >= floor
    });
    candidates.sort_by(better);
    candidates
}

/// A ranked candidate's score from its relevance, recency and importance.
fn score(scoring: &Scoring, candidate: &Candidate) -> f64 {
    let (alpha, beta, gamma) = (scoring.alpha, scoring.beta, scoring.gamma);
    let importance = f64::from(candidate.importance);
    match scoring.combine {
        Combine::Sum => alpha * candidate.relevance + beta * candidate.recency + gamma * importance,
        Combine::Gated => {
            candidate.relevance * (alpha + beta * candidate.recency + gamma * importance)
                / (alpha + beta + gamma)
        }
    }
}

/// Each candidate's `lexical`: BM25 over the query's lexemes, divided by
/// the pool's best, in [0, 1].
fn bm25(candidates: &mut [Candidate], lexeme_count: usize, documents: i64) {
    let lexeme_count = lexeme_count.min(MAX_LEXEMES);
    let holds = |matched: u32, index: usize| matched & (1 << index) != 0;
    let mut df = vec![0_usize; lexeme_count];
    for candidate in candidates.iter() {
        for (index, count) in df.iter_mut().enumerate() {
            if holds(candidate.matched, index) {
                *count += 1;
            }
        }
    }
    let documents = (documents.max(1) as f64).max(candidates.len() as f64);
    let idf: Vec<f64> = df
        .iter()
        .map(|df| {
            let df = *df as f64;
            (1.0 + (documents - df + 0.5) / (df + 0.5)).ln().max(0.0)
        })
        .collect();
    let average_length = if candidates.is_empty() {
        1.0
    } else {
        candidates
            .iter()
            .map(|c| f64::from(c.lexeme_count.max(1)))
            .sum::<f64>()
            / candidates.len() as f64
    };
    for candidate in candidates.iter_mut() {
        let length = f64::from(candidate.lexeme_count.max(1));
        let norm = K1 * (1.0 - B + B * length / average_length);
        candidate.lexical = idf
            .iter()
            .enumerate()
            .filter(|(index, _)| holds(candidate.matched, *index))
            .map(|(_, idf)| idf * (K1 + 1.0) / (1.0 + norm))
            .sum();
    }
    let best = candidates.iter().map(|c| c.lexical).fold(0.0_f64, f64::max);
    if best > 0.0 {
        for candidate in candidates.iter_mut() {
            candidate.lexical /= best;
        }
    }
}

/// Reciprocal rank fusion's constant: a rank's weight is 1/(60 + rank).
const RRF_K: f64 = 60.0;

/// Each candidate's `relevance` from its lexical and semantic scores,
/// divided by the pool's best so it lies in [0, 1]. With no semantic score
/// in the pool (semantic retrieval off, or nothing embedded yet) it is the
/// lexical score alone, as it would be without embeddings. A candidate
/// without a vector in a pool that has some (the embeddings projection has
/// not reached it yet: the newest memory, typically) is judged by its words
/// alone too, rather than as if it meant nothing.
pub fn fuse(candidates: &mut [Candidate], scoring: &Scoring) {
    let semantic_on =
        scoring.semantic_weight > 0.0 && candidates.iter().any(|c| c.semantic.is_some());
    if !semantic_on {
        for candidate in candidates.iter_mut() {
            candidate.relevance = candidate.lexical;
        }
        return;
    }
    let (lexical_weight, semantic_weight) = (scoring.lexical_weight, scoring.semantic_weight);
    match scoring.fusion {
        Fusion::Weighted => {
            // Similarity above what the pool's typical chunk scores, as a
            // share of the best's: everything in a conversation is
            // somewhat similar to a question about it (cosines bunch
            // together), and a min-max scale would leave that bunch at half
            // the best's relevance, where recency outweighs it. Centred on
            // the mean, a typical chunk is 0, as a chunk sharing only a
            // common word is nearly 0 on the lexical side.
            let similarities: Vec<f64> = candidates.iter().filter_map(|c| c.semantic).collect();
            let mean = similarities.iter().sum::<f64>() / similarities.len().max(1) as f64;
            let highest = similarities
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            let spread = highest - mean;
            for candidate in candidates.iter_mut() {
                candidate.relevance = match candidate.semantic {
                    None => candidate.lexical,
                    Some(s) => {
                        let semantic = if spread > 0.0 {
                            ((s - mean) / spread).max(0.0)
                        } else {
                            1.0
                        };
                        (lexical_weight * candidate.lexical + semantic_weight * semantic)
                            / (lexical_weight + semantic_weight)
                    }
                };
            }
        }
        Fusion::Rrf => {
            let lexical_ranks = ranks(candidates, |c| (c.lexical > 0.0).then_some(c.lexical));
            let semantic_ranks = ranks(candidates, |c| c.semantic);
            for (index, candidate) in candidates.iter_mut().enumerate() {
                let part = |weight: f64, rank: Option<usize>| {
                    rank.map_or(0.0, |rank| weight / (RRF_K + rank as f64 + 1.0))
                };
                // Not embedded yet: its lexical rank stands for both.
                let semantic_rank = match candidate.semantic {
                    None => lexical_ranks[index],
                    Some(_) => semantic_ranks[index],
                };
                candidate.relevance = part(lexical_weight, lexical_ranks[index])
                    + part(semantic_weight, semantic_rank);
            }
        }
    }
    let best = candidates.iter().map(|c| c.relevance).fold(0.0, f64::max);
    if best > 0.0 {
        for candidate in candidates.iter_mut() {
            candidate.relevance /= best;
        }
    }
}

/// Each candidate's rank (0 = best) by `score`, `None` without one. Ties
/// take the order of `candidates`, which is deterministic (the pool is
/// newest first, [`in_pool_order`]): the newer of equals ranks better.
fn ranks(
    candidates: &[Candidate],
    score: impl Fn(&Candidate) -> Option<f64>,
) -> Vec<Option<usize>> {
    let mut scored: Vec<(usize, f64)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(index, c)| score(c).map(|s| (index, s)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut ranks = vec![None; candidates.len()];
    for (rank, (index, _)) in scored.into_iter().enumerate() {
        ranks[index] = Some(rank);
    }
    ranks
}

/// Best first: score, then importance, then the newer, then the shorter,
/// then the earlier part of the same event (P7: the same inputs give the
/// same order; a position is unique in a tenant).
fn better(a: &Candidate, b: &Candidate) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then_with(|| b.importance.total_cmp(&a.importance))
        .then_with(|| b.seq.cmp(&a.seq))
        .then_with(|| a.token_est.cmp(&b.token_est))
        .then_with(|| a.part.cmp(&b.part))
}

/// Where a decision or summary chunk stands: what decides whether it may be
/// evidence at all.
#[derive(Debug, Clone, Default)]
pub struct Standing {
    /// The decision's status when the chunk is a decision's.
    pub decision_status: Option<String>,
    pub superseded_by: Option<String>,
    /// The summary's conflicts when the chunk is a flagged summary's, as
    /// the ledger found them: read them through [`Standing::seen_by`].
    pub conflicts: Option<Value>,
    /// Who may see each decision `conflicts` names, by decision id.
    pub conflict_audiences: HashMap<String, Audience>,
}

impl Standing {
    /// An active decision's.
    pub fn active() -> Self {
        Self {
            decision_status: Some("active".to_owned()),
            ..Self::default()
        }
    }

    /// The standing as `visibility` may read it: a summary's conflicts with
    /// decisions it may not see are left out (each quotes its decision),
    /// and a summary with none left stands.
    pub fn seen_by(mut self, visibility: Visibility<'_>) -> Self {
        self.conflicts = self.conflicts.take().and_then(|conflicts| {
            visible_conflicts(conflicts, &self.conflict_audiences, visibility)
        });
        self
    }
}

/// The entries of a summary's `conflicts` that `visibility` may read: a
/// contradiction quotes the decision it names, so it is kept only when that
/// decision may be seen (one the ledger no longer holds may not); the
/// summary's own problems (no or missing refs) are kept. `None` when none
/// is left.
pub fn visible_conflicts(
    conflicts: Value,
    audiences: &HashMap<String, Audience>,
    visibility: Visibility<'_>,
) -> Option<Value> {
    let Value::Array(entries) = conflicts else {
        return None;
    };
    let kept: Vec<Value> = entries
        .into_iter()
        .filter(
            |entry| match entry.get("decision_id").and_then(Value::as_str) {
                None => true,
                Some(id) => audiences
                    .get(id)
                    .is_some_and(|a| visibility.sees(a.channel, a.sensitivity, a.owner.as_deref())),
            },
        )
        .collect();
    (!kept.is_empty()).then_some(Value::Array(kept))
}

/// The decisions named by `conflicts` (summaries' conflicts, opened).
pub fn conflict_decision_ids<'v>(conflicts: impl IntoIterator<Item = &'v Value>) -> Vec<String> {
    let mut ids: Vec<String> = conflicts
        .into_iter()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|entry| entry.get("decision_id").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Who may see each of the decisions `ids`, by decision id (absent: not in
/// the ledger).
pub async fn decision_audiences(
    pool: &PgPool,
    tenant: &str,
    ids: &[String],
) -> Result<HashMap<String, Audience>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        r#"SELECT d.decision_id, d.channel AS "channel: Channel",
                  d.sensitivity AS "sensitivity: Sensitivity",
                  (SELECT e.agent_id FROM public.events e
                    WHERE e.tenant_id = d.tenant_id AND e.seq = d.seq) AS owner
             FROM projections.decisions d
            WHERE d.tenant_id = $1 AND d.decision_id = ANY ($2)"#,
        tenant,
        ids
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let audience = Audience {
                channel: row.channel,
                sensitivity: row.sensitivity,
                owner: row.owner,
            };
            (row.decision_id, audience)
        })
        .collect())
}

/// Where a task stands now: what tells a task update chunk that says
/// something older (`open` of a task now `done`) from the task's state.
#[derive(Debug, Clone)]
pub struct TaskNow {
    pub status: String,
    /// The seq of its newest update.
    pub last_seq: i64,
}

/// The current state of the tasks `task_ids`, by task id (unknown ones,
/// not projected yet, are absent).
pub async fn tasks_now(
    pool: &PgPool,
    tenant: &str,
    task_ids: &[String],
) -> Result<HashMap<String, TaskNow>, sqlx::Error> {
    if task_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        "SELECT task_id, status, last_seq FROM projections.tasks
          WHERE tenant_id = $1 AND task_id = ANY ($2)",
        tenant,
        task_ids
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let now = TaskNow {
                status: row.status,
                last_seq: row.last_seq,
            };
            (row.task_id, now)
        })
        .collect())
}

/// The standing of the decisions and summaries among `event_ids`, by event
/// id (other events are absent).
pub async fn standings(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    event_ids: &[&str],
) -> Result<HashMap<String, Standing>, sqlx::Error> {
    if event_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        r#"SELECT d.decision_id AS "event_id!", d.status, d.superseded_by,
                  NULL::jsonb AS conflicts
             FROM projections.decisions d
            WHERE d.tenant_id = $1 AND d.decision_id = ANY ($2)
           UNION ALL
           SELECT s.event_id, NULL, NULL, CASE WHEN s.conflicted THEN s.conflicts END
             FROM projections.summaries s
            WHERE s.tenant_id = $1 AND s.event_id = ANY ($2)"#,
        tenant,
        event_ids as &[&str]
    )
    .fetch_all(pool)
    .await?;
    let mut standings = rows
        .into_iter()
        .map(|row| {
            let mut conflicts = row.conflicts;
            if let Some(conflicts) = &mut conflicts {
                keyring.open_json(tenant, conflicts)?;
            }
            let standing = Standing {
                decision_status: row.status,
                superseded_by: row.superseded_by,
                conflicts,
                conflict_audiences: HashMap::new(),
            };
            Ok((row.event_id, standing))
        })
        .collect::<Result<HashMap<String, Standing>, sqlx::Error>>()?;
    let named = conflict_decision_ids(standings.values().filter_map(|s| s.conflicts.as_ref()));
    if !named.is_empty() {
        let audiences = decision_audiences(pool, tenant, &named).await?;
        for standing in standings.values_mut() {
            if let Some(conflicts) = &standing.conflicts {
                standing.conflict_audiences = conflict_decision_ids([conflicts])
                    .into_iter()
                    .filter_map(|id| Some((id.clone(), audiences.get(&id)?.clone())))
                    .collect();
            }
        }
    }
    Ok(standings)
}

/// What a kept chunk shows: its text and where it came from.
#[derive(Debug, Clone)]
pub struct Shown {
    pub text: String,
    pub session_id: String,
    pub actor_id: String,
    pub line_start: Option<i32>,
    pub line_end: Option<i32>,
    /// Where the whole output is, for a truncated tool result.
    pub artifact_id: Option<String>,
}

/// Texts and display fields of the chunks a bundle keeps, by chunk id.
pub async fn shown(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: &str,
    chunk_ids: &[&str],
) -> Result<HashMap<String, Shown>, sqlx::Error> {
    if chunk_ids.is_empty() {
        return Ok(HashMap::new());
    }
    // A function, planned once per connection (its migration says why).
    // A function's columns are all nullable to the checker; these are the
    // chunks table's NOT NULL columns.
    let rows = sqlx::query!(
        r#"SELECT chunk_id AS "chunk_id!", text AS "text!", session_id AS "session_id!",
                  actor_id AS "actor_id!", line_start, line_end, artifact_id
             FROM public.memd_shown_chunks($1, $2)"#,
        tenant,
        chunk_ids as &[&str]
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            let shown = Shown {
                text: keyring.open(tenant, &row.text)?.into_owned(),
                session_id: row.session_id,
                actor_id: row.actor_id,
                line_start: row.line_start,
                line_end: row.line_end,
                artifact_id: row.artifact_id,
            };
            Ok((row.chunk_id, shown))
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn common_terms_are_judged_at_a_step_of_the_history_at_most_256_events() {
        for (projected, judged) in [
            (0, 0),
            (1, 1),
            (305, 305),
            (511, 511),
            (512, 512),
            (555, 554),
            (1_000, 1_000),
            (1_001, 1_000),
            (65_535, 65_408),
            (100_000, 99_840),
            (100_255, 100_096),
            (100_256, 100_096),
            (1_000_123, 999_936),
        ] {
            assert_eq!(judged_through(projected), judged, "{projected}");
        }
    }

    /// A remembered row is matched against each question's lexemes as
    /// `tsv @@ lexeme` would match it, in the clear or blinded (a sealed
    /// chunk's), and shown only to channels and agents that may see it.
    #[test]
    fn a_remembered_row_is_matched_again_and_filtered_again() {
        use crate::domain::event::Channel;
        let keyring = Keyring::from_bytes(&[3; 32]);
        let row = |tsv: &[String], channel: &str, sensitivity: &str, agent: Option<&str>| {
            let mut lexemes: Vec<u64> = tsv.iter().map(|l| lexeme_hash(l)).collect();
            lexemes.sort_unstable();
            FoundRow {
                candidate: candidate("c1", &[], tsv.len() as i32, 1, 0.5),
                lexemes,
                channel: Channel::parse(channel).expect("a channel"),
                sensitivity: Sensitivity::parse(sensitivity).expect("a sensitivity"),
                agent_id: agent.map(str::to_owned),
            }
        };
        let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        let question = QueryLexemes::new(&words(&["alic", "door", "keeper"]), &keyring);
        let private = Visibility::new(Channel::Private);

        let plain = row(
            &words(&["alic", "keeper", "paint"]),
            "private",
            "none",
            None,
        );
        assert_eq!(plain.candidate(&question, private).unwrap().matched, 0b101);
        let other = QueryLexemes::new(&words(&["anchor", "keeper"]), &keyring);
        assert_eq!(plain.candidate(&other, private).unwrap().matched, 0b10);
        // Without the key a question cannot name blinded words.
        let unkeyed = QueryLexemes::new(&words(&["alic", "door", "keeper"]), &Keyring::none());
        let blinded: Vec<String> = ["door", "paint"]
            .iter()
            .map(|l| keyring.blind(l).unwrap())
            .collect();
        let sealed = row(&blinded, "private", "high", None);
        assert_eq!(sealed.candidate(&question, private).unwrap().matched, 0b010);
        assert_eq!(sealed.candidate(&unkeyed, private).unwrap().matched, 0);
        // The channel's rules, and the agent's own private memory.
        assert!(
            sealed
                .candidate(&question, Visibility::new(Channel::Agent))
                .is_none()
        );
        assert!(
            sealed
                .candidate(&question, Visibility::new(Channel::Public))
                .is_none()
        );
        let owned = row(&words(&["alic"]), "private", "none", Some("agent-a"));
        assert!(
            owned
                .candidate(&question, private.for_agent(Some("agent-b")))
                .is_none()
        );
        assert!(
            owned
                .candidate(&question, private.for_agent(Some("agent-a")))
                .is_some()
        );
        let team = row(&words(&["alic"]), "team", "low", Some("agent-a"));
        assert!(
            team.candidate(
                &question,
                Visibility::new(Channel::Team).for_agent(Some("agent-b"))
            )
            .is_some()
        );
    }

    pub(in crate::read) fn candidate(
        id: &str,
        matched: &[i32],
        lexemes: i32,
        hours_old: i64,
        importance: f32,
    ) -> Candidate {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        Fields {
            seq: 1_000 - hours_old,
            part: 0,
            ts: newest - chrono::Duration::hours(hours_old),
            kind: Some(Kind::Message),
            token_est: 10,
            importance,
            previous_turn: None,
            lexeme_count: lexemes,
        }
        .candidate(
            matched.iter().fold(0, |bits, index| bits | 1 << index),
            Details::Owned(Arc::new(OwnedDetails {
                chunk_id: id.to_owned(),
                event_id: format!("evt_{id}"),
                source: None,
                content_hash: [0; 32],
                words: vec![],
            })),
        )
    }

    #[test]
    fn rare_lexemes_outweigh_common_ones() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        // Lexeme 0 is in every candidate, lexeme 1 in one only.
        let mut pool: Vec<Candidate> = (0..20)
            .map(|i| candidate(&format!("c{i:02}"), &[0], 5, 1, 0.5))
            .collect();
        pool.push(candidate("rare", &[1], 5, 1, 0.5));
        let scoring = Scoring {
            alpha: 1.0,
            beta: 0.0,
            gamma: 0.0,
            recency_half_life_hours: 24.0,
            min_relevance: 0.0,
            ..Scoring::default()
        };
        let ranked = rank(pool, 2, 10_000, newest, &scoring);
        assert_eq!(ranked[0].chunk_id(), "rare");
        assert_eq!(ranked[0].relevance, 1.0);
    }

    #[test]
    fn a_decision_leading_the_pool_does_not_push_the_evidence_under_the_floor() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        // Lexeme 1 is rare and held by the decision alone; the messages hold
        // the common lexeme 0, some more of it than others.
        let mut decision = candidate("decision", &[0, 1], 5, 1, 0.9);
        decision.kind = Some(Kind::Decision);
        let mut pool: Vec<Candidate> = (0..40)
            .map(|i| candidate(&format!("m{i:02}"), &[0], 5 + i % 20, 1, 0.5))
            .collect();
        pool.push(decision);
        let scoring = Scoring {
            min_relevance: 0.2,
            ..Scoring::default()
        };
        let ranked = rank(pool.clone(), 2, 100, newest, &scoring);
        assert_eq!(ranked[0].chunk_id(), "decision");
        assert!(
            ranked
                .iter()
                .filter(|c| c.kind == Some(Kind::Message))
                .count()
                > 0,
            "the messages stay candidates"
        );
        // Without the decision, the same messages keep the same standing.
        let alone: Vec<Candidate> = pool
            .into_iter()
            .filter(|c| c.kind != Some(Kind::Decision))
            .collect();
        assert_eq!(
            rank(alone, 2, 100, newest, &scoring).len(),
            ranked.len() - 1
        );
    }

    #[test]
    fn weights_mix_relevance_recency_and_importance_and_ties_are_deterministic() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let pool = vec![
            candidate("old-relevant", &[0, 1], 5, 24 * 30, 0.4),
            candidate("new-partial", &[0], 5, 1, 0.4),
        ];
        let relevance_only = Scoring {
            alpha: 1.0,
            beta: 0.0,
            gamma: 0.0,
            recency_half_life_hours: 24.0,
            min_relevance: 0.0,
            ..Scoring::default()
        };
        let ranked = rank(pool.clone(), 2, 100, newest, &relevance_only);
        assert_eq!(ranked[0].chunk_id(), "old-relevant");
        let recency_heavy = Scoring {
            alpha: 0.2,
            beta: 0.8,
            gamma: 0.0,
            recency_half_life_hours: 24.0,
            min_relevance: 0.0,
            ..Scoring::default()
        };
        let ranked = rank(pool.clone(), 2, 100, newest, &recency_heavy);
        assert_eq!(ranked[0].chunk_id(), "new-partial");
        assert!((ranked[1].recency - 0.5_f64.powi(30)).abs() < 1e-12);

        // Equal scores: the more important wins, then the newer, then the
        // earlier part of the same event.
        let mut second_part = candidate("b", &[0], 5, 2, 0.4);
        second_part.part = 1;
        let tied = vec![
            second_part,
            candidate("a", &[0], 5, 2, 0.4),
            candidate("c", &[0], 5, 2, 0.9),
        ];
        let flat = Scoring {
            alpha: 1.0,
            beta: 0.0,
            gamma: 0.0,
            recency_half_life_hours: 24.0,
            min_relevance: 0.0,
            ..Scoring::default()
        };
        let order: Vec<_> = rank(tied, 1, 100, newest, &flat)
            .into_iter()
            .map(|c| c.chunk_id().to_owned())
            .collect();
        assert_eq!(order, ["c", "a", "b"]);
    }

    #[test]
    fn candidates_far_less_relevant_than_the_best_are_not_retrieved() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        // Lexeme 0 is in half the tenant's 60 chunks (a speaker's name),
        // lexeme 1 in one (the topic).
        let mut pool: Vec<Candidate> = (0..30)
            .map(|i| candidate(&format!("name-only-{i:02}"), &[0], 5, 0, 1.0))
            .collect();
        pool.push(candidate("topic", &[0, 1], 5, 24 * 90, 0.4));
        let scoring = Scoring::default();
        let ranked = rank(pool, 2, 60, newest, &scoring);
        assert_eq!(ranked.len(), 1, "new and important, but not relevant");
        assert_eq!(ranked[0].chunk_id(), "topic");
    }

    #[test]
    fn semantic_relevance_counts_only_what_is_above_the_pools_mean() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let mut pool: Vec<Candidate> = [0.2, 0.25, 0.3, 0.35, 0.8]
            .iter()
            .enumerate()
            .map(|(i, similarity)| {
                let mut c = candidate(&format!("c{i}"), &[], 5, 1, 0.5);
                c.semantic = Some(*similarity);
                c
            })
            .collect();
        pool[0].matched = 1; // the only lexical match, and the least similar
        let by_meaning = Scoring {
            alpha: 1.0,
            beta: 0.0,
            gamma: 0.0,
            min_relevance: 0.0,
            lexical_weight: 0.0,
            semantic_weight: 1.0,
            ..Scoring::default()
        };
        let ranked = rank(pool.clone(), 1, 100, newest, &by_meaning);
        assert_eq!(ranked[0].chunk_id(), "c4");
        assert_eq!(ranked[0].relevance, 1.0);
        // Mean 0.38: everything at or below it is not relevant by meaning.
        assert!(ranked[1..].iter().all(|c| c.relevance == 0.0));

        let hybrid = Scoring {
            lexical_weight: 0.5,
            semantic_weight: 0.5,
            ..by_meaning
        };
        let ranked = rank(pool, 1, 100, newest, &hybrid);
        let top: Vec<&str> = ranked[..2].iter().map(|c| c.chunk_id()).collect();
        assert_eq!(top, ["c0", "c4"], "each side's best leads");
        assert!(ranked[0].lexical == 1.0 && ranked[0].semantic == Some(0.2));
    }

    #[test]
    fn memory_not_embedded_yet_is_judged_by_its_words_not_as_meaningless() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        // The embeddings projection has reached one old chunk; the new one,
        // holding every word of the question, has no vector yet.
        let mut embedded = candidate("embedded", &[0], 5, 24, 0.0);
        embedded.semantic = Some(0.6);
        let waiting = candidate("waiting", &[0, 1], 5, 0, 0.0);
        for fusion in [Fusion::Weighted, Fusion::Rrf] {
            let scoring = Scoring {
                fusion,
                ..Scoring::default()
            };
            let ranked = rank(
                vec![embedded.clone(), waiting.clone()],
                2,
                100,
                newest,
                &scoring,
            );
            assert_eq!(ranked[0].chunk_id(), "waiting", "{fusion:?}");
            assert!(
                ranked[0].relevance >= scoring.min_relevance,
                "{fusion:?}: {}",
                ranked[0].relevance
            );
        }
    }

    #[test]
    fn gated_scores_let_recency_reorder_relevant_memory_but_never_lift_the_irrelevant() {
        let newest = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        // Old and on topic (both lexemes), against new with one of them
        // (relevance about 0.55); old fillers make lexeme 1 the commoner.
        let mut pool = vec![
            candidate("old-relevant", &[0, 1], 5, 24 * 90, 0.0),
            candidate("new-weak", &[0], 5, 0, 0.0),
        ];
        pool.extend((0..6).map(|i| candidate(&format!("filler-{i}"), &[1], 5, 24 * 90, 0.0)));
        let weights = |combine| Scoring {
            alpha: 0.6,
            beta: 0.3,
            gamma: 0.1,
            min_relevance: 0.0,
            combine,
            ..Scoring::default()
        };
        let order = |scoring: &Scoring| -> Vec<String> {
            rank(pool.clone(), 2, 1_000, newest, scoring)
                .into_iter()
                .take(2)
                .map(|c| c.chunk_id().to_owned())
                .collect()
        };
        assert_eq!(
            order(&weights(Combine::Gated)),
            ["old-relevant", "new-weak"]
        );
        assert_eq!(order(&weights(Combine::Sum)), ["new-weak", "old-relevant"]);
        // Equal relevance: the newer comes first either way.
        let tied = vec![
            candidate("old", &[0], 5, 24 * 90, 0.4),
            candidate("new", &[0], 5, 0, 0.4),
        ];
        let ranked = rank(tied, 1, 1_000, newest, &weights(Combine::Gated));
        assert_eq!(ranked[0].chunk_id(), "new");
        assert!(ranked[0].score <= ranked[0].relevance);
    }

    #[test]
    fn lexemes_are_quoted_as_single_operands() {
        assert_eq!(tsquery_literal("it's"), "'it''s'");
        assert_eq!(tsquery_literal("a\\b"), "'a\\\\b'");
    }
}
