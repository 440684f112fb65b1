//! Erasure of a data subject by crypto-shredding, on the real daemon: after
//! `POST /api/v1/admin/erase` (and `memd erase`), the subject's content is
//! unreadable in the log, its artifact, the projections (rebuilt), bundles
//! and a `pg_dump`; the hash chain still verifies; the erasure is recorded.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::section,
    helpers::{
        memd_cli, spawn_daemon, spawn_daemon_with, test_keyring, wait_embedded, wait_projected,
    },
};

/// Words only the subject's memory holds.
const ADDRESS: &str = "Alice lives at 42 Quokkastrasse, next to the zanzibarite bakery.";
const PHONE: &str = "QUOKKAPHONE";
const SUBJECT_WORDS: &[&str] = &["Quokkastrasse", "zanzibarite", "QUOKKAPHONE", "veganfeast"];
/// Memory of no subject, which erasure leaves alone.
const OFFSITE: &str = "The team offsite is in Lisbon, near the tile museum.";

fn about(subject: Option<&str>, kind: &str, content: Value, refs: &[&str]) -> Value {
    let mut event = json!({
        "session_id": "support-1",
        "channel": "private",
        "actor": {"type": "human", "id": "agent-desk"},
        "kind": kind,
        "content": content,
        "refs": refs,
    });
    if let Some(subject) = subject {
        event["subject_id"] = json!(subject);
    }
    event
}

