//! The question path's matrix product in 8-bit integers: `out ≈ x · wᵀ +
//! bias`, with `w` quantised once when the model loads and `x` on every
//! call.
//!
//! **Why.** A bundle's question is embedded while its caller waits, and
//! under load one thread embeds every question: at about 8 ms of f32
//! arithmetic each, that thread capped hybrid bundles with new questions
//! at about a hundred a second on two cores. With AVX-512 VNNI one instruction multiplies and adds 64
//! byte pairs where an f32 FMA does 16, and the weights take a quarter of
//! the bytes. AVX2 alone multiplies 16 pairs an instruction, exactly
//! (inputs widened to 16 bits, `mod avx2`): twice what the compiler made of
//! the plain loop, and a question in 6.5 ms instead of 13.8 on a 2-core
//! AVX2 EPYC. `minilm`'s stored vectors (the embeddings projection, its
//! digest and the drift check) stay on the exact f32 path; `minilm_int8`
//! stores this path's.
//!
//! **The scheme** (dynamic quantisation, as ONNX Runtime's and PyTorch's
//! for BERT): each weight row (one output) is scaled symmetrically into
//! `-127..=127`; each input row (one token) is scaled asymmetrically into
//! `0..=255` with a zero point, its range stretched to hold 0 so that 0 is
//! exact. Then `out[t][o] = sₜ·sₒ·(Σᵢ qₜᵢ·qₒᵢ − zₜ·Σᵢ qₒᵢ) + bias[o]`. The
//! sums are integers, so every path (VNNI, AVX2, plain) gives the same
//! bytes, and a row's result never depends on the rows beside it.

/// Inputs are padded to a whole number of 64-byte vectors; padded weights
/// are 0, so whatever the padded inputs hold adds nothing.
const STEP: usize = 64;

/// A linear layer's weights in 8 bits.
pub struct QuantizedLinear {
    /// `outputs × padded`, row `o` scaled by `scales[o]`.
    weights: Vec<i8>,
    scales: Vec<f32>,
    /// `Σᵢ weights[o][i]`, for the inputs' zero points.
    sums: Vec<i32>,
    inputs: usize,
    padded: usize,
}

impl QuantizedLinear {
    /// Quantises `w` (`outputs × inputs`, PyTorch's layout).
    pub fn new(w: &[f32], inputs: usize) -> Self {
        assert!(inputs > 0 && w.len().is_multiple_of(inputs), "shapes");
        let padded = inputs.div_ceil(STEP) * STEP;
        let outputs = w.len() / inputs;
        let mut weights = vec![0i8; outputs * padded];
        let (mut scales, mut sums) = (Vec::with_capacity(outputs), Vec::with_capacity(outputs));
        for (row, quantised) in w.chunks_exact(inputs).zip(weights.chunks_exact_mut(padded)) {
            let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
            let mut sum = 0i32;
            for (q, v) in quantised.iter_mut().zip(row) {
                *q = (v / scale).round().clamp(-127.0, 127.0) as i8;
                sum += i32::from(*q);
            }
            scales.push(scale);
            sums.push(sum);
        }
        Self {
            weights,
            scales,
            sums,
            inputs,
            padded,
        }
    }

    pub fn outputs(&self) -> usize {
        self.scales.len()
    }
}

/// Input rows in 8 bits, and their products: reused from layer to layer
/// of one forward pass.
#[derive(Default)]
pub struct QuantizedRows {
    bytes: Vec<u8>,
    scales: Vec<f32>,
    zeros: Vec<i32>,
    /// The integer products, `rows × outputs`.
    dots: Vec<i32>,
    /// The input bytes widened to 16 bits, for the AVX2 path.
    wide: Vec<i16>,
}

