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
    let mut tx = memd_projectors::transaction::begin(&app.pool)
        .await
        .unwrap();
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

/// memd renders content as PostgreSQL's `jsonb::text` does (the hash covers
/// that text); checked against PostgreSQL itself on tricky and random values.
#[sqlx::test]
async fn content_renders_as_postgresql_renders_jsonb(pool: sqlx::PgPool) {
    use memd::domain::jsonb_text::render;
    use proptest::{
        prelude::*,
        strategy::ValueTree,
        test_runner::{Config, TestRunner},
    };
    use serde_json::Value;

    let mut values = vec![
        json!({"text": "plain", "n": 1, "neg": -7, "big": u64::MAX, "small": i64::MIN}),
        json!({"f": [0.1, 1.0, -2.5, 1e20, 1e-7, 1.5e-7, 123456.789, f64::MAX, f64::MIN_POSITIVE, 5e-324, -0.0]}),
        json!({"s": "quote \" backslash \\ nl \n tab \t cr \r bs \u{8} ff \u{c} bell \u{7} \u{1f} é 漢字 😀 /"}),
        json!({"": 0, "a": {}, "bb": [], "ab": [[], {}], "b": null, "é": true, "z": false}),
        json!([1, "two", [3.0], {"four": 4}]),
        json!("just a string"),
        json!(42.5),
    ];
    let leaf = prop_oneof![
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[^\u{0}]{0,12}".prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    let tree = leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[^\u{0}]{0,6}", inner, 0..5)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    });
    let mut runner = TestRunner::new(Config::default());
    for _ in 0..2_000 {
        values.push(tree.new_tree(&mut runner).unwrap().current());
    }

    let sent: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    let rendered: Vec<String> = sqlx::query_scalar(
        "SELECT u::jsonb::text FROM unnest($1::text[]) WITH ORDINALITY AS t (u, o) ORDER BY o",
    )
    .bind(&sent)
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut declined = 0;
    for ((value, theirs), sent) in values.iter().zip(&rendered).zip(&sent) {
        match render(value) {
            Some(ours) => assert_eq!(&ours, theirs, "rendering {sent}"),
            None => declined += 1,
        }
    }
    assert!(
        declined * 100 < values.len(),
        "memd declined to render {declined} of {} values",
        values.len()
    );
}
