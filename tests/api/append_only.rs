//! The database itself refuses to change or remove events and artifacts.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon, tool_result};

#[sqlx::test]
async fn update_delete_and_truncate_fail_inside_postgres(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let big = "line\n".repeat(20_000);
    app.append(&token, &message("s1", "original")).await;
    app.append(&token, &tool_result("big.log", &big)).await;
    assert_eq!(app.count("SELECT count(*) FROM artifacts").await, 1);

    let attempts = [
        "UPDATE events SET content = '{\"text\": \"forged\"}' WHERE seq = 1",
        "UPDATE events SET seq = seq + 100",
        "DELETE FROM events WHERE seq = 1",
        "DELETE FROM events",
        "TRUNCATE events",
        "TRUNCATE events CASCADE",
        "UPDATE artifacts SET bytes = 'forged'",
        "DELETE FROM artifacts",
        "TRUNCATE artifacts",
        "TRUNCATE tenants CASCADE",
        "DELETE FROM tenants",
    ];
    for sql in attempts {
        let err = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&app.pool)
            .await
            .expect_err(sql);
        let message = err.to_string();
        assert!(
            message.contains("append-only") || message.contains("violates foreign key"),
            "{sql}: {message}"
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM events").await, 2);
    assert_eq!(app.count("SELECT count(*) FROM artifacts").await, 1);
    let text: String = sqlx::query_scalar("SELECT content->>'text' FROM events WHERE seq = 1")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(text, "original");
}
