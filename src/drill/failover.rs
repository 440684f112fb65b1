//! `memd drill failover`: the database server lost under mixed load, on a
//! highly available PostgreSQL (Patroni, etcd and HAProxy: `ops/ha/up.sh`).
//!
//! The deployment is the one `docs/scaling.md` describes: two daemons and
//! one projector process on HAProxy's leader port, the daemons' bundles on
//! its replica port (`--read-database-url`). In each round clients append
//! (every event with an idempotency key) and build bundles on both daemons;
//! then the leader is lost one of three ways:
//!
//! - `kill`: SIGKILL of the leader's postmaster (a crash: Patroni promotes
//!   the synchronous standby);
//! - `failover`: Patroni's failover to the synchronous standby (what
//!   `patronictl failover` asks for), the old leader shut down at once;
//! - `switchover`: a planned switchover (`patronictl switchover`), the old
//!   leader checkpointed and stopped cleanly before the standby takes over.
//!
//! Every append that got no success is sent again with its key, as a
//! client does; then the round checks what an auditor would: every
//! acknowledged event is stored once, the chain verifies, the checkpoints
//! signed before and after still hold, the projections match a rebuild.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

use super::{
    CLIENT_TIMEOUT, Daemon, Prepared, chain_and_drift, client,
    load::{Load, Tally},
    lost_and_duplicated, none_or_found, ok_or_broken,
    postgres::ms,
    prepare, resend, write_section,
};
use crate::{
    audit::checkpoint::{self, Checkpoint},
    drill::report::titled_header,
};
use memd_core::seal::Keyring;

/// How the leader is lost in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Way {
    /// SIGKILL of the leader's postmaster.
    Kill,
    /// Patroni's failover to the synchronous standby.
    Failover,
    /// Patroni's planned switchover.
    Switchover,
}

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Kill => "kill -9 of the leader's postmaster",
            Way::Failover => "failover to the sync standby",
            Way::Switchover => "planned switchover",
        }
    }
}

/// Where the cluster is: its ports and Patroni's REST API.
pub struct Cluster {
    /// memd's database through HAProxy's leader port.
    pub leader_url: String,
    /// The same database through HAProxy's replica port.
    pub replica_url: String,
    /// Patroni's REST API of each member (any one that answers will do).
    pub patroni: Vec<String>,
}

/// Load before the leader is lost, and after appends work again.
const STEADY: Duration = Duration::from_secs(3);
/// A round fails if appends do not succeed again within this.
const RECOVERY_BOUND: Duration = Duration::from_secs(60);
/// How long the cluster may take to be whole again (the old leader back as
/// a replica, a synchronous standby) before the next round.
const WHOLE_BOUND: Duration = Duration::from_secs(180);

struct Round {
    way: Way,
    old_leader: String,
    new_leader: String,
    /// From the fault to a new leader taking writes on the leader port.
    without_leader: Option<Duration>,
    /// From the fault to the answer of the first append sent once the new
    /// leader took writes.
    appends_back: Option<Duration>,
    bundles_back: Option<Duration>,
    tally: Tally,
    acknowledged: usize,
    retried: usize,
    retry_failures: usize,
    lost: i64,
    duplicates: i64,
    chain_ok: bool,
    drift_ok: bool,
    /// From the end of the load until no projection lags the log.
    caught_up: Option<Duration>,
    /// From the fault until the cluster had three members streaming again.
    whole_again: Option<Duration>,
}

impl Round {
    fn passed(&self) -> bool {
        self.appends_back.is_some()
            && self.bundles_back.is_some()
            && self.tally.bad() == 0
            && self.retry_failures == 0
            && self.lost == 0
            && self.duplicates == 0
            && self.chain_ok
            && self.drift_ok
            && self.caught_up.is_some()
            && self.whole_again.is_some()
    }
}

