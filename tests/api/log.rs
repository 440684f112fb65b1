//! Reading the log back: `GET /api/v1/events` (filters, paging, chain
//! hashes), `GET /api/v1/events/{id}` and `GET /api/v1/chunks/{id}`.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{TestApp, event, message, spawn_daemon, wait_projected};

/// The seqs of a page of events, in the order given.
fn seqs(page: &Value) -> Vec<i64> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect()
}

async fn get_json(app: &TestApp, path: &str, token: &str) -> (StatusCode, Value) {
    let response = app.get(path, token).await;
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[sqlx::test]
async fn events_read_back_in_log_order_filtered_and_paged(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let session = if i % 2 == 0 { "even" } else { "odd" };
        let said = app
            .append(&token, &message(session, &format!("note {i}")))
            .await;
        ids.push(said["event_id"].as_str().unwrap().to_owned());
    }
    app.append(
        &token,
        &event(
            "decision",
            json!({"decision": "notes are kept", "scope": "project"}),
            &[&ids[0]],
        ),
    )
    .await;

    let (status, all) = get_json(&app, "/api/v1/events", &token).await;
    assert_eq!(status, StatusCode::OK);
    let events = all["events"].as_array().unwrap();
    assert_eq!(events.len(), 6);
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(events[0]["content"]["text"], "note 0");
    assert_eq!(events[0]["actor_type"], "human");
    assert_eq!(events[1]["prev_hash"], events[0]["hash"], "the chain links");
    assert_eq!(events[0]["prev_hash"], "0".repeat(64));
    assert_eq!(all["next_after_seq"], Value::Null);

    let (_, odd) = get_json(&app, "/api/v1/events?session_id=odd", &token).await;
    let texts: Vec<&str> = odd["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["note 1", "note 3"]);
    let (_, decisions) = get_json(&app, "/api/v1/events?kind=decision", &token).await;
    assert_eq!(decisions["events"][0]["refs"], json!([ids[0]]));

    // Paging: two at a time, resuming after the last seq seen.
    let mut seen = Vec::new();
    let mut path = "/api/v1/events?limit=2".to_owned();
    loop {
        let (_, page) = get_json(&app, &path, &token).await;
        seen.extend(
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["seq"].as_i64().unwrap()),
        );
        match page["next_after_seq"].as_i64() {
            Some(after) => path = format!("/api/v1/events?limit=2&after_seq={after}"),
            None => break,
        }
    }
    assert_eq!(seen, [1, 2, 3, 4, 5, 6]);

    let (status, refused) = get_json(&app, "/api/v1/events?limit=0", &token).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["error"]["field"], "limit");
    let (status, refused) = get_json(&app, "/api/v1/events?kind=mesage", &token).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["error"]["field"], "kind");
    let (status, refused) = get_json(&app, "/api/v1/events?sesion_id=x", &token).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a misspelt filter is an error"
    );
    assert_eq!(refused["error"]["field"], "sesion_id", "{refused}");

    let (status, one) = get_json(&app, &format!("/api/v1/events/{}", ids[2]), &token).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["seq"], 3);
    assert_eq!(one, events[2]);
}

#[sqlx::test]
async fn a_chunk_a_bundle_cites_can_be_looked_up(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = app
        .append(
            &token,
            &message("s1", "the quarterly report ships on fridays"),
        )
        .await;
    let event_id = said["event_id"].as_str().unwrap();
    wait_projected(&app.pool, "acme").await;
    let response = app
        .client
        .post(format!("{}/api/v1/acb/build", app.base_url))
        .bearer_auth(&token)
        .json(&json!({"query_text": "when does the quarterly report ship?"}))
        .send()
        .await
        .unwrap();
    let acb: Value = response.json().await.unwrap();
    let evidence = acb["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "retrieved_evidence")
        .expect("evidence");
    let chunk_id = evidence["items"][0]["chunk_id"].as_str().unwrap();

    let (status, chunk) = get_json(&app, &format!("/api/v1/chunks/{chunk_id}"), &token).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chunk["event_id"], event_id);
    assert_eq!(chunk["text"], "the quarterly report ships on fridays");
    assert!(chunk["token_est"].as_i64().unwrap() > 0);
    let (status, missing) = get_json(&app, "/api/v1/chunks/chk_nope_0", &token).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["error"]["code"], "not_found");
}

