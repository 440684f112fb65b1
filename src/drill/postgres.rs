//! `memd drill pg-restart` and `pg-outage`: PostgreSQL stopped under mixed
//! load, then started again. The drill runs its own PostgreSQL server (a
//! fresh cluster in a temporary folder, on a free port of 127.0.0.1), so
//! stopping it disturbs nothing else on the machine.
//!
//! What it checks: what clients receive meanwhile (503 with `Retry-After`,
//! never a 500, never a hang past the client's timeout), how soon appends
//! and bundles succeed again, how soon projections catch up, and that
//! nothing acknowledged was lost or doubled.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use super::{
    CLIENT_TIMEOUT, Daemon, Prepared, chain_and_drift,
    load::{Load, Tally},
    lost_and_duplicated, none_or_found, ok_or_broken, prepare, resend, write_section,
};
use crate::{
    db::{self, private_server::PrivateServer},
    drill::report::titled_header,
};

/// Load before PostgreSQL stops, and after both kinds of request work again.
const STEADY: Duration = Duration::from_secs(3);
/// How long after PostgreSQL is back appends and bundles must work again.
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

struct Round {
    tally: Tally,
    appends_back: Option<Duration>,
    bundles_back: Option<Duration>,
    caught_up: Option<Duration>,
    acknowledged: usize,
    retried: usize,
    retry_failures: usize,
    lost: i64,
    duplicates: i64,
    chain_ok: bool,
    drift_ok: bool,
}

pub(super) async fn run(
    down: Duration,
    rounds: usize,
    clients: usize,
    out: &Path,
) -> anyhow::Result<()> {
    let server = PrivateServer::create().await?;
    let url = server.url("memd_drill");
    db::create_database_if_missing(&url).await?;
    let prepared = prepare(url.parse()?).await?;
    let (daemon, _) = Daemon::start(&url, "none").await?;
    let mut figures = Vec::new();
    let mut acknowledged = Vec::new();
    for round in 0..rounds {
        let figure = stop_and_start(
            &server,
            &prepared,
            &daemon,
            down,
            clients,
            &format!("r{round}"),
            &mut acknowledged,
        )
        .await?;
        eprintln!(
            "round {}: {:?}; appends back after {:?}, bundles after {:?}; projections caught up {:?} after the load; {} lost, {} duplicated",
            round + 1,
            figure.tally,
            figure.appends_back,
            figure.bundles_back,
            figure.caught_up,
            figure.lost,
            figure.duplicates
        );
        figures.push(figure);
    }
    daemon.kill().await?;
    prepared.pool.close().await;
    let title = if down.is_zero() {
        "memd drill pg-restart"
    } else {
        "memd drill pg-outage"
    };
    write_section(
        out,
        &render(title, down, clients, &figures, &prepared.environment),
    )?;
    anyhow::ensure!(
        figures.iter().all(Round::passed),
        "the drill found faults (see {})",
        out.display()
    );
    Ok(())
}

/// One round: load, PostgreSQL stopped for `down` and started again, the
/// failed appends sent again, then the checks. `acknowledged` gathers the
/// keys acknowledged over all rounds.
async fn stop_and_start(
    server: &PrivateServer,
    prepared: &Prepared,
    daemon: &Daemon,
    down: Duration,
    clients: usize,
    label: &str,
    acknowledged: &mut Vec<String>,
) -> anyhow::Result<Round> {
    let load = Load::start(&[&daemon.base_url], &prepared.token, clients, label);
    tokio::time::sleep(STEADY).await;
    server.stop().await?;
    tokio::time::sleep(down).await;
    server.start().await?;
    let up = load.started.elapsed();
    let (appends_at, bundles_at) = load.first_successes_after(up, RECOVERY_BOUND).await;
    let (appends_back, bundles_back) = (appends_at.map(|at| at - up), bundles_at.map(|at| at - up));
    tokio::time::sleep(STEADY).await;
    let finished = load.finish().await;
    let load_stopped = Instant::now();
    acknowledged.extend(finished.acknowledged.iter().cloned());

    // Sent once more, as a client would once the service is back.
    let (resent, retry_failures) = resend(
        &daemon.base_url,
        &prepared.token,
        &finished.failed_appends,
        1,
    )
    .await;
    acknowledged.extend(resent);
    let caught_up = caught_up(&prepared.pool)
        .await?
        .then(|| load_stopped.elapsed());
    let (_, lost, duplicates) = lost_and_duplicated(&prepared.pool, acknowledged).await?;
    let (chain_ok, drift_ok) = chain_and_drift(&prepared.pool, &prepared.tenant).await?;
    Ok(Round {
        tally: Tally::of(&finished.samples),
        appends_back,
        bundles_back,
        caught_up,
        acknowledged: finished.acknowledged.len(),
        retried: finished.failed_appends.len(),
        retry_failures,
        lost,
        duplicates,
        chain_ok,
        drift_ok,
    })
}