pub(super) async fn run(
    cluster: &Cluster,
    rounds: usize,
    ways: &[Way],
    clients: usize,
    out: &Path,
) -> anyhow::Result<()> {
    anyhow::ensure!(!ways.is_empty(), "--ways names no way to lose the leader");
    let http = client();
    let members = cluster
        .members(&http)
        .await
        .context("no Patroni member answered: is the cluster up (ops/ha/up.sh)?")?;
    anyhow::ensure!(
        members.iter().any(|m| m.role == "leader"),
        "the cluster has no leader: {members:?}"
    );
    let deployment = Deployment::start(cluster).await?;
    let mut figures = Vec::new();
    let mut acknowledged = Vec::new();
    let mut signed = Vec::new();
    for round in 0..rounds {
        let way = ways[round % ways.len()];
        let figure = lose_one_leader(
            cluster,
            &deployment,
            way,
            clients,
            &format!("f{round}"),
            &mut acknowledged,
        )
        .await?;
        eprintln!(
            "round {} ({}): {} -> {}; no leader for {} s, appends back after {} ms; {:?}; {} lost, {} duplicated",
            round + 1,
            figure.way.label(),
            figure.old_leader,
            figure.new_leader,
            seconds(figure.without_leader),
            ms(figure.appends_back),
            figure.tally,
            figure.lost,
            figure.duplicates
        );
        figures.push(figure);
        signed.extend(deployment.sign().await?);
    }
    let trusted = deployment.keyring.public_key().expect("a key was loaded");
    let checked = checkpoint::check(&deployment.prepared.pool, &trusted, signed).await?;
    let checkpoints_hold = checked.iter().filter(|c| c.holds()).count();
    let environment = deployment.prepared.environment.clone();
    deployment.stop().await?;
    write_section(
        out,
        &render(
            clients,
            &figures,
            (checkpoints_hold, checked.len()),
            &environment,
        ),
    )?;
    anyhow::ensure!(
        figures.iter().all(Round::passed) && checkpoints_hold == checked.len(),
        "the drill found faults (see {})",
        out.display()
    );
    Ok(())
}

/// memd as deployed on the cluster: two daemons and a projector process on
/// the leader port, the daemons' bundles on the replica port, all with one
/// key (the drill signs checkpoints with it too).
struct Deployment {
    prepared: Prepared,
    daemons: [Daemon; 2],
    projector: tokio::process::Child,
    keyring: Keyring,
    key_dir: PathBuf,
}

impl Deployment {
    async fn start(cluster: &Cluster) -> anyhow::Result<Self> {
        fresh_database(&cluster.leader_url).await?;
        let prepared = prepare(cluster.leader_url.parse()?).await?;
        let key_dir =
            std::env::temp_dir().join(format!("memd-failover-{}", ulid::Ulid::generate()));
        std::fs::create_dir_all(&key_dir)?;
        let key_file = key_dir.join("memd.key");
        std::fs::write(&key_file, Keyring::generate())?;
        let keyring = Keyring::load(&key_file)?;
        let key_path = key_file.to_str().context("a UTF-8 temporary path")?;
        let serving = [
            "--no-projectors",
            "--key-file",
            key_path,
            "--checkpoint-interval-secs",
            "0",
            "--read-database-url",
            &cluster.replica_url,
        ];
        let (first, _) = Daemon::start_with(&cluster.leader_url, "none", &serving).await?;
        let (second, _) = Daemon::start_with(&cluster.leader_url, "none", &serving).await?;
        let projector = tokio::process::Command::new(std::env::current_exe()?)
            .args(["project", "--embedder", "none", "--key-file", key_path])
            .args(["--database-url", &cluster.leader_url])
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting memd project")?;
        Ok(Self {
            prepared,
            daemons: [first, second],
            projector,
            keyring,
            key_dir,
        })
    }

    /// Signs the tenant's head now.
    async fn sign(&self) -> anyhow::Result<Vec<Checkpoint>> {
        let prepared = &self.prepared;
        let taken = checkpoint::take(&prepared.pool, &self.keyring, Some(&prepared.tenant)).await?;
        anyhow::ensure!(
            taken.refused.is_empty(),
            "a checkpoint was refused: {:?}",
            taken.refused
        );
        Ok(taken.signed)
    }

