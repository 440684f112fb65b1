//! A transformer encoder written for one job: token ids in, mean-pooled
//! hidden states out, on the CPU. It runs the two architectures of the
//! sentence-transformers models memd ships: BERT (all-MiniLM-L6-v2) and
//! MPNet (all-mpnet-base-v2).
//!
//! It reads the model's own files (`config.json`, `model.safetensors` in
//! PyTorch's layout) and runs the standard post-norm encoder: embeddings
//! (word + position + token type 0, layer norm), then per layer
//! self-attention, output projection, residual and layer norm, a GELU
//! feed-forward, residual and layer norm. MPNet differs in three places
//! only: no token types, positions counted from its padding id + 1 (as
//! RoBERTa does), and a learnt bias per head and bucket of relative
//! distance added to every attention score, the same in every layer
//! (T5's buckets: exact up to 8 apart, then logarithmic up to 128). Every matrix product goes through
//! [`kernel::linear`] in f32, or, for [`Precision::Int8`], the linear
//! layers' through [`int8::linear`] (attention stays in f32).
//!
//! Sequences are never padded: several texts run together through the
//! linear layers (their rows stacked), and attention stays within each
//! text. A text's vector is therefore the same whatever it was batched
//! with.

use std::{collections::HashMap, path::Path};

use serde::Deserialize;

use crate::{
    int8::{self, QuantizedLinear, QuantizedRows},
    kernel::linear,
};

/// How the linear layers multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 throughout: what stored vectors are made with.
    Exact,
    /// 8-bit weights and activations in the linear layers: about three
    /// times as fast with AVX-512 VNNI for a question (twice for a longer
    /// chunk, whose attention stays in f32), vectors within about 1%
    /// (cosine) of the exact ones. For questions, which are embedded while
    /// a caller waits and never stored, and for `minilm_int8`'s vectors.
    Int8,
}

/// What `config.json` says about the shape (the fields this encoder uses).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: String,
    /// `bert` or `mpnet`.
    #[serde(default = "bert")]
    pub model_type: String,
    /// MPNet: the padding id, from which positions are counted.
    #[serde(default)]
    pub pad_token_id: usize,
    /// MPNet: buckets of relative distance.
    #[serde(default)]
    pub relative_attention_num_buckets: usize,
}

fn bert() -> String {
    "bert".to_owned()
}

pub struct Encoder {
    config: Config,
    /// Position embedding row of a text's first token.
    first_position: usize,
    /// MPNet's relative attention bias, `buckets × heads`.
    relative: Option<Vec<f32>>,
    /// `vocab × hidden`.
    word: Vec<f32>,
    /// `max_position × hidden`.
    position: Vec<f32>,
    /// Token type 0's row: every token of a single text has type 0.
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
}

struct Layer {
    /// Query, key and value stacked: `3·hidden × hidden`.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    up: Linear,
    down: Linear,
    output_norm: Norm,
}

struct Linear {
    /// `outputs × inputs`, PyTorch's layout.
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    /// The same weights in 8 bits, for [`Precision::Int8`].
    quantized: QuantizedLinear,
}

struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl Linear {
    fn outputs(&self) -> usize {
        self.bias.len()
    }

    fn new(weight: Vec<f32>, bias: Vec<f32>, inputs: usize) -> Self {
        let quantized = QuantizedLinear::new(&weight, inputs);
        Self {
            weight,
            bias,
            inputs,
            quantized,
        }
    }

    fn apply(&self, x: &[f32], out: &mut Vec<f32>, precision: Precision, rows: &mut QuantizedRows) {
        // Every value is written by the product: only growth is zeroed
        // (zeroing the whole buffer was a sixth of a question's time).
        out.resize(x.len() / self.inputs * self.outputs(), 0.0);
        match precision {
            Precision::Exact => linear(x, self.inputs, &self.weight, Some(&self.bias), out),
            Precision::Int8 => int8::linear(x, &self.quantized, &self.bias, rows, out),
        }
    }
}

impl Norm {
    /// Normalises each row of `x` in place.
    fn apply(&self, x: &mut [f32]) {
        let width = self.gamma.len();
        for row in x.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let scale = 1.0 / (variance + self.eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *v = (*v - mean) * scale * g + b;
            }
        }
    }
}

/// The tensors of a `.safetensors` file, by name, as f32.
struct Tensors {
    bytes: Vec<u8>,
    /// Name → (shape, byte range in `bytes`).
    index: HashMap<String, (Vec<usize>, std::ops::Range<usize>)>,
}

#[derive(Deserialize)]
struct TensorEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [usize; 2],
}

