//! Encryption at rest (PRD §9.2): high and secret memory is sealed with a
//! key kept outside the database, in the log and in every projection, and
//! bundles, routes and operator commands see it as if it were not.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::texts,
    helpers::{memd_cli, opened, spawn_daemon, wait_projected},
};

/// Words that appear only in high-sensitivity memory: finding one in a dump
/// means plaintext at rest.
const SEALED_WORDS: &[&str] = &[
    "zanzibarvault",
    "quetzalledger",
    "okapimigration",
    "narwhalrunbook",
    "pangolinhandoff",
    "axolotlartifact",
    "wombatrule",
];

fn high(kind: &str, content: Value) -> Value {
    json!({
        "session_id": "s1",
        "channel": "private",
        "actor": {"type": "agent", "id": "agent-1"},
        "kind": kind,
        "sensitivity": "high",
        "content": content,
    })
}

#[sqlx::test]
async fn high_memory_is_sealed_in_every_table_and_bundles_and_routes_see_it_opened(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon(connect).await;
    let ready = app.readyz().await;
    assert_eq!(ready["encryption_at_rest"]["enabled"], true, "{ready}");
    assert_eq!(
        ready["encryption_at_rest"]["key_id"],
        crate::helpers::test_keyring().key_id().unwrap()
    );
    let token = app.tenant("acme").await;
    // In another session: the bundle below must retrieve it, not find it
    // in its recent window.
    let mut message = high(
        "message",
        json!({"text": "The zanzibarvault combination changed on Monday."}),
    );
    message["session_id"] = json!("s0");
    let said = app.append(&token, &message).await;
    // Citing its evidence: in force, so the ledger shows it (a decision
    // without refs is rejected, and left out of the window as such).
    let mut decision = high(
        "decision",
        json!({"decision": "Keep the quetzalledger in the EU region.", "key": "ledger.region", "scope": "project",
               "rationale": ["quetzalledger audit"], "value": "eu-quetzalledger"}),
    );
    decision["refs"] = json!([said["event_id"]]);
    app.append(&token, &decision).await;
    app.append(
        &token,
        &high(
            "task_update",
            json!({"task_id": "T-9", "status": "doing", "title": "okapimigration",
                   "details": "okapimigration step two"}),
        ),
    )
    .await;
    app.append(
        &token,
        &high(
            "summary",
            json!({"text": "narwhalrunbook reviewed",
                   "claims": [{"key": "ledger.region", "value": "narwhalrunbook"}]}),
        ),
    )
    .await;
    app.append(
        &token,
        &high(
            "handoff",
            json!({"to_agent": "agent-2", "task": "pangolinhandoff follow-up",
                   "open_questions": ["pangolinhandoff owner?"]}),
        ),
    )
    .await;
    let artifact = app
        .append(
            &token,
            &high(
                "artifact",
                json!({"name": "notes.txt", "text": "axolotlartifact\n".repeat(5_000)}),
            ),
        )
        .await;
    app.append(
        &token,
        &high(
            "view_update",
            json!({"view": "rules", "text": "Never mention wombatrule."}),
        ),
    )
    .await;
    // Memory of lower sensitivity stays in the clear.
    app.append(
        &token,
        &crate::helpers::message("s1", "The lemurcafe opens at nine."),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let database_url = app.database_url().await;
    let dump = app.pg_dump().await;
    assert!(dump.contains("lemurcafe"), "low memory is not sealed");
    for word in SEALED_WORDS {
        assert!(!dump.contains(word), "{word} is stored in the clear");
        assert!(
            !dump.contains(&hex::encode(word)),
            "{word} is stored in the clear in a bytea"
        );
    }
    // Not even its stem in a search vector.
    assert!(!dump.contains("'zanzibarvault'"));

    // Bundles find sealed chunks by their words (the blind index) and show
    // them opened, along with the sealed decision, task, view and handoff.
    let ask = |query: &str| json!({"session_id": "s1", "channel": "private", "query_text": query, "render": true});
    let bundle = app
        .acb(&token, ask("what changed about the zanzibarvault?"))
        .await;
    let evidence = texts(&bundle, "retrieved_evidence").join("\n");
    assert!(
        evidence.contains("zanzibarvault combination changed"),
        "{bundle}"
    );
    let prompt = bundle["prompt"].as_str().unwrap();
    for shown in [
        "Keep the quetzalledger in the EU region.",
        "okapimigration",
        "Never mention wombatrule.",
    ] {
        assert!(prompt.contains(shown), "{shown} missing: {prompt}");
    }
    let receiving = app
        .acb(
            &token,
            json!({"session_id": "s1", "channel": "private", "agent_id": "agent-2",
                   "query_text": "what next?", "render": true}),
        )
        .await;
    assert!(
        receiving["prompt"]
            .as_str()
            .unwrap()
            .contains("pangolinhandoff follow-up"),
        "{receiving}"
    );
    // The summary's claim was compared with the sealed decision as plaintext.
    let conflicted: bool = sqlx::query_scalar("SELECT conflicted FROM projections.summaries")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(conflicted, "narwhalrunbook is not the decided value");

    // The routes answer opened content and say it is sealed.
    let event_id = said["event_id"].as_str().unwrap();
    let event: Value = app
        .get(&format!("/api/v1/events/{event_id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(event["sealed"], true);
    assert_eq!(
        event["content"]["text"],
        "The zanzibarvault combination changed on Monday."
    );
    let artifact_id = artifact["artifact_id"].as_str().unwrap();
    let fetched = app
        .get(&format!("/api/v1/artifacts/{artifact_id}"), &token)
        .await;
    assert_eq!(fetched.headers()["x-memd-sealed"], "true");
    assert!(
        fetched
            .text()
            .await
            .unwrap()
            .starts_with("axolotlartifact\n")
    );
    let decisions: Value = app
        .get("/api/v1/decisions", &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        decisions["decisions"][0]["decision"],
        "Keep the quetzalledger in the EU region."
    );
    assert_eq!(decisions["decisions"][0]["value"], "eu-quetzalledger");
    let tasks: Value = app.get("/api/v1/tasks", &token).await.json().await.unwrap();
    assert_eq!(tasks["tasks"][0]["title"], "okapimigration");
    let views: Value = app.get("/api/v1/views", &token).await.json().await.unwrap();
    assert_eq!(views["views"][0]["text"], "Never mention wombatrule.");

    // The stored content is the sealed envelope; the chain covers it.
    let stored: Value = sqlx::query_scalar("SELECT content FROM events WHERE event_id = $1")
        .bind(event_id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(stored["sealed"].is_string(), "{stored}");
    assert_eq!(
        opened("acme", stored)["text"],
        "The zanzibarvault combination changed on Monday."
    );
    app.stop().await;
    let (code, out, err) = memd_cli(&database_url, &["verify"]).await;
    assert_eq!(code, 0, "verify needs no key: {out}{err}");
    // Sealing is deterministic: a replay writes the same bytes.
    let (code, out, err) = memd_cli(&database_url, &["drift-check", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

#[sqlx::test]
async fn a_client_cannot_send_what_looks_sealed(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let forged = crate::helpers::message("s1", "\u{1}sealed:0011223344556677:AAAA");
    let (status, body) = app.post_events(&token, &forged).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "content.text");
}

#[tokio::test]
async fn key_generate_writes_a_private_key_file_and_never_replaces_one() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("key-generate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("memd.key");
    let _ = std::fs::remove_file(&path);
    let path_arg = path.to_str().unwrap();
    let (code, out, err) =
        memd_cli("postgres://unused", &["key", "generate", "--out", path_arg]).await;
    assert_eq!(code, 0, "{out}{err}");
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.starts_with("memd-key-v1:"), "{written}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (code, _, err) =
        memd_cli("postgres://unused", &["key", "generate", "--out", path_arg]).await;
    assert_ne!(code, 0);
    assert!(err.contains("must not exist yet"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
}
