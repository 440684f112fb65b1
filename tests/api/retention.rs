//! Retention on the real daemon: memory a tenant's policy forgets leaves
//! its bundles (lexical and vector paths, named in the omissions) but stays
//! in the log; a rebuild gives the same bundles; a looser policy brings it
//! back; pinned memory is never forgotten.

use chrono::{DateTime, Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::section,
    helpers::{spawn_daemon, spawn_daemon_with, wait_embedded, wait_projected},
    semantic::semantic,
};

/// The tenant's newest event is at this time; ages count back from it.
fn newest() -> DateTime<Utc> {
    "2026-11-20T12:00:00Z".parse().unwrap()
}

fn aged(
    days: i64,
    session: &str,
    kind: &str,
    tags: &[&str],
    content: Value,
    refs: &[&str],
) -> Value {
    json!({
        "session_id": session,
        "channel": "private",
        "ts": (newest() - Duration::days(days)).to_rfc3339(),
        "tags": tags,
        "actor": {"type": "human", "id": "dana"},
        "kind": kind,
        "content": content,
        "refs": refs,
    })
}

fn said(days: i64, session: &str, tags: &[&str], text: &str) -> Value {
    aged(days, session, "message", tags, json!({"text": text}), &[])
}

fn evidence(acb: &Value) -> Vec<String> {
    section(acb, "retrieved_evidence")
        .iter()
        .map(|item| item["text"].as_str().unwrap().trim_end().to_owned())
        .collect()
}

