//! `memd drill`: fault drills anyone can re-run, bounded in rounds and time,
//! talking only to 127.0.0.1, each writing its figures (with the command
//! that made them) to a Markdown file.
//!
//! - `kill`: `kill -9` of a real daemon process under mixed load (single and
//!   batched appends, every event with an idempotency key), then a restart
//!   and the retry of every request that got no answer, as a client would.
//!   After each round: acknowledged events still stored, no duplicates,
//!   `verify` and `drift-check` clean.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::{
    audit,
    bench::harness::{environment, titled_header, write_report},
    db::{self, ScratchDatabase},
    domain::tenant::{Scope, TenantId},
    startup::ProjectionConfig,
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
        #[arg(long, default_value = "bench/drills.md")]
        out: PathBuf,
    },
}

pub async fn run(command: DrillCommand, database_url: &str) -> anyhow::Result<()> {
    match command {
        DrillCommand::Kill {
            rounds,
            clients,
            out,
        } => kill(database_url, rounds, clients, &out).await,
    }
}

const TENANT: &str = "drill";
/// Events in a batched request.
const BATCH: usize = 10;

/// One round's figures.
struct Round {
    acknowledged: usize,
    unanswered: usize,
    retried_replayed: usize,
    stored: i64,
    lost: i64,
    duplicates: i64,
    restart_ms: f64,
    chain_ok: bool,
    drift_ok: bool,
}

async fn kill(database_url: &str, rounds: usize, clients: usize, out: &Path) -> anyhow::Result<()> {
    let scratch = ScratchDatabase::create(database_url, "memd_drill").await?;
    let result = kill_rounds(database_url, &scratch, rounds, clients).await;
    scratch.drop_now().await?;
    let (figures, environment) = result?;
    write_report(out, &render(&figures, clients, &environment))
}

/// A daemon in a process of its own (this binary's `serve`), on a free port.
struct Child {
    process: tokio::process::Child,
    base_url: String,
}

async fn start(url: &str) -> anyhow::Result<(Child, Duration)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let started = Instant::now();
    let process = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--no-migrate",
            "--embedder",
            "none",
            "--rate-limit-rps",
            "0",
            "--rate-limit-bytes",
            "0",
        ])
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
            return Ok((Child { process, base_url }, started.elapsed()));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the daemon was not ready within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An HTTP client that gives up on a request after 10 s: a daemon that
/// stops answering fails the drill instead of hanging it.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

/// What the clients saw: events acknowledged (by idempotency key), and
/// requests that got no answer (to retry).
#[derive(Default)]
struct Seen {
    acknowledged: Vec<String>,
    unanswered: Vec<Value>,
}

fn event(key: String, text: String) -> Value {
    json!({"session_id": "drill", "channel": "private", "actor": {"type": "agent", "id": "drill"},
           "kind": "message", "content": {"text": text}, "idempotency_key": key})
}

