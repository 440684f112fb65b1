//! `memd-bench vectors`: the in-process vector index alone: its memory, the
//! time of one search by lists and by a full scan, and how many of the
//! full scan's nearest the lists find (recall). Either pseudo-random unit
//! vectors of MiniLM's 384 dimensions at a size no real embedder reaches
//! here in a session (a million chunks of MiniLM on two cores take hours),
//! which is the worst case for lists (no two vectors are about the same
//! thing), or a tenant's real vectors read from an embeddings projection
//! (`--tenant`), searched with questions of the `bench acb` kind.

use std::{fmt::Write as _, path::Path, time::Instant};

use super::harness::{percentile, report_header, write_report};
use memd::{
    domain::event::{Channel, Kind, Sensitivity},
    read::{
        privacy::Visibility,
        retrieve::Scope,
        semantic::SemanticConfig,
        vectors::{self, Filtered, Method, Position, TenantVectors},
    },
};

const DIMENSIONS: usize = 384;
/// What a bundle asks for by default (`semantic_candidates`).
const K: usize = 200;

/// The methods compared, the full scan first (what recall is counted
/// against).
const METHODS: [(&str, Method); 4] = [
    ("full scan", Method::Exact),
    ("lists, 1 in 4 read (bundles)", Method::Lists),
    ("lists, 1 in 8 read", Method::Probing(8)),
    ("lists, 1 in 16 read", Method::Probing(16)),
];

struct Run {
    name: &'static str,
    method: Method,
    times: Vec<std::time::Duration>,
    read: usize,
    same: usize,
    /// Of the full scan's closest [`TOP`], how many it found.
    top_same: usize,
}

/// The nearest that weigh most in a bundle's fusion.
const TOP: usize = 20;

impl Run {
    /// Counts one search that `took`, against the full scan's nearest.
    fn count(
        &mut self,
        took: std::time::Duration,
        searched: &vectors::Searched,
        exact: &[Position],
    ) {
        self.times.push(took);
        self.read += searched.rows_read;
        let found = |n: &&vectors::Neighbour| exact.contains(&n.position);
        self.same += searched.neighbours.iter().filter(found).count();
        self.top_same += searched
            .neighbours
            .iter()
            .filter(|n| exact.iter().take(TOP).any(|e| *e == n.position))
            .count();
    }
}

pub struct Options {
    pub count: usize,
    pub searches: usize,
    /// Read this tenant's vectors from the embeddings projection of
    /// `--embedder` instead of making pseudo-random ones.
    pub tenant: Option<String>,
    /// Rows from which lists are built (a power of two), if not the
    /// daemon's: to see lists on a smaller tenant.
    pub lists_from: Option<usize>,
}