#[sqlx::test]
async fn the_log_reads_by_time_and_tag_through_the_prds_indexes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let at = |day: u32, text: &str, tag: &str| {
        let mut e = message("s1", text);
        e["ts"] = json!(format!("2026-11-{day:02}T12:00:00Z"));
        e["tags"] = json!([tag]);
        e
    };
    app.append(
        &token,
        &json!({"events": [at(1, "first", "ops"), at(10, "second", "billing"), at(20, "third", "ops")]}),
    )
    .await;
    let texts = |page: &Value| -> Vec<String> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["content"]["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, page) = get_json(
        &app,
        "/api/v1/events?since=2026-11-05T00:00:00Z&until=2026-11-15T00:00:00Z",
        &token,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(texts(&page), ["second"]);
    let (_, page) = get_json(&app, "/api/v1/events?tag=ops", &token).await;
    assert_eq!(texts(&page), ["first", "third"]);
    let (status, error) = get_json(&app, "/api/v1/events?since=yesterday", &token).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error["error"]["field"], "since",
        "the parameter is named: {error}"
    );
    let (status, error) = get_json(&app, "/api/v1/events?limit=abc", &token).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["field"], "limit", "{error}");

    // With a tenant of many events, both filters are served by the PRD's
    // indexes (ANALYZE: the planner knows the table's shape).
    let chatter: Vec<Value> = (0..1000)
        .map(|i| {
            let mut e = message("s2", &format!("chatter {i}"));
            e["tags"] = json!(["chatter"]);
            e
        })
        .collect();
    app.append(&token, &json!({ "events": chatter })).await;
    let mut conn = app.pool.acquire().await.unwrap();
    sqlx::query("ANALYZE events")
        .execute(&mut *conn)
        .await
        .unwrap();
    for (condition, index) in [
        (
            "ts >= '2026-11-05' AND ts < '2026-11-15'",
            "events_tenant_ts",
        ),
        ("tags @> ARRAY['ops']", "events_tags"),
    ] {
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN SELECT * FROM events WHERE tenant_id = 'acme' AND {condition}"
        )))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        assert!(plan.join("\n").contains(index), "{condition}: {plan:#?}");
    }
}

/// The console reads the log newest first, a page at a time by seq, and by
/// actor.
#[sqlx::test]
async fn the_log_reads_newest_first_by_seq_and_by_actor(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let events: Vec<Value> = (1..=5)
        .map(|i| {
            let mut e = message("s1", &format!("turn {i}"));
            if i % 2 == 0 {
                e["actor"] = json!({"type": "agent", "id": "coder"});
            }
            e
        })
        .collect();
    app.append(&token, &json!({ "events": events })).await;
    let (status, page) = get_json(&app, "/api/v1/events?order=desc&limit=2", &token).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(seqs(&page), [5, 4]);
    assert_eq!(page["next_before_seq"], 4);
    assert!(page["next_after_seq"].is_null());
    let (_, page) = get_json(
        &app,
        "/api/v1/events?order=desc&limit=2&before_seq=4",
        &token,
    )
    .await;
    assert_eq!(seqs(&page), [3, 2]);
    let (_, page) = get_json(
        &app,
        "/api/v1/events?order=desc&limit=2&before_seq=2",
        &token,
    )
    .await;
    assert_eq!(seqs(&page), [1]);
    assert!(page["next_before_seq"].is_null(), "{page}");
    let (_, page) = get_json(&app, "/api/v1/events?actor_id=coder", &token).await;
    assert_eq!(seqs(&page), [2, 4]);
    let (status, error) = get_json(&app, "/api/v1/events?order=sideways", &token).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"]["field"], "order");
}

