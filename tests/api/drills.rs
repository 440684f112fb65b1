//! `memd drill kill` runs as a user runs it: real daemon processes, a
//! SIGKILL under load, a restart and retries; nothing acknowledged is lost.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{memd_cli, spawn_daemon};

#[sqlx::test]
async fn a_killed_daemon_loses_and_doubles_nothing_it_acknowledged(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // Only for a database URL on this test's server; the drill makes and
    // drops a scratch database of its own.
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("drills-{}.md", ulid::Ulid::generate()));
    let (code, printed, err) = memd_cli(
        &url,
        &[
            "drill",
            "kill",
            "--rounds",
            "1",
            "--clients",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{printed}{err}");
    let report = std::fs::read_to_string(&out).unwrap();
    let row = report
        .lines()
        .find(|line| line.starts_with("| 1 |"))
        .unwrap_or_else(|| panic!("no round in {report}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // | round | acknowledged | unanswered | replayed events | stored | lost | duplicated | restart | chain | drift |
    assert!(cells[2].parse::<u64>().unwrap() > 0, "{row}");
    assert_eq!((cells[6], cells[7]), ("0", "0"), "lost, duplicated: {row}");
    assert_eq!((cells[9], cells[10]), ("ok", "none"), "{row}");
    let _ = std::fs::remove_file(out);
}
