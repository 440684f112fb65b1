//! `memd bench scale` as a user runs it, on a tiny log: every figure it
//! reports is measured (appends, bundles, a rebuild, a verify) without a
//! failed request, size after size of the same log.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{memd_cli, spawn_daemon};

#[sqlx::test]
async fn the_scale_bench_measures_each_size_of_one_growing_log(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("scale-{}.md", ulid::Ulid::generate()));
    let (code, printed, err) = memd_cli(
        &url,
        &[
            "bench",
            "scale",
            "--sizes",
            "2000,4000",
            "--tenants",
            "2",
            "--seconds",
            "0.5",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    for file in [
        out.clone(),
        out.with_file_name(format!(
            "{}-latency.svg",
            out.file_stem().unwrap().to_str().unwrap()
        )),
        out.with_file_name(format!(
            "{}-throughput.svg",
            out.file_stem().unwrap().to_str().unwrap()
        )),
    ] {
        assert!(
            file.exists() || file == out,
            "{} not written",
            file.display()
        );
        let _ = std::fs::remove_file(file);
    }
    assert_eq!(code, 0, "{printed}{err}");
    let rows: Vec<Vec<String>> = report
        .lines()
        .filter(|line| line.starts_with("| ") && line.as_bytes()[2].is_ascii_digit())
        .map(|line| line.split('|').map(|c| c.trim().to_owned()).collect())
        .collect();
    // | size | events in the log | per tenant | fast | retrieval | single | batched | rebuild | verify | events table | chunks table |
    assert_eq!(rows.len(), 2, "{report}");
    assert_eq!(rows[0][1..4], ["2000", "2000", "1000"], "{report}");
    assert_eq!(
        (&rows[1][1], &rows[1][3]),
        (&"4000".to_owned(), &"2000".to_owned()),
        "{report}"
    );
    // The second size's log also holds the first size's bench appends,
    // made to a tenant of their own.
    assert!(rows[1][2].parse::<u64>().unwrap() > 4000, "{report}");
    assert!(report.contains("Failed requests: 0."), "{report}");
}
