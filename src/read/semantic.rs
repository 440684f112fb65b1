//! Semantic retrieval on the read side: which embedders this daemon has,
//! each tenant's embedder, question vectors (cached), the vector index.
//!
//! An embedder whose model files are missing is simply not loaded: the
//! daemon starts, says so in its log and in `/readyz`, and bundles of
//! tenants that use it are built from lexical candidates alone, with the
//! reason in `provenance.semantic`.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use memd_embedder as embed;

use memd_embedder::{EmbedError, Embedder, Model, ModelDirs, MpNet};
use serde::Serialize;

use super::{policy::QuestionPrecision, vectors::VectorIndex};

/// Which embedder tenants use by default, which others are loaded, and
/// where model files are.
#[derive(Debug, Clone)]
pub struct SemanticConfig {
    /// `minilm`, `hashed`, or `None` for lexical retrieval only.
    pub embedder: Option<String>,
    pub models: ModelDirs,
    /// Embedders loaded beside the default for tenants that choose them,
    /// beyond those always loaded (MiniLM's when its files are there, and
    /// the weight-free one): `mpnet`, whose 550 MB are not spent unless
    /// asked for.
    pub also: Vec<String>,
}

impl SemanticConfig {
    /// What fetches the model, for messages.
    pub const FETCH_COMMAND: &str = "ops/fetch-model.sh";

    /// No semantic retrieval.
    pub fn off() -> Self {
        Self {
            embedder: None,
            models: ModelDirs::default(),
            also: Vec::new(),
        }
    }