#[sqlx::test]
async fn the_log_filters_by_words_and_shows_each_events_chunks(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let texts = [
        "The nightly invoice export timed out",
        "Lunch is at noon",
        "Exporting invoices again after the fix",
    ];
    let mut ids = Vec::new();
    for text in texts {
        ids.push(app.append(&token, &message("s1", text)).await["event_id"].clone());
    }
    app.append(
        &token,
        &event(
            "tool_call",
            json!({"tool": "fs.read_file", "args": {}}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    // Every word, stemmed, in any order; combined with the other filters.
    let (status, page) = get_json(&app, "/api/v1/events?text=invoice%20export", &token).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(seqs(&page), [1, 3]);
    let (_, page) = get_json(
        &app,
        "/api/v1/events?text=exports%20invoices&order=desc",
        &token,
    )
    .await;
    assert_eq!(seqs(&page), [3, 1]);
    let (_, page) = get_json(&app, "/api/v1/events?text=nightly%20lunch", &token).await;
    assert_eq!(seqs(&page), Vec::<i64>::new());
    let (_, page) = get_json(&app, "/api/v1/events?text=invoice", &other).await;
    assert_eq!(seqs(&page), Vec::<i64>::new());
    for (query, why) in [
        ("text=the%20of", "no searchable word"),
        (&*format!("text={}", "a".repeat(501)), "at most 500"),
    ] {
        let (status, error) = get_json(&app, &format!("/api/v1/events?{query}"), &token).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(error["error"]["field"], "text");
        assert!(
            error["error"]["message"].as_str().unwrap().contains(why),
            "{error}"
        );
    }

    // The chunks each event produced; a tool call's are its tool and arguments.
    let id = ids[0].as_str().unwrap();
    let (status, chunks) = get_json(&app, &format!("/api/v1/events/{id}/chunks"), &token).await;
    assert_eq!(status, StatusCode::OK, "{chunks}");
    assert_eq!(chunks["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(chunks["chunks"][0]["text"], texts[0]);
    assert_eq!(chunks["chunks"][0]["event_id"], id);
    let (_, page) = get_json(&app, "/api/v1/events?kind=tool_call", &token).await;
    let call = page["events"][0]["event_id"].as_str().unwrap().to_owned();
    let (status, chunks) = get_json(&app, &format!("/api/v1/events/{call}/chunks"), &token).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chunks["chunks"].as_array().unwrap().len(), 1, "{chunks}");
    assert_eq!(chunks["chunks"][0]["source"], "tool_call fs.read_file");
    // Another tenant's event is missing, not empty.
    let (status, error) = get_json(&app, &format!("/api/v1/events/{id}/chunks"), &other).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
}

/// `before_seq` alone is the page just before it, in the order asked for,
/// and pages on backwards.
#[sqlx::test]
async fn before_seq_reads_the_events_just_before_it(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for i in 1..=12 {
        app.append(&token, &message("s1", &format!("note {i}")))
            .await;
    }
    let (status, page) = get_json(&app, "/api/v1/events?before_seq=10&limit=2", &token).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(seqs(&page), [8, 9]);
    assert_eq!(page["next_before_seq"], 8);
    assert_eq!(page["next_after_seq"], Value::Null);
    let (_, back) = get_json(&app, "/api/v1/events?before_seq=8&limit=2", &token).await;
    assert_eq!(seqs(&back), [6, 7]);
    let (_, newest_first) = get_json(
        &app,
        "/api/v1/events?before_seq=10&limit=2&order=desc",
        &token,
    )
    .await;
    assert_eq!(seqs(&newest_first), [9, 8]);
    let (_, between) = get_json(
        &app,
        "/api/v1/events?after_seq=2&before_seq=10&limit=2",
        &token,
    )
    .await;
    assert_eq!(seqs(&between), [3, 4], "with after_seq, forward as before");
    let (_, first) = get_json(&app, "/api/v1/events?before_seq=3&limit=5", &token).await;
    assert_eq!(seqs(&first), [1, 2]);
    assert_eq!(
        first["next_before_seq"],
        Value::Null,
        "a short page is the last"
    );
}
