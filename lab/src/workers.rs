//! `memd-bench workers`: projection shared by several `memd project`
//! processes. Throughput with 1, 2, 4 … processes over many tenants, each
//! run on tenants of its own whose logs were written while no projector
//! ran; then `kill -9` of one of two processes in the middle of the work:
//! how long the tenants it had in hand wait for the other, and whether the
//! projections still equal a rebuild (nothing applied twice or skipped).

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context;
use memd_projectors::{drift::drift_check, engine::Engine, runtime::lagging_tenants};
use sqlx::PgPool;

use super::{
    harness::{environment, percentile, report_header, write_report},
    histories::{self, History},
};
use memd::{
    db::{self, ScratchDatabase},
    domain::tenant::{Scope, TenantId},
    startup::ProjectionConfig,
    tenants,
};

pub struct Options {
    /// Tenants written for each run.
    pub tenants: usize,
    /// Events in each tenant's log.
    pub events: u64,
    /// How many `memd project` processes, one run for each.
    pub processes: Vec<usize>,
}

/// One run: `processes` projecting a backlog of `events` from their start.
struct Scale {
    processes: usize,
    events: u64,
    elapsed: Duration,
}

/// The kill run: two processes, the first killed once `projected_at_kill`
/// of the backlog was projected.
pub(crate) struct Takeover {
    pub events: u64,
    pub projected_at_kill: f64,
    /// Tenants whose cursors the killed process held (in the middle of a
    /// batch) when it was killed and that still had work left.
    pub held: usize,
    /// From the kill until PostgreSQL had ended the killed process's
    /// sessions (and with them its transactions and row locks).
    pub sessions_gone: Duration,
    /// For each held tenant, from the kill until the survivor advanced it.
    pub taken_over: Vec<Duration>,
    /// From the kill until every tenant was projected to its head.
    pub finished: Duration,
    /// Tenants whose projections differ from a rebuild of their log.
    pub drifted: Vec<String>,
}

/// How long a run may take before the bench gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(600);

pub async fn run(database_url: &str, options: Options, out: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(options.tenants > 0, "--tenants: at least 1");
    anyhow::ensure!(options.events > 0, "--events: at least 1");
    anyhow::ensure!(
        options.processes.iter().all(|&p| (1..=16).contains(&p)),
        "--processes: each from 1 to 16"
    );
    let scratch = ScratchDatabase::create(database_url, "memd_bench").await?;
    let url = db::with_database(database_url, &scratch.name);
    let result = measure(&scratch, &url, &options).await;
    scratch.drop_now().await?;
    let (scales, takeover, environment) = result?;
    super::charts::bars(
        &super::charts::path_beside(out, ""),
        &format!(
            "Projection of {} tenants' backlog by memd project processes",
            options.tenants
        ),
        "events projected per second",
        &scales
            .iter()
            .map(|s| format!("{} process{}", s.processes, plural(s.processes)))
            .collect::<Vec<_>>(),
        &[(
            "events/s".to_owned(),
            scales.iter().map(|s| rate(s.events, s.elapsed)).collect(),
        )],
    )?;
    let report = render(&options, &scales, &takeover, &environment);
    write_report(out, &report)?;
    anyhow::ensure!(
        takeover.drifted.is_empty(),
        "projections drifted after the kill: {}",
        takeover.drifted.join(", ")
    );
    Ok(())
}