impl Round {
    fn passed(&self) -> bool {
        self.tally.bad() == 0
            && self.appends_back.is_some()
            && self.bundles_back.is_some()
            && self.caught_up.is_some()
            && self.retry_failures == 0
            && self.lost == 0
            && self.duplicates == 0
            && self.chain_ok
            && self.drift_ok
    }
}

/// Waits (at most two minutes) until no tenant's projections lag the log;
/// false if they still do then.
pub(super) async fn caught_up(pool: &sqlx::PgPool) -> anyhow::Result<bool> {
    let engine = crate::startup::ProjectionConfig::default().engine();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if memd_projectors::runtime::lagging_tenants(pool, &engine)
            .await?
            .is_empty()
        {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(false)
}

/// Milliseconds, or `never`.
pub(super) fn ms(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
}

fn render(
    title: &str,
    down: Duration,
    clients: usize,
    figures: &[Round],
    environment: &str,
) -> String {
    use std::fmt::Write as _;
    let mut out = titled_header(title, environment);
    let stop = if down.is_zero() {
        "stopped (`pg_ctl stop -m fast`, which ends every session) and at once started again"
            .to_owned()
    } else {
        format!(
            "stopped (`pg_ctl stop -m fast`, which ends every session), left down {} s, and started again",
            down.as_secs()
        )
    };
    let _ = write!(
        out,
        "\nThe drill starts a PostgreSQL server of its own (a new cluster in a temporary folder, on a free port of \
         127.0.0.1) and `memd serve` on it. In each round {clients} clients alternate an append (one event, with an \
         idempotency key) and a bundle for {steady} s; then PostgreSQL is {stop}; the load goes on until both an \
         append and a bundle sent after the restart succeed, and {steady} s more. A client that gets an error waits \
         100 ms and goes on; its client timeout is {timeout} s. *Back after*: from PostgreSQL accepting connections \
         to the answer of the first successful request of that kind sent after it. Then every append that failed \
         is sent again with its key, and *catch-up* is the time from the end of the load until no projection lags \
         the log. *Bad answers* are anything but a success or a 503 with `Retry-After`: a 500, another status, no \
         answer within the timeout, a refused connection.\n\n\
         | round | requests | ok | 503 with Retry-After | bad answers | slowest failed answer ms | appends back after ms | bundles back after ms | catch-up ms | events acknowledged | failed appends retried | retries failed | lost | duplicated | chain | drift |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
        steady = STEADY.as_secs(),
        timeout = CLIENT_TIMEOUT.as_secs(),
    );
    for (i, f) in figures.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            f.tally.requests,
            f.tally.ok,
            f.tally.unavailable_with_retry_after,
            f.tally.bad(),
            f.tally.slowest_failure.as_secs_f64() * 1e3,
            ms(f.appends_back),
            ms(f.bundles_back),
            ms(f.caught_up),
            f.acknowledged,
            f.retried,
            f.retry_failures,
            f.lost,
            f.duplicates,
            ok_or_broken(f.chain_ok),
            none_or_found(f.drift_ok),
        );
    }
    for (i, f) in figures
        .iter()
        .enumerate()
        .filter(|(_, f)| f.tally.bad() > 0)
    {
        let _ = writeln!(out, "\nRound {}'s bad answers: {:?}", i + 1, f.tally);
    }
    out
}
