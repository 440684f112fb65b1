//! Semantic retrieval on the read side: which embedders this daemon has,
//! each tenant's embedder, question vectors (cached), the vector index.
//!
//! An embedder whose model files are missing is simply not loaded: the
//! daemon starts, says so in its log and in `/readyz`, and bundles of
//! tenants that use it are built from lexical candidates alone, with the
//! reason in `provenance.semantic`.

use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    sync::{Arc, Mutex},
};

use memd_projectors::embed::{self, EmbedError, Embedder};
use serde::Serialize;

use super::vectors::VectorIndex;

/// Which embedder tenants use by default, and where model files are.
#[derive(Debug, Clone)]
pub struct SemanticConfig {
    /// `minilm`, `hashed`, or `None` for lexical retrieval only.
    pub embedder: Option<String>,
    pub model_dir: PathBuf,
}

impl SemanticConfig {
    /// The default model folder: what `ops/fetch-model.sh` fills.
    pub const DEFAULT_MODEL_DIR: &str = ".models/all-minilm-l6-v2";
    /// What fetches the model, for messages.
    pub const FETCH_COMMAND: &str = "ops/fetch-model.sh";

    /// No semantic retrieval.
    pub fn off() -> Self {
        Self {
            embedder: None,
            model_dir: PathBuf::from(Self::DEFAULT_MODEL_DIR),
        }
    }

    /// The weight-free embedder: what tests run with.
    pub fn hashed() -> Self {
        Self {
            embedder: Some(embed::HashedEmbedder::NAME.to_owned()),
            ..Self::off()
        }
    }
}

impl Default for SemanticConfig {
    fn default() -> Self {
        Self::off()
    }
}

/// Questions whose vectors are kept, per daemon: an agent asks the same
/// question again after each tool call.
const QUERY_CACHE: usize = 4_096;

pub struct Semantic {
    /// The tenants' embedder unless they chose another.
    default: Option<&'static str>,
    embedders: HashMap<&'static str, Arc<dyn Embedder>>,
    /// Embedders that could not be loaded, and why.
    unavailable: Vec<(&'static str, String)>,
    pub index: VectorIndex,
    queries: Mutex<QueryCache>,
}

/// What `/readyz` and the log say of semantic retrieval.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SemanticStatus {
    /// Whether bundles of tenants on the default embedder retrieve by
    /// meaning.
    pub enabled: bool,
    /// The tenants' default embedder (`null`: lexical retrieval only).
    pub default_embedder: Option<&'static str>,
    /// Embedders this daemon can run.
    pub loaded: Vec<&'static str>,
    /// Why semantic retrieval is off, and what turns it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Semantic {
    /// Loads the configured embedder, and the weight-free one (always
    /// available, for tenants that choose it). Never fails: an embedder that
    /// cannot be loaded is reported, not fatal.
    pub fn load(config: &SemanticConfig) -> Self {
        let mut embedders: HashMap<&'static str, Arc<dyn Embedder>> = HashMap::new();
        let mut unavailable = Vec::new();
        let default = config
            .embedder
            .as_deref()
            .and_then(|name| embed::NAMES.iter().copied().find(|known| *known == name));
        for name in embed::NAMES {
            // The model is loaded when it is the default, or when semantic
            // retrieval is on and its files are there (a tenant may choose
            // it); with semantic retrieval off, never (90 MB).
            if *name == embed::MiniLm::NAME
                && default != Some(*name)
                && (default.is_none() || !config.model_dir.join("model.safetensors").is_file())
            {
                continue;
            }
            match embed::load(name, &config.model_dir) {
                Ok(embedder) => {
                    embedders.insert(*name, embedder);
                }
                Err(err) => {
                    let reason = match &err {
                        EmbedError::Missing(_) => format!(
                            "{err}; run {} (or set MEMD_MODEL_DIR)",
                            SemanticConfig::FETCH_COMMAND
                        ),
                        _ => err.to_string(),
                    };
                    unavailable.push((*name, reason));
                }
            }
        }
        let semantic = Self {
            default,
            embedders,
            unavailable,
            index: VectorIndex::default(),
            queries: Mutex::new(QueryCache::default()),
        };
        let status = semantic.status();
        if status.enabled {
            tracing::info!(embedder = status.default_embedder, "semantic retrieval on");
        } else {
            tracing::warn!(
                reason = status.reason.as_deref().unwrap_or(""),
                "semantic retrieval OFF: bundles use lexical retrieval only"
            );
        }
        semantic
    }

