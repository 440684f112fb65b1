//! Rebuild from zero reproduces the incremental projections exactly, and
//! drift-check tells when the live projections differ from the log.

use memd_projectors::{Schema, rebuild};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{
    TestApp, event, memd_cli, message, spawn_daemon, tool_result, wait_projected,
};

/// A history with every kind of event and every projection rule in play.
async fn varied_history(app: &TestApp, token: &str) {
    let mut refs: Vec<String> = Vec::new();
    for round in 0..6 {
        let said = app
            .append(
                token,
                &message("s1", &format!("round {round}: which database?")),
            )
            .await;
        refs.push(said["event_id"].as_str().unwrap().to_owned());
        let long: String = (0..300)
            .map(|i| format!("line {i} of round {round}\n"))
            .collect();
        app.append(token, &tool_result(&format!("src/mod{round}.rs"), &long))
            .await;
        let evidence = [refs.last().unwrap().as_str()];
        app.append(
            token,
            &event(
                "decision",
                json!({"decision": format!("Use store {round}"), "key": "db", "scope": "project"}),
                &evidence,
            ),
        )
        .await;
        app.append(
            token,
            &event(
                "decision",
                json!({"decision": "Unsupported", "scope": "project"}),
                &[],
            ),
        )
        .await;
        app.append(
            token,
            &event(
                "summary",
                json!({"text": "We use store 0", "claims": [{"key": "db", "value": "store 0"}]}),
                &evidence,
            ),
        )
        .await;
        let status = ["open", "doing", "done"][round % 3];
        app.append(
            token,
            &event(
                "task_update",
                json!({"task_id": format!("T{}", round % 2), "status": status}),
                &[],
            ),
        )
        .await;
        app.append(
            token,
            &event(
                "view_update",
                json!({"view": "rules", "text": format!("rule set {round}")}),
                &[],
            ),
        )
        .await;
    }
}

#[sqlx::test]
async fn a_rebuild_from_zero_equals_incremental_projection(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    varied_history(&app, &token).await;
    app.append(&other, &message("s1", "untouched by acme's rebuild"))
        .await;
    wait_projected(&app.pool, "acme").await;
    wait_projected(&app.pool, "other").await;
    let engine = memd::startup::ProjectionConfig::default().engine();
    let live = Schema::live();
    let incremental = rebuild::digests(&app.pool, &engine, &live, "acme")
        .await
        .unwrap();
    let other_before = rebuild::digests(&app.pool, &engine, &live, "other")
        .await
        .unwrap();
    let chunks = app
        .count("SELECT count(*) FROM projections.chunks WHERE tenant_id = 'acme'")
        .await;
    assert!(chunks > 40, "{chunks} chunks");

    let (code, stdout, stderr) =
        memd_cli(&app.database_url().await, &["rebuild", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("rebuilt tenant=acme events=42"), "{stdout}");
    assert!(stdout.contains("events/s"), "{stdout}");
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &live, "acme")
            .await
            .unwrap(),
        incremental
    );
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &live, "other")
            .await
            .unwrap(),
        other_before
    );

    // One projector alone, and every tenant at once.
    let (code, _, stderr) = memd_cli(
        &app.database_url().await,
        &["rebuild", "--projector", "decisions"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &live, "acme")
            .await
            .unwrap(),
        incremental
    );
    let (code, _, stderr) = memd_cli(
        &app.database_url().await,
        &["rebuild", "--projector", "nope"],
    )
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("unknown projector"), "{stderr}");
}

