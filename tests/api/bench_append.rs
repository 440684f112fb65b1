//! `memd bench append` as a user runs it, briefly: every scenario is
//! measured without a failed request, after the warm-up that gives it a
//! running daemon's state instead of an empty database's.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{run_bench, spawn_daemon};

#[sqlx::test]
async fn the_append_bench_measures_every_scenario_without_a_failed_request(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let (report, _) = run_bench(
        &app.database_url().await,
        &["append", "--seconds", "0.2", "--embedder", "none"],
    )
    .await;
    assert!(
        report.contains(
            "each of the 8 tenants got 200 events, projected, and the tables were analyzed"
        ),
        "{report}"
    );
    // | scenario | writers | events/request | requests | events/s | p50 | p95 | p99 | errors | CPU ... |
    let rows: Vec<Vec<&str>> = report
        .lines()
        .filter(|line| {
            ["| raw ", "| memd ", "| floor: "]
                .iter()
                .any(|start| line.starts_with(start))
        })
        .map(|line| line.split('|').map(str::trim).collect())
        .filter(|cells: &Vec<&str>| cells.len() == 13)
        .collect();
    for (scenario, writers) in [
        (
            "raw INSERT, one row per transaction",
            ["1", "8", "32"].as_slice(),
        ),
        ("raw INSERT, multi-row", &["1", "8"]),
        ("memd single append, one tenant", &["1", "8", "32"]),
        ("memd single append, 8 tenants", &["8", "32"]),
        ("memd batched append, one tenant", &["1"]),
        ("memd batched append, 8 tenants", &["8", "32"]),
        ("floor: HTTP round trip, no database (GET /healthz)", &["1"]),
        ("floor: raw INSERT of a log row, the log's indexes", &["1"]),
        (
            "floor: raw multi-row INSERT of log rows, the log's indexes",
            &["1"],
        ),
    ] {
        for writers in writers {
            let row = rows
                .iter()
                .find(|row| row[1] == scenario && row[2] == *writers)
                .unwrap_or_else(|| panic!("no row for {scenario} x{writers}: {report}"));
            assert!(row[4].parse::<u64>().unwrap() > 0, "{report}");
            assert_eq!(row[9], "0", "errors in {scenario} x{writers}: {report}");
        }
    }
    // The floor's own line in the ratio table: the two floor rows one
    // after the other, so never faster than the slower of them.
    let rate = |scenario: &str| -> f64 {
        let row = rows.iter().find(|row| row[1] == scenario).unwrap();
        row[5].parse().unwrap()
    };
    let slower = rate("floor: HTTP round trip, no database (GET /healthz)")
        .min(rate("floor: raw INSERT of a log row, the log's indexes"));
    let floor: f64 = report
        .lines()
        .find_map(|line| {
            line.strip_prefix(
                "| single, 1 writer, at most: the two floor rows one after the other | ",
            )
        })
        .unwrap_or_else(|| panic!("no floor line in the ratio table: {report}"))
        .split('|')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        floor > 0.0 && floor <= slower,
        "{floor} vs {slower}: {report}"
    );
}
