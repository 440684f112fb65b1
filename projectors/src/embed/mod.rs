//! Text embedders: what turns a chunk or a question into a vector for
//! semantic retrieval.
//!
//! An [`Embedder`] is named (its name keys its projection, its cursor and
//! its vectors), has a fixed dimension, and embeds a batch of texts into
//! L2-normalised vectors, so a dot product is the cosine similarity. It is
//! a pure function of its weights and the text: the same text gives the
//! same vector whatever batch it came in, which is what makes the
//! embeddings projection rebuildable byte for byte.
//!
//! - [`minilm`]: sentence-transformers all-MiniLM-L6-v2 on the CPU (memd's
//!   own [`bert`] encoder), from model files on disk; chunks in f32,
//!   questions in 8-bit integers (`int8`), three times as fast where the
//!   CPU has AVX-512 VNNI. `minilm_int8` is the same model storing 8-bit
//!   vectors too: a third of the embedding cost, a little less exact.
//! - [`hashed`]: no weights; hashed words and character trigrams. Cheap,
//!   lexical rather than semantic, and always available.

pub mod bert;
pub mod hashed;
mod int8;
mod kernel;
pub mod minilm;
pub mod worker;

use std::{path::Path, sync::Arc};

pub use hashed::HashedEmbedder;
pub use minilm::MiniLm;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("model files missing: {0}")]
    Missing(String),
    #[error("loading the model: {0}")]
    Load(String),
    #[error("embedding: {0}")]
    Run(String),
}

/// Turns texts into L2-normalised vectors of [`Embedder::dimensions`].
pub trait Embedder: Send + Sync {
    /// Stable name: keys the embeddings projection of this embedder.
    fn name(&self) -> &'static str;

    fn dimensions(&self) -> usize;

    /// Bump when the vectors for the same text change (weights, pooling,
    /// tokenisation): the projection is then rebuilt.
    fn version(&self) -> i32;

    /// The cosine similarity texts of unrelated meaning stay under with
    /// this model, calibrated per model (README, "Nothing relevant"): a
    /// candidate that shares no word with the question and is no more
    /// similar than this is no evidence, however it ranks in its pool.
    fn unrelated_similarity(&self) -> f64;

    /// One vector per text, in order. CPU-bound: call it off the async
    /// executor (`spawn_blocking`).
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// Vectors for questions: compared with stored [`Embedder::embed`]
    /// vectors, never stored themselves, so an embedder may trade a little
    /// precision for speed here (a caller waits on each).
    fn embed_questions(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }

    /// [`Embedder::embed`] for work nobody waits on (the embeddings
    /// projection): the same vectors, computed at a low CPU priority where
    /// the embedder is costly, so appends and bundles come first.
    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }
}

/// The embedders memd knows, by name.
pub const NAMES: &[&str] = &[MiniLm::NAME, MiniLm::INT8_NAME, HashedEmbedder::NAME];

/// The default embedder when the model files are there.
pub const DEFAULT: &str = MiniLm::NAME;

/// Whether the embedder called `name` needs the model files.
pub fn needs_model(name: &str) -> bool {
    name == MiniLm::NAME || name == MiniLm::INT8_NAME
}

/// Loads the embedder called `name`; `model_dir` is where model files are
/// (only the MiniLM ones need any).
pub fn load(name: &str, model_dir: &Path) -> Result<Arc<dyn Embedder>, EmbedError> {
    Loader::default().load(name, model_dir)
}

/// Loads embedders by name, reading the model files once for every
/// embedder that runs the same model (about 115 MB in memory each time).
#[derive(Default)]
pub struct Loader {
    minilm: Option<MiniLm>,
}

impl Loader {
    pub fn load(&mut self, name: &str, model_dir: &Path) -> Result<Arc<dyn Embedder>, EmbedError> {
        let stored = match name {
            MiniLm::NAME => bert::Precision::Exact,
            MiniLm::INT8_NAME => bert::Precision::Int8,
            HashedEmbedder::NAME => return Ok(Arc::new(HashedEmbedder)),
            other => {
                return Err(EmbedError::Load(format!(
                    "unknown embedder {other:?} (known: {})",
                    NAMES.join(", ")
                )));
            }
        };
        let model = match &self.minilm {
            Some(model) => model,
            None => self.minilm.insert(MiniLm::load(model_dir)?),
        };
        Ok(Arc::new(model.storing(stored)))
    }
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in vector {
            *x /= norm;
        }
    }
}

/// A vector as stored: little-endian f32s.
pub fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector back.
pub fn decode(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect()
}

/// The dot product of two vectors (the cosine, for unit vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
