//! Handoffs (A6): the receiving agent gets the packet, its decisions and a
//! few evidence chunks, never the sender's transcript.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::{section, texts},
    helpers::{TestApp, event, message, spawn_daemon, tool_result, wait_projected},
};

impl TestApp {
    pub async fn post_handoff(&self, token: &str, body: &Value) -> (StatusCode, Value) {
        self.send_json(reqwest::Method::POST, "/api/v1/handoffs", token, body)
            .await
    }
}

fn id(response: &Value) -> String {
    response["event_id"].as_str().unwrap().to_owned()
}

#[sqlx::test]
async fn the_receiver_gets_the_packet_not_the_transcript(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    // Agent A's thirty turns of work in its own session.
    let mut said = Vec::new();
    for turn in 0..30 {
        let text = format!("agent-a turn {turn}: investigating the invoice export timeout");
        said.push(id(&app
            .append(
                &token,
                &json!({"session_id": "a-work", "channel": "private",
                        "actor": {"type": "agent", "id": "agent-a"}, "kind": "message",
                        "content": {"text": text}}),
            )
            .await));
    }
    let log = id(&app
        .append(
            &token,
            &tool_result(
                "logs/export.log",
                "export: timeout after 30000 ms on page 7\n",
            ),
        )
        .await);
    let decision = id(&app
        .append(
            &token,
            &event("decision", json!({"decision": "Export invoices in pages of 200", "key": "export-page", "scope": "project"}), &[&log]),
        )
        .await);
    let unrelated = id(&app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Use tabs", "key": "indent", "scope": "project"}),
                &[&said[0]],
            ),
        )
        .await);
    app.append(
        &token,
        &event(
            "task_update",
            json!({"task_id": "EXP-1", "status": "doing", "title": "Fix the invoice export",
                                     "details": "Times out on large accounts"}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let (status, created) = app
        .post_handoff(
            &token,
            &json!({"from_agent": "agent-a", "to_agent": "agent-b", "session_id": "b-work",
                    "task_id": "EXP-1", "constraints": ["do not change the ledger format"],
                    "decision_ids": [decision], "required_files": ["src/export.rs"],
                    "open_questions": ["is page 7 special?"], "refs": [log]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let handoff_id = created["handoff_id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["packet"]["task"],
        "Fix the invoice export\nTimes out on large accounts"
    );
    assert_eq!(created["session_id"], "b-work");
    // Agent B's first turn in its session.
    app.append(
        &token,
        &json!({"session_id": "b-work", "channel": "private", "actor": {"type": "agent", "id": "agent-b"},
                "kind": "message", "content": {"text": "agent-b: picking up the export fix"}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let acb = app
        .acb(
            &token,
            json!({"session_id": "b-work", "agent_id": "agent-b", "query_text": "invoice export timeout", "render": true}),
        )
        .await;
    assert_eq!(acb["provenance"]["handoff_id"], handoff_id);
    let packet = section(&acb, "handoff_packet");
    assert_eq!(packet.len(), 1);
    let packet_text = packet[0]["text"].as_str().unwrap();
    for part in [
        "Task: Fix the invoice export",
        "do not change the ledger format",
        "src/export.rs",
        "is page 7 special?",
    ] {
        assert!(packet_text.contains(part), "{part}: {packet_text}");
    }
    let ledger: Vec<&Value> = section(&acb, "decision_ledger");
    assert_eq!(ledger.len(), 1, "only the packet's decisions: {acb}");
    assert_eq!(ledger[0]["decision_id"], decision);
    assert_ne!(ledger[0]["decision_id"], unrelated);
    let evidence = section(&acb, "retrieved_evidence");
    assert!(evidence.len() <= 20);
    assert_eq!(evidence[0]["event_id"], log, "the packet's refs come first");
    let prompt = acb["prompt"].as_str().unwrap();
    assert!(
        !prompt.contains("agent-a turn"),
        "the sender's transcript leaked: {prompt}"
    );
    assert!(!prompt.contains("Use tabs"), "{prompt}");
    assert_eq!(
        texts(&acb, "recent_window"),
        ["agent-b: picking up the export fix\n"]
    );
    let tasks = section(&acb, "task_state");
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["task_id"], "EXP-1");

    // The packet is an event of the log, like anything else.
    let kind: String = sqlx::query_scalar("SELECT kind FROM events WHERE event_id = $1")
        .bind(&handoff_id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(kind, "handoff");
    // Another agent in that session gets no packet.
    let other = app
        .acb(
            &token,
            json!({"session_id": "b-work", "agent_id": "agent-c", "intent": "continue"}),
        )
        .await;
    assert!(section(&other, "handoff_packet").is_empty());
}

#[sqlx::test]
async fn a_packet_defaults_to_the_active_decisions_and_refuses_unknown_ones(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = id(&app.append(&token, &message("s1", "we need a queue")).await);
    let decision = id(&app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Use PostgreSQL as the queue", "scope": "project"}),
                &[&said],
            ),
        )
        .await);
    wait_projected(&app.pool, "acme").await;

    let (status, created) = app
        .post_handoff(
            &token,
            &json!({"from_agent": "a", "to_agent": "b", "task": "Build the queue"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["packet"]["decision_ids"], json!([decision]));
    assert!(
        created["session_id"]
            .as_str()
            .unwrap()
            .starts_with("handoff_")
    );

    for (body, field) in [
        (
            json!({"from_agent": "a", "to_agent": "b", "task": "x", "decision_ids": [decision, "evt_nope"]}),
            "decision_ids[1]",
        ),
        (json!({"from_agent": "a", "to_agent": "b"}), "task"),
        (
            json!({"from_agent": "a", "to_agent": "b", "task_id": "NOPE"}),
            "task",
        ),
        (
            json!({"from_agent": "", "to_agent": "b", "task": "x"}),
            "from_agent",
        ),
        (json!({"to_agent": "b", "task": "x"}), "from_agent"),
        (
            json!({"from_agent": "a", "to_agent": "b", "task": "x", "colour": 1}),
            "colour",
        ),
    ] {
        let (status, error) = app.post_handoff(&token, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{error}");
    }
    let handoffs = app
        .count("SELECT count(*) FROM events WHERE kind = 'handoff'")
        .await;
    assert_eq!(handoffs, 1, "refused packets store nothing");
}

#[sqlx::test]
async fn a_packet_never_carries_a_task_text_further_than_the_task_could_go(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut update = event(
        "task_update",
        json!({"task_id": "AUDIT-1", "status": "doing", "title": "Rotate the okapi credentials"}),
        &[],
    );
    update["sensitivity"] = json!("high");
    app.append(&token, &update).await;
    wait_projected(&app.pool, "acme").await;

    // A team handoff of no sensitivity would show a high task's text to
    // agent-channel bundles, which may not read high memory.
    let (status, error) = app
        .post_handoff(
            &token,
            &json!({"from_agent": "a", "to_agent": "b", "task_id": "AUDIT-1",
                    "channel": "team", "sensitivity": "none"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["field"], "task_id");
    assert!(!error.to_string().contains("okapi"), "{error}");

    // At the task's own sensitivity, the text comes along.
    let (status, created) = app
        .post_handoff(
            &token,
            &json!({"from_agent": "a", "to_agent": "b", "task_id": "AUDIT-1",
                    "sensitivity": "high"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["packet"]["task"], "Rotate the okapi credentials");
}

/// The packet a bundle receives is the newest addressed to its agent in
/// its session, or the one the request names; another agent or another
/// session receives none.
#[sqlx::test]
async fn a_bundle_receives_the_newest_packet_for_its_agent_or_the_one_named(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut sent = Vec::new();
    for task in ["Build the queue", "Drain the queue"] {
        let (status, created) = app
            .post_handoff(
                &token,
                &json!({"from_agent": "a", "to_agent": "b", "session_id": "b-work",
                        "task": task}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        sent.push(created["handoff_id"].as_str().unwrap().to_owned());
    }
    wait_projected(&app.pool, "acme").await;
    let received = |body: Value| {
        let app = &app;
        let token = &token;
        async move { app.acb(token, body).await["provenance"]["handoff_id"].clone() }
    };
    assert_eq!(
        received(json!({"session_id": "b-work", "agent_id": "b"})).await,
        json!(sent[1])
    );
    assert_eq!(
        received(json!({"session_id": "b-work", "agent_id": "b", "handoff_id": sent[0]})).await,
        json!(sent[0])
    );
    for body in [
        json!({"session_id": "b-work", "agent_id": "c"}),
        json!({"session_id": "elsewhere", "agent_id": "b"}),
        json!({"session_id": "b-work"}),
    ] {
        assert_eq!(received(body.clone()).await, Value::Null, "{body}");
    }
}
