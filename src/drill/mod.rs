//! `memd drill`: fault drills anyone can re-run, bounded in rounds and time,
//! talking only to 127.0.0.1, each writing its figures (with the command
//! that made them) to its own section of a Markdown file.
//!
//! - `kill`: `kill -9` of the daemon under mixed load, restart, retries.
//! - `pg-restart`, `pg-outage`: PostgreSQL stopped under load (on a private
//!   server the drill starts, never the machine's shared one).
//! - `failover`: the database server's leader lost under load, on a
//!   Patroni cluster (`ops/ha/up.sh`).
//! - `soak`: many clients mixing appends and bundles for minutes.
//! - `fuzz`: schemathesis against the daemon's own OpenAPI document.

mod failover;
mod fuzz;
mod kill;
mod load;
mod postgres;
mod soak;

pub mod report;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::{
    db::{
        self,
        private_server::{free_port, run_program},
    },
    domain::tenant::{Scope, TenantId},
    drill::report::environment,
    tenants,
};

#[derive(Subcommand)]
pub enum DrillCommand {
    /// `kill -9` the daemon under mixed load, restart it, retry what got no
    /// answer; check nothing acknowledged was lost or doubled.
    Kill {
        /// Rounds of load, kill, restart, retry and checks.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Concurrent clients sending appends.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value = "lab/results/drills.md")]
        out: PathBuf,
    },
    /// Restart PostgreSQL under load (a private server the drill starts):
    /// what clients receive, how soon appends and bundles work again.
    PgRestart {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value = "lab/results/drills.md")]
        out: PathBuf,
    },
    /// Stop PostgreSQL under load for `--down-seconds`, then start it again.
    PgOutage {
        #[arg(long, default_value_t = 30)]
        down_seconds: u64,
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value = "lab/results/drills.md")]
        out: PathBuf,
    },
    /// Lose the database's leader under load, on a Patroni cluster
    /// (`ops/ha/up.sh`): two daemons and a projector process ride the
    /// failover; check nothing acknowledged was lost or doubled, the chain,
    /// checkpoints and projections.
    Failover {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// How the leader is lost, round after round.
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["kill", "failover", "switchover"])]
        ways: Vec<failover::Way>,
        /// Concurrent clients, spread over the two daemons.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// The drill's database through HAProxy's leader port (dropped and
        /// created afresh; its name must start with memd_drill).
        #[arg(
            long,
            default_value = "postgres://postgres@127.0.0.1:5440/memd_drill_failover"
        )]
        leader_url: String,
        /// The same database through HAProxy's replica port.
        #[arg(
            long,
            default_value = "postgres://postgres@127.0.0.1:5441/memd_drill_failover"
        )]
        replica_url: String,
        /// Patroni's REST API of each member.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "http://127.0.0.1:5461,http://127.0.0.1:5462,http://127.0.0.1:5463"
        )]
        patroni: Vec<String>,
        #[arg(long, default_value = "lab/results/drills.md")]
        out: PathBuf,
    },
    /// Clients mixing appends and bundles for a long while: errors,
    /// latencies, the daemon's memory at the start and the end.
    Soak {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// The daemon's embedder (as `memd serve --embedder`).
        #[arg(long, default_value = "minilm")]
        embedder: String,
        #[arg(long, default_value = "lab/results/drills.md")]
        out: PathBuf,
    },
    /// Fuzz the HTTP API from its OpenAPI document with schemathesis
    /// (installed into `--venv` on first use, from PyPI).
    Fuzz {
        /// Test cases per operation at most.
        #[arg(long, default_value_t = 100)]
        max_examples: u32,
        /// A time budget (seconds); schemathesis then repeats fuzzing and
        /// stateful tests until it is spent.
        #[arg(long)]
        seconds: Option<u64>,
        /// schemathesis's random seed: the same seed, the same requests.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value = "target/drill-venv")]
        venv: PathBuf,
        #[arg(long, default_value = "lab/results/drills.md")]
        out: PathBuf,
    },
}

