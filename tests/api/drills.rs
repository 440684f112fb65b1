//! The drills run as a user runs them: real daemon processes (and for the
//! outage, a PostgreSQL server of the drill's own), real load, and the
//! report's figures read back.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{memd_cli, spawn_daemon};

#[sqlx::test]
async fn a_killed_daemon_loses_and_doubles_nothing_it_acknowledged(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let report = drill(connect, &["kill", "--rounds", "1", "--clients", "2"]).await;
    let cells = first_row(&report, "memd drill kill");
    // | round | acknowledged | unanswered | replayed events | stored | lost | duplicated | restart | chain | drift |
    assert!(cells[2].parse::<u64>().unwrap() > 0, "{cells:?}");
    assert_eq!(
        (cells[6].as_str(), cells[7].as_str()),
        ("0", "0"),
        "lost, duplicated: {cells:?}"
    );
    assert_eq!(
        (cells[9].as_str(), cells[10].as_str()),
        ("ok", "none"),
        "{cells:?}"
    );
}

/// The drill's report row as cells (`| 1 | ... |`), for a drill's section.
fn first_row(report: &str, title: &str) -> Vec<String> {
    let section = report
        .split(&format!("# {title}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {title} in {report}"));
    let row = section
        .lines()
        .find(|line| {
            line.starts_with("| ") && line.chars().nth(2).is_some_and(|c| c.is_ascii_digit())
        })
        .unwrap_or_else(|| panic!("no figures in {section}"));
    row.split('|').map(|cell| cell.trim().to_owned()).collect()
}

async fn drill(connect: PgConnectOptions, args: &[&str]) -> String {
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("drills-{}.md", ulid::Ulid::generate()));
    let mut all = vec!["drill"];
    all.extend_from_slice(args);
    all.extend(["--out", out.to_str().unwrap()]);
    let (code, printed, err) = memd_cli(&url, &all).await;
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(out);
    assert_eq!(code, 0, "{printed}{err}");
    report
}

#[sqlx::test]
async fn a_postgres_outage_is_answered_503_with_retry_after_and_loses_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // A PostgreSQL server of the drill's own, down for 3 s under load.
    let report = drill(
        connect,
        &["pg-outage", "--down-seconds", "3", "--clients", "2"],
    )
    .await;
    let cells = first_row(&report, "memd drill pg-outage");
    // | round | requests | ok | 503 with Retry-After | bad answers | slowest | appends back | bundles back | catch-up | acknowledged | retried | retries failed | lost | duplicated | chain | drift |
    assert!(
        cells[4].parse::<u64>().unwrap() > 0,
        "no 503 while down: {cells:?}"
    );
    assert_eq!(cells[5], "0", "bad answers: {report}");
    assert_ne!(cells[7], "never", "appends never came back: {cells:?}");
    assert_ne!(cells[8], "never", "bundles never came back: {cells:?}");
    assert_eq!(
        (cells[13].as_str(), cells[14].as_str()),
        ("0", "0"),
        "lost, duplicated: {cells:?}"
    );
    assert_eq!(
        (cells[15].as_str(), cells[16].as_str()),
        ("ok", "none"),
        "{cells:?}"
    );
}

#[sqlx::test]
async fn a_short_soak_answers_every_request_and_reports_memory(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let report = drill(
        connect,
        &[
            "soak",
            "--clients",
            "4",
            "--seconds",
            "4",
            "--embedder",
            "hashed",
        ],
    )
    .await;
    let cells = first_row(&report, "memd drill soak");
    // | requests | ok | errors | ...
    assert!(cells[1].parse::<u64>().unwrap() > 0, "{cells:?}");
    assert_eq!(cells[1], cells[2], "every request answered: {report}");
    assert_eq!(cells[3], "0", "{report}");
    assert!(
        report.contains("0 lost, 0 duplicated; chain ok, drift none"),
        "{report}"
    );
    assert!(report.contains("daemon RSS at start MiB"), "{report}");
}

