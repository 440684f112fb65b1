//! The bundle policy per tenant, and the decision ledger API.

use memd::domain::tenant::Scope;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{event, memd_cli, message, spawn_daemon, wait_projected};

#[sqlx::test]
async fn a_tenant_edits_its_policy_and_bundles_follow_it(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let writer = app.tenant_with_scope("writer", Scope::Write).await;

    let version = |response: &reqwest::Response| {
        response.headers()["memd-policy-version"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(version(&app.get("/api/v1/policy", &token).await), "0");
    let before = app.acb(&token, json!({"query_text": "export"})).await;
    assert_eq!(before["provenance"]["policy_version"], 0, "the defaults");
    let (status, defaults) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(defaults["max_tokens"], 65_000);
    assert_eq!(defaults["sections"]["retrieved_evidence"]["cap"], 28_000);

    let (status, stored) = app
        .put_json(
            "/api/v1/policy",
            &token,
            &json!({"max_tokens": 8000, "scoring": {"alpha": 0.9, "beta": 0.0, "gamma": 0.1},
                    "fast_path_intents": ["keep_going"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(
        stored["scoring"]["recency_half_life_hours"], 168.0,
        "defaults fill the rest"
    );
    let (_, exported) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(exported, stored, "what GET exports is what PUT stored");
    let (_, untouched) = app.get_json("/api/v1/policy", &other).await;
    assert_eq!(untouched["max_tokens"], 65_000, "policies are per tenant");

    app.append(&token, &message("s1", "the nightly export runs at 2am"))
        .await;
    wait_projected(&app.pool, "acme").await;
    let acb = app.acb(&token, json!({"query_text": "export"})).await;
    assert_eq!(acb["budget_tokens"], 8000);
    assert_eq!(acb["provenance"]["policy_version"], 1);
    assert_eq!(version(&app.get("/api/v1/policy", &token).await), "1");
    assert_eq!(acb["provenance"]["scoring"]["alpha"], 0.9);
    assert_eq!(acb["provenance"]["path"], "retrieval");
    let fast = app
        .acb(
            &token,
            json!({"intent": "keep_going", "query_text": "export"}),
        )
        .await;
    assert_eq!(fast["provenance"]["path"], "fast");
    let (status, error) = app.post_acb(&token, &json!({"max_tokens": 9000})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 8000"),
        "{error}"
    );

    for (body, field) in [
        (json!({"max_tokens": 100_000}), "max_tokens"),
        (json!({"scoring": {"beta": -1}}), "scoring.beta"),
        (
            json!({"sections": {"rules": {"cap": 10}}}),
            "sections.rules.priority",
        ),
        (json!({"retrieved_max": 500}), "retrieved_max"),
        (json!({"typo": true}), "typo"),
    ] {
        let (status, error) = app.put_json("/api/v1/policy", &token, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{error}");
    }
    let (_, still) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(still, stored, "a refused policy changes nothing");
    assert_eq!(version(&app.get("/api/v1/policy", &token).await), "1");
    app.put_policy(&token, &json!({"max_tokens": 7000})).await;
    assert_eq!(version(&app.get("/api/v1/policy", &token).await), "2");
    let acb = app.acb(&token, json!({"query_text": "export"})).await;
    assert_eq!(acb["provenance"]["policy_version"], 2);
    let (status, _) = app.put_json("/api/v1/policy", &writer, &json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "only admins edit the policy");
}

#[sqlx::test]
async fn policies_export_to_a_file_and_import_back(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let url = app.database_url().await;
    let file = std::env::temp_dir().join(format!("memd-policy-{}.json", ulid::Ulid::generate()));
    let file_arg = file.to_str().unwrap();

    let (code, _, stderr) =
        memd_cli(&url, &["policy", "export", file_arg, "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let (_, served) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(exported, served, "the file is the document the API serves");

    let mut edited = exported.clone();
    edited["max_tokens"] = json!(12_000);
    edited["scoring"]["alpha"] = json!(0.8);
    std::fs::write(&file, edited.to_string()).unwrap();
    let (code, _, stderr) =
        memd_cli(&url, &["policy", "import", file_arg, "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (_, served) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(served, edited);
    // The running daemon hears the change (memd_policy) and drops its copy.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let acb = app.acb(&token, json!({"query_text": "anything"})).await;
        if acb["budget_tokens"] == 12_000 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon kept the old policy: {}",
            acb["budget_tokens"]
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // A bad file is refused with the field named; the stored policy stays.
    std::fs::write(&file, r#"{"scoring": {"alpha": 7}}"#).unwrap();
    let (code, _, stderr) =
        memd_cli(&url, &["policy", "import", file_arg, "--tenant", "acme"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("scoring.alpha"), "{stderr}");
    let (_, served) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(served, edited);
    std::fs::remove_file(&file).unwrap();
}

#[sqlx::test]
async fn the_decision_ledger_filters_by_status_key_and_channel(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let said = app.append(&token, &message("s1", "which database?")).await;
    let said = said["event_id"].as_str().unwrap();
    let decide = |text: &str, channel: &str| {
        let mut body = event(
            "decision",
            json!({"decision": text, "key": "db", "scope": "project"}),
            &[said],
        );
        body["channel"] = json!(channel);
        body
    };
    app.append(&token, &decide("Use SQLite", "private")).await;
    app.append(&token, &decide("Use PostgreSQL", "public"))
        .await;
    app.append(
        &token,
        &event(
            "decision",
            json!({"decision": "Unsupported", "scope": "project"}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let (status, all) = app.get_json("/api/v1/decisions", &token).await;
    assert_eq!(status, StatusCode::OK);
    let statuses: Vec<&str> = all["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["rejected", "active", "superseded"],
        "newest first"
    );
    let (_, active) = app
        .get_json("/api/v1/decisions?status=active&key=db", &token)
        .await;
    assert_eq!(active["decisions"][0]["decision"], "Use PostgreSQL");
    assert_eq!(active["decisions"].as_array().unwrap().len(), 1);
    let (_, public) = app
        .get_json("/api/v1/decisions?channel=public", &token)
        .await;
    assert_eq!(public["decisions"].as_array().unwrap().len(), 1);
    let (_, rejected) = app
        .get_json("/api/v1/decisions?status=rejected", &token)
        .await;
    assert!(
        rejected["decisions"][0]["rejected_reason"]
            .as_str()
            .unwrap()
            .contains("no refs")
    );
    let (_, theirs) = app.get_json("/api/v1/decisions", &other).await;
    assert_eq!(theirs["decisions"], json!([]));
    for (path, field) in [
        ("/api/v1/decisions?status=maybe", "status"),
        ("/api/v1/decisions?scope=galaxy", "scope"),
        ("/api/v1/decisions?limit=0", "limit"),
        ("/api/v1/decisions?channel=radio", "channel"),
        ("/api/v1/decisions?before_seq=abc", "before_seq"),
    ] {
        let (status, error) = app.get_json(path, &token).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
        assert_eq!(error["error"]["field"], field);
    }
}

#[sqlx::test]
async fn decisions_and_tasks_are_recorded_and_read_through_their_own_routes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let post = |path: &'static str, body: Value| {
        let app = &app;
        let token = token.clone();
        async move {
            let response = app
                .client
                .post(format!("{}{path}", app.base_url))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    let cited = app
        .append(&token, &message("s1", "exports time out above 500 rows"))
        .await;
    let (status, decision) = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": {"type": "agent", "id": "coder"},
               "refs": [cited["event_id"]], "decision": "Export in pages of 200",
               "key": "export.page_size", "scope": "project", "rationale": ["timeouts"]}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{decision}");
    let (status, error) = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": {"type": "agent", "id": "coder"},
               "decision": "x", "scope": "galaxy"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["field"], "content.scope");
    let (status, task) = post(
        "/api/v1/tasks",
        json!({"session_id": "s1", "actor": {"type": "agent", "id": "coder"},
               "task_id": "export-fix", "status": "doing", "title": "Fix the export"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{task}");
    let (status, error) = post(
        "/api/v1/tasks",
        json!({"session_id": "s1", "actor": {"type": "agent", "id": "coder"},
               "task_id": "export-fix", "status": "someday"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["field"], "content.status");
    app.append(
        &token,
        &event(
            "view_update",
            json!({"view": "identity", "text": "You are the billing agent."}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let (_, ledger) = app
        .get_json("/api/v1/decisions/query?key=export.page_size", &token)
        .await;
    assert_eq!(ledger["decisions"][0]["decision_id"], decision["event_id"]);
    assert_eq!(ledger["decisions"][0]["status"], "active");
    let (_, tasks) = app.get_json("/api/v1/tasks?status=doing", &token).await;
    assert_eq!(tasks["tasks"][0]["task_id"], "export-fix");
    assert_eq!(tasks["tasks"][0]["title"], "Fix the export");
    let (_, none) = app.get_json("/api/v1/tasks?status=done", &token).await;
    assert_eq!(none["tasks"], json!([]));
    let (status, error) = app.get_json("/api/v1/tasks?status=later", &token).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["field"], "status");
    let (_, views) = app.get_json("/api/v1/views", &token).await;
    assert_eq!(views["views"][0]["view"], "identity");
    assert_eq!(views["views"][0]["text"], "You are the billing agent.");
    // Another tenant sees none of it.
    let other = app.tenant("other").await;
    let (_, theirs) = app.get_json("/api/v1/tasks", &other).await;
    assert_eq!(theirs["tasks"], json!([]));
    let (_, theirs) = app.get_json("/api/v1/views", &other).await;
    assert_eq!(theirs["views"], json!([]));
}

/// Memory blocks over HTTP: a view's limit refuses a longer update, in a
/// batch too, and stores nothing of the request; the limits are checked.
#[sqlx::test]
async fn a_view_over_its_limit_is_refused_and_nothing_is_stored(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for (policy, field) in [
        (
            json!({"view_limits": {"persona": 0}}),
            "view_limits.persona",
        ),
        (
            json!({"view_limits": {"persona": 70000}}),
            "view_limits.persona",
        ),
        (json!({"view_limits": {"": 10}}), "view_limits"),
        (json!({"view_limits": {"a b": 10}}), "view_limits.a b"),
        (json!({"view_limits": ["persona"]}), "view_limits"),
    ] {
        let (status, refused) = app.put_json("/api/v1/policy", &token, &policy).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{policy}: {refused}");
        assert_eq!(refused["error"]["field"], field, "{policy}: {refused}");
    }
    app.put_policy(&token, &json!({"view_limits": {"persona": 12}}))
        .await;
    let view =
        |name: &str, text: &str| event("view_update", json!({"view": name, "text": text}), &[]);
    // Within the limit, and a view without one.
    app.append(&token, &view("persona", "I am terse.")).await;
    app.append(&token, &view("notes", &"a long note ".repeat(50)))
        .await;
    let long =
        "I am a very careful and extremely thorough release assistant who explains every step";
    let (status, refused) = app.post_events(&token, &view("persona", long)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "content.text");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"persona\"") && message.contains("at most 12 tokens"),
        "{message}"
    );
    let (status, refused) = app
        .post_events(
            &token,
            &json!({"events": [message_event(), view("persona", long)]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "events[1].content.text");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 2);
    wait_projected(&app.pool, "acme").await;
    let (_, views) = app.get_json("/api/v1/views", &token).await;
    assert_eq!(views["views"][1]["text"], "I am terse.", "{views:#}");
}

fn message_event() -> Value {
    message("s1", "a message in the same batch")
}
