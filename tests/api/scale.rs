//! `memd bench scale` as a user runs it, on a tiny log: every figure it
//! reports is measured (appends, bundles, a rebuild, a verify) without a
//! failed request, size after size of the same log.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{run_bench, spawn_daemon};

#[sqlx::test]
async fn the_scale_bench_measures_each_size_of_one_growing_log(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let (report, rows) = run_bench(
        &app.database_url().await,
        &[
            "scale",
            "--sizes",
            "2000,4000",
            "--tenants",
            "2",
            "--seconds",
            "0.5",
        ],
    )
    .await;
    // | size | events in the log | per tenant | fast | retrieval | single | batched | rebuild | verify | events table | chunks table |
    assert_eq!(rows.len(), 2, "{report}");
    assert_eq!(rows[0][1..4], ["2000", "2000", "1000"], "{report}");
    assert_eq!(
        (rows[1][1].as_str(), rows[1][3].as_str()),
        ("4000", "2000"),
        "{report}"
    );
    // The second size's log also holds the first size's bench appends,
    // made to a tenant of their own.
    assert!(rows[1][2].parse::<u64>().unwrap() > 4000, "{report}");
    assert!(report.contains("Failed requests: 0."), "{report}");
}
