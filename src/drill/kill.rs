//! `memd drill kill`: `kill -9` of a real daemon process under mixed load
//! (single and batched appends, every event with an idempotency key), then a
//! restart and the retry of every request that got no answer, as a client
//! would. After each round: acknowledged events still stored, no
//! duplicates, `verify` and `drift-check` clean.

use std::{
    collections::HashSet,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::{Value, json};

use super::{
    Daemon, chain_and_drift, client, event, lost_and_duplicated, none_or_found, ok_or_broken,
    prepare, write_section,
};
use crate::{
    db::{self, ScratchDatabase},
    drill::report::titled_header,
};

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

pub(super) async fn run(
    database_url: &str,
    rounds: usize,
    clients: usize,
    out: &Path,
) -> anyhow::Result<()> {
    let scratch = ScratchDatabase::create(database_url, "memd_drill").await?;
    let result = kill_rounds(database_url, &scratch, rounds, clients).await;
    scratch.drop_now().await?;
    let (figures, environment) = result?;
    write_section(out, &render(&figures, clients, &environment))
}

/// What the clients saw: events acknowledged (by idempotency key), and
/// requests that got no answer (to retry).
#[derive(Default)]
struct Seen {
    acknowledged: Vec<String>,
    unanswered: Vec<Value>,
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
    let prepared = prepare(scratch.options.clone()).await?;
    let (pool, token) = (&prepared.pool, &prepared.token);
    let url = db::with_database(database_url, &scratch.name);
    let mut acknowledged: HashSet<String> = HashSet::new();
    let mut figures = Vec::new();
    for round in 0..rounds {
        let (mut child, _) = Daemon::start(&url, "none").await?;
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
        let (child, restart) = Daemon::start(&url, "none").await?;
        let client = client();
        let mut replayed = 0;
        for body in &seen.unanswered {
            let answer: Value = client
                .post(format!("{}/api/v1/events", child.base_url))
                .bearer_auth(token)
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
        let (stored, lost, duplicates) = lost_and_duplicated(pool, &keys).await?;
        let (chain_ok, drift_ok) = chain_and_drift(pool, &prepared.tenant).await?;
        child.kill().await?;
        let figure = Round {
            acknowledged: seen.acknowledged.len(),
            unanswered: seen.unanswered.len(),
            retried_replayed: replayed,
            stored,
            lost,
            duplicates,
            restart_ms: restart.as_secs_f64() * 1e3,
            chain_ok,
            drift_ok,
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
            ok_or_broken(figure.chain_ok),
            none_or_found(figure.drift_ok),
        );
        figures.push(figure);
    }
    prepared.pool.close().await;
    Ok((figures, prepared.environment))
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
            ok_or_broken(f.chain_ok),
            none_or_found(f.drift_ok),
        );
    }
    out
}
