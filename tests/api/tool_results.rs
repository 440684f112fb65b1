//! Tool results keep a 64 KB excerpt; the full output is an artifact only its tenant can read.

use memd::domain::{limits::TOOL_EXCERPT_BYTES, tenant::Scope};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{spawn_daemon, tool_result, wait_projected};

async fn stored_content(pool: &sqlx::PgPool, event_id: &str) -> Value {
    sqlx::query_scalar("SELECT content FROM events WHERE event_id = $1")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_small_output_is_kept_whole_in_the_event(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let response = app
        .append(&token, &tool_result("README.md", "# Legacy\nA tool.\n"))
        .await;
    let content = stored_content(&app.pool, response["event_id"].as_str().unwrap()).await;
    assert_eq!(content["excerpt_text"], "# Legacy\nA tool.\n");
    assert_eq!(content["line_range"], json!([1, 2]));
    assert_eq!(content["truncated"], false);
    assert_eq!(content["path"], "README.md");
    assert_eq!(content["exit_code"], 0);
    assert!(content.get("artifact_id").is_none());
    assert_eq!(app.count("SELECT count(*) FROM artifacts").await, 0);
}

#[sqlx::test]
async fn a_large_output_goes_to_an_artifact_only_its_tenant_can_read(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let acme = app.tenant("acme").await;
    let acme_reader = {
        // A second, read-only token for the same tenant.
        let token = memd::domain::tenant::ApiToken::generate();
        sqlx::query(
            "INSERT INTO api_tokens (token_hash, tenant_id, scope) VALUES ($1, 'acme', $2)",
        )
        .bind(token.hash().as_slice())
        .bind(Scope::Read.as_str())
        .execute(&app.pool)
        .await
        .unwrap();
        token.expose().to_string()
    };
    let globex = app.tenant("globex").await;
    let output: String = (1..=5000)
        .map(|i| format!("{i:>6}: some log line of the build\n"))
        .collect();
    assert!(output.len() > TOOL_EXCERPT_BYTES);

    let response = app.append(&acme, &tool_result("build.log", &output)).await;
    let content = stored_content(&app.pool, response["event_id"].as_str().unwrap()).await;
    let excerpt = content["excerpt_text"].as_str().unwrap();
    assert!(excerpt.len() <= TOOL_EXCERPT_BYTES);
    assert!(output.starts_with(excerpt));
    let lines = excerpt.lines().count() as u64;
    assert_eq!(content["line_range"], json!([1, lines]));
    assert_eq!(content["truncated"], true);
    assert_eq!(content["output_bytes"], output.len());
    let artifact_id = content["artifact_id"].as_str().unwrap();
    assert_eq!(
        response["artifact_id"], artifact_id,
        "the append answer names the artifact"
    );

    for token in [&acme, &acme_reader] {
        let fetched = app
            .get(&format!("/api/v1/artifacts/{artifact_id}"), token)
            .await;
        assert_eq!(fetched.status(), StatusCode::OK);
        assert_eq!(
            fetched.headers()["content-type"],
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            fetched.headers()["x-memd-event-id"],
            response["event_id"].as_str().unwrap()
        );
        assert_eq!(fetched.text().await.unwrap(), output);
    }

    let other = app
        .get(&format!("/api/v1/artifacts/{artifact_id}"), &globex)
        .await;
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    let other_body: Value = other.json().await.unwrap();
    let missing = app
        .get("/api/v1/artifacts/art_01DOESNOTEXIST0000000000000", &globex)
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let missing_body: Value = missing.json().await.unwrap();
    assert_eq!(other_body["error"]["code"], missing_body["error"]["code"]);
    assert!(!other_body.to_string().contains("acme"));

    let anonymous = app
        .client
        .get(format!("{}/api/v1/artifacts/{artifact_id}", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[sqlx::test]
async fn an_artifact_event_keeps_a_named_document_and_bundles_find_it(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let text: String = (1..=4000)
        .map(|i| format!("clause {i}: the vendor keeps invoices for seven years\n"))
        .collect();
    let appended = app
        .append(
            &token,
            &json!({"session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "a"},
                    "kind": "artifact",
                    "content": {"name": "contract.md", "media_type": "text/markdown", "text": text}}),
        )
        .await;
    let content = stored_content(&app.pool, appended["event_id"].as_str().unwrap()).await;
    assert_eq!(content["name"], "contract.md");
    assert_eq!(content["truncated"], true);
    assert!(content.get("text").is_none(), "the text became an excerpt");
    let artifact_id = appended["artifact_id"].as_str().unwrap();
    let kind: String = sqlx::query_scalar("SELECT kind FROM artifacts WHERE artifact_id = $1")
        .bind(artifact_id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(kind, "blob");
    let whole = app
        .get(&format!("/api/v1/artifacts/{artifact_id}"), &token)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(whole, text);
    assert!(!appended["chunk_ids"].as_array().unwrap().is_empty());

    wait_projected(&app.pool, "acme").await;
    let acb = app
        .acb(
            &token,
            json!({"session_id": "s2", "query_text": "how long does the vendor keep invoices?"}),
        )
        .await;
    let evidence = crate::acb::section(&acb, "retrieved_evidence");
    assert!(
        evidence
            .iter()
            .any(|item| item["text"].as_str().unwrap().contains("seven years")),
        "{acb}"
    );
    let (status, error) = app
        .post_events(
            &token,
            &json!({"session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "a"},
                    "kind": "artifact", "content": {"text": "no name"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["field"], "content.name");
}

/// A first line number past what memd stores was a panic (the connection
/// closed without an answer; over MCP, which shares the check, the call
/// never returned): it is a 400 naming the field, and nothing is stored.
#[sqlx::test]
async fn a_first_line_past_the_bound_is_refused_by_field(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut event = tool_result("big.log", "a\nb");
    event["content"]["line_start"] = json!(u64::MAX);
    let (status, body) = app.post_events(&token, &event).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "content.line_start", "{body}");
    event["content"]["line_start"] = json!(i64::MAX);
    let (status, body) = app.post_events(&token, &event).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);
    // The daemon still answers.
    event["content"]["line_start"] = json!(41);
    let stored = app.append(&token, &event).await;
    let content = stored_content(&app.pool, stored["event_id"].as_str().unwrap()).await;
    assert_eq!(content["line_range"], json!([41, 42]));
}