impl Tensors {
    /// The format: a little-endian u64 header length, a JSON header naming
    /// each tensor's dtype, shape and byte range, then the data.
    fn parse(bytes: Vec<u8>) -> Result<Self, String> {
        let header_len = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .ok_or("shorter than its header length")?;
        let data_start = 8usize
            .checked_add(header_len)
            .filter(|end| *end <= bytes.len())
            .ok_or("header longer than the file")?;
        let header: HashMap<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..data_start]).map_err(|e| format!("header: {e}"))?;
        let mut index = HashMap::new();
        for (name, entry) in header {
            if name == "__metadata__" {
                continue;
            }
            let entry: TensorEntry =
                serde_json::from_value(entry).map_err(|e| format!("{name}: {e}"))?;
            let [begin, end] = entry.data_offsets;
            let range = data_start + begin..data_start + end;
            if begin > end || range.end > bytes.len() {
                return Err(format!("{name}: data outside the file"));
            }
            if entry.dtype == "F32" {
                index.insert(name, (entry.shape, range));
            }
        }
        Ok(Self { bytes, index })
    }

    /// The tensor `name`, which must have `shape`.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let (found, range) = self
            .index
            .get(name)
            .ok_or_else(|| format!("no f32 tensor {name}"))?;
        if found != shape {
            return Err(format!("{name}: shape {found:?}, expected {shape:?}"));
        }
        let data = &self.bytes[range.clone()];
        if data.len() != shape.iter().product::<usize>() * 4 {
            return Err(format!("{name}: {} bytes for shape {shape:?}", data.len()));
        }
        Ok(data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect())
    }
}

