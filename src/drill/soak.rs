//! `memd drill soak`: many clients alternating appends and bundles against
//! one daemon process for minutes: errors, latencies, and whether the
//! daemon's memory keeps growing.

use std::{path::Path, time::Duration};

use super::{
    Daemon, chain_and_drift,
    load::{Load, Op, Outcome, Tally},
    lost_and_duplicated, none_or_found, ok_or_broken, prepare, write_section,
};
use crate::{
    db::{self, ScratchDatabase},
    drill::report::{percentile, titled_header},
};

/// How often the daemon's resident memory is read.
const RSS_EVERY: Duration = Duration::from_secs(10);

struct Figures {
    clients: usize,
    elapsed: Duration,
    embedder: String,
    tally: Tally,
    appends: Latencies,
    bundles: Latencies,
    /// (seconds into the soak, KiB), first at the start, last at the end.
    rss: Vec<(u64, u64)>,
    acknowledged: usize,
    lost: i64,
    duplicates: i64,
    chain_ok: bool,
    drift_ok: bool,
}

struct Latencies {
    count: usize,
    p50: Duration,
    p95: Duration,
    p99: Duration,
}

impl Latencies {
    fn of(samples: &[super::load::Sample], op: Op) -> Self {
        let took: Vec<Duration> = samples
            .iter()
            .filter(|s| s.op == op && s.outcome == Outcome::Ok)
            .map(|s| s.took)
            .collect();
        Self {
            count: took.len(),
            p50: percentile(&took, 50.0),
            p95: percentile(&took, 95.0),
            p99: percentile(&took, 99.0),
        }
    }
}

pub(super) async fn run(
    database_url: &str,
    clients: usize,
    duration: Duration,
    embedder: &str,
    out: &Path,
) -> anyhow::Result<()> {
    let scratch = ScratchDatabase::create(database_url, "memd_drill").await?;
    let result = soak(database_url, &scratch, clients, duration, embedder).await;
    scratch.drop_now().await?;
    let (figures, environment) = result?;
    write_section(out, &render(&figures, &environment))?;
    anyhow::ensure!(
        figures.tally.bad() + figures.tally.unavailable_with_retry_after == 0
            && figures.lost == 0
            && figures.duplicates == 0
            && figures.chain_ok
            && figures.drift_ok,
        "the soak found faults (see {})",
        out.display()
    );
    Ok(())
}

async fn soak(
    database_url: &str,
    scratch: &ScratchDatabase,
    clients: usize,
    duration: Duration,
    embedder: &str,
) -> anyhow::Result<(Figures, String)> {
    let prepared = prepare(scratch.options.clone()).await?;
    let url = db::with_database(database_url, &scratch.name);
    let (daemon, _) = Daemon::start(&url, embedder).await?;
    let mut rss = Vec::new();
    rss.extend(daemon.rss_kib().map(|kib| (0, kib)));
    let load = Load::start(&[&daemon.base_url], &prepared.token, clients, "soak");
    while load.started.elapsed() < duration {
        tokio::time::sleep(RSS_EVERY.min(duration.saturating_sub(load.started.elapsed()))).await;
        rss.extend(
            daemon
                .rss_kib()
                .map(|kib| (load.started.elapsed().as_secs(), kib)),
        );
    }
    let elapsed = load.started.elapsed();
    let finished = load.finish().await;
    // The daemon stays up until the checks are done: it runs the
    // projectors the drift check waits for (killed first, a soak that
    // ended with projections behind waited for nobody, forever).
    let (_, lost, duplicates) = lost_and_duplicated(&prepared.pool, &finished.acknowledged).await?;
    let (chain_ok, drift_ok) = chain_and_drift(&prepared.pool, &prepared.tenant).await?;
    daemon.kill().await?;
    prepared.pool.close().await;
    let figures = Figures {
        clients,
        elapsed,
        embedder: embedder.to_owned(),
        tally: Tally::of(&finished.samples),
        appends: Latencies::of(&finished.samples, Op::Append),
        bundles: Latencies::of(&finished.samples, Op::Bundle),
        rss,
        acknowledged: finished.acknowledged.len(),
        lost,
        duplicates,
        chain_ok,
        drift_ok,
    };
    Ok((figures, prepared.environment))
}

fn render(f: &Figures, environment: &str) -> String {
    use std::fmt::Write as _;
    let mut out = titled_header("memd drill soak", environment);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let _ = write!(
        out,
        "\n{} clients alternate an append (one event, with an idempotency key) and a bundle (a question, 2,000 \
         tokens) against one `memd serve` process (embedder `{}`) on a scratch database, for {:.0} s. Latencies are \
         of successful requests, as the clients timed them. Resident memory (VmRSS) of the daemon is read every {} s.\n\n\
         | requests | ok | errors | appends/s | append p50 ms | p95 | p99 | bundles/s | bundle p50 ms | p95 | p99 |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n\
         | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} |\n",
        f.clients,
        f.embedder,
        f.elapsed.as_secs_f64(),
        RSS_EVERY.as_secs(),
        f.tally.requests,
        f.tally.ok,
        f.tally.requests - f.tally.ok,
        f.appends.count as f64 / f.elapsed.as_secs_f64(),
        ms(f.appends.p50),
        ms(f.appends.p95),
        ms(f.appends.p99),
        f.bundles.count as f64 / f.elapsed.as_secs_f64(),
        ms(f.bundles.p50),
        ms(f.bundles.p95),
        ms(f.bundles.p99),
    );
    if f.tally.requests > f.tally.ok {
        let _ = writeln!(out, "\nErrors: {:?}", f.tally);
    }
    let first = f.rss.first().map_or(0, |r| r.1);
    let last = f.rss.last().map_or(0, |r| r.1);
    let max = f.rss.iter().map(|r| r.1).max().unwrap_or(0);
    // Growth over the second half alone: the first minutes fill caches and pools.
    let half = f
        .rss
        .iter()
        .find(|r| r.0 >= f.elapsed.as_secs() / 2)
        .map_or(0, |r| r.1);
    let _ = write!(
        out,
        "\n| daemon RSS at start MiB | at half time | at the end | highest |\n|---:|---:|---:|---:|\n\
         | {:.0} | {:.0} | {:.0} | {:.0} |\n\n\
         After the soak: {} events acknowledged, {} lost, {} duplicated; chain {}, drift {}.\n",
        mib(first),
        mib(half),
        mib(last),
        mib(max),
        f.acknowledged,
        f.lost,
        f.duplicates,
        ok_or_broken(f.chain_ok),
        none_or_found(f.drift_ok),
    );
    out
}
