//! What every benchmark needs: a scratch database, a daemon on it, concurrent
//! drivers that record each operation's latency, and percentile arithmetic.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use sqlx::PgPool;

use memd::{calls::rate_limit::RateLimits, read::semantic::SemanticConfig, startup::ServeConfig};

pub use memd::{
    db::ScratchDatabase,
    drill::report::{
        analyze, environment, percentile, titled_header, wait_projected, write_report,
    },
    startup::RunningDaemon,
};

/// A daemon for a benchmark: on a free local port, without admission
/// control (benchmarks measure memd, not its rate limits), with the
/// embedder of `semantic`, whose model files must be there.
pub async fn start_daemon(pool: PgPool, semantic: SemanticConfig) -> anyhow::Result<RunningDaemon> {
    models_present(&semantic)?;
    RunningDaemon::start(
        pool,
        ServeConfig {
            rate_limits: RateLimits::UNLIMITED,
            semantic,
            ..ServeConfig::default()
        },
    )
    .await
}

/// [`start_daemon`] with no projector running: appends only.
pub async fn start_daemon_without_projections(
    pool: PgPool,
    semantic: SemanticConfig,
) -> anyhow::Result<RunningDaemon> {
    models_present(&semantic)?;
    RunningDaemon::start(
        pool,
        ServeConfig {
            rate_limits: RateLimits::UNLIMITED,
            semantic,
            projection: None,
            ..ServeConfig::default()
        },
    )
    .await
}

/// Fails unless the model files of every embedder `semantic` names are
/// in their folders. A daemon without them serves with semantic retrieval
/// off, which `memd serve` only warns about; a benchmark would then
/// measure lexical bundles under the embedder's name, or wait for
/// embeddings that never come (model folders are relative to the working
/// directory, so a bench started outside the repository has none).
fn models_present(semantic: &SemanticConfig) -> anyhow::Result<()> {
    if let Some((name, missing)) = semantic.missing_models().first() {
        anyhow::bail!(
            "embedder {name}: {} is missing (run {} from the repository's root, \
             or name the model's folder with --model-dir / --mpnet-dir)",
            missing.display(),
            SemanticConfig::FETCH_COMMAND
        );
    }
    Ok(())
}

/// Waits until every tenant's embeddings projection (of its chosen
/// embedder, or `default`) has applied its log up to its head.
pub async fn wait_embedded(pool: &PgPool, default: Option<&str>) -> anyhow::Result<()> {
    let Some(default) = default else {
        return Ok(());
    };
    // A cursor of another version (the embedder changed since a kept
    // database was embedded) is being rebuilt: not embedded yet.
    let (names, versions): (Vec<&str>, Vec<i32>) = memd_embedder::NAMES
        .iter()
        .filter_map(|name| {
            memd_projectors::projections::embeddings::projector_version(name)
                .map(|version| (*name, version))
        })
        .unzip();
    loop {
        let behind: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM public.tenant_heads h
               LEFT JOIN public.embedder_choice ch ON ch.tenant_id = h.tenant_id
               CROSS JOIN LATERAL (SELECT coalesce(ch.active, $1) AS name) AS e
               LEFT JOIN unnest($2::text[], $3::int[]) AS v (name, version) ON v.name = e.name
               LEFT JOIN projections.cursors c ON c.tenant_id = h.tenant_id
                    AND c.projector = 'embeddings_' || e.name AND c.version = v.version
              WHERE h.seq > 0 AND coalesce(c.seq, 0) < h.seq",
        )
        .bind(default)
        .bind(&names)
        .bind(&versions)
        .fetch_one(pool)
        .await?;
        if behind == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Latencies of one scenario's operations, and how many events they carried.
pub struct Measurement {
    pub operations: usize,
    pub events: usize,
    pub errors: usize,
    pub elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Measurement {
    /// A measurement of single operations timed one by one elsewhere.
    pub fn from_latencies(latencies: Vec<Duration>, elapsed: Duration) -> Self {
        Self {
            operations: latencies.len(),
            events: latencies.len(),
            errors: 0,
            elapsed,
            latencies,
        }
    }

    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p`-th percentile latency (nearest rank), in milliseconds.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        percentile(&self.latencies, p).as_secs_f64() * 1000.0
    }
}

/// Runs `op` from `writers` concurrent tasks until `duration` has passed; each
/// call carries `events_per_op` events. `op(writer, iteration)`.
pub async fn drive<F, Fut>(
    writers: usize,
    duration: Duration,
    events_per_op: usize,
    op: F,
) -> Measurement
where
    F: Fn(usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0;
                let mut iteration = 0_u64;
                while Instant::now() < deadline {
                    let start = Instant::now();
                    match op(writer, iteration).await {
                        Ok(()) => latencies.push(start.elapsed()),
                        Err(err) => {
                            errors += 1;
                            if errors == 1 {
                                tracing::warn!(error = %format!("{err:#}"), "benchmark operation failed");
                            }
                        }
                    }
                    iteration += 1;
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (task_latencies, task_errors) = task.await.expect("benchmark task panicked");
        latencies.extend(task_latencies);
        errors += task_errors;
    }
    let elapsed = started.elapsed();
    Measurement {
        operations: latencies.len(),
        events: latencies.len() * events_per_op,
        errors,
        elapsed,
        latencies,
    }
}

/// A bench's database: the one `keep` names, kept between runs (created if
/// missing), or a scratch one for this run. True when kept (the caller
/// drops a scratch one at the end).
pub async fn bench_database(
    database_url: &str,
    keep: Option<&str>,
) -> anyhow::Result<(ScratchDatabase, bool)> {
    Ok(match keep {
        Some(name) => (ScratchDatabase::named(database_url, name).await?, true),
        None => (
            ScratchDatabase::create(database_url, "memd_bench").await?,
            false,
        ),
    })
}

/// The first lines of every report: which benchmark, the command that
/// produced it, when, and on what machine.
pub fn report_header(bench: &str, environment: &str) -> String {
    titled_header(&format!("memd-bench {bench}"), environment)
}

#[cfg(test)]
mod model_tests {
    use memd_embedder::ModelDirs;

    use super::*;

    #[test]
    fn a_benchmark_refuses_an_embedder_whose_model_files_are_missing() {
        let folder = std::env::temp_dir().join(format!("memd-lab-no-model-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let semantic = |embedder: Option<&str>, also: &[&str]| SemanticConfig {
            embedder: embedder.map(str::to_owned),
            models: ModelDirs {
                minilm: folder.clone(),
                mpnet: folder.clone(),
            },
            also: also.iter().map(|name| (*name).to_owned()).collect(),
        };
        let err = models_present(&semantic(Some("minilm"), &[])).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("embedder minilm"), "{message}");
        assert!(message.contains("model.safetensors"), "{message}");
        assert!(message.contains(SemanticConfig::FETCH_COMMAND), "{message}");
        let err = models_present(&semantic(Some("hashed"), &["mpnet"])).unwrap_err();
        assert!(err.to_string().contains("embedder mpnet"), "{err}");
        // Embedders without model files, and none at all, need nothing.
        models_present(&semantic(Some("hashed"), &[])).unwrap();
        models_present(&semantic(None, &[])).unwrap();
        // With the files there, MiniLM's and MPNet's folders pass.
        for file in memd_embedder::sentence::FILES {
            std::fs::write(folder.join(file), b"").unwrap();
        }
        models_present(&semantic(Some("minilm"), &["mpnet"])).unwrap();
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