    async fn stop(self) -> anyhow::Result<()> {
        let [first, second] = self.daemons;
        first.kill().await?;
        second.kill().await?;
        let mut projector = self.projector;
        projector.start_kill()?;
        projector.wait().await?;
        self.prepared.pool.close().await;
        let _ = std::fs::remove_dir_all(&self.key_dir);
        Ok(())
    }
}

/// One round: load on both daemons, the leader lost `way`, the failed
/// appends sent again, then the checks. `acknowledged` gathers the keys
/// acknowledged over all rounds.
async fn lose_one_leader(
    cluster: &Cluster,
    deployment: &Deployment,
    way: Way,
    clients: usize,
    label: &str,
    acknowledged: &mut Vec<String>,
) -> anyhow::Result<Round> {
    let http = client();
    let prepared = &deployment.prepared;
    let [first, second] = &deployment.daemons;
    let load = Load::start(
        &[&first.base_url, &second.base_url],
        &prepared.token,
        clients,
        label,
    );
    tokio::time::sleep(STEADY).await;
    let old = cluster.leader(&http).await?;
    let fault = load.started.elapsed();
    let faulted = Instant::now();
    lose_leader(cluster, &http, way, &old).await?;
    let new = match new_leader(cluster, old.port, faulted).await {
        Some((port, took)) => Some((cluster.name_of(&http, port).await, took)),
        None => None,
    };
    let leader_at = load.started.elapsed();
    let (appends_at, bundles_at) = load.first_successes_after(leader_at, RECOVERY_BOUND).await;
    // From the fault, though only what was sent once a new leader took
    // writes counts: requests in flight before the fault may succeed late.
    let (appends_back, bundles_back) = (
        appends_at.map(|at| at - fault),
        bundles_at.map(|at| at - fault),
    );
    tokio::time::sleep(STEADY).await;
    let finished = load.finish().await;
    let load_stopped = Instant::now();
    acknowledged.extend(finished.acknowledged.iter().cloned());
    let (retried, retry_failures) = resend(
        &first.base_url,
        &prepared.token,
        &finished.failed_appends,
        5,
    )
    .await;
    acknowledged.extend(retried);
    let caught_up = super::postgres::caught_up(&prepared.pool)
        .await?
        .then(|| load_stopped.elapsed());
    let (_, lost, duplicates) = lost_and_duplicated(&prepared.pool, acknowledged).await?;
    let (chain_ok, drift_ok) = chain_and_drift(&prepared.pool, &prepared.tenant).await?;
    let whole_again = cluster.wait_whole(&http).await.then(|| faulted.elapsed());
    Ok(Round {
        way,
        old_leader: old.name,
        new_leader: new
            .as_ref()
            .map_or_else(|| "none".to_owned(), |n| n.0.clone()),
        without_leader: new.map(|n| n.1),
        appends_back,
        bundles_back,
        tally: Tally::of(&finished.samples),
        acknowledged: finished.acknowledged.len(),
        retried: finished.failed_appends.len(),
        retry_failures,
        lost,
        duplicates,
        chain_ok,
        drift_ok,
        caught_up,
        whole_again,
    })
}

/// Drops and creates the drill's database on the cluster, so every run
/// starts from an empty log.
async fn fresh_database(leader_url: &str) -> anyhow::Result<()> {
    let options: sqlx::postgres::PgConnectOptions = leader_url.parse()?;
    let name = options
        .get_database()
        .context("--leader-url names no database")?
        .to_owned();
    anyhow::ensure!(
        name.starts_with("memd_drill"),
        "the drill drops and creates its database: its name must start with memd_drill, not {name}"
    );
    let mut admin = PgConnection::connect_with(&options.database("postgres")).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await?;
    Ok(())
}

