//! `memd bench acb` as a user runs it, on a tiny history with the
//! weight-free embedder: every scenario is measured, none with a failed
//! bundle (or append, in an agent's turn), and every retrieval scenario
//! really retrieves, with vector candidates in every bundle.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{run_bench, spawn_daemon};

#[sqlx::test]
async fn the_bundle_bench_measures_every_scenario_without_a_failed_bundle(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let (report, rows) = run_bench(
        &app.database_url().await,
        &[
            "acb",
            "--sizes",
            "300",
            "--seconds",
            "0.3",
            "--restarts",
            "1",
            "--embedder",
            "hashed",
        ],
    )
    .await;
    // | events | scenario | clients | bundles | bundles/s | p50 | p95 | p99 | errors | mean tokens
    // | mean candidate pool | hybrid bundles |
    let measured: Vec<&Vec<String>> = rows.iter().filter(|row| row.len() == 14).collect();
    for (scenario, retrieves) in [
        ("fast path", false),
        ("retrieval path", true),
        ("retrieval path, every question new", true),
        (
            "agent turn (append a message, then a retrieval bundle)",
            true,
        ),
    ] {
        for clients in ["1", "32"] {
            let row = measured
                .iter()
                .find(|row| row[2] == scenario && row[3] == clients)
                .unwrap_or_else(|| panic!("no row for {scenario} x{clients}: {report}"));
            assert!(row[4].parse::<u64>().unwrap() > 0, "{report}");
            assert_eq!(row[9], "0", "errors in {scenario} x{clients}: {report}");
            let pool: f64 = row[11].parse().unwrap();
            assert_eq!(pool > 0.0, retrieves, "{scenario} x{clients}: {report}");
            // Every retrieval bundle measured was hybrid, none lexical
            // while the vector index loaded.
            let hybrid = if retrieves { &row[4] } else { "0" };
            assert_eq!(row[12], hybrid, "{scenario} x{clients}: {report}");
        }
    }
}