pub async fn run(command: DrillCommand, database_url: &str) -> anyhow::Result<()> {
    match command {
        DrillCommand::Kill {
            rounds,
            clients,
            out,
        } => kill::run(database_url, rounds, clients, &out).await,
        DrillCommand::PgRestart {
            rounds,
            clients,
            out,
        } => postgres::run(Duration::ZERO, rounds, clients, &out).await,
        DrillCommand::PgOutage {
            down_seconds,
            rounds,
            clients,
            out,
        } => postgres::run(Duration::from_secs(down_seconds), rounds, clients, &out).await,
        DrillCommand::Failover {
            rounds,
            ways,
            clients,
            leader_url,
            replica_url,
            patroni,
            out,
        } => {
            let cluster = failover::Cluster {
                leader_url,
                replica_url,
                patroni,
            };
            failover::run(&cluster, rounds, &ways, clients, &out).await
        }
        DrillCommand::Soak {
            clients,
            seconds,
            embedder,
            out,
        } => {
            soak::run(
                database_url,
                clients,
                Duration::from_secs(seconds),
                &embedder,
                &out,
            )
            .await
        }
        DrillCommand::Fuzz {
            max_examples,
            seconds,
            seed,
            venv,
            out,
        } => fuzz::run(database_url, max_examples, seconds, seed, &venv, &out).await,
    }
}

const TENANT: &str = "drill";

/// A migrated database with the drill's tenant: its pool, an admin token,
/// and the line describing the machine.
struct Prepared {
    pool: PgPool,
    token: String,
    environment: String,
    tenant: TenantId,
}

async fn prepare(options: sqlx::postgres::PgConnectOptions) -> anyhow::Result<Prepared> {
    let pool = db::connect(options, 4).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let tenant = TenantId::parse(TENANT).expect("valid tenant");
    let token = tenants::create_tenant(&pool, &tenant, Scope::Admin)
        .await?
        .expose()
        .to_string();
    Ok(Prepared {
        pool,
        token,
        environment,
        tenant,
    })
}

/// A daemon in a process of its own (this binary's `serve`), on a free port.
struct Daemon {
    process: tokio::process::Child,
    base_url: String,
}

impl Daemon {
    /// Starts `memd serve` on `url` (already migrated) with `embedder`;
    /// returns once `/readyz` answers, with the time that took.
    async fn start(url: &str, embedder: &str) -> anyhow::Result<(Self, Duration)> {
        Self::start_with(url, embedder, &[]).await
    }

    /// [`Daemon::start`] with more `serve` flags.
    async fn start_with(
        url: &str,
        embedder: &str,
        flags: &[&str],
    ) -> anyhow::Result<(Self, Duration)> {
        let port = free_port()?;
        let started = Instant::now();
        let process = tokio::process::Command::new(std::env::current_exe()?)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--no-migrate",
                "--embedder",
                embedder,
                "--rate-limit-rps",
                "0",
                "--rate-limit-bytes",
                "0",
            ])
            .args(flags)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting memd serve")?;
        let base_url = format!("http://127.0.0.1:{port}");
        let client = client();
        let deadline = started + Duration::from_secs(60);
        loop {
            if let Ok(response) = client.get(format!("{base_url}/readyz")).send().await
                && response.status().is_success()
            {
                return Ok((Self { process, base_url }, started.elapsed()));
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the daemon was not ready within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn kill(mut self) -> anyhow::Result<()> {
        self.process.start_kill()?;
        self.process.wait().await?;
        Ok(())
    }

    /// Resident memory of the daemon's process, in KiB (Linux).
    fn rss_kib(&self) -> Option<u64> {
        let pid = self.process.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    }
}

/// How long a drill's client waits for an answer. Anything slower counts as
/// a hang: a drill fails instead of waiting forever.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .expect("an HTTP client")
}

fn event(key: String, text: String) -> Value {
    json!({"session_id": "drill", "channel": "private", "actor": {"type": "agent", "id": "drill"},
           "kind": "message", "content": {"text": text}, "idempotency_key": key})
}

/// Sends every failed append again with its key, as a client does once the
/// service is back, each up to `attempts` times a second apart; the keys
/// acknowledged, and how many never were.
async fn resend(
    base_url: &str,
    token: &str,
    failed: &[Value],
    attempts: usize,
) -> (Vec<String>, usize) {
    let http = client();
    let mut acknowledged = Vec::new();
    let mut failures = 0;
    for body in failed {
        let mut stored = false;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let sent = http
                .post(format!("{base_url}/api/v1/events"))
                .bearer_auth(token)
                .json(body)
                .send()
                .await;
            if matches!(sent, Ok(ref r) if r.status().is_success()) {
                stored = true;
                break;
            }
        }
        if stored {
            acknowledged.push(body["idempotency_key"].as_str().expect("a key").to_owned());
        } else {
            failures += 1;
        }
    }
    (acknowledged, failures)
}

