//! `memd bench vectors`: the in-process vector index alone, at a size no
//! real embedder reaches here in a session (a million chunks of MiniLM on
//! two cores take hours): its memory, and the time of one search, with
//! pseudo-random unit vectors of MiniLM's 384 dimensions. The distribution
//! of vectors does not change the cost: every visible vector's sign bits
//! are scanned, and a fixed number of candidates rescored.

use std::{fmt::Write as _, path::Path, time::Instant};

use super::harness::{percentile, report_header, write_report};
use crate::{
    domain::event::Channel,
    read::{
        privacy::Visibility,
        retrieve::Scope,
        semantic::SemanticConfig,
        vectors::{Filtered, TenantVectors},
    },
};

const DIMENSIONS: usize = 384;
/// What a bundle asks for by default (`semantic_candidates`).
const K: usize = 200;

pub fn run(
    count: usize,
    searches: usize,
    semantic: &SemanticConfig,
    out: &Path,
) -> anyhow::Result<()> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let unit = |next: &mut dyn FnMut() -> f32| {
        let mut v: Vec<f32> = (0..DIMENSIONS).map(|_| next()).collect();
        memd_projectors::embed::normalise(&mut v);
        v
    };
    let started = Instant::now();
    let mut vectors = TenantVectors::default();
    for seq in 1..=count as i64 {
        let vector = unit(&mut next);
        // One in ten is high-sensitivity: filtered in the scan for a public bundle.
        let sensitivity = if seq % 10 == 0 { "high" } else { "none" };
        vectors.push(
            (seq, 0),
            ("public".into(), sensitivity.into(), "message".into(), None),
            Filtered {
                ts_us: seq * 1_000_000,
                session: format!("s{}", seq / 100),
                ..Filtered::default()
            },
            &vector,
        );
    }
    let built = started.elapsed();
    let mut latencies = Vec::with_capacity(searches);
    let mut found = 0;
    for _ in 0..searches {
        let query = unit(&mut next);
        let at = Instant::now();
        found += vectors
            .search(
                &query,
                K,
                Visibility::new(Channel::Public),
                &Scope::default(),
            )
            .len();
        latencies.push(at.elapsed());
    }
    let ms = |p| percentile(&latencies, p).as_secs_f64() * 1e3;
    let mut report = report_header(
        "vectors",
        &format!(
            "{} cores; memd {} ({} build)",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            env!("CARGO_PKG_VERSION"),
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        ),
    );
    let _ = writeln!(
        report,
        "\nOne tenant's index of {count} pseudo-random unit vectors of {DIMENSIONS} dimensions, built in process \
         ({:.1} s); {searches} searches for the {K} nearest, from a public channel (a tenth of the vectors are \
         high-sensitivity and skipped in the scan), one search at a time (a tenant of 262,144 vectors or more is scanned on every core).\n\n\
         | vectors | index memory | bytes per vector | search p50 ms | search p95 ms | results per search |\n\
         |---:|---:|---:|---:|---:|---:|\n\
         | {count} | {:.0} MiB | {:.0} | {:.2} | {:.2} | {:.0} |",
        built.as_secs_f64(),
        vectors.heap_bytes() as f64 / (1024.0 * 1024.0),
        vectors.heap_bytes() as f64 / count.max(1) as f64,
        ms(50.0),
        ms(95.0),
        found as f64 / searches.max(1) as f64
    );
    let mut categories = vec![format!(
        "search, {} vectors",
        super::charts::number(count as f64)
    )];
    let (mut p50s, mut p95s) = (vec![ms(50.0)], vec![ms(95.0)]);
    if let Some(name) = &semantic.embedder {
        let embedder = memd_projectors::embed::load(name, &semantic.model_dir)
            .map_err(|e| anyhow::anyhow!("--embedder {name}: {e}"))?;
        // Distinct questions: what a bundle computes on a cache miss.
        let questions: Vec<String> = (0..searches as u64)
            .map(|i| format!("{} (#{i})", super::acb::question(i)))
            .collect();
        // `as_question`: the question path, else the stored one.
        let time = |as_question: bool| {
            let mut latencies = Vec::with_capacity(searches);
            for question in &questions {
                let at = Instant::now();
                if as_question {
                    embedder.embed_questions(&[question])?;
                } else {
                    embedder.embed(&[question])?;
                }
                latencies.push(at.elapsed());
            }
            let ms = |p| percentile(&latencies, p).as_secs_f64() * 1e3;
            anyhow::Ok((ms(50.0), ms(95.0)))
        };
        // Alternated, so that a slow minute of a shared machine does not
        // land on one of them only.
        let (mut asked, mut stored) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            asked.push(time(true)?);
            stored.push(time(false)?);
        }
        // The run with the lower median, whole (its p50 and its p95).
        let best = |runs: &[(f64, f64)]| {
            runs.iter()
                .copied()
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .expect("two runs")
        };
        let (asked, stored) = (best(&asked), best(&stored));
        let _ = writeln!(
            report,
            "\nVectors by `{name}` of {searches} distinct questions of the `bench acb` kind, one at a time on the \
             calling thread (a bundle's cache miss); of two alternated runs of each, the one with the lower p50. A bundle's question \
             takes the question path (`embed_questions`; for `minilm`, 8-bit integer products); chunks take the \
             stored path (`embed`, f32).\n\n\
             | embedder | path | questions | p50 ms | p95 ms |\n|---|---|---:|---:|---:|\n\
             | {name} | question | {searches} | {:.2} | {:.2} |\n\
             | {name} | stored | {searches} | {:.2} | {:.2} |",
            asked.0, asked.1, stored.0, stored.1,
        );
        categories.push(format!("a question's vector ({name})"));
        p50s.push(asked.0);
        p95s.push(asked.1);
        categories.push(format!("a stored vector ({name})"));
        p50s.push(stored.0);
        p95s.push(stored.1);
    }
    super::charts::bars(
        &super::charts::path_beside(out, ""),
        "The vector index: a search for the 200 nearest, and a question's vector",
        "ms",
        &categories,
        &[("p50".into(), p50s), ("p95".into(), p95s)],
    )?;
    write_report(out, &report)
}