impl Encoder {
    /// Reads `config.json` and `model.safetensors` from `dir`.
    // Long on purpose: it checks the configuration, then reads every tensor
    // of both architectures by the names their checkpoints use, layer by
    // layer.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config.json"))
                .map_err(|e| format!("config.json: {e}"))?,
        )
        .map_err(|e| format!("config.json: {e}"))?;
        let mpnet = match config.model_type.as_str() {
            "bert" => false,
            "mpnet" => true,
            other => return Err(format!("model_type {other:?}: only bert and mpnet")),
        };
        if config.hidden_act != "gelu" {
            return Err(format!("hidden_act {:?}: only gelu", config.hidden_act));
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err("hidden_size is not a multiple of num_attention_heads".to_owned());
        }
        let tensors = Tensors::parse(
            std::fs::read(dir.join("model.safetensors"))
                .map_err(|e| format!("model.safetensors: {e}"))?,
        )
        .map_err(|e| format!("model.safetensors: {e}"))?;
        let (h, inner) = (config.hidden_size, config.intermediate_size);
        let eps = config.layer_norm_eps as f32;
        let vocab = tensors
            .index
            .get("embeddings.word_embeddings.weight")
            .map(|(shape, _)| shape[0])
            .ok_or("no word embeddings")?;
        let norm = |prefix: &str| -> Result<Norm, String> {
            Ok(Norm {
                gamma: tensors.get(&format!("{prefix}.weight"), &[h])?,
                beta: tensors.get(&format!("{prefix}.bias"), &[h])?,
                eps,
            })
        };
        let weights = |prefix: &str, outputs: usize, inputs: usize| {
            Ok::<_, String>((
                tensors.get(&format!("{prefix}.weight"), &[outputs, inputs])?,
                tensors.get(&format!("{prefix}.bias"), &[outputs])?,
            ))
        };
        let dense = |prefix: &str, outputs: usize, inputs: usize| {
            let (weight, bias) = weights(prefix, outputs, inputs)?;
            Ok::<_, String>(Linear::new(weight, bias, inputs))
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let (mut qkv_weight, mut qkv_bias) =
                (Vec::with_capacity(3 * h * h), Vec::with_capacity(3 * h));
            let (parts, out, out_norm) = if mpnet {
                (["attn.q", "attn.k", "attn.v"], "attn.o", "LayerNorm")
            } else {
                (
                    ["self.query", "self.key", "self.value"],
                    "output.dense",
                    "output.LayerNorm",
                )
            };
            for part in parts {
                let (weight, bias) = weights(&format!("{p}.attention.{part}"), h, h)?;
                qkv_weight.extend(weight);
                qkv_bias.extend(bias);
            }
            layers.push(Layer {
                qkv: Linear::new(qkv_weight, qkv_bias, h),
                attention_out: dense(&format!("{p}.attention.{out}"), h, h)?,
                attention_norm: norm(&format!("{p}.attention.{out_norm}"))?,
                up: dense(&format!("{p}.intermediate.dense"), inner, h)?,
                down: dense(&format!("{p}.output.dense"), h, inner)?,
                output_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        let (token_type, first_position, relative) = if mpnet {
            let buckets = config.relative_attention_num_buckets;
            if buckets < 4 || !buckets.is_multiple_of(4) {
                return Err(format!("relative_attention_num_buckets {buckets}"));
            }
            let relative = tensors.get(
                "encoder.relative_attention_bias.weight",
                &[buckets, config.num_attention_heads],
            )?;
            (vec![0.0; h], config.pad_token_id + 1, Some(relative))
        } else {
            let token_types = tensors
                .index
                .get("embeddings.token_type_embeddings.weight")
                .map(|(shape, _)| shape[0])
                .ok_or("no token type embeddings")?;
            let mut token_type =
                tensors.get("embeddings.token_type_embeddings.weight", &[token_types, h])?;
            token_type.truncate(h);
            (token_type, 0, None)
        };
        if first_position >= config.max_position_embeddings {
            return Err("no position left for a token".to_owned());
        }
        Ok(Self {
            first_position,
            relative,
            word: tensors.get("embeddings.word_embeddings.weight", &[vocab, h])?,
            position: tensors.get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type,
            embedding_norm: norm("embeddings.LayerNorm")?,
            layers,
            config,
        })
    }

    /// The most tokens a text may have.
    pub fn max_tokens(&self) -> usize {
        self.config.max_position_embeddings - self.first_position
    }

    /// The mean of the last hidden states of each text's tokens (texts of
    /// any lengths, at most [`Encoder::max_tokens`] each).
    pub fn mean_pooled(
        &self,
        texts: &[&[u32]],
        precision: Precision,
    ) -> Result<Vec<Vec<f32>>, String> {
        let h = self.config.hidden_size;
        let vocab = self.word.len() / h;
        let rows: usize = texts.iter().map(|ids| ids.len()).sum();
        let mut hidden = Vec::with_capacity(rows * h);
        for ids in texts {
            if ids.len() > self.max_tokens() {
                return Err(format!(
                    "{} tokens, more than the model's positions",
                    ids.len()
                ));
            }
            for (position, id) in (self.first_position..).zip(ids.iter()) {
                let id = *id as usize;
                if id >= vocab {
                    return Err(format!("token id {id} outside the vocabulary"));
                }
                let word = &self.word[id * h..(id + 1) * h];
                let place = &self.position[position * h..(position + 1) * h];
                hidden.extend(
                    word.iter()
                        .zip(place)
                        .zip(&self.token_type)
                        .map(|((w, p), t)| w + p + t),
                );
            }
        }
        self.embedding_norm.apply(&mut hidden);
        let lengths: Vec<usize> = texts.iter().map(|ids| ids.len()).collect();
        let mut work = Work::default();
        for layer in &self.layers {
            self.layer(layer, &mut hidden, &lengths, precision, &mut work);
        }
        let mut pooled = Vec::with_capacity(texts.len());
        let mut start = 0;
        for length in lengths {
            let mut mean = vec![0f32; h];
            for row in hidden[start * h..(start + length) * h].chunks_exact(h) {
                for (m, v) in mean.iter_mut().zip(row) {
                    *m += v;
                }
            }
            for m in &mut mean {
                *m /= length.max(1) as f32;
            }
            pooled.push(mean);
            start += length;
        }
        Ok(pooled)
    }

    fn layer(
        &self,
        layer: &Layer,
        hidden: &mut Vec<f32>,
        lengths: &[usize],
        precision: Precision,
        work: &mut Work,
    ) {
        let h = self.config.hidden_size;
        let rows = &mut work.rows;
        layer.qkv.apply(hidden, &mut work.qkv, precision, rows);
        self.attention(&work.qkv, lengths, &mut work.context, &mut work.heads);
        layer
            .attention_out
            .apply(&work.context, &mut work.projected, precision, rows);
        for (p, x) in work.projected.iter_mut().zip(hidden.iter()) {
            *p += x;
        }
        layer.attention_norm.apply(&mut work.projected);
        layer
            .up
            .apply(&work.projected, &mut work.inner, precision, rows);
        gelu(&mut work.inner);
        layer.down.apply(&work.inner, hidden, precision, rows);
        for (x, p) in hidden.iter_mut().zip(&work.projected) {
            *x += p;
        }
        layer.output_norm.apply(hidden);
        debug_assert_eq!(hidden.len() % h, 0);
    }

    /// Scaled dot-product attention of every head, within each text.
    fn attention(&self, qkv: &[f32], lengths: &[usize], context: &mut Vec<f32>, heads: &mut Heads) {
        let h = self.config.hidden_size;
        let head_count = self.config.num_attention_heads;
        let d = h / head_count;
        let scale = 1.0 / (d as f32).sqrt();
        let rows: usize = lengths.iter().sum();
        // Every head of every token is written below.
        context.resize(rows * h, 0.0);
        let mut start = 0;
        for &length in lengths {
            if let Some(table) = &self.relative {
                heads.buckets_for(length, table.len() / head_count);
            }
            for head in 0..head_count {
                heads.fill(qkv, h, start, length, head * d, d);
                heads.scores.resize(length * length, 0.0);
                linear(&heads.query, d, &heads.key, None, &mut heads.scores);
                match &self.relative {
                    None => {
                        for row in heads.scores.chunks_exact_mut(length) {
                            softmax(row, scale);
                        }
                    }
                    Some(table) => {
                        // Score (i, j) gets the bias of the bucket of j − i,
                        // kept in `buckets` at `length − 1 + j − i`.
                        for (i, row) in heads.scores.chunks_exact_mut(length).enumerate() {
                            let buckets = &heads.buckets[length - 1 - i..2 * length - 1 - i];
                            for (score, bucket) in row.iter_mut().zip(buckets) {
                                *score = *score * scale + table[bucket * head_count + head];
                            }
                            softmax(row, 1.0);
                        }
                    }
                }
                heads.out.resize(length * d, 0.0);
                linear(&heads.scores, length, &heads.value_t, None, &mut heads.out);
                for (t, row) in heads.out.chunks_exact(d).enumerate() {
                    let at = (start + t) * h + head * d;
                    context[at..at + d].copy_from_slice(row);
                }
            }
            start += length;
        }
    }
}

/// Buffers reused across layers.
#[derive(Default)]
struct Work {
    qkv: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    inner: Vec<f32>,
    heads: Heads,
    rows: QuantizedRows,
}

/// One head of one text, laid out for [`linear`]: queries and keys by
/// token, values transposed (by dimension), so both products read rows.
#[derive(Default)]
struct Heads {
    query: Vec<f32>,
    key: Vec<f32>,
    value_t: Vec<f32>,
    scores: Vec<f32>,
    out: Vec<f32>,
    /// MPNet: the bucket of each relative distance `j − i`, from
    /// `−(length − 1)` at 0 to `length − 1` at `2·length − 2`.
    buckets: Vec<usize>,
}

impl Heads {
    fn buckets_for(&mut self, length: usize, buckets: usize) {
        let reach = length as i64 - 1;
        self.buckets.clear();
        self.buckets
            .extend((-reach..=reach).map(|distance| relative_bucket(distance, buckets, 128)));
    }

    fn fill(
        &mut self,
        qkv: &[f32],
        h: usize,
        start: usize,
        length: usize,
        offset: usize,
        d: usize,
    ) {
        self.query.clear();
        self.key.clear();
        self.value_t.resize(d * length, 0.0);
        for t in 0..length {
            let row = &qkv[(start + t) * 3 * h..(start + t + 1) * 3 * h];
            self.query.extend_from_slice(&row[offset..offset + d]);
            self.key.extend_from_slice(&row[h + offset..h + offset + d]);
            for (j, v) in row[2 * h + offset..2 * h + offset + d].iter().enumerate() {
                self.value_t[j * length + t] = *v;
            }
        }
    }
}

/// The bucket of the relative distance `distance` (key position minus
/// query position), as MPNet (after T5) counts them: half the buckets for
/// keys before the query, half for keys after; in each half, distances under
/// a quarter of the buckets have one each, longer ones share buckets
/// logarithmically up to `max_distance`, beyond which all share the last.
fn relative_bucket(distance: i64, buckets: usize, max_distance: usize) -> usize {
    let half = buckets / 2;
    let n = -distance;
    let mut bucket = if n < 0 { half } else { 0 };
    let n = n.unsigned_abs() as usize;
    let exact = half / 2;
    bucket += if n < exact {
        n
    } else {
        // As PyTorch computes it: the logarithm in f32, truncated.
        let far = (n as f32 / exact as f32).ln() / (max_distance as f32 / exact as f32).ln()
            * (half - exact) as f32;
        (exact + far as usize).min(half - 1)
    };
    bucket
}

/// `softmax(row · scale)` in place.
fn softmax(row: &mut [f32], scale: f32) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v)) * scale;
    for v in row.iter_mut() {
        *v = exp(*v * scale - max);
    }
    let total: f32 = row.iter().sum();
    for v in row.iter_mut() {
        *v /= total;
    }
}