/// Events acknowledged (their idempotency keys) that are not stored, and
/// keys stored more than once, for the drill's tenant.
async fn lost_and_duplicated(
    pool: &PgPool,
    acknowledged: &[String],
) -> anyhow::Result<(i64, i64, i64)> {
    let counts = sqlx::query!(
        r#"SELECT (SELECT count(*) FROM events WHERE tenant_id = $1) AS "stored!",
                  (SELECT count(*) FROM unnest($2::text[]) AS k (key)
                    WHERE NOT EXISTS (SELECT 1 FROM events e
                                       WHERE e.tenant_id = $1 AND e.idempotency_key = k.key))
                    AS "lost!",
                  (SELECT count(*) FROM (SELECT idempotency_key FROM events WHERE tenant_id = $1
                                          GROUP BY 1 HAVING count(*) > 1) d) AS "duplicated!""#,
        TENANT,
        acknowledged
    )
    .fetch_one(pool)
    .await?;
    Ok((counts.stored, counts.lost, counts.duplicated))
}

/// How long a drill waits for the daemon's projections to catch up before
/// it checks them for drift.
const PROJECTED_WITHIN: Duration = Duration::from_secs(60);

/// Whether the tenant's chain verifies and its projections match a rebuild
/// (a daemon on the drill's database must be running: it projects).
async fn chain_and_drift(pool: &PgPool, tenant: &TenantId) -> anyhow::Result<(bool, bool)> {
    let chain_ok = crate::audit::verify_chains(pool, Some(tenant))
        .await?
        .iter()
        .all(|report| report.broken.is_none());
    // The daemon under drill projects; a drill that waited past this bound
    // reports it instead of hanging.
    tokio::time::timeout(PROJECTED_WITHIN, crate::drill::report::wait_projected(pool))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the projections did not reach the log's head within {} s",
                PROJECTED_WITHIN.as_secs()
            )
        })??;
    let engine = crate::startup::ProjectionConfig::default().engine();
    let drift =
        memd_projectors::drift::drift_check(pool, &engine, Some(TENANT), &mut |_| {}).await?;
    Ok((chain_ok, !drift.drifted()))
}

fn ok_or_broken(ok: bool) -> &'static str {
    if ok { "ok" } else { "BROKEN" }
}

fn none_or_found(clean: bool) -> &'static str {
    if clean { "none" } else { "FOUND" }
}

/// Writes `section` (which starts with its `# title` line) into `out`,
/// replacing that drill's previous section and keeping the others', so one
/// file holds the latest figures of every drill.
fn write_section(out: &Path, section: &str) -> anyhow::Result<()> {
    let title = section.lines().next().unwrap_or_default();
    let existing = std::fs::read_to_string(out).unwrap_or_default();
    let mut sections: Vec<String> = split_sections(&existing)
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect();
    match sections
        .iter_mut()
        .find(|s| s.lines().next() == Some(title))
    {
        Some(previous) => *previous = section.to_owned(),
        None => sections.push(section.to_owned()),
    }
    let joined: Vec<&str> = sections.iter().map(|s| s.trim_end()).collect();
    crate::drill::report::write_report(out, &(joined.join("\n\n") + "\n"))
}

/// The file's sections, each from a line starting with `# ` to the next.
fn split_sections(text: &str) -> Vec<String> {
    let mut sections: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# ") || sections.is_empty() {
            sections.push(String::new());
        }
        let current = sections.last_mut().expect("a section");
        current.push_str(line);
        current.push('\n');
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drills_section_replaces_its_previous_one_and_keeps_the_others() {
        let dir = std::env::temp_dir().join(format!("memd-drill-{}", ulid::Ulid::generate()));
        let out = dir.join("drills.md");
        write_section(&out, "# memd drill kill\n\nold kill\n").unwrap();
        write_section(&out, "# memd drill soak\n\nsoak figures\n").unwrap();
        write_section(&out, "# memd drill kill\n\nnew kill\n").unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            text,
            "# memd drill kill\n\nnew kill\n\n# memd drill soak\n\nsoak figures\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