    pub fn default_embedder(&self) -> Option<&'static str> {
        self.default
    }

    pub fn embedder(&self, name: &str) -> Option<&Arc<dyn Embedder>> {
        self.embedders.get(name)
    }

    /// Every embedder this daemon runs, by name.
    pub fn embedders(&self) -> &HashMap<&'static str, Arc<dyn Embedder>> {
        &self.embedders
    }

    /// Why `name` cannot be used here, when it cannot.
    pub fn unavailable(&self, name: Option<&str>) -> Option<String> {
        let Some(name) = name else {
            return Some("no embedder configured (--embedder none)".to_owned());
        };
        if self.embedders.contains_key(name) {
            return None;
        }
        Some(
            self.unavailable
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, reason)| format!("embedder {name}: {reason}"))
                .unwrap_or_else(|| format!("embedder {name} is not loaded in this daemon")),
        )
    }

    pub fn status(&self) -> SemanticStatus {
        let mut loaded: Vec<&'static str> = self.embedders.keys().copied().collect();
        loaded.sort_unstable();
        let reason = self.unavailable(self.default);
        SemanticStatus {
            enabled: reason.is_none(),
            default_embedder: self.default,
            loaded,
            reason,
        }
    }

    /// The question's vector by `embedder`, from the cache or computed off
    /// the executor.
    pub async fn query_vector(
        &self,
        embedder: &'static str,
        text: &str,
    ) -> Result<Arc<Vec<f32>>, EmbedError> {
        let key = (embedder, text.to_owned());
        if let Some(found) = self.queries.lock().expect("query cache").get(&key) {
            return Ok(found);
        }
        let model = self
            .embedders
            .get(embedder)
            .cloned()
            .ok_or_else(|| EmbedError::Missing(embedder.to_owned()))?;
        let owned = text.to_owned();
        let vector = tokio::task::spawn_blocking(move || model.embed(&[owned.as_str()]))
            .await
            .map_err(|e| EmbedError::Run(e.to_string()))??
            .pop()
            .ok_or_else(|| EmbedError::Run("no vector".to_owned()))?;
        let vector = Arc::new(vector);
        self.queries
            .lock()
            .expect("query cache")
            .put(key, vector.clone());
        Ok(vector)
    }
}

/// A bounded map of question vectors; the oldest entry goes first.
#[derive(Default)]
struct QueryCache {
    vectors: HashMap<(&'static str, String), Arc<Vec<f32>>>,
    order: VecDeque<(&'static str, String)>,
}

impl QueryCache {
    fn get(&self, key: &(&'static str, String)) -> Option<Arc<Vec<f32>>> {
        self.vectors.get(key).cloned()
    }

    fn put(&mut self, key: (&'static str, String), vector: Arc<Vec<f32>>) {
        if self.vectors.insert(key.clone(), vector).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > QUERY_CACHE {
            if let Some(oldest) = self.order.pop_front() {
                self.vectors.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_turns_semantic_retrieval_off_and_says_how_to_fix_it() {
        let semantic = Semantic::load(&SemanticConfig {
            embedder: Some("minilm".into()),
            model_dir: PathBuf::from("/nonexistent/model"),
        });
        let status = semantic.status();
        assert!(!status.enabled);
        let reason = status.reason.unwrap();
        assert!(reason.contains("ops/fetch-model.sh"), "{reason}");
        assert_eq!(status.loaded, ["hashed"], "the weight-free one still runs");
    }

    #[test]
    fn the_query_cache_keeps_the_newest() {
        let mut cache = QueryCache::default();
        for i in 0..QUERY_CACHE + 5 {
            cache.put(("hashed", i.to_string()), Arc::new(vec![i as f32]));
        }
        assert!(cache.get(&("hashed", "0".into())).is_none());
        assert!(
            cache
                .get(&("hashed", (QUERY_CACHE + 4).to_string()))
                .is_some()
        );
        assert_eq!(cache.vectors.len(), QUERY_CACHE);
    }
}