async fn measure(
    scratch: &ScratchDatabase,
    url: &str,
    options: &Options,
) -> anyhow::Result<(Vec<Scale>, Takeover, String)> {
    let pool = db::connect(scratch.options.clone(), 4).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let engine = ProjectionConfig::default().engine();
    let mut scales = Vec::new();
    for (run, &processes) in options.processes.iter().enumerate() {
        let tenants = write_backlog(&pool, &format!("r{run}"), options).await?;
        let started = Instant::now();
        let workers = Workers::start(url, processes)?;
        wait_caught_up(&pool, &engine, &tenants).await?;
        let elapsed = started.elapsed();
        workers.stop().await?;
        eprintln!(
            "{processes} process(es): {:.0} events/s",
            rate(options.events * options.tenants as u64, elapsed)
        );
        scales.push(Scale {
            processes,
            events: options.events * options.tenants as u64,
            elapsed,
        });
    }
    let tenants = write_backlog(&pool, "kill", options).await?;
    let takeover = kill_one_of_two(&pool, url, &engine, &tenants, 0.4).await?;
    Ok((scales, takeover, environment))
}

/// Creates `options.tenants` tenants named `<prefix>_<i>` and writes each
/// one's chat history, with no projector running: a backlog.
async fn write_backlog(
    pool: &PgPool,
    prefix: &str,
    options: &Options,
) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::with_capacity(options.tenants);
    for i in 0..options.tenants {
        let name = format!("{prefix}_{i:04}");
        let tenant = TenantId::parse(&name).map_err(|e| anyhow::anyhow!("{e}"))?;
        tenants::create_tenant(pool, &tenant, Scope::Admin).await?;
        histories::load(pool, &tenant, History::Chat, 0, options.events).await?;
        names.push(name);
    }
    Ok(names)
}

/// Runs two processes on the backlog of `tenants`, kills the first with
/// SIGKILL once `at` of the backlog is projected, and times what follows.
pub(crate) async fn kill_one_of_two(
    pool: &PgPool,
    url: &str,
    engine: &Engine,
    tenants: &[String],
    at: f64,
) -> anyhow::Result<Takeover> {
    let total: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(seq), 0)::bigint FROM tenant_heads WHERE tenant_id = ANY ($1)",
    )
    .bind(tenants)
    .fetch_one(pool)
    .await?;
    // A tenant's first batch creates its cursor rows, invisible to other
    // sessions until it commits: created here at seq 0, as that batch
    // would, every batch locks rows this bench can see.
    let names: Vec<&str> = engine.projectors().iter().map(|p| p.name()).collect();
    let versions: Vec<i32> = engine.projectors().iter().map(|p| p.version()).collect();
    sqlx::query(
        "INSERT INTO projections.cursors (projector, tenant_id, seq, version)
         SELECT p, t, 0, v FROM unnest($1::text[]) AS t,
                unnest($2::text[], $3::int[]) AS u (p, v)",
    )
    .bind(tenants)
    .bind(&names)
    .bind(&versions)
    .execute(pool)
    .await?;
    let mut workers = Workers::start(url, 2)?;
    let deadline = Instant::now() + RUN_LIMIT;
    let projected_at_kill = loop {
        let done = projected(pool, tenants).await? as f64 / total.max(1) as f64;
        if done >= at {
            break done;
        }
        anyhow::ensure!(Instant::now() < deadline, "projection did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let victim = workers.0.remove(0);
    let victim_name = victim.name.clone();
    // Frozen first (SIGSTOP), so that what it holds and what it committed
    // cannot change between reading them and the kill.
    victim.freeze().await?;
    // The tenants whose cursor rows the victim's open transactions lock:
    // a row locked FOR UPDATE carries its locker's transaction id.
    let in_hand: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT c.tenant_id FROM projections.cursors c
           JOIN pg_stat_activity a ON a.backend_xid = c.xmax
          WHERE a.application_name = $1 AND c.tenant_id = ANY ($2)",
    )
    .bind(&victim_name)
    .bind(tenants)
    .fetch_all(pool)
    .await?;
    // Where the held tenants stand: what the victim committed before it
    // froze counts as its own work, what it had open is lost with it.
    let mut waiting: Vec<(String, i64, i64)> = positions(pool, &in_hand)
        .await?
        .into_iter()
        .filter(|(_, at, head)| at < head)
        .collect();
    let killed = Instant::now();
    victim.kill().await?;
    while sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&victim_name)
    .fetch_one(pool)
    .await?
        > 0
    {
        anyhow::ensure!(killed.elapsed() < RUN_LIMIT, "the killed sessions stayed");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let sessions_gone = killed.elapsed();
    let held = waiting.len();
    let mut taken_over = Vec::with_capacity(held);
    while !waiting.is_empty() {
        anyhow::ensure!(
            killed.elapsed() < RUN_LIMIT,
            "no worker took over {} tenant(s)",
            waiting.len()
        );
        let names: Vec<String> = waiting.iter().map(|w| w.0.clone()).collect();
        let now = positions(pool, &names).await?;
        waiting.retain(|(tenant, at, _)| {
            let moved = now.iter().any(|(t, seq, _)| t == tenant && seq > at);
            if moved {
                taken_over.push(killed.elapsed());
            }
            !moved
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_caught_up(pool, engine, tenants).await?;
    let finished = killed.elapsed();
    workers.stop().await?;
    let mut drifted = Vec::new();
    for tenant in tenants {
        if drift_check(pool, engine, Some(tenant), &mut |_| {})
            .await?
            .drifted()
        {
            drifted.push(tenant.clone());
        }
    }
    Ok(Takeover {
        events: total as u64,
        projected_at_kill,
        held,
        sessions_gone,
        taken_over,
        finished,
        drifted,
    })
}

/// Events projected by every projector, summed over `tenants`.
async fn projected(pool: &PgPool, tenants: &[String]) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(sum(s), 0)::bigint
           FROM (SELECT min(seq) AS s FROM projections.cursors
                  WHERE tenant_id = ANY ($1) GROUP BY tenant_id) m",
    )
    .bind(tenants)
    .fetch_one(pool)
    .await?)
}