impl QuantizedRows {
    fn fill(&mut self, x: &[f32], inputs: usize, padded: usize) {
        let rows = x.len() / inputs;
        // Grown, never shrunk or cleared: the layers' widths alternate, and
        // zeroing the growth on every layer was a tenth of a batch's time.
        // Every input byte is written below, and whatever a row's padding
        // holds meets weights of 0.
        grow(&mut self.bytes, rows * padded);
        self.scales.clear();
        self.zeros.clear();
        for (row, quantised) in x
            .chunks_exact(inputs)
            .zip(self.bytes[..rows * padded].chunks_exact_mut(padded))
        {
            let (low, high) = row
                .iter()
                .fold((0f32, 0f32), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            let scale = if high > low {
                (high - low) / 255.0
            } else {
                1.0
            };
            let inverse = 1.0 / scale;
            // `+ 0.5` then `as u8` rounds half up and clamps to 0..=255 (a
            // float-to-int `as` saturates): no call to `roundf`, and the
            // loop vectorises.
            let zero = (-low * inverse + 0.5) as u8;
            let shifted = f32::from(zero) + 0.5;
            for (q, v) in quantised.iter_mut().zip(row) {
                *q = (v * inverse + shifted) as u8;
            }
            self.scales.push(scale);
            self.zeros.push(i32::from(zero));
        }
    }
}

/// Makes `buffer` at least `len` long, keeping what it holds.
fn grow<T: Clone + Default>(buffer: &mut Vec<T>, len: usize) {
    if buffer.len() < len {
        buffer.resize(len, T::default());
    }
}

/// The instruction sets the integer sums can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Vnni,
    Avx2,
    Plain,
}

impl Path {
    fn available() -> Vec<Path> {
        let mut paths = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                paths.push(Path::Vnni);
            }
            if std::is_x86_feature_detected!("avx2") {
                paths.push(Path::Avx2);
            }
        }
        paths.push(Path::Plain);
        paths
    }

    fn best() -> Path {
        static BEST: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Path::available()[0])
    }
}

/// `out[t * n + o] ≈ bias[o] + Σ_i x[t * k + i] · w[o][i]` for the rows
/// of `x`, `k = w.inputs`, `n = w.outputs()`.
pub fn linear(
    x: &[f32],
    w: &QuantizedLinear,
    bias: &[f32],
    rows: &mut QuantizedRows,
    out: &mut [f32],
) {
    linear_on(Path::best(), x, w, bias, rows, out);
}

fn linear_on(
    path: Path,
    x: &[f32],
    w: &QuantizedLinear,
    bias: &[f32],
    rows: &mut QuantizedRows,
    out: &mut [f32],
) {
    let (k, n) = (w.inputs, w.outputs());
    assert!(x.len().is_multiple_of(k), "input shape");
    let m = x.len() / k;
    assert_eq!(out.len(), m * n, "output shape");
    assert_eq!(bias.len(), n, "bias shape");
    assert!(Path::available().contains(&path), "{path:?} on this CPU");
    rows.fill(x, k, w.padded);
    // Every product is written by the kernel.
    grow(&mut rows.dots, m * n);
    let sums = Sums {
        x: &rows.bytes[..m * w.padded],
        w: &w.weights,
        padded: w.padded,
        n,
    };
    match path {
        // SAFETY: the CPU has the path's features (checked just above);
        // `fill` made `m` rows of `padded` bytes, `new` `n` of them.
        #[cfg(target_arch = "x86_64")]
        Path::Vnni => unsafe { vnni::dots(&sums, m, &mut rows.dots[..m * n]) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { avx2::dots(&sums, m, &mut rows.wide, &mut rows.dots[..m * n]) },
        _ => plain::dots(&sums, m, &mut rows.dots[..m * n]),
    }
    // No overflow: |Σ| ≤ 255·127·inputs, under 5·10⁷ for 1,536 inputs.
    // Zipped rather than indexed, so that the loop vectorises.
    let rows_out = out.chunks_exact_mut(n).zip(rows.dots.chunks_exact(n));
    for ((out_row, dots), (scale, zero)) in rows_out.zip(rows.scales.iter().zip(&rows.zeros)) {
        let columns = w.sums.iter().zip(&w.scales).zip(bias);
        for ((value, dot), ((sum, weight_scale), b)) in out_row.iter_mut().zip(dots).zip(columns) {
            *value = scale * weight_scale * (dot - zero * sum) as f32 + b;
        }
    }
}

/// The operands of the integer dot products of every input row with every
/// weight row.
struct Sums<'a> {
    x: &'a [u8],
    w: &'a [i8],
    padded: usize,
    n: usize,
}