/// The database's leader lost under load, on a Patroni cluster of the
/// test's own (`ops/ha/up.sh` on ports of its own): one round, the leader's
/// postmaster killed. Skipped only where Patroni, etcd and HAProxy cannot be
/// installed.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_database_leader_loses_and_doubles_nothing_acknowledged() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let port = free_ports(HA_PORTS);
    let cluster = HaCluster {
        dir: std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ha-failover-{port}")),
        port,
        root,
    };
    let up = cluster.script("up.sh", &[]);
    match up.status.code() {
        Some(0) => {}
        Some(3) => {
            eprintln!(
                "SKIPPED: Patroni, etcd and HAProxy cannot be installed here: {}",
                String::from_utf8_lossy(&up.stderr)
            );
            return;
        }
        _ => panic!(
            "ops/ha/up.sh failed: {}{}",
            String::from_utf8_lossy(&up.stdout),
            String::from_utf8_lossy(&up.stderr)
        ),
    }
    let out = cluster.dir.join("failover.md");
    let url = |port: u16| format!("postgres://postgres@127.0.0.1:{port}/memd_drill_failover");
    let patroni: Vec<String> = (1..=3)
        .map(|n| format!("http://127.0.0.1:{}", cluster.port + 20 + n))
        .collect();
    let args = [
        "drill".to_owned(),
        "failover".to_owned(),
        "--rounds=1".to_owned(),
        "--ways=kill".to_owned(),
        "--clients=2".to_owned(),
        format!("--leader-url={}", url(cluster.port)),
        format!("--replica-url={}", url(cluster.port + 1)),
        format!("--patroni={}", patroni.join(",")),
        format!("--out={}", out.display()),
    ];
    // What the drill says goes to a file, so that a drill that overruns
    // shows how far it got.
    let said = cluster.dir.join("drill.log");
    let mut drill = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&said).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("run memd");
    let status = tokio::time::timeout(DRILL_BOUND, drill.wait()).await;
    let said = std::fs::read_to_string(&said).unwrap_or_default();
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let status = status
        .unwrap_or_else(|_| panic!("the failover drill ran past {DRILL_BOUND:?}: {said}"))
        .unwrap();
    assert!(status.success(), "{said}{report}");
    let cells = first_row(&report, "memd drill failover");
    // | round | way | old leader | new leader | no leader s | appends back | bundles back | requests | ok | 503 | bad answers | acknowledged | retried | retries failed | lost | duplicated | chain | drift | catch-up | whole again |
    assert_ne!(cells[3], cells[4], "the leader did not change: {cells:?}");
    assert_ne!(cells[6], "never", "appends never came back: {cells:?}");
    assert_eq!(cells[11], "0", "bad answers: {report}");
    assert!(cells[12].parse::<u64>().unwrap() > 0, "{cells:?}");
    assert_eq!(cells[14], "0", "retries failed: {cells:?}");
    assert_eq!(
        (cells[15].as_str(), cells[16].as_str()),
        ("0", "0"),
        "lost, duplicated: {cells:?}"
    );
    assert_eq!(
        (cells[17].as_str(), cells[18].as_str()),
        ("ok", "none"),
        "{cells:?}"
    );
    assert_ne!(
        cells[20], "never",
        "the cluster was not whole again: {cells:?}"
    );
    assert!(report.contains(": 1 of 1 hold"), "{report}");
}

/// How long the one-round drill may take: about 40 s alone, minutes on a
/// machine busy with the rest of the suite.
const DRILL_BOUND: std::time::Duration = std::time::Duration::from_secs(420);

/// The ports `ops/ha` uses from its base (`MEMD_HA_PORT`): 0-4, 11-13, 21-23.
const HA_PORTS: u16 = 24;

/// A base port with the `count` ports from it free now, so that two runs of
/// the suite on one machine do not share a cluster.
fn free_ports(count: u16) -> u16 {
    let mut base = 20_000 + (std::process::id() % 400) as u16 * 100;
    loop {
        if (base..base + count).all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        {
            return base;
        }
        base = if base >= 59_900 { 20_000 } else { base + 100 };
    }
}