    /// Each embedder this configuration names (the default, then the
    /// others) whose model folder lacks a file, with the first it lacks: a
    /// daemon would run without it (lexical bundles only, for the default).
    pub fn missing_models(&self) -> Vec<(&str, std::path::PathBuf)> {
        self.embedder
            .iter()
            .chain(&self.also)
            .filter_map(|name| {
                let dir = self.models.of(name)?;
                memd_embedder::sentence::missing_file(dir).map(|missing| (name.as_str(), missing))
            })
            .collect()
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
    /// One question queue per embedder.
    questions: HashMap<&'static str, QuestionQueue>,
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
        let mut loader = embed::Loader::default();
        for name in embed::NAMES {
            // A model is loaded (once for all of its embedders) when it is
            // the default's; otherwise MiniLM when semantic retrieval is on
            // and its files are there (a tenant may choose it; 90 MB), and
            // MPNet when asked for; with semantic retrieval off, never.
            if let Some(dir) = config.models.of(name)
                && default != Some(*name)
                && (default.is_none()
                    || !dir.join("model.safetensors").is_file()
                    || (*name == MpNet::NAME && !config.also.iter().any(|a| a == name)))
            {
                continue;
            }
            match loader.load(name, &config.models) {
                Ok(embedder) => {
                    embedders.insert(*name, embedder);
                }
                Err(err) => {
                    let reason = match &err {
                        EmbedError::Missing(_) => {
                            format!("{err}; or set MEMD_MODEL_DIR / MEMD_MPNET_DIR")
                        }
                        _ => err.to_string(),
                    };
                    unavailable.push((*name, reason));
                }
            }
        }
        let questions = embedders
            .iter()
            .map(|(name, embedder)| (*name, QuestionQueue::start(embedder.clone())))
            .collect();
        let semantic = Self {
            default,
            embedders,
            questions,
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

    /// The similarity `name`'s unrelated texts stay under, if it runs here.
    pub fn unrelated_similarity(&self, name: &str) -> Option<f64> {
        self.embedders
            .get(name)
            .map(|embedder| embedder.unrelated_similarity())
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
                .unwrap_or_else(|| {
                    format!(
                        "embedder {name} is not loaded in this daemon \
                         (start it with --also-embedders {name})"
                    )
                }),
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

    /// The question's vector by `embedder` in `precision`, from the cache
    /// or computed off the executor by the embedder's question queue; and
    /// whether it was computed (the model ran for it).
    pub async fn query_vector(
        &self,
        embedder: &'static str,
        precision: QuestionPrecision,
        text: &str,
    ) -> Result<(Arc<Vec<f32>>, bool), EmbedError> {
        let key = (embedder, precision, text.to_owned());
        if let Some(found) = self.queries.lock().expect("query cache").get(&key) {
            return Ok((found, false));
        }
        let queue = self
            .questions
            .get(embedder)
            .ok_or_else(|| EmbedError::Missing(embedder.to_owned()))?;
        let vector = Arc::new(queue.embed(precision, text.to_owned()).await?);
        self.queries
            .lock()
            .expect("query cache")
            .put(key, vector.clone());
        Ok((vector, true))
    }
}

/// Most questions one forward pass takes.
const QUESTION_BATCH: usize = 32;

/// A question waiting for its vector.
struct Asked {
    precision: QuestionPrecision,
    text: String,
    reply: tokio::sync::oneshot::Sender<Result<Vec<f32>, String>>,
}

/// Questions to one embedder, answered by a thread of their own in
/// batches: every question that arrived while the previous forward pass ran
/// goes into the next one (the same question asked twice is embedded once).
/// Alone, a question is embedded at once, as before; under load, one pass
/// reads the weights for many, and the model never takes more than one
/// core from PostgreSQL and the bundles. A text's vector does not depend on
/// its batch (embedders never pad), so batching changes no bundle.
struct QuestionQueue {
    sender: std::sync::mpsc::Sender<Asked>,
}

impl QuestionQueue {
    fn start(model: Arc<dyn Embedder>) -> Self {
        let (sender, receiver) = std::sync::mpsc::channel::<Asked>();
        std::thread::Builder::new()
            .name(format!("memd-question-{}", model.name()))
            .spawn(move || {
                // Ends when the daemon drops its `Semantic`.
                while let Ok(first) = receiver.recv() {
                    let mut batch = vec![first];
                    while batch.len() < QUESTION_BATCH {
                        match receiver.try_recv() {
                            Ok(asked) => batch.push(asked),
                            Err(_) => break,
                        }
                    }
                    for precision in [QuestionPrecision::Int8, QuestionPrecision::Exact] {
                        let (asked, rest) = batch
                            .into_iter()
                            .partition(|asked| asked.precision == precision);
                        batch = rest;
                        if !asked.is_empty() {
                            answer(model.as_ref(), precision, asked);
                        }
                    }
                }
            })
            .expect("spawning the question thread");
        Self { sender }
    }

    async fn embed(
        &self,
        precision: QuestionPrecision,
        text: String,
    ) -> Result<Vec<f32>, EmbedError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.sender
            .send(Asked {
                precision,
                text,
                reply,
            })
            .map_err(|_| EmbedError::Run("the question thread has stopped".to_owned()))?;
        answer
            .await
            .map_err(|_| EmbedError::Run("the question thread has stopped".to_owned()))?
            .map_err(EmbedError::Run)
    }
}

/// Embeds a batch of questions in `precision`, each distinct text once, and
/// replies to each asker.
fn answer(model: &dyn Embedder, precision: QuestionPrecision, batch: Vec<Asked>) {
    let mut texts: Vec<&str> = batch.iter().map(|asked| asked.text.as_str()).collect();
    texts.sort_unstable();
    texts.dedup();
    let vectors = match precision {
        QuestionPrecision::Int8 => model.embed_questions(&texts),
        QuestionPrecision::Exact => model.embed(&texts),
    };
    let vectors = vectors.and_then(|vectors| {
        if vectors.len() == texts.len() {
            Ok(vectors)
        } else {
            Err(EmbedError::Run("fewer vectors than questions".to_owned()))
        }
    });
    let found: Result<HashMap<String, Vec<f32>>, String> = vectors
        .map(|vectors| {
            texts
                .iter()
                .map(|text| (*text).to_owned())
                .zip(vectors)
                .collect()
        })
        .map_err(|err| err.to_string());
    for asked in batch {
        let vector = match &found {
            Ok(found) => Ok(found[&asked.text].clone()),
            Err(err) => Err(err.clone()),
        };
        // An asker that gave up (its bundle was cancelled) needs no answer.
        let _ = asked.reply.send(vector);
    }
}

/// A cached question vector's embedder, precision and text.
type QueryKey = (&'static str, QuestionPrecision, String);

/// A bounded map of question vectors; the oldest entry goes first.
#[derive(Default)]
struct QueryCache {
    vectors: HashMap<QueryKey, Arc<Vec<f32>>>,
    order: VecDeque<QueryKey>,
}

impl QueryCache {
    fn get(&self, key: &QueryKey) -> Option<Arc<Vec<f32>>> {
        self.vectors.get(key).cloned()
    }

    fn put(&mut self, key: QueryKey, vector: Arc<Vec<f32>>) {
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
            models: ModelDirs {
                minilm: "/nonexistent/model".into(),
                mpnet: "/nonexistent/mpnet".into(),
            },
            also: Vec::new(),
        });
        let status = semantic.status();
        assert!(!status.enabled);
        let reason = status.reason.unwrap();
        assert!(reason.contains("ops/fetch-model.sh"), "{reason}");
        assert_eq!(status.loaded, ["hashed"], "the weight-free one still runs");
    }

    #[test]
    fn the_quality_tier_is_loaded_only_when_asked_for() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let models = ModelDirs {
            minilm: root.join(ModelDirs::DEFAULT_MINILM),
            mpnet: root.join(ModelDirs::DEFAULT_MPNET),
        };
        assert!(
            models.mpnet.join("model.safetensors").is_file(),
            "run ops/fetch-model.sh mpnet first"
        );
        let loaded = |also: &[&str]| {
            Semantic::load(&SemanticConfig {
                embedder: Some("hashed".into()),
                models: models.clone(),
                also: also.iter().map(|s| s.to_string()).collect(),
            })
            .status()
            .loaded
        };
        assert_eq!(loaded(&[]), ["hashed", "minilm", "minilm_int8"]);
        assert_eq!(
            loaded(&["mpnet"]),
            ["hashed", "minilm", "minilm_int8", "mpnet"]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn questions_asked_together_get_the_vectors_they_get_alone() {
        let semantic = Arc::new(Semantic::load(&SemanticConfig::hashed()));
        let model = semantic.embedder("hashed").unwrap().clone();
        // Many at once (some the same text) so that the queue batches them.
        let texts: Vec<String> = (0..64)
            .map(|i| format!("why did export {} fail for account {}?", i % 40, i % 7))
            .collect();
        let asked: Vec<_> = texts
            .iter()
            .map(|text| {
                let (semantic, text) = (semantic.clone(), text.clone());
                tokio::spawn(async move {
                    semantic
                        .query_vector("hashed", QuestionPrecision::Int8, &text)
                        .await
                        .map(|(v, _)| v)
                })
            })
            .collect();
        for (text, asked) in texts.iter().zip(asked) {
            let batched = asked.await.unwrap().unwrap();
            let alone = model
                .embed_questions(&[text.as_str()])
                .unwrap()
                .pop()
                .unwrap();
            assert_eq!(*batched, alone, "{text}");
        }
    }

    #[test]
    fn the_query_cache_keeps_the_newest() {
        let key = |i: usize| ("hashed", QuestionPrecision::Int8, i.to_string());
        let mut cache = QueryCache::default();
        for i in 0..QUERY_CACHE + 5 {
            cache.put(key(i), Arc::new(vec![i as f32]));
        }
        assert!(cache.get(&key(0)).is_none());
        assert!(cache.get(&key(QUERY_CACHE + 4)).is_some());
        assert_eq!(cache.vectors.len(), QUERY_CACHE);
    }

    /// `question_precision` `exact` gives the vector the model stores
    /// vectors with, `int8` the 8-bit one; the two differ (slightly), and
    /// each is cached apart, even when asked together.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_question_is_embedded_in_the_precision_asked_for() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let semantic = Arc::new(Semantic::load(&SemanticConfig {
            embedder: Some("minilm".into()),
            models: ModelDirs {
                minilm: root.join(ModelDirs::DEFAULT_MINILM),
                mpnet: root.join(ModelDirs::DEFAULT_MPNET),
            },
            also: Vec::new(),
        }));
        let model = semantic
            .embedder("minilm")
            .expect("run ops/fetch-model.sh first")
            .clone();
        let text = "when did Caroline go to the support group?";
        let asked = |precision| {
            let semantic = semantic.clone();
            tokio::spawn(async move { semantic.query_vector("minilm", precision, text).await })
        };
        let (int8, exact) = (
            asked(QuestionPrecision::Int8),
            asked(QuestionPrecision::Exact),
        );
        let (int8, embedded_int8) = int8.await.unwrap().unwrap();
        let (exact, embedded_exact) = exact.await.unwrap().unwrap();
        assert!(embedded_int8 && embedded_exact);
        assert_eq!(*exact, model.embed(&[text]).unwrap()[0]);
        assert_eq!(*int8, model.embed_questions(&[text]).unwrap()[0]);
        assert_ne!(exact, int8);
        let cosine: f32 = exact.iter().zip(int8.iter()).map(|(a, b)| a * b).sum();
        assert!(cosine > 0.99, "{cosine}");
        for (precision, vector) in [
            (QuestionPrecision::Int8, &int8),
            (QuestionPrecision::Exact, &exact),
        ] {
            let (again, embedded) = semantic
                .query_vector("minilm", precision, text)
                .await
                .unwrap();
            assert!(!embedded, "cached");
            assert_eq!(&again, vector);
        }
    }
}