pub async fn run(
    options: Options,
    database_url: &str,
    semantic: &SemanticConfig,
    out: &Path,
) -> anyhow::Result<()> {
    let Options {
        count,
        searches,
        tenant,
        lists_from,
    } = options;
    let tuning = match lists_from {
        None => vectors::Tuning::DEFAULT,
        Some(rows) if rows.is_power_of_two() && rows >= 1024 => vectors::Tuning {
            approximate_from: rows,
            ..vectors::Tuning::DEFAULT
        },
        Some(_) => anyhow::bail!("--lists-from: a power of two, 1024 or more"),
    };
    let embedder = match &semantic.embedder {
        Some(name) => Some(
            memd_embedder::load(name, &semantic.models)
                .map_err(|e| anyhow::anyhow!("--embedder {name}: {e}"))?,
        ),
        None => None,
    };
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut unit = move || {
        let mut v: Vec<f32> = (0..DIMENSIONS).map(|_| next()).collect();
        memd_embedder::normalise(&mut v);
        v
    };
    let started = Instant::now();
    let (mut vectors, queries, visibility, what) = match &tenant {
        None => {
            let mut vectors = TenantVectors::with_tuning(tuning);
            for seq in 1..=count as i64 {
                // One in ten is high-sensitivity: filtered in the scan for a public bundle.
                let sensitivity = if seq % 10 == 0 {
                    Sensitivity::High
                } else {
                    Sensitivity::None
                };
                vectors.push(
                    (seq, 0),
                    (Channel::Public, sensitivity, Kind::Message, None),
                    Filtered {
                        ts_us: seq * 1_000_000,
                        session: format!("s{}", seq / 100),
                        ..Filtered::default()
                    },
                    &unit(),
                );
            }
            vectors.settle();
            let queries: Vec<Vec<f32>> = (0..searches).map(|_| unit()).collect();
            let what = format!(
                "{count} pseudo-random unit vectors of {DIMENSIONS} dimensions, built in process \
                 ({:.1} s), searched with {searches} pseudo-random ones from a public channel (a tenth of the \
                 vectors are high-sensitivity and skipped); random vectors are the worst case for lists",
                started.elapsed().as_secs_f64()
            );
            (vectors, queries, Visibility::new(Channel::Public), what)
        }
        Some(tenant) => {
            let (Some(name), Some(embedder)) = (&semantic.embedder, &embedder) else {
                anyhow::bail!("--tenant reads an embedder's projection: give --embedder");
            };
            let table = memd_projectors::projections::embeddings::projector_name(name)
                .ok_or_else(|| anyhow::anyhow!("--embedder {name} has no projection"))?;
            let pool = sqlx::PgPool::connect(database_url).await?;
            let vectors = vectors::load_tenant(&pool, tenant, table, tuning).await?;
            let questions: Vec<String> = (0..searches as u64)
                .map(|i| format!("{} (#{i})", super::acb::question(i)))
                .collect();
            let asked: Vec<&str> = questions.iter().map(String::as_str).collect();
            let queries = embedder.embed_questions(&asked)?;
            let what = format!(
                "tenant `{tenant}`'s {} vectors of `{name}` read from `projections.{table}` ({:.1} s with \
                 the lists built), searched from a private channel with {searches} distinct questions of the \
                 `bench acb` kind, embedded by the question path",
                vectors.len(),
                started.elapsed().as_secs_f64()
            );
            (vectors, queries, Visibility::new(Channel::Private), what)
        }
    };
    let training = Instant::now();
    vectors.train_lists();
    let training = training.elapsed();
    // Every method per question, in turn, so that a slow second of a
    // shared machine lands on all of them.
    let mut runs: Vec<Run> = METHODS
        .iter()
        .map(|(name, method)| Run {
            name,
            method: *method,
            times: Vec::new(),
            read: 0,
            same: 0,
            top_same: 0,
        })
        .collect();
    let (mut wanted, mut top_wanted) = (0, 0);
    // What bundles call, which remembers its searches: a question's first
    // search, then the same question again with nothing added.
    let mut asked_again = Run {
        name: "bundles' search, the same question again (remembered; nothing added)",
        method: Method::Lists,
        times: Vec::new(),
        read: 0,
        same: 0,
        top_same: 0,
    };
    for query in &queries {
        let mut exact = Vec::new();
        for run in &mut runs {
            let at = Instant::now();
            let searched = vectors.search_by(run.method, query, K, visibility, &Scope::default());
            let took = at.elapsed();
            if run.method == Method::Exact {
                exact = searched.neighbours.iter().map(|n| n.position).collect();
                wanted += exact.len();
                top_wanted += exact.len().min(TOP);
            }
            run.count(took, &searched, &exact);
        }
        vectors.searched(query, K, visibility, &Scope::default());
        let at = Instant::now();
        let searched = vectors.searched(query, K, visibility, &Scope::default());
        asked_again.count(at.elapsed(), &searched, &exact);
    }
    runs.push(asked_again);
    let ms = |latencies: &[std::time::Duration], p| percentile(latencies, p).as_secs_f64() * 1e3;
    let searched = queries.len().max(1) as f64;
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
    let lists = vectors.lists_built().map_or(
        "none (below the threshold)".to_owned(),
        |(count, level)| {
            format!(
                "{count} lists trained on {level} rows, each row placed in the closest, in {:.2} s",
                training.as_secs_f64()
            )
        },
    );
    let _ = writeln!(
        report,
        "\nOne tenant's index: {what}. Each search asks for the {K} nearest, one search at a time (a full \
         scan of 262,144 vectors or more runs on every core). Recall: the share of the full scan's {K} \
         nearest that a method finds too, and of their closest {TOP}. Each list search reads the lists closest to the question, at \
         least the share named, more while it has found fewer than 16 × {K} visible vectors.\n\n\
         Index memory {:.0} MiB ({:.0} bytes per vector); {lists}.\n\n\
         | method | vectors | search p50 ms | search p95 ms | vectors compared per search | recall@{K} | recall of the closest {TOP} |\n\
         |---|---:|---:|---:|---:|---:|---:|",
        vectors.heap_bytes() as f64 / (1024.0 * 1024.0),
        vectors.heap_bytes() as f64 / vectors.len().max(1) as f64,
    );
    for run in &runs {
        let _ = writeln!(
            report,
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.3} | {:.3} |",
            run.name,
            vectors.len(),
            ms(&run.times, 50.0),
            ms(&run.times, 95.0),
            run.read as f64 / searched,
            run.same as f64 / wanted.max(1) as f64,
            run.top_same as f64 / top_wanted.max(1) as f64,
        );
    }
    let count = vectors.len();
    let (mut p50s, mut p95s): (Vec<f64>, Vec<f64>) = runs
        .iter()
        .map(|run| (ms(&run.times, 50.0), ms(&run.times, 95.0)))
        .unzip();
    let categories_of = |method: &str| {
        format!(
            "search by {method}, {} vectors",
            super::charts::number(count as f64)
        )
    };
    let mut categories: Vec<String> = runs.iter().map(|run| categories_of(run.name)).collect();
    if let (Some(name), Some(embedder)) = (&semantic.embedder, &embedder) {
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
