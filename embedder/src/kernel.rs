//! The one matrix product the encoder needs: `out = x · wᵀ + bias`, with
//! `w` laid out as PyTorch stores a linear layer (one row of `k` inputs per
//! output), so every output is a dot product of two contiguous rows.
//!
//! **Why not a general GEMM.** A question is about fifteen tokens: a
//! general GEMM repacks the whole weight matrix on every call, which costs
//! as much as the product itself at that size (measured with candle: 41% of
//! a question's time went to packing). Reading weight rows in place does
//! no copying at all.
//!
//! **Same bytes in any batch.** `out[t][o]` is computed from row `t` of `x`
//! and row `o` of `w` alone, in one fixed order (eight lane sums over the
//! whole lanes, added in a fixed tree, then the rest in order, then the
//! bias), whatever tile or batch the row falls in. So a text's vector
//! never depends on the texts embedded with it. Machines with AVX-512 take
//! that path, others with AVX2 and FMA that one, the rest a plain one; each
//! machine always takes the same, and two daemons on one database should
//! run on the same kind of CPU (or the drift check sees their vectors differ
//! in the last bits).

/// Rows of `x` kept in cache while every output is computed for them.
const ROW_BLOCK: usize = 32;

/// The instruction sets a product can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Avx512,
    Avx2,
    Plain,
}