fn forgotten_ids(acb: &Value) -> Vec<String> {
    acb["omissions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["reason"] == "retention")
        .flat_map(|o| o["candidates"].as_array().unwrap().clone())
        .map(|id| id.as_str().unwrap().to_owned())
        .collect()
}

const OLD: &str = "The staging database password rotates every Monday.";
const RECENT: &str = "The database backup rotates at midnight now.";
const PINNED: &str = "Dana owns the database rotation schedule.";
const TOOL: &str = "database rotation log: 14 keys rotated";

#[sqlx::test]
async fn forgotten_memory_leaves_bundles_stays_in_the_log_and_survives_a_rebuild(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect, semantic("hashed")).await;
    let token = app.tenant("acme").await;
    let appended = app
        .append(
            &token,
            &json!({"events": [
                said(90, "s1", &["pinned"], PINNED),
                said(60, "s1", &[], OLD),
                aged(10, "s1", "tool_result", &[],
                     json!({"tool": "vault.rotate", "output": TOOL}), &[]),
                said(0, "s1", &[], RECENT),
            ]}),
        )
        .await;
    let old_event = appended["events"][1]["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;
    let ask = || json!({"query_text": "when does the database rotate?", "max_tokens": 2000});

    let everything = app.acb(&token, ask()).await;
    let all = evidence(&everything);
    for text in [OLD, RECENT, PINNED] {
        assert!(all.iter().any(|t| t == text), "{text} missing: {all:#?}");
    }
    let vectors_unfiltered = everything["provenance"]["semantic"]["semantic_candidates"]
        .as_u64()
        .unwrap();

    // Messages fade after 30 days, tool output after 7.
    let retention = json!({"retention": {"max_age_days": {"message": 30, "tool_result": 7}}});
    let (status, stored) = app.put_json("/api/v1/policy", &token, &retention).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    let forgetful = app.acb(&token, ask()).await;
    let kept = evidence(&forgetful);
    assert!(kept.iter().any(|t| t == RECENT), "{kept:#?}");
    assert!(
        kept.iter().any(|t| t == PINNED),
        "pinned memory is never forgotten"
    );
    assert!(
        kept.iter().all(|t| t != OLD && !t.contains("14 keys")),
        "forgotten memory in a bundle: {kept:#?}"
    );
    // Not through the vector path either: it found two fewer chunks.
    let semantic = &forgetful["provenance"]["semantic"];
    assert_eq!(semantic["used"], true, "{semantic}");
    assert_eq!(
        semantic["semantic_candidates"].as_u64().unwrap(),
        vectors_unfiltered - 2,
        "{semantic}"
    );
    // The bundle names what retention dropped.
    let named = forgotten_ids(&forgetful);
    assert_eq!(named.len(), 2, "{:#?}", forgetful["omissions"]);
    let mut named_events = Vec::new();
    for id in &named {
        let (status, chunk) = app.get_json(&format!("/api/v1/chunks/{id}"), &token).await;
        assert_eq!(status, StatusCode::OK, "{chunk}");
        named_events.push(chunk["event_id"].as_str().unwrap().to_owned());
    }
    assert!(named_events.contains(&old_event), "{named_events:?}");

    // The log still holds it, byte for byte.
    let (status, event) = app
        .get_json(&format!("/api/v1/events/{old_event}"), &token)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(event["content"]["text"], OLD);

    // A rebuild of every projection gives the same bundle.
    let (status, queued) = app.post_admin("rebuild", &token, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let job = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["status"], "done", "{job}");
    wait_embedded(&app, "acme", "hashed").await;
    let rebuilt = app.acb(&token, ask()).await;
    assert_eq!(evidence(&rebuilt), kept);
    assert_eq!(forgotten_ids(&rebuilt), named);

    // A looser policy brings the memory back at once.
    let looser = json!({"retention": {"max_age_days": {"message": 365}}});
    let (status, _) = app.put_json("/api/v1/policy", &token, &looser).await;
    assert_eq!(status, StatusCode::OK);
    let back = evidence(&app.acb(&token, ask()).await);
    assert!(back.iter().any(|t| t == OLD), "{back:#?}");
    assert!(back.iter().any(|t| t.contains("14 keys")), "{back:#?}");
    app.stop().await;
}

#[sqlx::test]
async fn sessions_chunk_caps_and_superseded_decisions_are_forgotten(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let first = app
        .append(
            &token,
            &said(20, "early", &[], "Queue workers use Redis streams."),
        )
        .await;
    let evidence_id = first["event_id"].as_str().unwrap().to_owned();
    let decide = |days: i64, text: &str| {
        aged(
            days,
            "later",
            "decision",
            &[],
            json!({"decision": text, "key": "queue", "scope": "project"}),
            &[evidence_id.as_str()],
        )
    };
    app.append(&token, &decide(15, "Queue workers use Redis"))
        .await;
    app.append(&token, &decide(10, "Queue workers use PostgreSQL"))
        .await;
    app.append(
        &token,
        &said(0, "later", &[], "Queue workers moved to PostgreSQL."),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let ask = json!({"query_text": "what do queue workers use?", "max_tokens": 4000,
                     "include_history": true});
    let policy = |retention: Value| json!({"retention": retention});

    // With history, the superseded decision shows beside its successor.
    let ledger = |acb: &Value| -> Vec<String> {
        section(acb, "decision_ledger")
            .iter()
            .map(|item| item["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let full = app.acb(&token, ask.clone()).await;
    assert!(
        ledger(&full).iter().any(|t| t.contains("use Redis")),
        "{:#?}",
        ledger(&full)
    );
    // Superseded 10 days before the newest event: past a 5-day grace.
    let (status, body) = app
        .put_json(
            "/api/v1/policy",
            &token,
            &policy(json!({"superseded_decisions_grace_days": 5})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let graced = app.acb(&token, ask.clone()).await;
    assert!(
        ledger(&graced).iter().all(|t| !t.contains("use Redis")),
        "{:#?}",
        ledger(&graced)
    );
    assert!(ledger(&graced).iter().any(|t| t.contains("PostgreSQL")));

    // Only the most recently active session.
    app.put_json(
        "/api/v1/policy",
        &token,
        &policy(json!({"sessions_kept": 1})),
    )
    .await;
    let texts = evidence(&app.acb(&token, ask.clone()).await);
    assert!(
        texts.iter().all(|t| !t.contains("Redis streams")),
        "{texts:#?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("moved to PostgreSQL")),
        "{texts:#?}"
    );

    // Only the newest chunk.
    app.put_policy(&token, &policy(json!({"max_chunks": 1})))
        .await;
    let texts = evidence(&app.acb(&token, ask.clone()).await);
    assert_eq!(texts, ["Queue workers moved to PostgreSQL."]);

    // Bounds are checked, by field, and a refused policy changes nothing.
    for (retention, field) in [
        (json!({"sessions_kept": 0}), "retention.sessions_kept"),
        (
            json!({"max_age_days": {"message": 50_000}}),
            "retention.max_age_days.message",
        ),
        (
            json!({"max_age_days": {"decision": 5}}),
            "retention.max_age_days.decision",
        ),
        (
            json!({"max_age_days": [null, null]}),
            "retention.max_age_days",
        ),
    ] {
        let (status, body) = app
            .put_json("/api/v1/policy", &token, &policy(retention))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (_, stored) = app.get_json("/api/v1/policy", &token).await;
    assert_eq!(stored["retention"]["max_chunks"], 1);
}

/// A client's clock cannot move its tenant's ages: a `ts` further ahead
/// than the allowed skew is refused by field, one within it is recorded at
/// the daemon's time, and recency and retention count from the newest `ts`
/// capped at the last append, so neither an event dated in the past nor a
/// row dated in the future (stored before `ts` was bounded) shifts them.
#[sqlx::test]
async fn no_single_events_clock_moves_the_age_of_the_rest(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let skewed = app.tenant("skewed").await;
    let far = json!({"session_id": "s1", "channel": "private", "kind": "message",
                     "actor": {"type": "human", "id": "dana"}, "content": {"text": "hello"},
                     "ts": "2099-01-01T00:00:00Z"});
    let (status, refused) = app.post_events(&skewed, &far).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "ts");
    let mut fine = far.clone();
    fine["ts"] = json!((Utc::now() - Duration::days(400)).to_rfc3339());
    let (status, refused) = app
        .post_events(&skewed, &json!({"events": [fine, far.clone()]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["field"], "events[1].ts");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);
    let mut ahead = far.clone();
    ahead["ts"] = json!((Utc::now() + Duration::minutes(2)).to_rfc3339());
    let (status, stored) = app.post_events(&skewed, &ahead).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    let (ts, created_at): (DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as("SELECT ts, created_at FROM events WHERE tenant_id = 'skewed'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        ts, created_at,
        "within the skew: recorded at the daemon's time"
    );

    let token = app.tenant("acme").await;
    app.append(
        &token,
        &json!({"events": [said(60, "s1", &[], OLD), said(0, "s1", &[], RECENT)]}),
    )
    .await;
    let retention = json!({"retention": {"max_age_days": {"message": 30}}});
    app.put_policy(&token, &retention).await;
    wait_projected(&app.pool, "acme").await;
    let ask = || json!({"query_text": "when does the database rotate?", "max_tokens": 2000});
    let before = app.acb(&token, ask()).await;
    assert_eq!(evidence(&before), vec![RECENT.to_owned()]);
    let recency = |acb: &Value| section(acb, "retrieved_evidence")[0]["recency"].clone();
    assert!(recency(&before).as_f64().is_some(), "{before}");

    // An event dated long ago, now the tenant's last: ages stay.
    app.append(&token, &said(20_000, "s2", &[], "a line from an old diary"))
        .await;
    wait_projected(&app.pool, "acme").await;
    let backdated = app.acb(&token, ask()).await;
    assert_eq!(
        evidence(&backdated),
        evidence(&before),
        "the old event freshened the rest"
    );
    assert_eq!(recency(&backdated), recency(&before));

    // A row dated 2099 (as a log from before the bound may hold), the
    // tenant's last: ages stay too.
    let event_id = format!("evt_{}", ulid::Ulid::generate());
    sqlx::query(
        "INSERT INTO events (tenant_id, seq, event_id, created_at, ts, session_id, channel,
                             actor_type, actor_id, kind, sensitivity, tags, content, refs,
                             prev_hash, hash)
         SELECT tenant_id, seq + 1, $1, created_at, '2099-01-01', 's3', channel, actor_type,
                actor_id, kind, sensitivity, tags, '{\"text\": \"a note from the future\"}',
                refs, hash, hash
           FROM events WHERE tenant_id = 'acme' ORDER BY seq DESC LIMIT 1",
    )
    .bind(&event_id)
    .execute(&app.pool)
    .await
    .unwrap();
    // The head as the migration that added the anchor leaves it for a log
    // holding such a row.
    sqlx::query(
        "UPDATE tenant_heads h SET seq = seq + 1,
                newest_ts = (SELECT max(e.ts) FROM events e
                              WHERE e.tenant_id = h.tenant_id AND e.ts <= e.created_at)
          WHERE tenant_id = 'acme'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query("SELECT pg_notify($1, 'acme:4')")
        .bind(memd::write::NOTIFY_CHANNEL)
        .execute(&app.pool)
        .await
        .unwrap();
    wait_projected(&app.pool, "acme").await;
    let future = app.acb(&token, ask()).await;
    assert_eq!(
        evidence(&future),
        evidence(&before),
        "the 2099 row aged the rest"
    );
    assert_eq!(recency(&future), recency(&before));
}
