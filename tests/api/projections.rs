//! What each projection derives from the log, observed after the daemon's
//! own projection workers have caught up.

use memd_projectors::{
    projections::{Encoding, TokenCounter},
    render,
};
use serde_json::{Value, json};
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use crate::helpers::{event, message, spawn_daemon, tool_result, wait_projected};

fn id(response: &Value) -> String {
    response["event_id"].as_str().expect("event_id").to_owned()
}

async fn decision_row(
    pool: &PgPool,
    decision_id: &str,
) -> (String, Option<String>, Option<String>) {
    sqlx::query_as(
        "SELECT status, superseded_by, rejected_reason FROM projections.decisions
          WHERE decision_id = $1",
    )
    .bind(decision_id)
    .fetch_one(pool)
    .await
    .expect("decision row")
}

#[sqlx::test]
async fn messages_become_searchable_chunks_with_exact_token_counts(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let text = "The billing service stores invoices in PostgreSQL.";
    let sent = app.append(&token, &message("s1", text)).await;
    // Not a retrieval unit: a summary without text.
    app.append(
        &token,
        &event(
            "view_update",
            json!({"view": "rules", "text": "Be brief."}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let (chunk_id, stored, token_est, kind, channel, ts): (
        String,
        String,
        i32,
        String,
        String,
        chrono::DateTime<chrono::Utc>,
    ) = sqlx::query_as(
        "SELECT chunk_id, text, token_est, kind, channel, ts FROM projections.chunks
          WHERE tsv @@ plainto_tsquery('english', 'stored invoice')",
    )
    .fetch_one(&app.pool)
    .await
    .expect("the message is found by full-text search");
    assert_eq!(stored, text);
    // Counted once, as a bundle renders it: meta line (under the day's
    // heading, so the time of day only) and body.
    let rendered = render::chunk_meta("user-1", "message", None, None, ts) + &render::body(text);
    assert_eq!(
        rendered,
        format!(" user-1 · {}\n{text}\n", ts.format("%H:%M"))
    );
    assert_eq!(
        token_est as usize,
        TokenCounter::new(Encoding::O200kBase).count(&rendered)
    );
    assert_eq!((kind.as_str(), channel.as_str()), ("message", "private"));
    assert_eq!(chunk_id, id(&sent).replace("evt_", "chk_") + "_0");
    assert_eq!(
        app.count("SELECT count(*) FROM projections.chunks").await,
        1,
        "a view is not a retrieval unit"
    );
}

#[sqlx::test]
async fn long_tool_output_splits_into_parts_that_keep_line_ranges(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let output: String = (1..=400)
        .map(|i| format!("fn handler_{i}() {{ route(\"/api/v{i}\"); }}\n"))
        .collect();
    app.append(&token, &tool_result("src/routes.rs", &output))
        .await;
    wait_projected(&app.pool, "acme").await;

    let parts: Vec<(i32, i32, i32, String, i32, Option<String>)> = sqlx::query_as(
        "SELECT part, line_start, line_end, text, token_est, source FROM projections.chunks
          ORDER BY part",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(parts.len() > 5, "{} parts", parts.len());
    let mut next_line = 1;
    let mut rebuilt = String::new();
    for (index, (part, start, end, text, tokens, source)) in parts.iter().enumerate() {
        assert_eq!(*part as usize, index);
        assert_eq!(*start, next_line, "parts are contiguous");
        assert_eq!(text.lines().count() as i32, end - start + 1);
        let last = index == parts.len() - 1;
        assert!(
            (100..=600).contains(tokens) || (last && *tokens > 0),
            "part {part} has {tokens} tokens"
        );
        assert_eq!(source.as_deref(), Some("fs.read_file src/routes.rs"));
        next_line = end + 1;
        rebuilt.push_str(text);
    }
    assert_eq!(next_line, 401);
    assert_eq!(rebuilt, output, "the parts are the excerpt, in order");
}

#[sqlx::test]
async fn importance_ranks_decisions_tasks_messages_and_key_files(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let evidence = id(&app.append(&token, &message("s1", "what is this?")).await);
    app.append(&token, &tool_result("README.md", "# Legacy billing\n"))
        .await;
    app.append(&token, &tool_result("src/util.rs", "fn pad() {}\n"))
        .await;
    app.append(
        &token,
        &event(
            "decision",
            json!({"decision": "Keep the legacy API", "scope": "project"}),
            &[&evidence],
        ),
    )
    .await;
    app.append(
        &token,
        &event(
            "task_update",
            json!({"task_id": "t1", "status": "open", "title": "Map the API"}),
            &[],
        ),
    )
    .await;
    let mut pinned = message("s1", "Never deploy on Fridays");
    pinned["tags"] = json!(["pinned"]);
    app.append(&token, &pinned).await;
    wait_projected(&app.pool, "acme").await;

    let importance = |sql: &'static str| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, f32>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let decision =
        importance("SELECT importance FROM projections.chunks WHERE kind = 'decision'").await;
    let task =
        importance("SELECT importance FROM projections.chunks WHERE kind = 'task_update'").await;
    let message =
        importance("SELECT importance FROM projections.chunks WHERE text = 'what is this?'").await;
    let readme =
        importance("SELECT importance FROM projections.chunks WHERE source LIKE '%README.md'")
            .await;
    let util =
        importance("SELECT importance FROM projections.chunks WHERE source LIKE '%util.rs'").await;
    let pinned =
        importance("SELECT importance FROM projections.chunks WHERE 'pinned' = ANY (tags)").await;
    assert!(
        decision > task && task > message,
        "{decision} {task} {message}"
    );
    assert!(readme > util, "README {readme} vs util {util}");
    assert!(pinned > message, "pinned {pinned} vs {message}");
}

#[sqlx::test]
async fn decisions_supersede_by_key_and_by_reference_and_unsupported_ones_are_rejected(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let evidence = id(&app
        .append(&token, &message("s1", "we need a database"))
        .await);
    let foreign = id(&app.append(&other, &message("s1", "not yours")).await);

    let decide = |content: Value, refs: Vec<String>| {
        let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
        event("decision", content, &refs)
    };
    let v1 = id(&app
        .append(
            &token,
            &decide(
                json!({"decision": "Use SQLite", "key": "db", "scope": "project"}),
                vec![evidence.clone()],
            ),
        )
        .await);
    let v2 = id(&app
        .append(
            &token,
            &decide(
                json!({"decision": "Use PostgreSQL", "key": "db", "scope": "project"}),
                vec![evidence.clone()],
            ),
        )
        .await);
    // An explicit `supersedes`, without a key.
    let v3 = id(&app
        .append(
            &token,
            &decide(
                json!({"decision": "Use PostgreSQL 15", "scope": "project", "supersedes": v2}),
                vec![v2.clone()],
            ),
        )
        .await);
    let unsupported = id(&app
        .append(
            &token,
            &decide(
                json!({"decision": "Use MongoDB", "key": "db", "scope": "project"}),
                vec![],
            ),
        )
        .await);
    let cross_tenant = id(&app
        .append(
            &token,
            &decide(
                json!({"decision": "Use Redis", "key": "cache", "scope": "project"}),
                vec![foreign.clone()],
            ),
        )
        .await);
    let dangling = id(&app
        .append(
            &token,
            &decide(
                json!({"decision": "Drop the cache", "scope": "project", "supersedes": "evt_nope"}),
                vec![evidence.clone()],
            ),
        )
        .await);
    wait_projected(&app.pool, "acme").await;

    assert_eq!(
        decision_row(&app.pool, &v1).await,
        ("superseded".into(), Some(v2.clone()), None)
    );
    assert_eq!(
        decision_row(&app.pool, &v2).await,
        ("superseded".into(), Some(v3.clone()), None)
    );
    assert_eq!(
        decision_row(&app.pool, &v3).await,
        ("active".into(), None, None)
    );

    let (status, _, reason) = decision_row(&app.pool, &unsupported).await;
    assert_eq!(status, "rejected");
    assert!(reason.unwrap().contains("no refs"));
    let (status, _, reason) = decision_row(&app.pool, &cross_tenant).await;
    assert_eq!(status, "rejected", "another tenant's event is no evidence");
    assert!(reason.unwrap().contains(&foreign));
    let (status, _, reason) = decision_row(&app.pool, &dangling).await;
    assert_eq!(status, "rejected");
    assert!(reason.unwrap().contains("evt_nope"));
    assert_eq!(
        app.count("SELECT count(*) FROM projections.decisions WHERE status = 'active'")
            .await,
        1,
        "rejected decisions supersede nothing"
    );
}

#[sqlx::test]
async fn summaries_that_contradict_the_ledger_or_cite_nothing_are_flagged(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let evidence = id(&app.append(&token, &message("s1", "PostgreSQL it is")).await);
    let decision = id(&app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Use PostgreSQL 15 for storage", "key": "db", "scope": "project"}),
                &[&evidence],
            ),
        )
        .await);
    let summary = |text: &str, claim: &str, refs: &[&str]| {
        event(
            "summary",
            json!({"text": text, "claims": [{"key": "db", "value": claim}]}),
            refs,
        )
    };
    let agreeing = id(&app
        .append(
            &token,
            &summary("We store data in PostgreSQL.", "PostgreSQL", &[&evidence]),
        )
        .await);
    let contradicting = id(&app
        .append(
            &token,
            &summary("We store data in MySQL.", "MySQL", &[&evidence]),
        )
        .await);
    let uncited = id(&app
        .append(
            &token,
            &summary("We store data in PostgreSQL.", "PostgreSQL", &[]),
        )
        .await);
    let dangling = id(&app
        .append(
            &token,
            &summary("We store data in PostgreSQL.", "PostgreSQL", &["evt_gone"]),
        )
        .await);
    wait_projected(&app.pool, "acme").await;

    let conflicts = |event_id: String| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_as::<_, (bool, Value)>(
                "SELECT conflicted, conflicts FROM projections.summaries WHERE event_id = $1",
            )
            .bind(event_id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(conflicts(agreeing).await, (false, json!([])));

    let (flagged, list) = conflicts(contradicting).await;
    assert!(flagged);
    let conflict = &list[0];
    assert_eq!(conflict["reason"], "contradicts_decision");
    assert_eq!(conflict["decision_id"], decision.as_str());
    assert_eq!(conflict["claim"], "MySQL");
    assert_eq!(conflict["summary_refs"], json!([evidence]));
    assert_eq!(conflict["decision_refs"], json!([evidence]));

    let (flagged, list) = conflicts(uncited).await;
    assert!(flagged);
    assert_eq!(list[0]["reason"], "no_refs");
    let (flagged, list) = conflicts(dangling).await;
    assert!(flagged);
    assert_eq!(list[0]["reason"], "missing_refs");
    assert_eq!(list[0]["refs"], json!(["evt_gone"]));
}

#[sqlx::test]
async fn tasks_keep_their_latest_state_and_views_their_latest_text(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let task = |content: Value| event("task_update", content, &[]);
    app.append(&token, &task(json!({"task_id": "T-1", "status": "open", "title": "Port the CLI", "details": "all commands"})))
        .await;
    app.append(&token, &task(json!({"task_id": "T-1", "status": "doing"})))
        .await;
    let mut secret_note = task(json!({"task_id": "T-1", "status": "done", "details": "shipped"}));
    secret_note["sensitivity"] = json!("high");
    let done = id(&app.append(&token, &secret_note).await);
    let view = |text: &str| event("view_update", json!({"view": "rules", "text": text}), &[]);
    app.append(&token, &view("1. Be brief.")).await;
    let latest = id(&app
        .append(&token, &view("1. Be brief.\n2. Cite sources."))
        .await);
    wait_projected(&app.pool, "acme").await;

    let (status, title, details, sensitivity, updates, last_event): (
        String,
        String,
        String,
        String,
        i32,
        String,
    ) = sqlx::query_as(
        "SELECT status, title, details, sensitivity,
                (SELECT count(*)::int FROM projections.task_events e WHERE e.task_id = t.task_id),
                (SELECT e.event_id FROM projections.task_events e WHERE e.task_id = t.task_id
                  ORDER BY e.seq DESC LIMIT 1)
           FROM projections.tasks t WHERE task_id = 'T-1'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(status, "done");
    let keys = crate::helpers::test_keyring();
    let title = keys.open("acme", &title).unwrap();
    assert_eq!(title, "Port the CLI", "an update without a title keeps it");
    assert_eq!(keys.open("acme", &details).unwrap(), "shipped");
    assert_eq!(sensitivity, "high", "the most sensitive update wins");
    assert_eq!((updates, last_event), (3, done));

    let (text, event_id): (String, String) =
        sqlx::query_as("SELECT text, event_id FROM projections.views WHERE view = 'rules'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(text, "1. Be brief.\n2. Cite sources.");
    assert_eq!(event_id, latest);
}

/// Tasks projected before `task_events` existed keep their history through
/// the migration, with nothing to replay.
#[sqlx::test(migrations = false)]
async fn a_tasks_projected_updates_move_to_task_events_in_the_migration(pool: PgPool) {
    use memd::{
        db::MIGRATOR,
        domain::{
            event::{EventRequest, NewEvent},
            redact::Redactor,
            tenant::{Scope, TenantId},
        },
    };
    MIGRATOR.run_to(20261125000017, &pool).await.unwrap();
    let acme = TenantId::parse("acme").unwrap();
    memd::tenants::create_tenant(&pool, &acme, Scope::Write)
        .await
        .unwrap();
    let updates = ["open", "done"].map(|status| {
        let request: EventRequest = serde_json::from_value(json!({
            "session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "coder"},
            "kind": "task_update", "content": {"task_id": "T-1", "status": status, "title": "Port"},
        }))
        .unwrap();
        NewEvent::parse(request, &Redactor::default()).unwrap()
    });
    // Today's append also keeps the head's time and the events' data
    // subject (later migrations' columns): lend them for the append only.
    for lent in [
        "ALTER TABLE tenant_heads ADD COLUMN created_at TIMESTAMPTZ",
        "ALTER TABLE tenant_heads ADD COLUMN newest_ts TIMESTAMPTZ",
        "ALTER TABLE events ADD COLUMN subject_id TEXT",
        "ALTER TABLE events ADD COLUMN request_digest BYTEA",
    ] {
        sqlx::query(lent).execute(&pool).await.unwrap();
    }
    let appended = memd::write::append(
        &pool,
        &memd_core::seal::Keyring::none(),
        &acme,
        updates.to_vec(),
    )
    .await
    .unwrap();
    for returned in [
        "ALTER TABLE tenant_heads DROP COLUMN created_at",
        "ALTER TABLE tenant_heads DROP COLUMN newest_ts",
        "ALTER TABLE events DROP COLUMN subject_id",
        "ALTER TABLE events DROP COLUMN request_digest",
    ] {
        sqlx::query(returned).execute(&pool).await.unwrap();
    }
    let ids: Vec<&str> = appended.iter().map(|a| a.event_id.as_str()).collect();
    sqlx::query(
        "INSERT INTO projections.tasks (tenant_id, task_id, status, title, details, refs, event_ids,
                                        session_id, channel, sensitivity, first_seq, last_seq, updated_at)
         VALUES ('acme', 'T-1', 'done', 'Port', '', '{}', $1, 's1', 'private', 'none', 1, 2, now())",
    )
    .bind(&ids)
    .execute(&pool)
    .await
    .unwrap();

    MIGRATOR.run(&pool).await.unwrap();
    let moved: Vec<(String, i64, String)> = sqlx::query_as(
        "SELECT task_id, seq, event_id FROM projections.task_events
          WHERE tenant_id = 'acme' ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        moved,
        [
            ("T-1".to_owned(), 1, ids[0].to_owned()),
            ("T-1".to_owned(), 2, ids[1].to_owned())
        ]
    );
    let columns: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns
          WHERE table_schema = 'projections' AND table_name = 'tasks' AND column_name = 'event_ids'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(columns, 0, "the array is gone from the task's row");
}
