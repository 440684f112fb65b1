//! Reports of measurements: the header that names the command, the date
//! and the machine, percentiles, and waiting for projections before
//! measuring. Drills write them; the lab's benchmarks (`lab/`) use the same.

use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::PgPool;

/// Nearest-rank percentile of sorted-or-not samples; zero when empty.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Waits until every projector has applied every tenant's log up to its
/// head.
pub async fn wait_projected(pool: &PgPool) -> anyhow::Result<()> {
    let engine = crate::startup::ProjectionConfig::default().engine();
    // Far beyond what the largest bench history takes: a bench whose
    // projector stopped fails instead of waiting forever.
    let deadline = Instant::now() + Duration::from_secs(3_600);
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the projections did not reach the log's head within an hour"
        );
        if memd_projectors::runtime::lagging_tenants(pool, &engine)
            .await?
            .is_empty()
        {
            return analyze(pool).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What autovacuum does within a minute or so of a bulk load; measuring
/// before it would time plans made for empty tables.
pub async fn analyze(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query!("VACUUM (ANALYZE)").execute(pool).await?;
    Ok(())
}

/// The first lines of every report: its title, the command that produced
/// it, when, and on what machine.
pub fn titled_header(title: &str, environment: &str) -> String {
    let command: Vec<String> = std::env::args().collect();
    format!(
        "# {title}\n\nCommand: `{}`  \nDate: {}  \nMachine: {environment}  \n",
        command.join(" "),
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
    )
}

/// Writes a report (creating its directory), prints it, and says where.
pub fn write_report(out: &std::path::Path, report: &str) -> anyhow::Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, report).with_context(|| format!("writing {}", out.display()))?;
    print!("{report}");
    eprintln!("written to {}", out.display());
    Ok(())
}

/// One line saying what machine and database produced the numbers.
pub async fn environment(pool: &PgPool) -> anyhow::Result<String> {
    let setting = sqlx::query!(
        r#"SELECT current_setting('server_version') AS "version!",
                  current_setting('synchronous_commit') AS "sync!""#
    )
    .fetch_one(pool)
    .await?;
    let (version, sync) = (setting.version, setting.sync);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    Ok(format!(
        "{cores} cores ({}); PostgreSQL {version} (synchronous_commit={sync}) on the same machine; memd {} ({} build)",
        vector_instructions(),
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    ))
}

/// The widest vector instructions the CPU has of those memd's kernels use:
/// the same build runs at different speeds with them, and its f32 sums may
/// differ in their last bits (8-bit ones do not).
fn vector_instructions() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512vnni") {
            return "AVX-512 VNNI";
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "AVX-512, no VNNI";
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return "AVX2, no AVX-512";
        }
        "no AVX2"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 95.0), Duration::from_millis(95));
        assert_eq!(percentile(&samples, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&samples[..1], 99.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
