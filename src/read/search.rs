//! A plain search: the memories that best answer a question, with their
//! scores, and no bundle around them.
//!
//! It is the retrieval of a bundle and nothing else: the same candidates
//! (lexical and by meaning), the same ranking, and the same choosing, so
//! the same channel privacy, agent isolation, retention, filters and
//! dedupe apply, and what was left out is named in `omissions` as a
//! bundle names it. What differs: decisions in force are results like any
//! memory (a bundle shows them in its ledger), pinned memory is not added
//! unasked, and there is no budget: up to `k` results.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    AcbRequest,
    acb::{Acb, Consistency, MAX_QUERY_BYTES, Omission, Provenance},
    filters::RetrievalFilters,
};
use crate::domain::{FieldError, event::Channel};

/// At most this many results (`k`).
pub const MAX_RESULTS: u32 = 100;
const DEFAULT_RESULTS: u32 = 10;

/// `POST /api/v1/search`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Optional: the tenant comes from the bearer token.
    pub tenant_id: Option<String>,
    /// What to look for, 1 byte to 16 KiB.
    pub query: String,
    /// How many results at most, 1 to 100 (default 10).
    #[schema(minimum = 1, maximum = 100, default = 10)]
    pub k: Option<u32>,
    /// The channel the results will be used in; decides what they may hold.
    #[serde(default = "private")]
    #[schema(default = "private")]
    pub channel: Channel,
    /// The agent searching: another agent's private memory is not its to
    /// see. An agent's token sets it (and refuses another).
    pub agent_id: Option<String>,
    /// Narrow the search to a time range, agents, sessions, kinds or tags.
    #[serde(default, deserialize_with = "crate::domain::object")]
    pub filters: RetrievalFilters,
    /// Show superseded decisions too. Default: when the query asks about
    /// history ("previously", "changed", ...).
    pub include_history: Option<bool>,
    /// A seq an append of the tenant answered with: the search reads a
    /// copy of the log that holds it.
    #[schema(minimum = 1)]
    pub after: Option<i64>,
    #[serde(default)]
    pub consistency: Consistency,
}

fn private() -> Channel {
    Channel::Private
}

impl SearchRequest {
    /// The bundle request that retrieves what this search asks for.
    pub fn into_bundle_request(self) -> Result<AcbRequest, FieldError> {
        let query = self.query.trim();
        if query.is_empty() {
            return Err(FieldError::new("query", "must not be empty"));
        }
        if self.query.len() > MAX_QUERY_BYTES {
            return Err(FieldError::new(
                "query",
                format!(
                    "is {} bytes; at most {MAX_QUERY_BYTES} allowed",
                    self.query.len()
                ),
            ));
        }
        let k = self.k.unwrap_or(DEFAULT_RESULTS);
        if !(1..=MAX_RESULTS).contains(&k) {
            return Err(FieldError::new(
                "k",
                format!("must be 1 to {MAX_RESULTS}, not {k}"),
            ));
        }
        Ok(AcbRequest {
            tenant_id: self.tenant_id,
            session_id: None,
            agent_id: self.agent_id,
            channel: self.channel,
            intent: None,
            query_text: Some(self.query),
            max_tokens: None,
            render: false,
            consistency: self.consistency,
            include_history: self.include_history,
            handoff_id: None,
            after: self.after,
            filters: self.filters,
            search: Some(k as usize),
        })
    }
}

/// What a search found, best first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SearchResults {
    pub results: Vec<SearchResult>,
    /// What the question matched but the results leave out, and why
    /// (`privacy`, `retention`, `duplicate`, `superseded`, ...), as in a
    /// bundle.
    pub omissions: Vec<Omission>,
    /// How the search ran: query terms, semantic retrieval, candidate
    /// pool, filters, how far the projections were.
    pub provenance: Provenance,
}

/// One memory found: a chunk of an event.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchResult {
    pub chunk_id: String,
    pub event_id: String,
    /// The event's kind: `message`, `tool_result`, `decision`, ...
    pub kind: String,
    /// The chunk's text as a bundle shows it.
    pub text: String,
    pub session_id: Option<String>,
    pub ts: DateTime<Utc>,
    /// What it was ranked by: relevance with recency and importance, as the
    /// policy's scoring combines them.
    pub score: f64,
    /// The fused relevance to the question, 0 to 1.
    pub relevance: f64,
    /// BM25 over the question's words, divided by the best candidate's.
    pub lexical: f64,
    /// Cosine similarity with the question; none when it was found by its
    /// words alone (not embedded yet, or semantic retrieval off).
    pub semantic: Option<f64>,
    pub recency: f64,
    pub importance: f64,
    /// The chunk id and event id, to cite.
    pub refs: Vec<String>,
    /// Where the full output of a truncated tool result is.
    pub artifact_id: Option<String>,
}

impl SearchResults {
    /// The results of a search's bundle: its evidence, in rank order.
    pub fn of(acb: Acb) -> Self {
        let results = acb
            .sections
            .into_iter()
            .flat_map(|section| section.items)
            .filter_map(|packed| {
                let item = packed.item;
                let mut fields = item.fields;
                fields.insert("text".into(), Value::String(item.text.trim_end().into()));
                fields.insert("refs".into(), serde_json::json!(item.refs));
                match serde_json::from_value(Value::Object(fields)) {
                    Ok(result) => Some(result),
                    Err(err) => {
                        tracing::error!(%err, "an evidence item without a search result's fields");
                        None
                    }
                }
            })
            .collect();
        Self {
            results,
            omissions: acb.omissions,
            provenance: acb.provenance,
        }
    }
}