/// Loses the leader `old` the way `way` says.
async fn lose_leader(
    cluster: &Cluster,
    http: &reqwest::Client,
    way: Way,
    old: &Member,
) -> anyhow::Result<()> {
    match way {
        Way::Kill => {
            // Through the leader port: the postmaster of the server that
            // answers there (root or the postgres user may signal it).
            let mut leader = PgConnection::connect(&cluster.leader_url).await?;
            let pid: i32 = sqlx::query_scalar!(
                "SELECT split_part(pg_read_file('postmaster.pid'), E'\\n', 1)::int AS \"pid!\""
            )
            .fetch_one(&mut leader)
            .await?;
            let status = tokio::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .await?;
            anyhow::ensure!(status.success(), "kill -KILL {pid} failed");
        }
        Way::Failover => {
            let members = cluster.members(http).await?;
            let candidate = members
                .iter()
                .find(|m| m.role == "sync_standby")
                .context("no synchronous standby to fail over to")?;
            cluster
                .post(http, "failover", json!({"candidate": candidate.name}))
                .await?;
        }
        Way::Switchover => {
            cluster
                .post(http, "switchover", json!({"leader": old.name}))
                .await?;
        }
    }
    Ok(())
}

/// Waits (at most [`RECOVERY_BOUND`] from `faulted`) until a server other
/// than the one on `old_port` takes writes on the leader port; its port and
/// how long after the fault that was. (Patroni answers a failover or
/// switchover request once it is done, so this may find one at once.)
async fn new_leader(cluster: &Cluster, old_port: u16, faulted: Instant) -> Option<(u16, Duration)> {
    while faulted.elapsed() < RECOVERY_BOUND {
        let answer = tokio::time::timeout(Duration::from_secs(1), async {
            let mut connection = PgConnection::connect(&cluster.leader_url).await.ok()?;
            let server = sqlx::query!(
                r#"SELECT inet_server_port() AS "port!", pg_is_in_recovery() AS "in_recovery!""#
            )
            .fetch_one(&mut connection)
            .await
            .ok()?;
            let _ = connection.close().await;
            Some((server.port, server.in_recovery))
        })
        .await
        .ok()
        .flatten();
        if let Some((port, false)) = answer
            && port != i32::from(old_port)
        {
            return Some((u16::try_from(port).unwrap_or_default(), faulted.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A member as Patroni's `/cluster` lists it.
#[derive(Debug, Clone, serde::Deserialize)]
struct Member {
    name: String,
    role: String,
    state: String,
    port: u16,
    #[serde(default)]
    lag: Option<Value>,
}

impl Cluster {
    async fn members(&self, http: &reqwest::Client) -> anyhow::Result<Vec<Member>> {
        #[derive(serde::Deserialize)]
        struct Listing {
            members: Vec<Member>,
        }
        let mut last = None;
        for api in &self.patroni {
            match http.get(format!("{api}/cluster")).send().await {
                Ok(response) if response.status().is_success() => {
                    return Ok(response.json::<Listing>().await?.members);
                }
                Ok(response) => last = Some(anyhow::anyhow!("{api}: {}", response.status())),
                Err(e) => last = Some(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no Patroni API given")))
    }

    /// The name of the member whose PostgreSQL listens on `port`.
    async fn name_of(&self, http: &reqwest::Client, port: u16) -> String {
        self.members(http)
            .await
            .ok()
            .and_then(|members| members.into_iter().find(|m| m.port == port))
            .map_or_else(|| format!("port {port}"), |m| m.name)
    }

    async fn leader(&self, http: &reqwest::Client) -> anyhow::Result<Member> {
        self.members(http)
            .await?
            .into_iter()
            .find(|m| m.role == "leader" && m.state == "running")
            .context("the cluster has no running leader")
    }

    /// Asks Patroni (any member) for a failover or switchover.
    async fn post(&self, http: &reqwest::Client, action: &str, body: Value) -> anyhow::Result<()> {
        let mut last = None;
        for api in &self.patroni {
            match http
                .post(format!("{api}/{action}"))
                .json(&body)
                .send()
                .await
            {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) => {
                    let status = response.status();
                    last = Some(anyhow::anyhow!(
                        "{api}/{action}: {status}: {}",
                        response.text().await.unwrap_or_default()
                    ));
                }
                Err(e) => last = Some(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no Patroni API given")))
    }

    /// Waits (at most [`WHOLE_BOUND`]) until one leader and every other
    /// member run, none lagging, one of them the synchronous standby.
    async fn wait_whole(&self, http: &reqwest::Client) -> bool {
        let started = Instant::now();
        while started.elapsed() < WHOLE_BOUND {
            if let Ok(members) = self.members(http).await {
                let running = members
                    .iter()
                    .all(|m| m.state == "running" || m.state == "streaming");
                let leaders = members.iter().filter(|m| m.role == "leader").count();
                let synchronous = members.iter().any(|m| m.role == "sync_standby");
                let caught_up = members
                    .iter()
                    .filter(|m| m.role != "leader")
                    .all(|m| m.lag.as_ref().and_then(Value::as_i64) == Some(0));
                if running
                    && leaders == 1
                    && synchronous
                    && caught_up
                    && members.len() == self.patroni.len()
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

fn render(
    clients: usize,
    figures: &[Round],
    (holding, checkpoints): (usize, usize),
    environment: &str,
) -> String {
    use std::fmt::Write as _;
    let mut out = titled_header("memd drill failover", environment);
    let _ = write!(
        out,
        "\nA Patroni cluster of three PostgreSQL members on this machine (`ops/ha/up.sh`: etcd, \
         `synchronous_mode: true`, HAProxy's leader and replica ports); two `memd serve --no-projectors` and one \
         `memd project` on the leader port, the daemons' bundles on the replica port. In each round {clients} clients, \
         spread over both daemons, alternate an append (one event, with an idempotency key) and a bundle for {steady} \
         s; then the leader is lost; the load goes on until an append and a bundle sent after a new leader took \
         writes succeed, and {steady} s more. A client that gets an error waits 100 ms and goes on; its timeout is \
         {timeout} s. *No leader*: from the fault to a new server taking writes on the leader port. *Appends back*: \
         from the fault to the answer of the first append sent after that. Then every failed append is sent again \
         with its key; *lost* counts acknowledged events not stored, *duplicated* keys stored twice. *Catch-up*: \
         from the end of the load until no projection lags the log. *Whole again*: from the fault until three \
         members run, none lagging, one the synchronous standby. *Bad answers* are anything but a success or a 503 \
         with `Retry-After`.\n\n\
         | round | way | old leader | new leader | no leader s | appends back ms | bundles back ms | requests | ok | 503 with Retry-After | bad answers | acknowledged | failed appends retried | retries failed | lost | duplicated | chain | drift | catch-up ms | whole again s |\n\
         |---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|\n",
        steady = STEADY.as_secs(),
        timeout = CLIENT_TIMEOUT.as_secs(),
    );
    for (i, f) in figures.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            f.way.label(),
            f.old_leader,
            f.new_leader,
            seconds(f.without_leader),
            ms(f.appends_back),
            ms(f.bundles_back),
            f.tally.requests,
            f.tally.ok,
            f.tally.unavailable_with_retry_after,
            f.tally.bad(),
            f.acknowledged,
            f.retried,
            f.retry_failures,
            f.lost,
            f.duplicates,
            ok_or_broken(f.chain_ok),
            none_or_found(f.drift_ok),
            ms(f.caught_up),
            seconds(f.whole_again),
        );
    }
    let _ = writeln!(
        out,
        "\nSigned checkpoints of the tenant's head after each round (each the one before the next round), by the \
         daemons' key: {holding} of {checkpoints} hold against the log after the last round (`memd verify \
         --checkpoint`'s check)."
    );
    for (i, f) in figures
        .iter()
        .enumerate()
        .filter(|(_, f)| f.tally.bad() > 0)
    {
        let _ = writeln!(out, "\nRound {}'s bad answers: {:?}", i + 1, f.tally);
    }
    out
}
