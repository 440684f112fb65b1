//! The daemon logs in as `memd_app`, a role that can append to the log and
//! keep the projections, but cannot rewrite, delete or unprotect anything.

use memd::{
    db::{self, roles::DAEMON_ROLE},
    startup::ServeConfig,
};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon_with, test_keyring, wait_projected};

#[sqlx::test]
async fn the_daemons_role_appends_and_projects_but_cannot_rewrite_the_log(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // `memd migrate`, as the owner: migrations, then the role's grants.
    let owner = db::connect(connect.clone(), 2).await.unwrap();
    db::migrate(&owner).await.unwrap();
    let role_connect = connect.clone().username(DAEMON_ROLE);

    // The whole daemon as memd_app: migrate only checks, then it serves.
    let app = spawn_daemon_with(
        role_connect.clone(),
        ServeConfig {
            keyring: test_keyring(),
            ..ServeConfig::default()
        },
    )
    .await;
    let who: (String, bool) = sqlx::query_as(
        "SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(who, (DAEMON_ROLE.to_owned(), false));
    let token = app.tenant("acme").await;
    let first = app
        .append(&token, &message("s1", "the export runs nightly at two"))
        .await;
    app.append(
        &token,
        &json!({"session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "a"},
                "kind": "decision", "content": {"decision": "Exports run at two", "key": "export-time",
                "scope": "project"}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let acb: serde_json::Value = app
        .client
        .post(format!("{}/api/v1/acb/build", app.base_url))
        .bearer_auth(&token)
        .json(&json!({"session_id": "s2", "query_text": "when does the export run?"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(acb.to_string().contains("nightly at two"), "{acb}");
    // Operator jobs run in the daemon too: a drift check builds a shadow
    // schema of its own and compares.
    let queued: serde_json::Value = app
        .client
        .post(format!("{}/api/v1/admin/drift-check", app.base_url))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["status"], "done", "{job}");
    assert_eq!(job["result"]["drifted"], false, "{job}");

    // What the role may not do, each refused by PostgreSQL itself.
    let event = first["event_id"].as_str().unwrap();
    for statement in [
        format!("UPDATE events SET content = '{{}}' WHERE event_id = '{event}'"),
        format!("DELETE FROM events WHERE event_id = '{event}'"),
        "TRUNCATE events".to_owned(),
        "ALTER TABLE events DISABLE TRIGGER events_append_only".to_owned(),
        "ALTER TABLE events DISABLE TRIGGER ALL".to_owned(),
        "DROP TABLE events".to_owned(),
        "UPDATE checkpoints SET seq = 1".to_owned(),
        "DELETE FROM tenants".to_owned(),
        "CREATE TABLE public.shadow_log (x int)".to_owned(),
        "SET ROLE postgres".to_owned(),
        "CREATE ROLE intruder SUPERUSER".to_owned(),
    ] {
        let refused = sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&app.pool)
            .await
            .expect_err(&statement);
        let code = refused
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(
            code.as_deref(),
            Some("42501"),
            "{statement}: insufficient_privilege expected, got {refused}"
        );
    }
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE tenant_id = 'acme'")
        .fetch_one(&owner)
        .await
        .unwrap();
    assert_eq!(stored, 2, "nothing was changed");
}

/// A rebuild as `memd_app` vacuums and analyzes what it rebuilt: the daemon
/// owns the disposable projection tables (never the log), and only an owner
/// may vacuum a table.
#[sqlx::test]
async fn a_rebuild_as_the_daemons_role_vacuums_the_projections_it_rebuilt(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let owner = db::connect(connect.clone(), 2).await.unwrap();
    db::migrate(&owner).await.unwrap();
    let app = spawn_daemon_with(
        connect.clone().username(DAEMON_ROLE),
        ServeConfig {
            keyring: test_keyring(),
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    for i in 0..20 {
        app.append(&token, &message("s1", &format!("note {i} on the export")))
            .await;
    }
    wait_projected(&app.pool, "acme").await;
    let owners: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.oid::regclass::text, pg_get_userbyid(c.relowner)::text
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname IN ('public', 'projections') AND c.relkind IN ('r', 'p')",
    )
    .fetch_all(&owner)
    .await
    .unwrap();
    for (table, role) in &owners {
        let projection = table.starts_with("projections.");
        assert_eq!(
            role == DAEMON_ROLE,
            projection,
            "{table} is owned by {role}"
        );
    }

    let before: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&owner)
        .await
        .unwrap();
    let (status, queued) = app.post_admin("rebuild", &token, None).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{queued}");
    let job = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["status"], "done", "{job}");
    let engine = memd::startup::ProjectionConfig::default().engine();
    let tenants = ["acme".to_owned()];
    let vacuumed = memd_projectors::rebuild::vacuumed_tables(&owner, &engine, Some(&tenants))
        .await
        .unwrap();
    assert!(
        vacuumed.iter().any(|t| t.contains("chunks_p")),
        "{vacuumed:?}"
    );
    // The statistics arrive a moment after the VACUUM: waited for, bounded.
    let bound = std::time::Duration::from_secs(30);
    crate::helpers::wait_until(
        bound,
        "every rebuilt table vacuumed and analyzed",
        || async {
            let stale: Vec<String> = sqlx::query_scalar(
                "SELECT relid::regclass::text FROM pg_stat_user_tables
              WHERE relid::regclass::text = ANY ($1)
                AND (last_vacuum IS NULL OR last_vacuum < $2
                     OR last_analyze IS NULL OR last_analyze < $2)",
            )
            .bind(&vacuumed)
            .bind(before)
            .fetch_all(&owner)
            .await
            .unwrap();
            match stale.is_empty() {
                true => Ok(()),
                false => Err(format!("not yet: {stale:?}")),
            }
        },
    )
    .await;
}
