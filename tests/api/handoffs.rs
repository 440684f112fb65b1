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

/// The packet a bundle receives is the newest addressed to its agent (a
/// pending one in any session), or the one the request names; another
/// agent, or no agent, receives none.
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
    // A pending packet reaches its receiver in any session.
    assert_eq!(
        received(json!({"session_id": "elsewhere", "agent_id": "b"})).await,
        json!(sent[1])
    );
    for body in [
        json!({"session_id": "b-work", "agent_id": "c"}),
        json!({"session_id": "b-work"}),
    ] {
        assert_eq!(received(body.clone()).await, Value::Null, "{body}");
    }
}

/// A receiver's inbox: its pending packets newest first, whatever session
/// they went to; its bundle shows the newest pending packet in any
/// session; a packet is accepted by the receiver's first event citing it.
/// Packets are the business of their sender, receiver and operators only,
/// in the log too; a handoff to oneself, and another agent's private
/// decision, are refused as a missing one is.
#[sqlx::test]
async fn a_receivers_inbox_lists_its_pending_packets_and_no_one_else_reads_them(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let operator = app.tenant("acme").await;
    let planner = crate::agents::agent_token(&app, "acme", "planner").await;
    let coder = crate::agents::agent_token(&app, "acme", "coder").await;
    let bystander = crate::agents::agent_token(&app, "acme", "bystander").await;
    let handoff = |to: &str, task: &str| json!({"from_agent": "planner", "to_agent": to, "task": task, "decision_ids": []});
    // No session given: the packet goes to a new `handoff_<ulid>` session.
    let (status, first) = app
        .post_handoff(&planner, &handoff("coder", "Port the exporter to Rust"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, second) = app
        .post_handoff(&planner, &handoff("coder", "Write the exporter's tests"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    wait_projected(&app.pool, "acme").await;

    let inbox = |token: String, query: &'static str| {
        let app = &app;
        async move {
            app.get_json(&format!("/api/v1/handoffs{query}"), &token)
                .await
        }
    };
    let (status, listed) = inbox(coder.clone(), "").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let ids: Vec<&str> = listed["handoffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["handoff_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            second["handoff_id"].as_str().unwrap(),
            first["handoff_id"].as_str().unwrap()
        ],
        "newest first"
    );
    assert_eq!(listed["handoffs"][0]["state"], "pending");
    assert_eq!(listed["handoffs"][0]["task"], "Write the exporter's tests");
    let (_, theirs) = inbox(bystander.clone(), "").await;
    assert_eq!(theirs["handoffs"], json!([]), "not the bystander's");
    let (status, _) = inbox(bystander.clone(), "?to_agent=coder").await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an agent reads its own inbox only"
    );
    let (_, all) = inbox(operator.clone(), "?to_agent=coder").await;
    assert_eq!(all["handoffs"].as_array().unwrap().len(), 2);

    // The coder's bundle in a session of its own holds the newest pending
    // packet, and its own session's history stays in its window.
    app.append(
        &coder,
        &json!({"session_id": "coder-desk", "channel": "private",
                "actor": {"type": "agent", "id": "coder"}, "kind": "message",
                "content": {"text": "setting up the workspace"}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let bundle = app
        .acb(
            &coder,
            json!({"session_id": "coder-desk", "agent_id": "coder", "max_tokens": 2000}),
        )
        .await;
    assert_eq!(
        bundle["provenance"]["handoff_id"], second["handoff_id"],
        "{:#?}",
        bundle["provenance"]
    );
    assert!(
        texts(&bundle, "recent_window")
            .iter()
            .any(|t| t.contains("setting up the workspace"))
    );

    // Citing the packet accepts it: it leaves the pending inbox, and the
    // bundle elsewhere shows the next pending one.
    app.append(
        &coder,
        &json!({"session_id": "coder-desk", "channel": "private",
                "actor": {"type": "agent", "id": "coder"}, "kind": "message",
                "refs": [second["handoff_id"]],
                "content": {"text": "on it: tests first"}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let (_, pending) = inbox(coder.clone(), "").await;
    assert_eq!(pending["handoffs"].as_array().unwrap().len(), 1);
    assert_eq!(pending["handoffs"][0]["handoff_id"], first["handoff_id"]);
    let (_, accepted) = inbox(coder.clone(), "?state=accepted").await;
    assert_eq!(accepted["handoffs"][0]["handoff_id"], second["handoff_id"]);
    assert_eq!(accepted["handoffs"][0]["state"], "accepted");
    let bundle = app
        .acb(
            &coder,
            json!({"session_id": "coder-desk", "agent_id": "coder", "max_tokens": 2000}),
        )
        .await;
    assert_eq!(bundle["provenance"]["handoff_id"], first["handoff_id"]);

    // The log shows a packet to its sender, its receiver and operators.
    let packets = |token: String| {
        let app = &app;
        async move {
            let (_, page) = app.get_json("/api/v1/events?kind=handoff", &token).await;
            page["events"].as_array().unwrap().len()
        }
    };
    assert_eq!(packets(planner.clone()).await, 2);
    assert_eq!(packets(coder.clone()).await, 2);
    assert_eq!(packets(operator.clone()).await, 2);
    assert_eq!(packets(bystander.clone()).await, 0);
    let (status, _) = app
        .get_json(
            &format!("/api/v1/events/{}", first["handoff_id"].as_str().unwrap()),
            &bystander,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // To oneself: refused. Another agent's private decision: answered as
    // an unknown one.
    let (status, refused) = app
        .post_handoff(&planner, &handoff("planner", "Talk to myself"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "to_agent");
    let evidence = id(&app
        .append(
            &bystander,
            &json!({"session_id": "b", "channel": "private",
                "actor": {"type": "agent", "id": "bystander"}, "kind": "message",
                "content": {"text": "the bystander's own notes"}}),
        )
        .await);
    let private_decision = id(&app
        .append(
            &bystander,
            &json!({"session_id": "b", "channel": "private",
                    "actor": {"type": "agent", "id": "bystander"}, "kind": "decision",
                    "refs": [evidence],
                    "content": {"decision": "Bystander's private plan", "scope": "project"}}),
        )
        .await);
    wait_projected(&app.pool, "acme").await;
    let mut naming = handoff("coder", "Use the plan");
    naming["decision_ids"] = json!([private_decision]);
    let (status, theirs) = app.post_handoff(&planner, &naming).await;
    naming["decision_ids"] = json!(["evt_01M00000000000000000000000"]);
    let (unknown_status, unknown) = app.post_handoff(&planner, &naming).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{theirs}");
    assert_eq!(unknown_status, StatusCode::BAD_REQUEST, "{unknown}");
    assert_eq!(theirs["error"]["field"], unknown["error"]["field"]);
    assert_eq!(
        theirs["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&private_decision, "ID"),
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .replace("evt_01M00000000000000000000000", "ID"),
        "the same answer as for a decision that does not exist"
    );
}

/// A packet's secrets are redacted before it is stored, and the answer
/// shows the packet as stored: it used to echo the secrets it was sent with.
#[sqlx::test]
async fn a_packets_secrets_are_redacted_in_the_answer_as_in_the_log(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let (status, created) = app
        .post_handoff(
            &token,
            &json!({"from_agent": "a", "to_agent": "b",
                    "task": "deploy with PASSWORD=hunter2abc",
                    "open_questions": ["is redis://:p4ssw0rd@redis.local:6379/0 the cache?"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (_, stored) = app
        .get_json(&format!("/api/v1/events/{}", id(&created)), &token)
        .await;
    for body in [&created, &stored] {
        let text = body.to_string();
        assert!(!text.contains("hunter2abc"), "{body:#}");
        assert!(!text.contains("p4ssw0rd"), "{body:#}");
        assert!(text.contains("[REDACTED:"), "{body:#}");
    }
}
