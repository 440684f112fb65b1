//! `POST /api/v1/events`: the envelope, validation, batches, idempotency, auth.

use memd::{domain::tenant::Scope, startup::ServeConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{PgPool, Row, postgres::PgConnectOptions, postgres::PgPoolOptions};

use crate::helpers::{message, spawn_daemon, spawn_daemon_with};

#[sqlx::test]
async fn a_single_event_is_stored_with_every_field(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let body = json!({
        "session_id": "s1",
        "channel": "team",
        "actor": {"type": "agent", "id": "coder"},
        "kind": "decision",
        "sensitivity": "low",
        "tags": ["topic:db", "pinned"],
        "content": {"decision": "Use PostgreSQL", "key": "db", "scope": "project", "rationale": ["boring"]},
        "refs": ["evt_earlier"],
        "ts": "2025-01-02T03:04:05.123456Z",
    });
    let (status, response) = app.post_events(&token, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{response}");
    let event_id = response["event_id"].as_str().unwrap();
    assert!(
        event_id.starts_with("evt_") && event_id.len() == 30,
        "{event_id}"
    );
    assert_eq!(response["seq"], 1);
    assert!(response["created_at"].as_str().unwrap().ends_with('Z'));

    let row = sqlx::query(
        "SELECT tenant_id, seq, session_id, channel, actor_type, actor_id, kind, sensitivity, tags, refs,
                content, to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') AS ts
           FROM events WHERE event_id = $1",
    )
    .bind(event_id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>("tenant_id"), "acme");
    assert_eq!(row.get::<i64, _>("seq"), 1);
    assert_eq!(row.get::<String, _>("session_id"), "s1");
    assert_eq!(row.get::<String, _>("channel"), "team");
    assert_eq!(row.get::<String, _>("actor_type"), "agent");
    assert_eq!(row.get::<String, _>("actor_id"), "coder");
    assert_eq!(row.get::<String, _>("kind"), "decision");
    assert_eq!(row.get::<String, _>("sensitivity"), "low");
    assert_eq!(row.get::<Vec<String>, _>("tags"), ["topic:db", "pinned"]);
    assert_eq!(row.get::<Vec<String>, _>("refs"), ["evt_earlier"]);
    assert_eq!(row.get::<Value, _>("content")["decision"], "Use PostgreSQL");
    assert_eq!(row.get::<String, _>("ts"), "2025-01-02T03:04:05.123456");
}

#[sqlx::test]
async fn a_batch_is_stored_in_order_as_one_transaction(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let events: Vec<Value> = (0..3)
        .map(|i| message("s1", &format!("turn {i}")))
        .collect();
    let response = app.append(&token, &json!({ "events": events })).await;
    let seqs: Vec<i64> = response["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    let texts: Vec<String> = sqlx::query_scalar("SELECT content->>'text' FROM events ORDER BY seq")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(texts, ["turn 0", "turn 1", "turn 2"]);

    // One bad event refuses the whole batch: nothing of it is stored.
    let mut bad =
        json!({"events": [message("s1", "fine"), message("s1", "fine"), message("s1", "bad")]});
    bad["events"][2]["channel"] = json!("radio");
    let (status, response) = app.post_events(&token, &bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(response["error"]["field"], "events[2].channel");
    assert_eq!(response["error"]["code"], "invalid_field");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 3);
}

#[sqlx::test]
async fn invalid_requests_name_the_field_and_store_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let with = |patch: Value| {
        let mut event = message("s1", "hello");
        for (key, value) in patch.as_object().unwrap() {
            event[key] = value.clone();
        }
        event
    };
    let cases = [
        (with(json!({"channel": "radio"})), "channel"),
        (
            with(json!({"actor": {"type": "robot", "id": "r"}})),
            "actor.type",
        ),
        (with(json!({"kind": "gossip"})), "kind"),
        (with(json!({"sensitivity": "extreme"})), "sensitivity"),
        (with(json!({"session_id": ""})), "session_id"),
        (with(json!({"session_id": "s".repeat(300)})), "session_id"),
        (with(json!({"tags": ["x".repeat(200)]})), "tags[0]"),
        (with(json!({"refs": vec!["r"; 300]})), "refs"),
        (
            with(json!({"idempotency_key": "k".repeat(300)})),
            "idempotency_key",
        ),
        (with(json!({"content": {"text": 5}})), "content.text"),
        (
            with(json!({"content": {"text": "nul \u{0} byte"}})),
            "content.text",
        ),
        (with(json!({"unexpected": true})), "unexpected"),
        (with(json!({"ts": "last tuesday"})), "ts"),
        (json!({"channel": "private"}), "session_id"),
        (json!("just a string"), "body"),
        (json!({"events": "nope"}), "events"),
    ];
    for (body, field) in cases {
        let (status, response) = app.post_events(&token, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {response}");
        assert_eq!(response["error"]["field"], field, "{body}: {response}");
        assert!(!response["error"]["message"].as_str().unwrap().is_empty());
    }
    let response = app
        .client
        .post(format!("{}/api/v1/events", app.base_url))
        .bearer_auth(&token)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["field"],
        "body"
    );
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);
}

#[sqlx::test]
async fn a_body_over_the_limit_is_refused_with_413(_: PgPoolOptions, connect: PgConnectOptions) {
    let config = ServeConfig {
        max_body_bytes: 64 * 1024,
        ..ServeConfig::default()
    };
    let app = spawn_daemon_with(connect, config).await;
    let token = app.tenant("acme").await;
    let (status, response) = app
        .post_events(&token, &message("s1", &"x".repeat(70 * 1024)))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(response["error"]["field"], "body");
    app.append(&token, &message("s1", &"x".repeat(60 * 1024)))
        .await;
    assert_eq!(app.count("SELECT count(*) FROM events").await, 1);
}

#[sqlx::test]
async fn the_tenant_comes_from_the_token(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let acme = app.tenant("acme").await;
    app.tenant("globex").await;

    let mut claims_other = message("s1", "hi");
    claims_other["tenant_id"] = json!("globex");
    let (status, response) = app.post_events(&acme, &claims_other).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(response["error"]["field"], "tenant_id");
    let (status, response) = app
        .post_events(&acme, &json!({"events": [message("s", "a"), claims_other]}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(response["error"]["field"], "events[1].tenant_id");

    let mut claims_own = message("s1", "hi");
    claims_own["tenant_id"] = json!("acme");
    app.append(&acme, &claims_own).await;
    app.append(&acme, &message("s1", "no claim at all")).await;
    let tenants: Vec<String> = sqlx::query_scalar("SELECT DISTINCT tenant_id FROM events")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(tenants, ["acme"]);
    assert_eq!(app.count("SELECT count(*) FROM events").await, 2);
}

#[sqlx::test]
async fn callers_without_a_valid_token_or_scope_are_refused(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let reader = app.tenant_with_scope("acme", Scope::Read).await;
    let url = format!("{}/api/v1/events", app.base_url);
    let body = message("s1", "hi");

    let missing = app.client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    for bad in [
        "nonsense",
        &format!("memd_{}", "0".repeat(64)),
        &format!("{reader}x"),
    ] {
        let (status, response) = app.post_events(bad, &body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}");
        assert_eq!(response["error"]["code"], "unauthorized");
    }
    let (status, response) = app.post_events(&reader, &body).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(response["error"]["code"], "insufficient_scope");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);
}

#[sqlx::test]
async fn a_retry_with_the_same_idempotency_key_returns_the_original(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let acme = app.tenant("acme").await;
    let globex = app.tenant("globex").await;
    let mut event = message("s1", "exactly once");
    event["idempotency_key"] = json!("turn-42");

    let (status, first) = app.post_events(&acme, &event).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, retry) = app.post_events(&acme, &event).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(retry["event_id"], first["event_id"]);
    assert_eq!(retry["seq"], first["seq"]);
    assert_eq!(retry["created_at"], first["created_at"]);
    assert_eq!(retry["replayed"], true);

    // In a batch: the known key replays, a key repeated inside the batch is stored once.
    let mut fresh = message("s1", "new");
    fresh["idempotency_key"] = json!("turn-43");
    let batch = json!({"events": [event.clone(), fresh.clone(), fresh]});
    let (status, response) = app.post_events(&acme, &batch).await;
    assert_eq!(status, StatusCode::CREATED);
    let results = response["events"].as_array().unwrap();
    assert_eq!(results[0]["event_id"], first["event_id"]);
    assert_eq!(results[1]["seq"], 2);
    assert_eq!(results[2]["event_id"], results[1]["event_id"]);
    assert_eq!(app.count("SELECT count(*) FROM events").await, 2);

    // Keys belong to a tenant: another tenant's same key is a new event.
    let (status, other) = app.post_events(&globex, &event).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(other["event_id"], first["event_id"]);
    assert_eq!(other["seq"], 1);
    assert_eq!(app.count("SELECT count(*) FROM events").await, 3);
}

#[sqlx::test]
async fn a_key_reused_for_another_request_is_a_conflict_and_stores_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut once = message("s1", "once");
    once["idempotency_key"] = json!("k1");
    let (status, first) = app.post_events(&token, &once).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");

    // The same request, its fields in another order and its defaults
    // spelled out: a resend, answered with the original.
    let resend = json!({"idempotency_key": "k1", "content": {"text": "once"},
                        "kind": "message", "actor": {"id": "user-1", "type": "human"},
                        "channel": "private", "session_id": "s1", "sensitivity": "none",
                        "tags": [], "refs": []});
    let (status, replay) = app.post_events(&token, &resend).await;
    assert_eq!(status, StatusCode::OK, "{replay}");
    assert_eq!(replay["event_id"], first["event_id"]);
    assert_eq!(replay["replayed"], true);

    // Another body under the key: refused, naming the key; nothing stored.
    let mut other = message("s1", "twice");
    other["idempotency_key"] = json!("k1");
    let (status, refused) = app.post_events(&token, &other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "idempotency_conflict");
    assert_eq!(refused["error"]["field"], "idempotency_key");
    let mut tagged = once.clone();
    tagged["tags"] = json!(["urgent"]);
    let (status, _) = app.post_events(&token, &tagged).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "another tag is another request"
    );
    assert_eq!(app.count("SELECT count(*) FROM events").await, 1);

    // In a batch, per event: the one that conflicts is named, and the
    // batch (all or nothing) stores nothing.
    let mut fresh = message("s1", "fresh");
    fresh["idempotency_key"] = json!("k2");
    let (status, refused) = app
        .post_events(
            &token,
            &json!({"events": [fresh.clone(), once.clone(), other]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["field"], "events[2].idempotency_key");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 1);
    // A key repeated inside one batch with two bodies conflicts too.
    let mut fresh_again = message("s1", "fresh, changed");
    fresh_again["idempotency_key"] = json!("k2");
    let (status, refused) = app
        .post_events(&token, &json!({"events": [fresh.clone(), fresh_again]}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["field"], "events[1].idempotency_key");
    let (status, stored) = app
        .post_events(&token, &json!({"events": [fresh.clone(), once, fresh]}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    assert_eq!(stored["events"][1]["replayed"], true);
    assert_eq!(
        stored["events"][2]["event_id"],
        stored["events"][0]["event_id"]
    );
    assert_eq!(app.count("SELECT count(*) FROM events").await, 2);

    // Sealed content (sensitivity high) keeps a keyed digest, not a plain
    // one, and still tells a resend from a conflict.
    let mut sealed = message("s1", "the vault code is in the blue binder");
    sealed["sensitivity"] = json!("high");
    sealed["idempotency_key"] = json!("k3");
    assert_eq!(
        app.post_events(&token, &sealed).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.post_events(&token, &sealed).await.0, StatusCode::OK);
    sealed["content"]["text"] = json!("the vault code is in the red binder");
    assert_eq!(
        app.post_events(&token, &sealed).await.0,
        StatusCode::CONFLICT
    );
    let stored = |key: &'static str| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, Vec<u8>>(
                "SELECT request_digest FROM events WHERE idempotency_key = $1",
            )
            .bind(key)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let plain = |body: &Value| {
        let request = serde_json::from_value(body.clone()).unwrap();
        let parsed = memd::domain::event::NewEvent::parse(request, &Default::default()).unwrap();
        parsed.request_digest.to_vec()
    };
    assert_eq!(
        stored("k1").await,
        plain(&once),
        "unsealed: the plain digest"
    );
    sealed["content"]["text"] = json!("the vault code is in the blue binder");
    let keyed = stored("k3").await;
    assert_eq!(keyed.len(), 32);
    assert_ne!(keyed, plain(&sealed), "sealed: keyed, not guessable");
}

#[sqlx::test]
async fn each_append_notifies_projectors_on_commit(pool: PgPool) {
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen(memd::write::NOTIFY_CHANNEL).await.unwrap();
    let options = pool.connect_options().as_ref().clone();
    let app = spawn_daemon(options).await;
    let token = app.tenant("acme").await;
    app.append(
        &token,
        &json!({"events": [message("s", "a"), message("s", "b")]}),
    )
    .await;
    let notification = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification within 10 s")
        .unwrap();
    assert_eq!(notification.payload(), "acme:2");
}

#[sqlx::test]
async fn the_append_answer_names_the_chunks_the_event_becomes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let long: String = (1..=2000)
        .map(|i| format!("line {i} of a long build log\n"))
        .collect();
    let answer = app
        .append(
            &token,
            &json!({"events": [
                message("s1", "the export runs nightly"),
                crate::helpers::tool_result("build.log", &long),
                {"session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "a"},
                 "kind": "tool_call", "content": {"tool": "ls"}},
            ]}),
        )
        .await;
    crate::helpers::wait_projected(&app.pool, "acme").await;
    for appended in answer["events"].as_array().unwrap() {
        let named: Vec<String> =
            serde_json::from_value(appended["chunk_ids"].clone()).expect("chunk_ids");
        let projected: Vec<String> = sqlx::query_scalar(
            "SELECT chunk_id FROM projections.chunks WHERE event_id = $1 ORDER BY part",
        )
        .bind(appended["event_id"].as_str().unwrap())
        .fetch_all(&app.pool)
        .await
        .unwrap();
        assert_eq!(named, projected, "{appended}");
    }
    let parts = |i: usize| answer["events"][i]["chunk_ids"].as_array().unwrap().len();
    assert_eq!(parts(0), 1);
    assert!(parts(1) > 1, "a long output is several chunks");
}

/// Found by schemathesis: PostgreSQL prints a stored float as its exact
/// decimal digits, which a fast float parser can read as out of range; the
/// event must read back as it was written, and its hash must still verify.
#[sqlx::test]
async fn extreme_numbers_read_back_as_written_and_keep_the_chain_whole(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut event = message("s1", "numbers at the edges");
    event["content"]["largest"] = json!(f64::MAX);
    event["content"]["most_negative"] = json!(f64::MIN);
    event["content"]["smallest"] = json!(f64::from_bits(1));
    let appended = app.append(&token, &event).await;
    let id = appended["event_id"].as_str().unwrap();
    let response = app.get(&format!("/api/v1/events/{id}"), &token).await;
    assert_eq!(response.status(), StatusCode::OK);
    let stored: Value = response.json().await.unwrap();
    assert_eq!(stored["content"]["largest"].as_f64(), Some(f64::MAX));
    assert_eq!(stored["content"]["most_negative"].as_f64(), Some(f64::MIN));
    assert_eq!(
        stored["content"]["smallest"].as_f64(),
        Some(f64::from_bits(1))
    );
    let reports = memd::audit::verify_chains(&app.pool, None).await.unwrap();
    assert!(reports.iter().all(|r| r.broken.is_none()), "{reports:?}");
}

/// Found by schemathesis: a NUL in a bundle's `query_text` reached
/// PostgreSQL (which stores NUL in no text) and came back a 500. Every body
/// field, path and query is now refused with the field named.
#[sqlx::test]
async fn nul_characters_are_refused_by_field_wherever_they_come(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let response = app
        .client
        .post(format!("{}/api/v1/acb/build", app.base_url))
        .bearer_auth(&token)
        .json(&json!({"session_id": "s1", "query_text": "a\u{0}b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "query_text", "{body}");
    for (path, field) in [
        ("/api/v1/events?session_id=a%00b", "query"),
        ("/api/v1/events/evt_%00", "path"),
    ] {
        let response = app.get(path, &token).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }
}

/// `POST /api/v1/decisions` and `/tasks` take the envelope (with
/// `subject_id`, sealed as on events) and their own fields only: a typo is
/// refused by name, never stored as content in the clear; a decision must
/// cite its evidence.
#[sqlx::test]
async fn flat_decision_and_task_bodies_refuse_unknown_fields_and_seal_a_subject(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = app
        .append(&token, &message("s1", "pages of 200 time out"))
        .await;
    let evidence = said["event_id"].as_str().unwrap();
    let actor = json!({"type": "agent", "id": "coder"});
    let post = |path: &'static str, body: Value| {
        let (app, token) = (&app, &token);
        async move {
            app.send_json(reqwest::Method::POST, path, token, &body)
                .await
        }
    };

    let (status, refused) = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": actor, "refs": [evidence], "scope": "project",
               "decision": "Ship on Friday", "sensitivty": "high"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "sensitivty");
    let (status, refused) = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": actor, "scope": "project", "decision": "Ship on Friday"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "refs");
    let (status, refused) = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": actor, "refs": [], "scope": "project",
               "decision": "Ship on Friday"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "refs");
    let (status, refused) = post(
        "/api/v1/tasks",
        json!({"session_id": "s1", "actor": actor, "task_id": "T1", "status": "open",
               "titel": "Port the exporter"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "titel");
    assert_eq!(
        app.count("SELECT count(*) FROM events").await,
        1,
        "nothing stored"
    );

    // A subject's decision and task: sealed under the subject's key.
    let (status, decided) = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": actor, "refs": [evidence], "scope": "user",
               "subject_id": "carol", "decision": "Carol gets the zanzibarite discount"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{decided}");
    let (status, tasked) = post(
        "/api/v1/tasks",
        json!({"session_id": "s1", "actor": actor, "task_id": "T2", "status": "open",
               "subject_id": "carol", "title": "Call Carol about the quokkaphone"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{tasked}");
    for appended in [&decided, &tasked] {
        let (subject, content): (Option<String>, Value) =
            sqlx::query_as("SELECT subject_id, content FROM events WHERE event_id = $1")
                .bind(appended["event_id"].as_str().unwrap())
                .fetch_one(&app.pool)
                .await
                .unwrap();
        assert_eq!(subject.as_deref(), Some("carol"));
        assert!(content.get("sealed").is_some(), "{content}");
        assert!(content.get("subject_id").is_none(), "{content}");
    }
    let dump = app.pg_dump().await;
    for word in ["zanzibarite", "quokkaphone"] {
        assert!(!dump.contains(word), "{word} in the clear");
    }
}

/// A `<private>` span never leaves the private channel: an event holding
/// one is recorded there (tagged `private-span`), so neither team or public
/// bundles nor a team token's log reads show it.
#[sqlx::test]
async fn a_private_span_never_leaves_the_private_channel(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut shared = message(
        "s1",
        "The ferret deploy is at five <private>and the gate code is 7788</private>",
    );
    shared["channel"] = json!("team");
    let stored = app.append(&token, &shared).await;
    let mut plain = message("s1", "The ferret standup moved to ten");
    plain["channel"] = json!("team");
    app.append(&token, &plain).await;
    crate::helpers::wait_projected(&app.pool, "acme").await;
    let (_, event) = app
        .get_json(
            &format!("/api/v1/events/{}", stored["event_id"].as_str().unwrap()),
            &token,
        )
        .await;
    assert_eq!(event["channel"], "private");
    assert!(
        event["tags"]
            .as_array()
            .unwrap()
            .contains(&json!("private-span")),
        "{event}"
    );
    for channel in ["team", "public"] {
        let acb = app
            .acb(
                &token,
                json!({"session_id": "s1", "channel": channel, "query_text": "ferret gate code",
                       "max_tokens": 2000, "render": true}),
            )
            .await;
        let prompt = acb["prompt"].as_str().unwrap();
        assert!(!prompt.contains("7788"), "{channel}: {prompt}");
        if channel == "team" {
            assert!(prompt.contains("standup moved"), "{prompt}");
        }
    }
    let private = app
        .acb(
            &token,
            json!({"session_id": "s2", "channel": "private", "query_text": "ferret gate code",
                   "max_tokens": 2000}),
        )
        .await;
    assert!(
        private.to_string().contains("7788"),
        "the private channel keeps it"
    );

    // A view is shown in every channel's bundles: one holding a span is
    // refused on any channel (it reached public bundles), and nothing is
    // stored.
    let before = app.count("SELECT count(*) FROM events").await;
    for channel in ["public", "private"] {
        let view = json!({"session_id": "s1", "channel": channel,
                          "actor": {"type": "human", "id": "alice"}, "kind": "view_update",
                          "content": {"view": "rules", "text": "narwhal rule <PRIVATE>viewpin 8811</PRIVATE>"}});
        let (status, body) = app.post_events(&token, &view).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{channel}: {body}");
        assert_eq!(body["error"]["field"], "content.text", "{body}");
    }
    assert_eq!(app.count("SELECT count(*) FROM events").await, before);
}

/// What an agent asked a tool is retrievable: a tool call is chunked (its
/// tool and arguments, as stored: redacted at the edge like all content).
#[sqlx::test]
async fn tool_calls_are_chunked_with_their_arguments(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let call = json!({"session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "a"},
                      "kind": "tool_call",
                      "content": {"tool": "db.query", "args": {"sql": "select * from platypus_orders"}}});
    let appended = app.append(&token, &call).await;
    assert_eq!(
        appended["chunk_ids"].as_array().unwrap().len(),
        1,
        "{appended}"
    );
    crate::helpers::wait_projected(&app.pool, "acme").await;
    let acb = app
        .acb(
            &token,
            json!({"session_id": "s2", "query_text": "which query read the platypus orders?",
                   "max_tokens": 2000}),
        )
        .await;
    let evidence = crate::acb::texts(&acb, "retrieved_evidence").join("\n");
    assert!(evidence.contains("platypus_orders"), "{evidence}");
    assert!(evidence.contains("db.query"), "{evidence}");
}

/// A body that says a field twice, or an integer memd would have to round,
/// is refused by name: nothing is stored under a guess.
#[sqlx::test]
async fn duplicate_keys_and_integers_past_64_bits_are_refused(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let send = |raw: &'static str| {
        let app = &app;
        let token = &token;
        async move {
            let response = app
                .client
                .post(format!("{}/api/v1/events", app.base_url))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(raw)
                .send()
                .await
                .unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, refused) = send(
        r#"{"session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "u"},
            "kind": "message", "content": {"text": "the vault code"},
            "sensitivity": "high", "sensitivity": "none"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "sensitivity");
    let (status, refused) = send(
        r#"{"events": [{"session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "u"},
            "kind": "message", "content": {"text": "a", "text": "b"}}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "events[0].content.text");
    let (status, refused) = send(
        r#"{"session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "u"},
            "kind": "message", "content": {"text": "order", "order_id": 123456789012345678901234567890}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("123456789012345678901234567890"),
        "{refused}"
    );
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);
    // The same numbers as floats, or in 64 bits, are fine.
    let (status, stored) = send(
        r#"{"session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "u"},
            "kind": "message", "content": {"text": "order", "big": 1.5e29, "id": 18446744073709551615}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
}
