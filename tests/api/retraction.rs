//! Retracting and correcting one memory: a `retraction` event withdraws
//! earlier events, `POST /api/v1/events/{id}/correct` withdraws one and
//! records its corrected content. The log keeps both; bundles, searches,
//! the decision ledger, tasks and views stop showing what was withdrawn,
//! and a rebuild from the log ends where the live projections did.

use memd::{read::semantic::SemanticConfig, startup::ServeConfig};
use memd_projectors::{Schema, rebuild};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    agents::agent_token,
    helpers::{TestApp, event, memd_cli, message, spawn_daemon, spawn_daemon_with, wait_projected},
};

/// A retraction of `ids` by a person (any token may record what a person
/// asks; an agent's token may not speak as another agent).
fn retraction(ids: &[&Value], reason: &str) -> Value {
    let mut retraction = event("retraction", json!({ "reason": reason }), &[]);
    retraction["actor"] = json!({"type": "human", "id": "user-1"});
    retraction["refs"] = json!(
        ids.iter()
            .map(|id| id["event_id"].clone())
            .collect::<Vec<_>>()
    );
    retraction
}

async fn correct(app: &TestApp, token: &str, id: &Value, body: Value) -> (StatusCode, Value) {
    let path = format!(
        "/api/v1/events/{}/correct",
        id["event_id"].as_str().unwrap()
    );
    app.send_json(Method::POST, &path, token, &body).await
}

