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
//! - [`sentence`]: sentence-transformers models on the CPU (memd's own
//!   [`encoder`]), from model files on disk; chunks in f32, questions in
//!   8-bit integers (`int8`), three times as fast where the CPU has AVX-512
//!   VNNI. `minilm` (all-MiniLM-L6-v2) is the default; `minilm_int8` is the
//!   same model storing 8-bit vectors too: a third of the embedding cost, a
//!   little less exact; `mpnet` (all-mpnet-base-v2) is the quality tier.
//! - [`hashed`]: no weights; hashed words and character trigrams. Cheap,
//!   lexical rather than semantic, and always available.

pub mod encoder;
pub mod hashed;
mod int8;
mod kernel;
pub mod sentence;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

pub use hashed::HashedEmbedder;
pub use sentence::{MiniLm, Model, MpNet, Sentence};

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
    /// this model, calibrated per model (docs/bundles.md, "Nothing relevant"): a
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
pub const NAMES: &[&str] = &[
    MiniLm::NAME,
    MiniLm::INT8_NAME,
    MpNet::NAME,
    HashedEmbedder::NAME,
];

/// The default embedder when the model files are there.
pub const DEFAULT: &str = MiniLm::NAME;

/// Where each model's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDirs {
    /// all-MiniLM-L6-v2 (`minilm`, `minilm_int8`).
    pub minilm: PathBuf,
    /// all-mpnet-base-v2 (`mpnet`).
    pub mpnet: PathBuf,
}

impl ModelDirs {
    /// The folders `ops/fetch-model.sh` fills, relative to the working
    /// directory.
    pub const DEFAULT_MINILM: &str = ".models/all-minilm-l6-v2";
    pub const DEFAULT_MPNET: &str = ".models/all-mpnet-base-v2";

    /// The folder of the model the embedder called `name` runs; `None` for
    /// an embedder without model files.
    pub fn of(&self, name: &str) -> Option<&Path> {
        match name {
            MiniLm::NAME | MiniLm::INT8_NAME => Some(&self.minilm),
            MpNet::NAME => Some(&self.mpnet),
            _ => None,
        }
    }
}

impl Default for ModelDirs {
    fn default() -> Self {
        Self {
            minilm: PathBuf::from(Self::DEFAULT_MINILM),
            mpnet: PathBuf::from(Self::DEFAULT_MPNET),
        }
    }
}

/// Loads the embedder called `name` from its model's folder in `dirs`.
pub fn load(name: &str, dirs: &ModelDirs) -> Result<Arc<dyn Embedder>, EmbedError> {
    Loader::default().load(name, dirs)
}

/// Loads embedders by name, reading a model's files once for every
/// embedder that runs it (about 115 MB in memory for MiniLM, 550 MB for
/// MPNet).
#[derive(Default)]
pub struct Loader {
    minilm: Option<Sentence<MiniLm>>,
    mpnet: Option<Sentence<MpNet>>,
}

impl Loader {
    pub fn load(&mut self, name: &str, dirs: &ModelDirs) -> Result<Arc<dyn Embedder>, EmbedError> {
        let stored = match name {
            MiniLm::NAME | MpNet::NAME => encoder::Precision::Exact,
            MiniLm::INT8_NAME => encoder::Precision::Int8,
            HashedEmbedder::NAME => return Ok(Arc::new(HashedEmbedder)),
            other => {
                return Err(EmbedError::Load(format!(
                    "unknown embedder {other:?} (known: {})",
                    NAMES.join(", ")
                )));
            }
        };
        if name == MpNet::NAME {
            let model = match &self.mpnet {
                Some(model) => model,
                None => self.mpnet.insert(Sentence::load(&dirs.mpnet)?),
            };
            return Ok(Arc::new(model.storing(stored)));
        }
        let model = match &self.minilm {
            Some(model) => model,
            None => self.minilm.insert(Sentence::load(&dirs.minilm)?),
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