impl Path {
    /// Every path this CPU can run, the fastest first.
    fn available() -> Vec<Path> {
        let mut paths = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                paths.push(Path::Avx512);
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
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

/// `out[t * n + o] = bias[o] + Σ_i x[t * k + i] · w[o * k + i]`, where
/// `n = w.len() / k` and `t` runs over the `x.len() / k` rows of `x`.
pub fn linear(x: &[f32], k: usize, w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    linear_on(Path::best(), x, k, w, bias, out);
}

fn linear_on(path: Path, x: &[f32], k: usize, w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    assert!(
        k > 0 && x.len().is_multiple_of(k) && w.len().is_multiple_of(k),
        "shapes"
    );
    let (m, n) = (x.len() / k, w.len() / k);
    assert_eq!(out.len(), m * n, "output shape");
    if let Some(bias) = bias {
        assert_eq!(bias.len(), n, "bias shape");
    }
    assert!(Path::available().contains(&path), "{path:?} on this CPU");
    match path {
        // SAFETY: the CPU has the path's features (checked just above);
        // the shapes were checked above.
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { avx512::linear(x, m, k, w, n, bias, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { avx2::linear(x, m, k, w, n, bias, out) },
        _ => plain::linear(x, m, k, w, n, bias, out),
    }
}

/// Lane sums added in one fixed tree (halves added pairwise).
#[inline(always)]
fn reduce<const N: usize>(mut lanes: [f32; N]) -> f32 {
    let mut width = N;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
    }
    lanes[0]
}

mod plain {
    use super::reduce;

    pub fn linear(
        x: &[f32],
        m: usize,
        k: usize,
        w: &[f32],
        n: usize,
        bias: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let k8 = k / 8 * 8;
        for t in 0..m {
            let row = &x[t * k..(t + 1) * k];
            for o in 0..n {
                let weights = &w[o * k..(o + 1) * k];
                let mut lanes = [0f32; 8];
                for (xs, ws) in row[..k8].chunks_exact(8).zip(weights[..k8].chunks_exact(8)) {
                    for lane in 0..8 {
                        lanes[lane] += xs[lane] * ws[lane];
                    }
                }
                let mut sum = reduce(lanes);
                for i in k8..k {
                    sum += row[i] * weights[i];
                }
                out[t * n + o] = sum + bias.map_or(0.0, |b| b[o]);
            }
        }
    }
}

/// One SIMD kernel per instruction set, from one text: the vector type,
/// its lane count, its intrinsics and the register tile it fits.
macro_rules! simd_kernel {
    (
        $module:ident, $features:literal, $vector:ident, $lanes:literal,
        $zero:ident, $load:ident, $fma:ident, $store:ident,
        rows: $rows:literal, outputs: $outputs:literal
    ) => {
        #[cfg(target_arch = "x86_64")]
        mod $module {
            use std::arch::x86_64::*;

            use super::{ROW_BLOCK, reduce};

            /// # Safety
            /// The CPU must have the module's features; `x` holds `m * k`,
            /// `w` `n * k`, `out` `m * n` and `bias` (if any) `n` values.
            #[target_feature(enable = $features)]
            pub unsafe fn linear(
                x: &[f32],
                m: usize,
                k: usize,
                w: &[f32],
                n: usize,
                bias: Option<&[f32]>,
                out: &mut [f32],
            ) {
                let shape = Shape { k, n, bias };
                for block in (0..m).step_by(ROW_BLOCK) {
                    let block_end = (block + ROW_BLOCK).min(m);
                    let mut o = 0;
                    while o < n {
                        let outputs = (n - o).min($outputs);
                        let mut t = block;
                        while t < block_end {
                            let rows = (block_end - t).min($rows);
                            // SAFETY: t + rows ≤ m and o + outputs ≤ n.
                            unsafe {
                                if rows == $rows && outputs == $outputs {
                                    tile::<$rows, $outputs>(x, w, out, &shape, t, o);
                                } else {
                                    edge(x, w, out, &shape, t, o, rows, outputs);
                                }
                            }
                            t += rows;
                        }
                        o += outputs;
                    }
                }
            }

            struct Shape<'a> {
                k: usize,
                n: usize,
                bias: Option<&'a [f32]>,
            }

            /// A partial tile at the matrix's edge (the same sums, in the
            /// same order, as in a full tile). Whole outputs take the
            /// remaining rows together: a question of fifteen tokens leaves
            /// three rows past its last full tile, and taken one at a time
            /// they load each weight three times as often.
            ///
            /// # Safety
            /// As [`tile`], for `rows × outputs`.
            #[allow(clippy::too_many_arguments)]
            #[target_feature(enable = $features)]
            unsafe fn edge(
                x: &[f32],
                w: &[f32],
                out: &mut [f32],
                shape: &Shape<'_>,
                t: usize,
                o: usize,
                rows: usize,
                outputs: usize,
            ) {
                if outputs == $outputs {
                    // SAFETY: the caller's bounds (rows < the tile's rows).
                    unsafe {
                        match rows {
                            3 => tile::<3, $outputs>(x, w, out, shape, t, o),
                            2 => tile::<2, $outputs>(x, w, out, shape, t, o),
                            _ => {
                                for r in 0..rows {
                                    tile::<1, $outputs>(x, w, out, shape, t + r, o);
                                }
                            }
                        }
                    }
                    return;
                }
                for r in 0..rows {
                    for j in 0..outputs {
                        // SAFETY: the caller's bounds.
                        unsafe { tile::<1, 1>(x, w, out, shape, t + r, o + j) };
                    }
                }
            }

            /// Outputs `o..o + O` of rows `t..t + R`.
            ///
            /// # Safety
            /// As [`linear`], with `t + R ≤ m` and `o + O ≤ n`.
            #[target_feature(enable = $features)]
            unsafe fn tile<const R: usize, const O: usize>(
                x: &[f32],
                w: &[f32],
                out: &mut [f32],
                shape: &Shape<'_>,
                t: usize,
                o: usize,
            ) {
                let Shape { k, n, bias } = *shape;
                let whole = k / $lanes * $lanes;
                let (xp, wp) = (x.as_ptr(), w.as_ptr());
                let mut sums = [[$zero(); O]; R];
                let mut i = 0;
                while i < whole {
                    let mut weights = [$zero(); O];
                    for (j, weight) in weights.iter_mut().enumerate() {
                        // SAFETY: (o + j) * k + i + lanes ≤ n * k.
                        *weight = unsafe { $load(wp.add((o + j) * k + i)) };
                    }
                    for (r, row_sums) in sums.iter_mut().enumerate() {
                        // SAFETY: (t + r) * k + i + lanes ≤ m * k.
                        let input = unsafe { $load(xp.add((t + r) * k + i)) };
                        for (sum, weight) in row_sums.iter_mut().zip(&weights) {
                            *sum = $fma(input, *weight, *sum);
                        }
                    }
                    i += $lanes;
                }
                for (r, row_sums) in sums.iter().enumerate() {
                    let row = &x[(t + r) * k..(t + r + 1) * k];
                    for (j, sum) in row_sums.iter().enumerate() {
                        let weights = &w[(o + j) * k..(o + j + 1) * k];
                        let mut lanes = [0f32; $lanes];
                        // SAFETY: `lanes` holds one vector.
                        unsafe { $store(lanes.as_mut_ptr(), *sum) };
                        let mut total = reduce(lanes);
                        for i in whole..k {
                            total += row[i] * weights[i];
                        }
                        out[(t + r) * n + o + j] = total + bias.map_or(0.0, |b| b[o + j]);
                    }
                }
            }
        }
    };
}

// AVX2: 16 registers, 12 hold sums (4 rows × 3 outputs), 3 the weights.
simd_kernel!(
    avx2, "avx2,fma", __m256, 8,
    _mm256_setzero_ps, _mm256_loadu_ps, _mm256_fmadd_ps, _mm256_storeu_ps,
    rows: 4, outputs: 3
);
// AVX-512: 32 registers, 24 hold sums (4 rows × 6 outputs), 6 the weights.
simd_kernel!(
    avx512, "avx512f", __m512, 16,
    _mm512_setzero_ps, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_storeu_ps,
    rows: 4, outputs: 6
);

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The product in f64, rounded once: what every path is judged by.
    pub(crate) fn naive(x: &[f32], k: usize, w: &[f32], bias: &[f32]) -> Vec<f32> {
        let (m, n) = (x.len() / k, w.len() / k);
        let mut out = vec![0.0; m * n];
        for t in 0..m {
            for o in 0..n {
                let dot: f64 = (0..k)
                    .map(|i| f64::from(x[t * k + i]) * f64::from(w[o * k + i]))
                    .sum();
                out[t * n + o] = (dot + f64::from(bias[o])) as f32;
            }
        }
        out
    }

    /// `count` pseudo-random values in [-1, 1], the same for a seed.
    pub(crate) fn values(count: usize, seed: u32) -> Vec<f32> {
        (0..count)
            .map(|i| {
                let h = (i as u32 ^ seed)
                    .wrapping_mul(2_654_435_761)
                    .rotate_left(13);
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn products_match_a_plain_sum_for_every_tile_shape() {
        // k with and without a remainder past the 8 lanes; m and n not
        // multiples of the tile or the row block; every partial row tile
        // (1, 2 and 3 rows past the last whole one).
        for (m, k, n) in [
            (1, 8, 1),
            (5, 13, 7),
            (37, 64, 11),
            (3, 384, 5),
            (6, 40, 12),
            (15, 384, 9),
        ] {
            let (x, w, bias) = (values(m * k, 1), values(n * k, 2), values(n, 3));
            for path in Path::available() {
                let mut out = vec![0.0; m * n];
                linear_on(path, &x, k, &w, Some(&bias), &mut out);
                for (got, want) in out.iter().zip(naive(&x, k, &w, &bias)) {
                    assert!(
                        (got - want).abs() < 1e-4,
                        "{path:?} {m}x{k}x{n}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_row_gets_the_same_bytes_alone_or_among_others() {
        let (k, n) = (96, 10);
        let w = values(n * k, 5);
        // 43 rows: a block of 32, two whole tiles, then a tile of 3.
        let many = values(43 * k, 6);
        for path in Path::available() {
            let mut together = vec![0.0; 43 * n];
            linear_on(path, &many, k, &w, None, &mut together);
            for t in [0, 3, 4, 31, 32, 40, 41, 42] {
                let mut alone = vec![0.0; n];
                linear_on(path, &many[t * k..(t + 1) * k], k, &w, None, &mut alone);
                assert_eq!(alone, together[t * n..(t + 1) * n], "{path:?} row {t}");
            }
        }
    }
}
