//! `POST /api/v1/search`: scored memories for a question, under the same
//! rules as a bundle's evidence (channel privacy, agent isolation, dedupe,
//! decisions' standing), with no bundle around them.

use memd::{read::semantic::SemanticConfig, startup::ServeConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    agents::agent_token,
    helpers::{TestApp, spawn_daemon_with, wait_projected},
};

fn said(channel: &str, who: &str, text: &str) -> Value {
    json!({
        "session_id": "s1",
        "channel": channel,
        "actor": {"type": "human", "id": who},
        "kind": "message",
        "content": {"text": text},
    })
}

/// A decision resting on `evidence` (one without any is rejected).
fn decision(key: &str, text: &str, evidence: &Value) -> Value {
    json!({"session_id": "s1", "channel": "private", "kind": "decision",
           "actor": {"type": "agent", "id": "planner"}, "refs": [evidence["event_id"]],
           "content": {"decision": text, "key": key, "scope": "project"}})
}

async fn search(app: &TestApp, token: &str, body: Value) -> (StatusCode, Value) {
    app.send_json(reqwest::Method::POST, "/api/v1/search", token, &body)
        .await
}

fn texts(found: &Value) -> Vec<String> {
    found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap().to_owned())
        .collect()
}

/// A daemon with the weight-free embedder: searches run both sides.
async fn hashed_app(connect: PgConnectOptions) -> TestApp {
    spawn_daemon_with(
        connect,
        ServeConfig {
            semantic: SemanticConfig::hashed(),
            ..ServeConfig::default()
        },
    )
    .await
}