/// BERT's GELU, the exact (erf) form, `x·(1 + erf(x/√2))/2`, over a whole
/// slice. Written with arithmetic alone (no call into a maths library) so
/// that the compiler turns the loop into vector instructions: with
/// `libm::erff`, one call per value, GELU was a fifth of a question's
/// time. `erf` is Abramowitz and Stegun's 7.1.26, whose error is under
/// 1.5·10⁻⁷, below what a float holds near 1.
///
/// Compiled three times (AVX-512, AVX2, baseline) and chosen by the CPU:
/// each value is computed alone by the same operations in the same order
/// (Rust never fuses a multiply and an add by itself), so every path gives
/// the same bytes (tested), only more values at a time.
fn gelu(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { gelu_avx512(values) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { gelu_avx2(values) };
        }
    }
    gelu_plain(values);
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gelu_avx512(values: &mut [f32]) {
    gelu_plain(values);
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gelu_avx2(values: &mut [f32]) {
    gelu_plain(values);
}

#[inline(always)]
fn gelu_plain(values: &mut [f32]) {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    for v in values {
        let x = *v;
        let z = (x * std::f32::consts::FRAC_1_SQRT_2).abs();
        let t = 1.0 / (1.0 + P * z);
        let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
        let erf = (1.0 - poly * exp(-(z * z))).copysign(x);
        *v = 0.5 * x * (1.0 + erf);
    }
}

/// `eˣ` with arithmetic alone (vectorisable, see [`gelu`]): `x = k·ln 2 + r`
/// with `|r| ≤ ln 2 / 2`, then `2ᵏ` from the exponent bits and `eʳ` from its
/// Taylor series to the sixth power (relative error under 2·10⁻⁷). Inputs
/// are clamped to `[-87, 88]`, where `eˣ` is a normal float; softmax and
/// GELU never ask for more.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Adding and taking away 1.5·2²³ rounds to the nearest integer without
    // a call (`f32::round` is one on baseline x86-64).
    const ROUNDER: f32 = 12_582_912.0;
    // ln 2 in two parts (Cody and Waite): `k·LN2_HI` is exact for the k
    // here, so `r` keeps its precision even where k is about 126.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let k = (x * std::f32::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let series = 1.0
        + r * (1.0
            + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r / 720.0)))));
    let two_to_k = f32::from_bits(((k as i32 + 127) as u32) << 23);
    series * two_to_k
}