/// A Patroni cluster `ops/ha` runs for a test, in `dir` on ports from
/// `port`; stopped and deleted when dropped, whatever the test did.
struct HaCluster<'a> {
    dir: std::path::PathBuf,
    port: u16,
    root: &'a std::path::Path,
}

impl HaCluster<'_> {
    /// Runs `ops/ha/<name>`, killed after 10 minutes (a package install
    /// that never ends must fail the test, not hang it). It blocks: the test
    /// has nothing else running while it sets up or tears down.
    fn script(&self, name: &str, args: &[&str]) -> std::process::Output {
        std::process::Command::new("timeout")
            .args(["--kill-after=10", "600", "bash"])
            .arg(self.root.join("ops/ha").join(name))
            .args(args)
            .env("MEMD_HA_DIR", &self.dir)
            .env("MEMD_HA_PORT", self.port.to_string())
            .env("MEMD_BIN", env!("CARGO_BIN_EXE_memd"))
            .output()
            .expect("run an ops/ha script")
    }
}

impl Drop for HaCluster<'_> {
    fn drop(&mut self) {
        let down = self.script("down.sh", &["--purge"]);
        if !down.status.success() {
            eprintln!("ops/ha/down.sh: {}", String::from_utf8_lossy(&down.stderr));
        }
    }
}

/// In a failover the leader port can reach a demoted leader, read-only,
/// for a moment: `/readyz` says the daemon is not ready, a write is
/// answered 503 with `Retry-After` (not a 500), and both recover as soon as
/// the connections reach a writable server again. Here the test's own
/// database turns read-only for new sessions, and the daemon's sessions are
/// ended, as a demotion ends them.
#[sqlx::test]
async fn a_read_only_leader_is_not_ready_and_writes_to_it_are_retried_later(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect.clone()).await;
    let token = app.tenant("acme").await;
    let event = |key: &str| {
        serde_json::json!({"session_id": "s", "channel": "private", "kind": "message",
                           "actor": {"type": "agent", "id": "a"}, "content": {"text": "hello"},
                           "idempotency_key": key})
    };
    app.append(&token, &event("before")).await;
    alter_and_reconnect(&connect, "SET default_transaction_read_only = on").await;
    let not_ready = crate::helpers::wait_until(
        std::time::Duration::from_secs(30),
        "/readyz says the database is read-only",
        || async {
            let ready = app.readyz().await;
            if ready["reason"] == "database read-only" {
                Ok(ready)
            } else {
                Err(ready.to_string())
            }
        },
    )
    .await;
    assert_eq!(not_ready["status"], "unavailable", "{not_ready}");
    let response = app
        .client
        .post(format!("{}/api/v1/events", app.base_url))
        .bearer_auth(&token)
        .json(&event("during"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));

    alter_and_reconnect(&connect, "RESET default_transaction_read_only").await;
    crate::helpers::wait_until(
        std::time::Duration::from_secs(30),
        "/readyz says ready again",
        || async {
            let ready = app.readyz().await;
            if ready["status"] == "ready" {
                Ok(())
            } else {
                Err(ready.to_string())
            }
        },
    )
    .await;
    // The retry stores the event once.
    app.append(&token, &event("during")).await;
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE idempotency_key = 'during'")
            .await,
        1
    );
}

/// `ALTER DATABASE <the test's> <sql>`, then ends every other session of
/// it, so the daemon's next connections start with the new setting.
async fn alter_and_reconnect(connect: &PgConnectOptions, sql: &str) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect_with(connect).await.unwrap();
    // This session writes whatever the database's default now is.
    sqlx::query("SET default_transaction_read_only = off")
        .execute(&mut admin)
        .await
        .unwrap();
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{database}\" {sql}"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(&mut admin)
    .await
    .unwrap();
}