/// Input bytes of one block of rows: half of a 32 KiB L1 data cache.
#[cfg(target_arch = "x86_64")]
const BLOCK_BYTES: usize = 16 * 1024;

/// Walks `m` rows × `n` outputs in tiles of at most `rows` × `outputs`
/// (`tile(t, o, rows, outputs)`), for the paths that keep a tile's sums in
/// registers. Rows are taken a block at a time (`row_bytes` each, as the
/// kernel reads them), and every output computed for a block before the
/// next: the block's inputs stay in the L1 cache while the weights stream
/// past, instead of every row being read again for each tile of outputs (a
/// batch of questions was slower per question than one alone).
#[cfg(target_arch = "x86_64")]
fn tiles(
    m: usize,
    n: usize,
    row_bytes: usize,
    rows: usize,
    outputs: usize,
    mut tile: impl FnMut(usize, usize, usize, usize),
) {
    let block = (BLOCK_BYTES / row_bytes / rows).max(1) * rows;
    for start in (0..m).step_by(block) {
        let end = (start + block).min(m);
        for o in (0..n).step_by(outputs) {
            for t in (start..end).step_by(rows) {
                tile(t, o, (end - t).min(rows), (n - o).min(outputs));
            }
        }
    }
}

mod plain {
    use super::Sums;

    pub fn dots(sums: &Sums<'_>, m: usize, out: &mut [i32]) {
        let Sums { x, w, padded, n } = *sums;
        for t in 0..m {
            let row = &x[t * padded..(t + 1) * padded];
            for o in 0..n {
                let weights = &w[o * padded..(o + 1) * padded];
                let dot: i32 = row
                    .iter()
                    .zip(weights)
                    .map(|(a, b)| i32::from(*a) * i32::from(*b))
                    .sum();
                out[t * n + o] = dot;
            }
        }
    }
}

