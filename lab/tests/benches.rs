//! The lab's benchmarks as a user runs them, briefly: each on a scratch
//! database it makes on the server of `DATABASE_URL` (which the test
//! command sets), from the repository's root, as the docs run them.

use std::time::Duration;

/// How long one benchmark of a test may run.
const BENCH_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `memd-bench ARGS --out FILE`, insists that it exits 0 and draws its
/// plots beside its report, removes what it wrote, and returns the report
/// with the cells of each of its figure rows (`| 1 | ... |`).
async fn run_bench(args: &[&str]) -> (String, Vec<Vec<String>>) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let stem = format!("bench-{}", ulid::Ulid::generate());
    let out = dir.join(format!("{stem}.md"));
    let mut all = args.to_vec();
    all.extend(["--out", out.to_str().expect("a UTF-8 path")]);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd-bench"))
        .args(&all)
        .current_dir(root)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(BENCH_TIMEOUT, child)
        .await
        .unwrap_or_else(|_| panic!("memd-bench {args:?} ran past {BENCH_TIMEOUT:?}"))
        .expect("run memd-bench");
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let written: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .expect("the test folder")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&stem))
        })
        .collect();
    for file in &written {
        let _ = std::fs::remove_file(file);
    }
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        written
            .iter()
            .any(|path| path.extension().is_some_and(|e| e == "svg")),
        "no plot beside the report: {written:?}"
    );
    let rows = report
        .lines()
        .filter(|line| line.starts_with("| ") && line.as_bytes()[2].is_ascii_digit())
        .map(|line| line.split('|').map(|cell| cell.trim().to_owned()).collect())
        .collect();
    (report, rows)
}

// `memd-bench acb` as a user runs it, on a tiny history with the
// weight-free embedder: every scenario is measured, none with a failed
// bundle (or append, in an agent's turn), and every retrieval scenario
// really retrieves, with vector candidates in every bundle.
#[tokio::test]
async fn the_bundle_bench_measures_every_scenario_without_a_failed_bundle() {
    let (report, rows) = run_bench(&[
        "acb",
        "--sizes",
        "300",
        "--seconds",
        "0.3",
        "--restarts",
        "1",
        "--embedder",
        "hashed",
    ])
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

// `memd-bench append` as a user runs it, briefly: every scenario is
// measured without a failed request, after the warm-up that gives it a
// running daemon's state instead of an empty database's.
#[tokio::test]
async fn the_append_bench_measures_every_scenario_without_a_failed_request() {
    let (report, _) = run_bench(&["append", "--seconds", "0.2", "--embedder", "none"]).await;
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

// `memd-bench scale` as a user runs it, on a tiny log: every figure it
// reports is measured (appends, bundles, a rebuild, a verify) without a
// failed request, size after size of the same log.
#[tokio::test]
async fn the_scale_bench_measures_each_size_of_one_growing_log() {
    let (report, rows) = run_bench(&[
        "scale",
        "--sizes",
        "2000,4000",
        "--tenants",
        "2",
        "--seconds",
        "0.5",
    ])
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

// Projection shared by several `memd project` processes, run as an
// operator runs them: real processes on a backlog, one of them killed
// with SIGKILL in the middle of the work.
#[tokio::test]
async fn a_killed_projector_process_has_its_tenants_taken_over_without_drift() {
    // The bench exits non-zero when a tenant's projections differ from a
    // rebuild of its log after the kill.
    let (report, rows) = run_bench(&[
        "workers",
        "--tenants",
        "6",
        "--events",
        "1500",
        "--processes",
        "1,2",
    ])
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
