//! Tamper evidence: `memd verify` walks each tenant's hash chain.

use memd::audit::verify_chains;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{TestApp, memd_cli, message, spawn_daemon, tool_result};

async fn seeded(connect: PgConnectOptions) -> (TestApp, String) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("globex").await;
    for i in 0..5 {
        app.append(
            &token,
            &message("s1", &format!("turn {i}, with a number {}", i as f64 * 1.5)),
        )
        .await;
    }
    app.append(&token, &tool_result("big.log", &"x\n".repeat(40_000)))
        .await;
    app.append(
        &token,
        &json!({"events": [message("s2", "a"), message("s2", "b")]}),
    )
    .await;
    app.append(&other, &message("s9", "another tenant")).await;
    (app, token)
}

/// Runs `sql` with the append-only triggers disabled, as an attacker with
/// superuser rights could.
async fn tamper(app: &TestApp, table: &str, sql: &'static str) {
    let mut tx = app.pool.begin().await.unwrap();
    for statement in [
        format!("ALTER TABLE {table} DISABLE TRIGGER USER"),
        sql.to_string(),
        format!("ALTER TABLE {table} ENABLE TRIGGER USER"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

#[sqlx::test]
async fn an_untouched_log_verifies(_: PgPoolOptions, connect: PgConnectOptions) {
    let (app, _) = seeded(connect).await;
    let reports = verify_chains(&app.pool, None).await.unwrap();
    assert_eq!(reports.len(), 2);
    assert!(reports.iter().all(|r| r.broken.is_none()), "{reports:?}");
    assert_eq!(reports[0].events_ok, 8);
    assert_eq!(reports[1].events_ok, 1);

    let (code, stdout, stderr) = memd_cli(&app.database_url().await, &["verify"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("ok      tenant=acme events=8"), "{stdout}");
}

#[sqlx::test]
async fn an_altered_event_is_named(_: PgPoolOptions, connect: PgConnectOptions) {
    let (app, _) = seeded(connect).await;
    tamper(
        &app,
        "events",
        "UPDATE events SET content = '{\"text\": \"forged\"}' WHERE tenant_id = 'acme' AND seq = 3",
    )
    .await;
    let event_id: String =
        sqlx::query_scalar("SELECT event_id FROM events WHERE tenant_id = 'acme' AND seq = 3")
            .fetch_one(&app.pool)
            .await
            .unwrap();

    let (code, stdout, _) = memd_cli(&app.database_url().await, &["verify"]).await;
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains(&format!("BROKEN  tenant=acme seq=3 event_id={event_id}")),
        "{stdout}"
    );
    assert!(stdout.contains("ok      tenant=globex"), "{stdout}");
    let (code, stdout, _) =
        memd_cli(&app.database_url().await, &["verify", "--tenant", "globex"]).await;
    assert_eq!(code, 0, "{stdout}");
}

#[sqlx::test]
async fn a_removed_event_or_altered_artifact_is_named(_: PgPoolOptions, connect: PgConnectOptions) {
    let (app, _) = seeded(connect).await;
    tamper(&app, "artifacts", "UPDATE artifacts SET bytes = 'short'").await;
    let report = &verify_chains(&app.pool, None).await.unwrap()[0];
    let broken = report.broken.as_ref().expect("artifact tampering detected");
    assert_eq!(broken.seq, 6);
    assert!(broken.reason.contains("artifact"), "{}", broken.reason);

    tamper(
        &app,
        "events",
        "DELETE FROM events WHERE tenant_id = 'acme' AND seq = 2",
    )
    .await;
    let report = &verify_chains(&app.pool, None).await.unwrap()[0];
    let broken = report.broken.as_ref().expect("deletion detected");
    assert_eq!(broken.seq, 3);
    assert!(
        broken.reason.contains("seq 2 is missing"),
        "{}",
        broken.reason
    );
    assert_eq!(report.events_ok, 1);
}

#[sqlx::test]
async fn a_truncated_tail_is_named(_: PgPoolOptions, connect: PgConnectOptions) {
    let (app, _) = seeded(connect).await;
    tamper(
        &app,
        "events",
        "DELETE FROM events WHERE tenant_id = 'acme' AND seq = 8",
    )
    .await;
    let report = &verify_chains(&app.pool, None).await.unwrap()[0];
    let broken = report.broken.as_ref().expect("a missing tail is detected");
    assert!(
        broken.reason.contains("log ends at seq 7"),
        "{}",
        broken.reason
    );
}