async fn search(app: &TestApp, token: &str, query: &str) -> Value {
    let (status, found) = app
        .send_json(
            Method::POST,
            "/api/v1/search",
            token,
            &json!({"query": query, "k": 20}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    found
}

async fn bundle(app: &TestApp, token: &str, query: &str) -> Value {
    let (status, acb) = app
        .send_json(
            Method::POST,
            "/api/v1/acb/build",
            token,
            &json!({"session_id": "s1", "query_text": query, "render": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{acb}");
    acb
}

fn omitted(acb: &Value, reason: &str) -> Vec<Value> {
    acb["omissions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["reason"] == reason)
        .cloned()
        .collect()
}

#[sqlx::test]
async fn a_corrected_memory_leaves_every_bundle_search_and_view_and_a_rebuild_agrees(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(
        connect,
        ServeConfig {
            semantic: SemanticConfig::hashed(),
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    let wrong = app
        .append(
            &token,
            &message("s1", "The deploy bucket is s3://exports-old"),
        )
        .await;
    app.append(&token, &message("s1", "Lunch is at noon on Fridays"))
        .await;
    let decided = app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Deploy to exports-old", "key": "deploy.bucket",
                       "scope": "project"}),
                &[wrong["event_id"].as_str().unwrap()],
            ),
        )
        .await;
    let opened = app
        .append(
            &token,
            &event(
                "task_update",
                json!({"task_id": "T-1", "status": "open", "title": "Move the exports"}),
                &[],
            ),
        )
        .await;
    let started = app
        .append(
            &token,
            &event(
                "task_update",
                json!({"task_id": "T-1", "status": "doing", "title": "Move exports to old"}),
                &[],
            ),
        )
        .await;
    app.append(
        &token,
        &event(
            "view_update",
            json!({"view": "rules", "text": "Answer briefly."}),
            &[],
        ),
    )
    .await;
    let loud = app
        .append(
            &token,
            &event(
                "view_update",
                json!({"view": "rules", "text": "ANSWER IN CAPITALS."}),
                &[],
            ),
        )
        .await;

    // The wrong message, corrected: a retraction and its replacement.
    let (status, corrected) = correct(
        &app,
        &token,
        &wrong,
        json!({"content": {"text": "The deploy bucket is s3://exports-2026"},
               "reason": "the bucket was renamed",
               "actor": {"type": "human", "id": "alice"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{corrected}");
    let replacement = &corrected["event"];
    assert_eq!(
        replacement["seq"].as_i64().unwrap(),
        corrected["retraction"]["seq"].as_i64().unwrap() + 1
    );
    // The decision, the task's last update and the view's last update,
    // withdrawn in one retraction.
    let withdrawn = app
        .append(
            &token,
            &retraction(&[&decided, &started, &loud], "said in error"),
        )
        .await;
    wait_projected(&app.pool, "acme").await;

    // The log keeps all of it, each withdrawn event naming its retraction.
    let (_, logged) = app
        .get_json(
            &format!("/api/v1/events/{}", wrong["event_id"].as_str().unwrap()),
            &token,
        )
        .await;
    assert_eq!(logged["retracted_by"], corrected["retraction"]["event_id"]);
    assert_eq!(
        logged["content"]["text"],
        "The deploy bucket is s3://exports-old"
    );
    let (_, logged) = app
        .get_json(
            &format!(
                "/api/v1/events/{}",
                replacement["event_id"].as_str().unwrap()
            ),
            &token,
        )
        .await;
    assert_eq!(logged["retracted_by"], Value::Null);
    assert_eq!(logged["session_id"], "s1");
    assert_eq!(logged["refs"], json!([wrong["event_id"]]));
    let (_, page) = app.get_json("/api/v1/events?kind=retraction", &token).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 2, "{page}");

    let check = |found: Value, acb: Value| {
        let texts: Vec<&str> = found["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        assert!(
            texts.iter().any(|t| t.contains("exports-2026")),
            "{texts:?}"
        );
        assert!(
            !texts.iter().any(|t| t.contains("exports-old")),
            "{texts:?}"
        );
        assert!(
            !omitted(&found, "retracted").is_empty(),
            "a search names withdrawn memory it matched: {found:#}"
        );
        let prompt = acb["prompt"].as_str().unwrap();
        assert!(prompt.contains("exports-2026"), "{prompt}");
        assert!(!prompt.contains("exports-old"), "{prompt}");
        assert!(!prompt.contains("CAPITALS"), "{prompt}");
        assert!(prompt.contains("Answer briefly."), "{prompt}");
        assert!(prompt.contains("Move the exports"), "{prompt}");
        let recent: Vec<Value> = omitted(&acb, "retracted")
            .into_iter()
            .filter(|o| o["section"] == "recent_window")
            .collect();
        assert!(!recent.is_empty(), "{:#}", acb["omissions"]);
    };
    check(
        search(&app, &token, "deploy bucket exports").await,
        bundle(&app, &token, "which deploy bucket do we use?").await,
    );

    // The ledger, the task and the view, as if the withdrawn had not been.
    let (_, ledger) = app.get_json("/api/v1/decisions", &token).await;
    let decision = &ledger["decisions"][0];
    assert_eq!(decision["status"], "retracted", "{ledger}");
    assert_eq!(decision["retracted_by"], withdrawn["event_id"]);
    let (_, tasks) = app.get_json("/api/v1/tasks", &token).await;
    assert_eq!(tasks["tasks"][0]["status"], "open", "{tasks}");
    assert_eq!(tasks["tasks"][0]["title"], "Move the exports", "{tasks}");
    let (_, views) = app.get_json("/api/v1/views", &token).await;
    assert_eq!(views["views"][0]["text"], "Answer briefly.", "{views}");
    assert!(opened["event_id"].is_string());

    // A rebuild from the log ends where the live projections are.
    let engine = memd::startup::ProjectionConfig::default().engine();
    let live = Schema::live();
    let incremental = rebuild::digests(&app.pool, &engine, &live, "acme")
        .await
        .unwrap();
    let (code, out, err) =
        memd_cli(&app.database_url().await, &["rebuild", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &live, "acme")
            .await
            .unwrap(),
        incremental
    );
    let (status, queued) = app.post_admin("drift-check", &token, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let drift = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(drift["result"]["drifted"], false, "{drift}");
    let (code, out, err) = memd_cli(&app.database_url().await, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    check(
        search(&app, &token, "deploy bucket exports").await,
        bundle(&app, &token, "which deploy bucket do we use?").await,
    );
}

#[sqlx::test]
async fn an_agent_retracts_only_its_own_or_unowned_memory(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let operator = app.tenant("acme").await;
    let other_tenant = app.tenant("other").await;
    let ann = agent_token(&app, "acme", "ann").await;
    let bob = agent_token(&app, "acme", "bob").await;
    let anns = app.append(&ann, &message("s1", "ann's private note")).await;
    let shared = app.append(&operator, &message("s1", "nobody's note")).await;
    let elsewhere = app
        .append(&other_tenant, &message("s1", "another tenant's note"))
        .await;

    // Another agent's memory, another tenant's and none at all are refused
    // alike, naming the ref; a correction of them is a 404.
    let missing = json!({"event_id": "evt_01J00000000000000000000000"});
    for id in [&anns, &elsewhere, &missing] {
        let (status, refused) = app.post_events(&bob, &retraction(&[id], "not mine")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["error"]["field"], "refs[0]", "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("may retract"),
            "{refused}"
        );
        let (status, refused) = correct(
            &app,
            &bob,
            id,
            json!({"content": {"text": "x"}, "reason": "r",
                   "actor": {"type": "agent", "id": "bob"}}),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    }
    // Malformed retractions, by field.
    for (body, field) in [
        (event("retraction", json!({"reason": "r"}), &[]), "refs"),
        (
            event("retraction", json!({"reason": "r"}), &["chk_01J_0"]),
            "refs[0]",
        ),
        (
            event(
                "retraction",
                json!({}),
                &[anns["event_id"].as_str().unwrap()],
            ),
            "content.reason",
        ),
    ] {
        let (status, refused) = app.post_events(&ann, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["error"]["field"], field, "{refused}");
    }

    // Its own memory and nobody's, an agent may; an operator anything.
    let (status, _) = app
        .post_events(&bob, &retraction(&[&shared], "stale"))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let first = app.append(&ann, &retraction(&[&anns], "oops")).await;
    // A retraction itself is the log's record: never withdrawn.
    let (status, refused) = app
        .post_events(&operator, &retraction(&[&first], "undo"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be retracted"),
        "{refused}"
    );

    // A correction retried with its key answers the original, and stores
    // nothing more.
    let fresh = app.append(&ann, &message("s1", "the port is 8080")).await;
    let body = json!({"content": {"text": "the port is 9090"}, "reason": "typo",
                      "actor": {"type": "agent", "id": "ann"}, "idempotency_key": "fix-port"});
    let (status, once) = correct(&app, &ann, &fresh, body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{once}");
    let (status, again) = correct(&app, &ann, &fresh, body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(once["event"]["event_id"], again["event"]["event_id"]);
    assert_eq!(
        once["retraction"]["event_id"],
        again["retraction"]["event_id"]
    );
    // Corrected again (another request), the original would have two
    // replacements in force: 409 naming the retraction; its replacement is
    // what to correct, and that works.
    let before = app.count("SELECT count(*) FROM events").await;
    for key in [json!("fix-port-again"), Value::Null] {
        let (status, refused) = correct(
            &app,
            &ann,
            &fresh,
            json!({"content": {"text": "the port is 7070"}, "reason": "again",
                   "actor": {"type": "agent", "id": "ann"}, "idempotency_key": key}),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(refused["error"]["code"], "already_withdrawn", "{refused}");
        assert_eq!(refused["error"]["field"], "id", "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains(once["retraction"]["event_id"].as_str().unwrap()),
            "{refused}"
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM events").await, before);
    // The corrected event keeps the original's agent and channel.
    wait_projected(&app.pool, "acme").await;
    let (_, logged) = app
        .get_json(
            &format!(
                "/api/v1/events/{}",
                once["event"]["event_id"].as_str().unwrap()
            ),
            &ann,
        )
        .await;
    assert_eq!(logged["agent_id"], "ann");
    assert_eq!(logged["channel"], "private");
    // Bad corrections, by field.
    let (status, refused) = correct(
        &app,
        &ann,
        &once["event"],
        json!({"content": {"text": ""}, "reason": "r", "actor": {"type": "agent", "id": "ann"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "content.text", "{refused}");
    let (status, refused) = correct(
        &app,
        &ann,
        &once["event"],
        json!({"content": {"text": "x"}, "reason": "", "actor": {"type": "agent", "id": "ann"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "reason", "{refused}");
}

/// The embeddings projection runs apart from the others and may lag them:
/// a retraction the chunks projection folded but the embeddings one has
/// not must not bring the withdrawn memory back by meaning (its vector is
/// still in memory, and the row an earlier search read is remembered).
#[sqlx::test]
async fn a_withdrawn_memory_is_not_found_by_meaning_while_its_vector_lags(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(
        connect,
        ServeConfig {
            semantic: SemanticConfig::hashed(),
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    let wrong = app
        .append(&token, &message("s1", "the staging port is 8080"))
        .await;
    wait_projected(&app.pool, "acme").await;
    crate::helpers::wait_embedded(&app, "acme", "hashed").await;
    // Found, by words and by meaning: the index remembers its row.
    let found = search(&app, &token, "staging port").await;
    assert_eq!(
        found["results"][0]["text"], "the staging port is 8080",
        "{found:#}"
    );
    assert!(found["results"][0]["semantic"].is_number(), "{found:#}");

    // The embeddings projection is held back while the retraction lands.
    let mut held = memd_projectors::transaction::begin(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "SELECT seq FROM projections.cursors
          WHERE tenant_id = 'acme' AND projector = 'embeddings_hashed' FOR UPDATE",
    )
    .fetch_one(&mut *held)
    .await
    .unwrap();
    app.append(&token, &retraction(&[&wrong], "wrong port"))
        .await;
    wait_projected(&app.pool, "acme").await;
    let lagging: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM projections.embeddings_hashed WHERE tenant_id = 'acme'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(lagging, 1, "the vector is still there");
    let found = search(&app, &token, "staging port").await;
    assert_eq!(found["results"], json!([]), "{found:#}");
    held.rollback().await.unwrap();
}