/// Sends appends from `clients` tasks until the daemon stops answering.
async fn load(base_url: &str, token: &str, round: usize, clients: usize) -> Seen {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let client = client();
    let tasks: Vec<_> = (0..clients)
        .map(|writer| {
            let (seen, client, url, token) = (
                seen.clone(),
                client.clone(),
                format!("{base_url}/api/v1/events"),
                token.to_owned(),
            );
            tokio::spawn(async move {
                for i in 0.. {
                    let key = |n: usize| format!("r{round}-w{writer}-{i}-{n}");
                    // Every third request a batch.
                    let (body, keys): (Value, Vec<String>) = if i % 3 == 2 {
                        let keys: Vec<String> = (0..BATCH).map(key).collect();
                        let events: Vec<Value> = keys
                            .iter()
                            .map(|k| event(k.clone(), format!("batched note {k}")))
                            .collect();
                        (json!({"events": events}), keys)
                    } else {
                        let k = key(0);
                        (event(k.clone(), format!("note {k}")), vec![k])
                    };
                    match client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await
                    {
                        Ok(response) if response.status().is_success() => {
                            seen.lock().expect("seen").acknowledged.extend(keys);
                        }
                        _ => {
                            // Killed: no answer, or an error after the kill.
                            seen.lock().expect("seen").unanswered.push(body);
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    Arc::try_unwrap(seen)
        .ok()
        .expect("clients are done")
        .into_inner()
        .expect("seen")
}

async fn kill_rounds(
    database_url: &str,
    scratch: &ScratchDatabase,
    rounds: usize,
    clients: usize,
) -> anyhow::Result<(Vec<Round>, String)> {
    let pool = db::connect(scratch.options.clone(), 4).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let tenant = TenantId::parse(TENANT).expect("valid tenant");
    let token = tenants::create_tenant(&pool, &tenant, Scope::Admin)
        .await?
        .expose()
        .to_string();
    let url = db::with_database(database_url, &scratch.name);
    let engine = ProjectionConfig::default().engine();
    let mut acknowledged: HashSet<String> = HashSet::new();
    let mut figures = Vec::new();
    for round in 0..rounds {
        let (mut child, _) = start(&url).await?;
        let base_url = child.base_url.clone();
        let token_for_load = token.clone();
        let load =
            tokio::spawn(async move { load(&base_url, &token_for_load, round, clients).await });
        // A kill at a different moment each round: 1.0 to 2.4 s into the load.
        tokio::time::sleep(Duration::from_millis(1_000 + (round as u64 * 370) % 1_500)).await;
        child.process.start_kill()?;
        child.process.wait().await?;
        let seen = load.await?;
        acknowledged.extend(seen.acknowledged.iter().cloned());

        // A restart, and the retry of every request that got no answer.
        let (mut child, restart) = start(&url).await?;
        let client = client();
        let mut replayed = 0;
        for body in &seen.unanswered {
            let answer: Value = client
                .post(format!("{}/api/v1/events", child.base_url))
                .bearer_auth(&token)
                .json(body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let results = answer["events"].as_array().cloned().unwrap_or(vec![answer]);
            replayed += results.iter().filter(|r| r["replayed"] == true).count();
            let keys = match body["events"].as_array() {
                Some(events) => events.clone(),
                None => vec![body.clone()],
            };
            acknowledged.extend(
                keys.iter()
                    .filter_map(|e| e["idempotency_key"].as_str().map(str::to_owned)),
            );
        }

        // The checks.
        let keys: Vec<String> = acknowledged.iter().cloned().collect();
        let (stored, lost, duplicates): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM events WHERE tenant_id = $1),
                    (SELECT count(*) FROM unnest($2::text[]) AS k (key)
                      WHERE NOT EXISTS (SELECT 1 FROM events e
                                         WHERE e.tenant_id = $1 AND e.idempotency_key = k.key)),
                    (SELECT count(*) FROM (SELECT idempotency_key FROM events WHERE tenant_id = $1
                                            GROUP BY 1 HAVING count(*) > 1) d)",
        )
        .bind(TENANT)
        .bind(&keys)
        .fetch_one(&pool)
        .await?;
        let chain_ok = audit::verify_chains(&pool, Some(&tenant))
            .await?
            .iter()
            .all(|report| report.broken.is_none());
        crate::bench::harness::wait_projected(&pool).await?;
        let drift =
            memd_projectors::drift::drift_check(&pool, &engine, Some(TENANT), &mut |_| {}).await?;
        child.process.start_kill()?;
        child.process.wait().await?;
        let figure = Round {
            acknowledged: seen.acknowledged.len(),
            unanswered: seen.unanswered.len(),
            retried_replayed: replayed,
            stored,
            lost,
            duplicates,
            restart_ms: restart.as_secs_f64() * 1e3,
            chain_ok,
            drift_ok: !drift.drifted(),
        };
        eprintln!(
            "round {}: {} acknowledged, {} unanswered requests retried ({} replayed), {} stored, {} lost, {} duplicated, chain {}, drift {}",
            round + 1,
            figure.acknowledged,
            figure.unanswered,
            figure.retried_replayed,
            figure.stored,
            figure.lost,
            figure.duplicates,
            if figure.chain_ok { "ok" } else { "BROKEN" },
            if figure.drift_ok { "none" } else { "FOUND" },
        );
        figures.push(figure);
    }
    pool.close().await;
    Ok((figures, environment))
}

fn render(figures: &[Round], clients: usize, environment: &str) -> String {
    use std::fmt::Write as _;
    let mut out = titled_header("memd drill kill", environment);
    let _ = write!(
        out,
        "\nEach round starts `memd serve` as a process of its own on a scratch database, {clients} clients send \
         appends (two single events, then a batch of {BATCH}, over and over; every event with an idempotency key), \
         and the daemon is killed with SIGKILL 1.0 to 2.4 s in. A new daemon is started (*restart*: from spawning \
         the process to `/readyz` answering 200), and every request that got no answer is sent again unchanged, as \
         a client would; a retried event that had been stored before the kill comes back `replayed`. Then: every \
         event ever acknowledged (or acknowledged on retry) is looked up by its key (*lost*), keys stored twice are \
         counted (*duplicated*), the hash chain is verified and the projections drift-checked. Counts are \
         cumulative over rounds except *acknowledged* and *retried*.\n\n\
         | round | events acknowledged | requests unanswered, retried | events replayed on retry | events stored | lost | duplicated | restart ms | chain | drift |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n"
    );
    for (i, f) in figures.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |",
            i + 1,
            f.acknowledged,
            f.unanswered,
            f.retried_replayed,
            f.stored,
            f.lost,
            f.duplicates,
            f.restart_ms,
            if f.chain_ok { "ok" } else { "BROKEN" },
            if f.drift_ok { "none" } else { "FOUND" },
        );
    }
    out
}