/// AVX2 has no instruction that multiplies unsigned by signed bytes into
/// 32-bit sums without saturating (`vpmaddubsw` saturates at 16 bits, and
/// 255 · 127 · 2 does not fit), so the bytes are widened to 16 bits and
/// multiplied in pairs into 32-bit sums (`vpmaddwd`): 16 products an
/// instruction, exact. The loop the compiler vectorised by itself widened
/// both operands for every product and kept one sum at a time; here the
/// inputs are widened once per call and each weight once per tile of rows,
/// and a tile keeps 12 sums in registers.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Sums;

    /// Rows × outputs of one register tile: 12 sums and 3 weight vectors,
    /// with the input, in AVX2's 16 registers.
    const ROWS: usize = 4;
    const OUTPUTS: usize = 3;
    /// Input values one instruction takes.
    const LANES: usize = 16;

    /// # Safety
    /// The CPU must have AVX2; `x` holds `m` rows of `padded` bytes and `w`
    /// `n` rows, `padded` a multiple of 16.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dots(sums: &Sums<'_>, m: usize, wide: &mut Vec<i16>, out: &mut [i32]) {
        wide.clear();
        wide.extend(
            sums.x[..m * sums.padded]
                .iter()
                .map(|byte| i16::from(*byte)),
        );
        let wide = &wide[..];
        super::tiles(
            m,
            sums.n,
            2 * sums.padded,
            ROWS,
            OUTPUTS,
            |t, o, rows, outputs| {
                // SAFETY: the caller's bounds; `tiles` keeps t + rows ≤ m and
                // o + outputs ≤ n.
                unsafe {
                    match (rows, outputs) {
                        (4, OUTPUTS) => tile::<4, OUTPUTS>(sums, wide, out, t, o),
                        (3, OUTPUTS) => tile::<3, OUTPUTS>(sums, wide, out, t, o),
                        (2, OUTPUTS) => tile::<2, OUTPUTS>(sums, wide, out, t, o),
                        (1, OUTPUTS) => tile::<1, OUTPUTS>(sums, wide, out, t, o),
                        _ => {
                            for r in 0..rows {
                                for j in 0..outputs {
                                    tile::<1, 1>(sums, wide, out, t + r, o + j);
                                }
                            }
                        }
                    }
                }
            },
        );
    }

    /// Outputs `o..o + O` of rows `t..t + R`.
    ///
    /// # Safety
    /// As [`dots`], with `wide` the widened `x`, `t + R ≤ m` and
    /// `o + O ≤ n`.
    #[target_feature(enable = "avx2")]
    unsafe fn tile<const R: usize, const O: usize>(
        sums: &Sums<'_>,
        wide: &[i16],
        out: &mut [i32],
        t: usize,
        o: usize,
    ) {
        let (xp, wp, padded) = (wide.as_ptr(), sums.w.as_ptr(), sums.padded);
        let mut acc = [[_mm256_setzero_si256(); O]; R];
        let mut i = 0;
        while i < padded {
            let mut weights = [_mm256_setzero_si256(); O];
            for (j, weight) in weights.iter_mut().enumerate() {
                // SAFETY: (o + j) * padded + i + 16 ≤ n * padded.
                let bytes = unsafe { _mm_loadu_si128(wp.add((o + j) * padded + i).cast()) };
                *weight = _mm256_cvtepi8_epi16(bytes);
            }
            for (r, row_acc) in acc.iter_mut().enumerate() {
                // SAFETY: (t + r) * padded + i + 16 ≤ m * padded.
                let input = unsafe { _mm256_loadu_si256(xp.add((t + r) * padded + i).cast()) };
                for (sum, weight) in row_acc.iter_mut().zip(&weights) {
                    *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(input, *weight));
                }
            }
            i += LANES;
        }
        for (r, row_acc) in acc.iter().enumerate() {
            for (j, sum) in row_acc.iter().enumerate() {
                out[(t + r) * sums.n + o + j] = horizontal_sum(*sum);
            }
        }
    }

    #[target_feature(enable = "avx2")]
    fn horizontal_sum(v: __m256i) -> i32 {
        let halves = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let pairs = _mm_add_epi32(halves, _mm_shuffle_epi32::<0b01_00_11_10>(halves));
        let sum = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
        _mm_cvtsi128_si32(sum)
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{STEP, Sums};

    /// Rows × outputs of one register tile: 24 sums, 6 weight vectors and
    /// one input vector in AVX-512's 32 registers.
    const ROWS: usize = 4;
    const OUTPUTS: usize = 6;

    /// # Safety
    /// The CPU must have AVX-512F and VNNI; `x` holds `m` rows of
    /// `padded` bytes and `w` `n` rows, `padded` a multiple of 64.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn dots(sums: &Sums<'_>, m: usize, out: &mut [i32]) {
        super::tiles(
            m,
            sums.n,
            sums.padded,
            ROWS,
            OUTPUTS,
            |t, o, rows, outputs| {
                // SAFETY: the caller's bounds; `tiles` keeps t + rows ≤ m and
                // o + outputs ≤ n.
                unsafe {
                    match (rows, outputs) {
                        (4, OUTPUTS) => tile::<4, OUTPUTS>(sums, out, t, o),
                        (3, OUTPUTS) => tile::<3, OUTPUTS>(sums, out, t, o),
                        (2, OUTPUTS) => tile::<2, OUTPUTS>(sums, out, t, o),
                        (1, OUTPUTS) => tile::<1, OUTPUTS>(sums, out, t, o),
                        _ => {
                            for r in 0..rows {
                                for j in 0..outputs {
                                    tile::<1, 1>(sums, out, t + r, o + j);
                                }
                            }
                        }
                    }
                }
            },
        );
    }

    /// Outputs `o..o + O` of rows `t..t + R`.
    ///
    /// # Safety
    /// As [`dots`], with `t + R ≤ m` and `o + O ≤ n`.
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn tile<const R: usize, const O: usize>(
        sums: &Sums<'_>,
        out: &mut [i32],
        t: usize,
        o: usize,
    ) {
        let (xp, wp, padded) = (sums.x.as_ptr(), sums.w.as_ptr(), sums.padded);
        let mut acc = [[_mm512_setzero_si512(); O]; R];
        let mut i = 0;
        while i < padded {
            let mut weights = [_mm512_setzero_si512(); O];
            for (j, weight) in weights.iter_mut().enumerate() {
                // SAFETY: (o + j) * padded + i + 64 ≤ n * padded.
                *weight = unsafe { _mm512_loadu_si512(wp.add((o + j) * padded + i).cast()) };
            }
            for (r, row_acc) in acc.iter_mut().enumerate() {
                // SAFETY: (t + r) * padded + i + 64 ≤ m * padded.
                let input = unsafe { _mm512_loadu_si512(xp.add((t + r) * padded + i).cast()) };
                for (sum, weight) in row_acc.iter_mut().zip(&weights) {
                    *sum = _mm512_dpbusd_epi32(*sum, input, *weight);
                }
            }
            i += STEP;
        }
        for (r, row_acc) in acc.iter().enumerate() {
            for (j, sum) in row_acc.iter().enumerate() {
                out[(t + r) * sums.n + o + j] = _mm512_reduce_add_epi32(*sum);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tests::{naive, values};

    #[test]
    fn every_path_gives_the_same_bytes_close_to_the_exact_product() {
        // k with and without a remainder past 64 bytes; m and n off the
        // tile; a row of one sign only (its zero point at an end).
        for (m, k, n) in [(1, 8, 1), (5, 100, 7), (15, 384, 12), (6, 1536, 13)] {
            let (mut x, w, bias) = (values(m * k, 1), values(n * k, 2), values(n, 3));
            for v in &mut x[..k] {
                *v = v.abs() + 0.5;
            }
            let quantized = QuantizedLinear::new(&w, k);
            let want = naive(&x, k, &w, &bias);
            let mut first: Option<Vec<f32>> = None;
            for path in Path::available() {
                let mut out = vec![0.0; m * n];
                linear_on(
                    path,
                    &x,
                    &quantized,
                    &bias,
                    &mut QuantizedRows::default(),
                    &mut out,
                );
                // Each term is off by at most half a step of either
                // operand: about 1% of a term's size, which averages out
                // over k terms.
                for (got, want) in out.iter().zip(&want) {
                    let tolerance = 0.02 * (k as f32).sqrt();
                    assert!(
                        (got - want).abs() < tolerance,
                        "{path:?} {m}x{k}x{n}: {got} vs {want}"
                    );
                }
                match &first {
                    None => first = Some(out),
                    Some(first) => assert_eq!(first, &out, "{path:?} {m}x{k}x{n}"),
                }
            }
        }
    }

    #[test]
    fn a_row_gets_the_same_bytes_alone_or_among_others() {
        let (k, n) = (96, 12);
        let (w, bias) = (values(n * k, 5), values(n, 7));
        let quantized = QuantizedLinear::new(&w, k);
        let many = values(11 * k, 6);
        let mut together = vec![0.0; 11 * n];
        linear(
            &many,
            &quantized,
            &bias,
            &mut QuantizedRows::default(),
            &mut together,
        );
        for t in [0, 3, 4, 9, 10] {
            let mut alone = vec![0.0; n];
            linear(
                &many[t * k..(t + 1) * k],
                &quantized,
                &bias,
                &mut QuantizedRows::default(),
                &mut alone,
            );
            assert_eq!(alone, together[t * n..(t + 1) * n], "row {t}");
        }
    }
}