/// Each tenant's slowest cursor and its head.
async fn positions(pool: &PgPool, tenants: &[String]) -> anyhow::Result<Vec<(String, i64, i64)>> {
    Ok(sqlx::query_as(
        "SELECT h.tenant_id, coalesce(min(c.seq), 0), h.seq
           FROM tenant_heads h LEFT JOIN projections.cursors c USING (tenant_id)
          WHERE h.tenant_id = ANY ($1)
          GROUP BY h.tenant_id, h.seq",
    )
    .bind(tenants)
    .fetch_all(pool)
    .await?)
}

async fn wait_caught_up(pool: &PgPool, engine: &Engine, tenants: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        let lagging = lagging_tenants(pool, engine).await?;
        if !lagging.iter().any(|t| tenants.contains(t)) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} tenant(s) still lagging after {} s",
            lagging.len(),
            RUN_LIMIT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `memd project` processes, each naming its database sessions after itself
/// (`PGAPPNAME`).
struct Workers(Vec<Worker>);

/// The `memd` binary the workers run: `MEMD_BIN`, or the one built beside
/// this one (`cargo build --release` builds both).
fn memd_binary() -> anyhow::Result<std::path::PathBuf> {
    let exe = match std::env::var_os("MEMD_BIN") {
        Some(path) => path.into(),
        None => std::env::current_exe()?.with_file_name("memd"),
    };
    anyhow::ensure!(
        exe.is_file(),
        "no memd binary at {} (build it: cargo build --release, or set MEMD_BIN)",
        exe.display()
    );
    Ok(exe)
}

struct Worker {
    name: String,
    process: tokio::process::Child,
}