#[sqlx::test]
async fn an_operator_command_gives_up_on_a_held_lock_with_a_clear_message(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    app.append(&token, &message("s1", "hello")).await;
    wait_projected(&app.pool, "acme").await;
    app.stop().await;
    let url = app.database_url().await;
    // Rebuild waits for the tenant's live cursors, which a projector holds
    // in the middle of a batch; drift check reads the live tables, which a
    // schema change locks.
    for (command, lock) in [
        (
            "rebuild",
            "SELECT 1 FROM projections.cursors WHERE tenant_id = 'acme' FOR UPDATE",
        ),
        (
            "drift-check",
            "LOCK TABLE projections.chunks IN ACCESS EXCLUSIVE MODE",
        ),
    ] {
        let mut holder = memd_projectors::transaction::begin(&app.pool)
            .await
            .unwrap();
        sqlx::query(lock).execute(&mut *holder).await.unwrap();
        let (code, stdout, stderr) = memd_cli(
            &url,
            &[command, "--tenant", "acme", "--lock-timeout-ms", "300"],
        )
        .await;
        assert_ne!(code, 0, "{command}: {stdout}{stderr}");
        assert!(
            stderr.contains("gave up waiting for a lock"),
            "{command}: {stderr}"
        );
        holder.rollback().await.unwrap();
    }
    let (code, stdout, stderr) = memd_cli(&url, &["drift-check", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "once the lock is released: {stdout}{stderr}");
}

#[sqlx::test]
async fn drift_check_passes_on_live_projections_and_names_every_tampered_row(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    varied_history(&app, &token).await;
    wait_projected(&app.pool, "acme").await;
    let url = app.database_url().await;

    let (code, stdout, stderr) = memd_cli(&url, &["drift-check"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("no drift"), "{stdout}");

    let changed: String = sqlx::query_scalar(
        "UPDATE projections.decisions SET status = 'active'
          WHERE decision_id = (SELECT decision_id FROM projections.decisions
                                WHERE status = 'superseded' ORDER BY seq LIMIT 1)
          RETURNING decision_id",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let deleted: String = sqlx::query_scalar(
        "DELETE FROM projections.chunks
          WHERE chunk_id = (SELECT chunk_id FROM projections.chunks ORDER BY seq LIMIT 1)
          RETURNING chunk_id",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO projections.tasks (tenant_id, task_id, status, title, details, refs,
                                        session_id, channel, sensitivity, first_seq, last_seq, updated_at)
         VALUES ('acme', 'ghost', 'open', 'ghost', '', '{}', 's', 'private', 'none', 1, 1, now())",
    )
    .execute(&app.pool)
    .await
    .unwrap();

    let (code, stdout, _) = memd_cli(&url, &["drift-check", "--tenant", "acme"]).await;
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("DRIFT FOUND"), "{stdout}");
    assert!(
        stdout.contains(&changed)
            && stdout.contains("status: live \"active\" != rebuilt \"superseded\""),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{deleted}\"]: missing in live")),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"ghost\"]: in live, not produced by the log"),
        "{stdout}"
    );

    let (code, json_out, _) = memd_cli(&url, &["drift-check", "--json"]).await;
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&json_out).unwrap();
    let differing: i64 = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["differing_rows"].as_i64().unwrap())
        .sum();
    assert_eq!(differing, 3);

    // A rebuild repairs it, and the check passes again.
    let (code, _, _) = memd_cli(&url, &["rebuild"]).await;
    assert_eq!(code, 0);
    let (code, stdout, _) = memd_cli(&url, &["drift-check"]).await;
    assert_eq!(code, 0, "{stdout}");
}