fn texts(acb: &Value) -> String {
    acb["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["items"].as_array().unwrap().clone())
        .map(|item| item["text"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[sqlx::test]
async fn an_erased_subjects_memory_is_unreadable_everywhere_and_the_chain_still_verifies(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let output: String = (0..3000)
        .map(|n| format!("call {n}: {PHONE} 555-0199 answered\n"))
        .collect();
    let said = app
        .append(
            &token,
            &about(Some("alice"), "message", json!({"text": ADDRESS}), &[]),
        )
        .await;
    let said = said["event_id"].as_str().unwrap().to_owned();
    let tool = app
        .append(
            &token,
            &about(
                Some("alice"),
                "tool_result",
                json!({"tool": "crm.calls", "output": output}),
                &[],
            ),
        )
        .await;
    let artifact = tool["artifact_id"].as_str().unwrap().to_owned();
    app.append(
        &token,
        &about(
            Some("alice"),
            "decision",
            json!({"decision": "Order the veganfeast menu for Alice", "key": "alice.menu",
                   "scope": "user"}),
            &[&said],
        ),
    )
    .await;
    app.append(
        &token,
        &about(None, "message", json!({"text": OFFSITE}), &[]),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    // Before: the subject's memory is there for the tenant, sealed at rest.
    let ask = json!({"session_id": "q", "query_text": "where does Alice live, and where is the offsite?",
                     "max_tokens": 4000});
    let before = texts(&app.acb(&token, ask.clone()).await);
    assert!(before.contains("Quokkastrasse"), "{before}");
    assert!(before.contains("Lisbon"));
    let (status, event) = app
        .get_json(&format!("/api/v1/events/{said}"), &token)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(event["content"]["text"], ADDRESS);
    assert_eq!(event["subject_id"], "alice");
    assert_eq!(event["sealed"], true);
    let dump = app.pg_dump().await;
    for word in SUBJECT_WORDS {
        assert!(!dump.contains(word), "{word} in the clear before erasure");
    }
    let verified_before = memd_cli(&app.database_url().await, &["verify"]).await;
    assert_eq!(verified_before.0, 0, "{verified_before:?}");

    // Erase.
    let erased = app
        .erase_and_rebuild(&token, json!({"subject_id": "alice", "by": "dpo-ticket-7"}))
        .await;
    assert_eq!(erased["erasure"]["events"], 3);
    assert_eq!(erased["erasure"]["erased_by"], "dpo-ticket-7");
    wait_projected(&app.pool, "acme").await;

    // The log keeps the events, unreadable, and records the erasure.
    let (_, event) = app
        .get_json(&format!("/api/v1/events/{said}"), &token)
        .await;
    assert_eq!(event["erased"], true, "{event}");
    assert_eq!(event["content"], json!({}));
    let (_, records) = app.get_json("/api/v1/events?kind=erasure", &token).await;
    let record = &records["events"][0];
    assert_eq!(record["content"]["subject_id"], "alice");
    assert_eq!(record["content"]["erased_by"], "dpo-ticket-7");
    assert_eq!(record["actor_type"], "system");
    assert!(!record.to_string().contains("Quokkastrasse"));
    let artifact = app
        .get(&format!("/api/v1/artifacts/{artifact}"), &token)
        .await;
    assert_eq!(artifact.status(), StatusCode::GONE);

    // Bundles: nothing of it, by any path; the rest stands.
    let after = app.acb(&token, ask).await;
    let after_text = texts(&after);
    for word in SUBJECT_WORDS {
        assert!(
            !after_text.contains(word),
            "{word} in a bundle: {after_text}"
        );
    }
    assert!(after_text.contains("Lisbon"), "{after_text}");
    assert!(section(&after, "decision_ledger").is_empty());

    // The projections hold nothing derived from it, even opened with the key.
    let keyring = test_keyring();
    let chunk_texts: Vec<String> = sqlx::query_scalar("SELECT text FROM projections.chunks")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    for text in chunk_texts {
        let opened = keyring.open("acme", &text).unwrap().into_owned();
        assert!(
            !opened.contains("Quokkastrasse") && !opened.contains(PHONE),
            "{opened}"
        );
    }
    let decisions: i64 = sqlx::query_scalar("SELECT count(*) FROM projections.decisions")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(decisions, 0);
    let dump = app.pg_dump().await;
    for word in SUBJECT_WORDS {
        assert!(!dump.contains(word), "{word} in pg_dump after erasure");
        assert!(
            !dump.contains(&hex::encode(word)),
            "{word} hex-encoded in pg_dump"
        );
    }
    assert!(
        dump.contains("dpo-ticket-7"),
        "the erasure record is in the dump"
    );

    // The chain verifies, and a drift check finds the projections equal to
    // a rebuild from the log.
    let (code, out, err) = memd_cli(&app.database_url().await, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (status, queued) = app.post_admin("drift-check", &token, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let drift = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(drift["result"]["drifted"], false, "{drift}");

    // Nothing more is recorded under an erased subject, and erasing twice or
    // an unknown subject is refused by field.
    let (status, refused) = app
        .post_events(
            &token,
            &about(Some("alice"), "message", json!({"text": "back again"}), &[]),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "subject_erased");
    assert_eq!(refused["error"]["field"], "subject_id");
    let (status, again) = app
        .post_admin("erase", &token, Some(json!({"subject_id": "alice"})))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    let (status, unknown) = app
        .post_admin("erase", &token, Some(json!({"subject_id": "bob"})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{unknown}");
    assert_eq!(unknown["error"]["field"], "subject_id");
}

#[sqlx::test]
async fn memd_erase_on_the_command_line_and_subjects_need_a_key(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect.clone()).await;
    let token = app.tenant("acme").await;
    let said = app
        .append(
            &token,
            &about(Some("carol"), "message", json!({"text": ADDRESS}), &[]),
        )
        .await;
    let said = said["event_id"].as_str().unwrap().to_owned();
    wait_projected(&app.pool, "acme").await;
    let (code, out, err) = memd_cli(
        &app.database_url().await,
        &[
            "erase",
            "--tenant",
            "acme",
            "--subject",
            "carol",
            "--by",
            "ops",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("erased subject=carol tenant=acme events=1 by=ops"),
        "{out}"
    );
    assert!(out.contains("rebuilt tenant=acme"), "{out}");
    let (_, event) = app
        .get_json(&format!("/api/v1/events/{said}"), &token)
        .await;
    assert_eq!(event["erased"], true);
    let chunks: i64 =
        sqlx::query_scalar("SELECT count(*) FROM projections.chunks WHERE event_id = $1")
            .bind(&said)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(chunks, 0);

    // Without a key file there is no key to seal a subject's content under.
    let keyless = spawn_daemon_with(connect, memd::startup::ServeConfig::default()).await;
    let token = keyless.tenant("other").await;
    let (status, refused) = keyless
        .post_events(
            &token,
            &json!({"events": [about(None, "message", json!({"text": "x"}), &[]),
                               about(Some("dave"), "message", json!({"text": "y"}), &[])]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "events[1].subject_id");
    // And a client cannot forge an erasure record.
    let (status, forged) = keyless
        .post_events(
            &token,
            &about(None, "erasure", json!({"subject_id": "dave"}), &[]),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{forged}");
    assert_eq!(forged["error"]["field"], "kind");
}

#[sqlx::test]
async fn an_erased_subjects_vectors_leave_the_daemons_memory(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(connect, crate::semantic::semantic("hashed")).await;
    let token = app.tenant("acme").await;
    for text in [ADDRESS, "Alice's phone is QUOKKAPHONE, call after noon."] {
        app.append(
            &token,
            &about(Some("alice"), "message", json!({"text": text}), &[]),
        )
        .await;
    }
    app.append(
        &token,
        &about(None, "message", json!({"text": OFFSITE}), &[]),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;
    let ask =
        json!({"session_id": "q", "query_text": "where does Alice live?", "max_tokens": 4000});
    let before = app.acb(&token, ask.clone()).await;
    let semantic = &before["provenance"]["semantic"];
    assert_eq!(semantic["used"], true, "{semantic}");
    assert_eq!(semantic["vectors"], 3, "{semantic}");

    let (status, erased) = app
        .post_admin(
            "erase",
            &token,
            Some(json!({"subject_id": "alice", "by": "dpo"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{erased}");
    assert_eq!(erased["erasure"]["vectors_deleted"], 2, "{erased}");
    wait_embedded(&app, "acme", "hashed").await;

    // The index this daemon loaded before the erasure drops them too.
    let after = app.acb(&token, ask).await;
    let semantic = &after["provenance"]["semantic"];
    assert_eq!(semantic["used"], true, "{semantic}");
    assert_eq!(semantic["vectors"], 1, "{semantic}");
}

/// Every path that records a subject's words seals them under the
/// subject's key, so that after the erasure none is left anywhere: events,
/// the decision and task routes, a handoff that copies the subject's task,
/// a view, a summary; then the dump (text and hex), bundles, the inbox,
/// views, decisions, tasks and the log read.
#[sqlx::test]
async fn after_an_erasure_no_route_leaves_the_subjects_words_anywhere(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    const WORDS: &[&str] = &[
        "xylodora",
        "quibbledora",
        "frondodora",
        "zephyrdora",
        "glimmerdora",
        "marzipandora",
    ];
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = app
        .append(
            &token,
            &about(
                Some("dora"),
                "message",
                json!({"text": "Dora's xylodora account"}),
                &[],
            ),
        )
        .await;
    let said = said["event_id"].as_str().unwrap().to_owned();
    let post = |path: &'static str, body: Value| {
        let (app, token) = (&app, &token);
        async move {
            let (status, answer) = app
                .send_json(reqwest::Method::POST, path, token, &body)
                .await;
            assert!(status.is_success(), "{path}: {status} {answer}");
            answer
        }
    };
    let actor = json!({"type": "agent", "id": "desk"});
    post(
        "/api/v1/decisions",
        json!({"session_id": "support-1", "actor": actor, "refs": [said], "scope": "user",
               "subject_id": "dora", "decision": "Refund Dora's quibbledora order"}),
    )
    .await;
    post(
        "/api/v1/tasks",
        json!({"session_id": "support-1", "actor": actor, "task_id": "DORA-1", "status": "doing",
               "subject_id": "dora", "title": "Call Dora about frondodora",
               "details": "zephyrdora follow-up"}),
    )
    .await;
    app.append(
        &token,
        &about(
            Some("dora"),
            "view_update",
            json!({"view": "dora-notes", "text": "glimmerdora"}),
            &[],
        ),
    )
    .await;
    app.append(
        &token,
        &about(
            Some("dora"),
            "summary",
            json!({"text": "marzipandora summary"}),
            &[&said],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let handoff = post(
        "/api/v1/handoffs",
        json!({"from_agent": "desk", "to_agent": "billing", "task_id": "DORA-1",
               "session_id": "billing-1", "decision_ids": []}),
    )
    .await;
    assert!(
        handoff["packet"]["task"]
            .as_str()
            .unwrap()
            .contains("frondodora"),
        "{handoff}"
    );
    assert_eq!(
        handoff["packet"]["subject_id"], "dora",
        "the copy carries its subject"
    );
    wait_projected(&app.pool, "acme").await;
    let dump = app.pg_dump().await;
    for word in WORDS {
        assert!(
            !dump.contains(word),
            "{word} in the clear before the erasure"
        );
    }

    app.erase_and_rebuild(&token, json!({"subject_id": "dora"}))
        .await;
    wait_projected(&app.pool, "acme").await;

    let mut seen = vec![("pg_dump".to_owned(), app.pg_dump().await)];
    for path in [
        "/api/v1/events?limit=1000",
        "/api/v1/decisions",
        "/api/v1/tasks",
        "/api/v1/views",
        "/api/v1/summaries",
        "/api/v1/handoffs?state=all",
    ] {
        let (_, answer) = app.get_json(path, &token).await;
        seen.push((path.to_owned(), answer.to_string()));
    }
    for (session, agent) in [("support-1", None), ("billing-1", Some("billing"))] {
        let mut ask = json!({"session_id": session, "max_tokens": 4000, "render": true,
                             "query_text": "what about Dora's account, order and call?"});
        if let Some(agent) = agent {
            ask["agent_id"] = json!(agent);
        }
        seen.push((
            format!("bundle {session}"),
            app.acb(&token, ask).await.to_string(),
        ));
    }
    for (place, text) in &seen {
        for word in WORDS {
            assert!(!text.contains(word), "{word} left in {place}");
            assert!(
                !text.contains(&hex::encode(word)),
                "{word} left hex-encoded in {place}"
            );
        }
    }
}
