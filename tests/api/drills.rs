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
