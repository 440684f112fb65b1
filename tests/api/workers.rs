//! Projection shared by several `memd project` processes, run as an
//! operator runs them: real processes on a backlog, one of them killed
//! with SIGKILL in the middle of the work.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{run_bench, spawn_daemon};

#[sqlx::test]
async fn a_killed_projector_process_has_its_tenants_taken_over_without_drift(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    // The bench exits non-zero when a tenant's projections differ from a
    // rebuild of its log after the kill.
    let (report, rows) = run_bench(
        &app.database_url().await,
        &[
            "workers",
            "--tenants",
            "6",
            "--events",
            "1500",
            "--processes",
            "1,2",
        ],
    )
    .await;
    // | processes | events | seconds | events/s | vs 1 process |
    assert_eq!(rows[0][1..3], ["1", "9000"], "{report}");
    assert_eq!(rows[1][1..3], ["2", "9000"], "{report}");
    // | events | projected at kill | held | sessions gone ms | taken over p50 | max | all projected after kill s | tenants drifted |
    let kill = &rows[2];
    assert_eq!(kill[1], "9000", "{report}");
    let at_kill: f64 = kill[2].trim_end_matches('%').parse().unwrap();
    assert!(
        (40.0..100.0).contains(&at_kill),
        "killed at {at_kill}%: {report}"
    );
    assert_eq!(kill[8], "0", "drifted tenants: {report}");
}