#[cfg(test)]
mod maths {
    use super::*;

    /// erf by its Taylor series in f64: exact enough to judge an f32 erf.
    fn erf64(x: f64) -> f64 {
        let (mut term, mut sum, mut n) = (x, x, 0.0);
        while term.abs() > 1e-17 * sum.abs().max(1e-300) {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn gelu_is_the_erf_form_to_float_precision() {
        let inputs: Vec<f32> = (-1200..=1200).map(|i| i as f32 / 100.0).collect();
        let mut got = inputs.clone();
        gelu(&mut got);
        for (x, got) in inputs.iter().zip(got) {
            let x = f64::from(*x);
            let want = if x.abs() > 5.5 {
                x.max(0.0)
            } else {
                0.5 * x * (1.0 + erf64(x / std::f64::consts::SQRT_2))
            };
            assert!(
                (f64::from(got) - want).abs() <= 1e-6 * want.abs().max(1.0),
                "gelu({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn gelu_gives_the_same_bytes_on_every_path() {
        let inputs: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 / 3_000.0).collect();
        let mut plain = inputs.clone();
        gelu_plain(&mut plain);
        #[cfg(target_arch = "x86_64")]
        for (path, run) in [
            ("avx512f", gelu_avx512 as unsafe fn(&mut [f32])),
            ("avx2", gelu_avx2),
        ] {
            if !std::arch::is_x86_feature_detected!("avx2")
                || (path == "avx512f" && !std::arch::is_x86_feature_detected!("avx512f"))
            {
                continue;
            }
            let mut got = inputs.clone();
            // SAFETY: the CPU has the path's feature (checked above).
            unsafe { run(&mut got) };
            let same = got
                .iter()
                .zip(&plain)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{path} differs from the baseline");
        }
    }

    #[test]
    fn exp_holds_to_float_precision_over_the_range_used() {
        for i in -8700..=8800 {
            let x = i as f32 / 100.0;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            assert!(
                (got - want).abs() <= 4e-7 * want,
                "exp({x}) = {got}, want {want}"
            );
        }
    }
}