impl Workers {
    fn start(url: &str, count: usize) -> anyhow::Result<Self> {
        let exe = memd_binary()?;
        (0..count)
            .map(|i| {
                let name = format!("memd-bench-worker-{i}");
                let process = tokio::process::Command::new(&exe)
                    .args(["project", "--embedder", "none"])
                    .env("DATABASE_URL", url)
                    .env("PGAPPNAME", &name)
                    .env("RUST_LOG", "error")
                    .stdout(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .context("starting memd project")?;
                Ok(Worker { name, process })
            })
            .collect::<anyhow::Result<_>>()
            .map(Self)
    }

    async fn stop(self) -> anyhow::Result<()> {
        for worker in self.0 {
            worker.kill().await?;
        }
        Ok(())
    }
}

impl Worker {
    /// SIGSTOP: the process keeps its sessions and locks, and does nothing.
    async fn freeze(&self) -> anyhow::Result<()> {
        let pid = self.process.id().context("the worker has exited")?;
        let status = tokio::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .await?;
        anyhow::ensure!(status.success(), "kill -STOP {pid} failed");
        Ok(())
    }

    /// SIGKILL, as an operator's `kill -9` or the OOM killer would.
    async fn kill(mut self) -> anyhow::Result<()> {
        self.process.start_kill()?;
        self.process.wait().await?;
        Ok(())
    }
}

fn rate(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "es" }
}

fn render(options: &Options, scales: &[Scale], takeover: &Takeover, environment: &str) -> String {
    let mut out = report_header("workers", environment);
    out.push_str(&format!(
        "\nEach run: {} new tenants, each with a chat history of {} events (as `memd-bench acb` loads it) written while no projector ran; then `memd project --embedder none` processes (each with its default 2 worker tasks and its own connection pool) started together, timed from their start until every projector of every one of those tenants reached its head. The processes share the tenants through the cursor rows each batch locks (`FOR UPDATE SKIP LOCKED`): a tenant is in one process's hands at a time, batch by batch. Every process and PostgreSQL share the same cores.\n\n",
        options.tenants, options.events
    ));
    out.push_str(
        "| processes | events | seconds | events/s | vs 1 process |\n|---:|---:|---:|---:|---:|\n",
    );
    let one = scales
        .iter()
        .find(|s| s.processes == 1)
        .map(|s| rate(s.events, s.elapsed));
    for scale in scales {
        let events_per_second = rate(scale.events, scale.elapsed);
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.0} | {} |\n",
            scale.processes,
            scale.events,
            scale.elapsed.as_secs_f64(),
            events_per_second,
            one.map_or("".to_owned(), |one| format!(
                "{:.2}",
                events_per_second / one
            )),
        ));
    }
    let ms = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
    out.push_str(&format!(
        "\n## kill -9 of one of two processes\n\nTwo processes on a new backlog of the same size; the first is sent SIGKILL once {:.0}% of the backlog is projected. *Held*: tenants whose cursor rows the killed process had locked in an open batch (its sessions' transaction ids on the rows) and that still had work left. *Sessions gone*: until PostgreSQL had ended the killed process's sessions, rolling back their batches and releasing their rows. *Taken over*: until the other process advanced each held tenant's cursors (n/a when the killed process held none: it was between batches). The process is frozen (SIGSTOP) before what it holds and where its tenants stand are read, then killed (SIGKILL). *Drift*: every tenant's projections against a rebuild of its log (`memd drift-check`): an event applied twice or skipped would differ.\n\n",
        takeover.projected_at_kill * 100.0
    ));
    out.push_str("| events | projected at kill | held | sessions gone ms | taken over p50 ms | taken over max ms | all projected after kill s | tenants drifted |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    out.push_str(&format!(
        "| {} | {:.0}% | {} | {} | {} | {} | {:.1} | {} |\n",
        takeover.events,
        takeover.projected_at_kill * 100.0,
        takeover.held,
        ms(takeover.sessions_gone),
        if takeover.taken_over.is_empty() {
            "n/a".to_owned()
        } else {
            ms(percentile(&takeover.taken_over, 50.0))
        },
        takeover
            .taken_over
            .iter()
            .max()
            .map_or("n/a".to_owned(), |max| ms(*max)),
        takeover.finished.as_secs_f64(),
        takeover.drifted.len(),
    ));
    out
}