#[sqlx::test]
async fn a_search_returns_scored_memories_best_first_with_decisions_in_force(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = hashed_app(connect).await;
    let token = app.tenant("acme").await;
    let mut said_first = Value::Null;
    for text in [
        "The billing export times out above 500 rows per page",
        "Lunch is at noon on Fridays",
        "The billing export runs every night at two",
        "Carol likes the new dashboard colours",
    ] {
        let appended = app.append(&token, &said("private", "alice", text)).await;
        if said_first.is_null() {
            said_first = appended;
        }
    }
    // The second decision of the key supersedes the first.
    for text in [
        "Billing export pages hold 1000 rows",
        "Billing export pages hold 250 rows",
    ] {
        app.append(&token, &decision("export.page", text, &said_first))
            .await;
    }
    wait_projected(&app.pool, "acme").await;

    let (status, found) = search(
        &app,
        &token,
        json!({"query": "billing export page rows", "k": 3}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let results = found["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{found:#}");
    // Best first, every score present and in range.
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    for result in results {
        for field in ["relevance", "lexical"] {
            let value = result[field].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&value), "{field} {value}");
        }
        assert!(result["event_id"].as_str().unwrap().starts_with("evt_"));
        assert_eq!(
            result["refs"],
            json!([result["chunk_id"], result["event_id"]])
        );
        assert_eq!(result["session_id"], "s1");
        assert!(result["ts"].is_string());
    }
    let found_texts = texts(&found);
    // The decision in force is a result; the one it replaced is not, and
    // the omissions say why.
    assert!(
        found_texts.contains(&"Billing export pages hold 250 rows".to_owned()),
        "{found_texts:?}"
    );
    assert!(
        !found_texts.iter().any(|t| t.contains("1000 rows")),
        "{found_texts:?}"
    );
    assert!(
        found["omissions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["reason"] == "superseded"),
        "{found:#}"
    );
    assert!(
        !found_texts.iter().any(|t| t.contains("Lunch")),
        "{found_texts:?}"
    );
    assert_eq!(found["provenance"]["path"], "retrieval");

    // Asked about history, the superseded decision is found too.
    let (_, history) = search(
        &app,
        &token,
        json!({"query": "billing export page rows", "include_history": true, "k": 10}),
    )
    .await;
    assert!(
        texts(&history).iter().any(|t| t.contains("1000 rows")),
        "{history:#}"
    );

    // Nothing to search for is not an error: no results, and why.
    let (status, nothing) = search(&app, &token, json!({"query": "the and of"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(nothing["results"], json!([]));
}

#[sqlx::test]
async fn a_search_keeps_channel_privacy_and_agent_isolation(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = hashed_app(connect).await;
    let operator = app.tenant("acme").await;
    let alpha = agent_token(&app, "acme", "alpha").await;
    let beta = agent_token(&app, "acme", "beta").await;
    app.append(
        &alpha,
        &said("private", "alice", "Alpha's ledger note: migrate to rust"),
    )
    .await;
    app.append(
        &beta,
        &said(
            "private",
            "bob",
            "Beta's ledger note: the mascot is a zebra",
        ),
    )
    .await;
    app.append(
        &operator,
        &said("public", "carol", "Public ledger note: releases on friday"),
    )
    .await;
    app.append(
        &operator,
        &json!({"session_id": "s1", "channel": "private", "sensitivity": "high",
                "actor": {"type": "human", "id": "dana"}, "kind": "message",
                "content": {"text": "Sensitive ledger note: the salary table"}}),
    )
    .await;
    // Standing state a search never shows: a private task and view.
    for (kind, content) in [
        (
            "task_update",
            json!({"task_id": "ledger", "status": "doing", "title": "Ledger note cleanup"}),
        ),
        (
            "view_update",
            json!({"view": "rules", "text": "Ledger notes stay private."}),
        ),
    ] {
        app.append(
            &operator,
            &json!({"session_id": "s1", "channel": "private", "kind": kind,
                    "actor": {"type": "human", "id": "dana"}, "content": content}),
        )
        .await;
    }
    wait_projected(&app.pool, "acme").await;
    let query = json!({"query": "ledger note", "k": 20});

    // The operator sees everything on a private channel.
    let (_, all) = search(&app, &operator, query.clone()).await;
    let every = texts(&all);
    for said in ["Alpha's", "Beta's", "Public", "Sensitive"] {
        assert!(every.iter().any(|t| t.starts_with(said)), "{every:?}");
    }

    // A public channel holds nothing private or sensitive, and what it
    // leaves out is named as evidence only (a search has no other section).
    let mut public = query.clone();
    public["channel"] = json!("public");
    let (_, shown) = search(&app, &operator, public).await;
    assert_eq!(
        texts(&shown),
        ["Public ledger note: releases on friday"],
        "{shown:#}"
    );
    let omissions = shown["omissions"].as_array().unwrap();
    assert!(
        omissions.iter().any(|o| o["reason"] == "privacy"),
        "{shown:#}"
    );
    assert!(
        omissions
            .iter()
            .all(|o| o["section"] == "retrieved_evidence" || o["section"].is_null()),
        "{shown:#}"
    );

    // An agent sees its own private memory and what is shared, never
    // another agent's.
    let (_, alphas) = search(&app, &alpha, query.clone()).await;
    let seen = texts(&alphas);
    assert!(seen.iter().any(|t| t.starts_with("Alpha's")), "{seen:?}");
    assert!(!seen.iter().any(|t| t.starts_with("Beta's")), "{seen:?}");

    // An agent's token searches as that agent only.
    let mut as_beta = query.clone();
    as_beta["agent_id"] = json!("beta");
    let (status, refused) = search(&app, &alpha, as_beta).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"]["code"], "agent_mismatch");
}

#[sqlx::test]
async fn a_bad_search_is_refused_naming_the_field(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = hashed_app(connect).await;
    let token = app.tenant("acme").await;
    for (body, field) in [
        (json!({"query": ""}), "query"),
        (json!({"query": "   "}), "query"),
        (json!({"query": "x".repeat(16 * 1024 + 1)}), "query"),
        (json!({"query": "ledger", "k": 0}), "k"),
        (json!({"query": "ledger", "k": 101}), "k"),
        (json!({"query": "ledger", "max_tokens": 10}), "max_tokens"),
        (json!({"k": 5}), "query"),
        (json!({"query": "ledger", "channel": "everyone"}), "channel"),
    ] {
        let (status, refused) = search(&app, &token, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        assert_eq!(refused["error"]["field"], field, "{body}: {refused}");
    }
    let (status, _) = app
        .send_json(
            reqwest::Method::POST,
            "/api/v1/search",
            "not-a-token",
            &json!({"query": "ledger"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