#[sqlx::test]
async fn views_export_to_markdown_and_edits_import_back_as_events(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut preferences = event(
        "view_update",
        json!({"view": "preferences", "text": "Prefers short answers."}),
        &[],
    );
    preferences["sensitivity"] = json!("high");
    app.append(&token, &preferences).await;
    app.append(
        &token,
        &event(
            "view_update",
            json!({"view": "rules", "text": "1. Cite sources."}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let url = app.database_url().await;
    let dir = std::env::temp_dir().join(format!("memd-views-{}", ulid::Ulid::generate()));
    let dir_arg = dir.to_str().unwrap();

    let (code, stdout, stderr) =
        memd_cli(&url, &["views", "export", dir_arg, "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("rules"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(dir.join("rules.md")).unwrap(),
        "1. Cite sources."
    );

    std::fs::write(dir.join("rules.md"), "1. Cite sources.\n2. Never guess.\n").unwrap();
    std::fs::write(
        dir.join("identity.md"),
        "You are the billing agent. token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    )
    .unwrap();
    let (code, stdout, stderr) = memd_cli(
        &url,
        &[
            "views", "import", dir_arg, "--tenant", "acme", "--actor", "alice",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("preferences unchanged"), "{stdout}");
    assert!(stdout.contains("rules updated"), "{stdout}");
    assert!(stdout.contains("identity updated"), "{stdout}");
    wait_projected(&app.pool, "acme").await;

    let views: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT view, text, actor_id, sensitivity FROM projections.views ORDER BY view",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(views.len(), 3);
    assert_eq!(views[2].0, "rules");
    assert_eq!(views[2].1, "1. Cite sources.\n2. Never guess.\n");
    assert_eq!(views[2].2, "alice");
    assert_eq!(views[1].3, "high", "preferences untouched");
    assert!(
        !views[0].1.contains("ghp_abcdef"),
        "imports are redacted: {}",
        views[0].1
    );

    // Importing again changes nothing.
    let (_, stdout, _) = memd_cli(&url, &["views", "import", dir_arg, "--tenant", "acme"]).await;
    assert_eq!(stdout.matches("unchanged").count(), 3, "{stdout}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A replay reads the log ahead on a connection of its own, in batches;
/// with no spare connection it reads in its own transaction. Either way,
/// over many small batches, it rebuilds exactly the incremental rows.
#[sqlx::test]
async fn a_rebuild_reads_ahead_or_in_its_transaction_alike(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect.clone()).await;
    let token = app.tenant("acme").await;
    varied_history(&app, &token).await;
    wait_projected(&app.pool, "acme").await;
    let engine = memd::startup::ProjectionConfig::default()
        .engine()
        .with_batch_size(5);
    let live = Schema::live();
    let incremental = rebuild::digests(&app.pool, &engine, &live, "acme")
        .await
        .unwrap();

    let ahead = rebuild::rebuild(&app.pool, &engine, Some("acme"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(ahead[0].events, 42);
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &live, "acme")
            .await
            .unwrap(),
        incremental
    );

    let single = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(connect)
        .await
        .unwrap();
    let in_transaction = rebuild::rebuild(&single, &engine, Some("acme"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(in_transaction[0].events, 42);
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &live, "acme")
            .await
            .unwrap(),
        incremental
    );
}

/// After one tenant's rebuild, the table partitioned by tenant is vacuumed
/// only where that tenant's rows are, not in every other tenant's
/// partition; the other tables whole. Rebuilding everything vacuums the
/// partitioned table whole.
#[sqlx::test]
async fn a_tenant_rebuild_vacuums_its_own_partition(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    // Two tenants whose chunks land in different partitions.
    let partition_of = |tenant: &str| {
        let pool = app.pool.clone();
        let tenant = tenant.to_owned();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT p.relid::regclass::text
                   FROM pg_partition_tree('projections.chunks') AS p
                   JOIN pg_class c ON c.oid = p.relid
                  WHERE CASE WHEN p.isleaf
                             THEN satisfies_hash_partition('projections.chunks'::regclass, 16,
                                      substring(c.relname FROM '[0-9]+$')::int, $1::text)
                             ELSE false END",
            )
            .bind(tenant)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let first = partition_of("acme").await;
    let mut other = String::new();
    for candidate in ["globex", "initech", "umbrella", "hooli", "wonka"] {
        if partition_of(candidate).await != first {
            other = candidate.to_owned();
            break;
        }
    }
    assert!(!other.is_empty(), "no second tenant in another partition");
    for tenant in ["acme", other.as_str()] {
        let token = app.tenant(tenant).await;
        app.append(&token, &message("s1", "the export job finished"))
            .await;
        wait_projected(&app.pool, tenant).await;
    }
    let engine = memd::startup::ProjectionConfig::default().engine();
    let rebuilt = ["acme".to_owned()];
    rebuild::rebuild(&app.pool, &engine, Some("acme"), &mut |_| {})
        .await
        .unwrap();
    let tables = rebuild::vacuumed_tables(&app.pool, &engine, Some(&rebuilt))
        .await
        .unwrap();
    assert!(tables.contains(&first), "{tables:?}");
    assert!(!tables.contains(&partition_of(&other).await), "{tables:?}");
    assert!(
        !tables.contains(&"projections.chunks".to_owned()),
        "{tables:?}"
    );
    assert!(
        tables.contains(&"projections.decisions".to_owned()),
        "{tables:?}"
    );
    rebuild::vacuum_analyze(&app.pool, &engine, Some(&rebuilt))
        .await
        .unwrap();

    let everything = rebuild::vacuumed_tables(&app.pool, &engine, None)
        .await
        .unwrap();
    assert!(
        everything.contains(&"projections.chunks".to_owned()),
        "{everything:?}"
    );
}
