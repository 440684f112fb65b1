//! `memd export` and `memd import`, run as an operator runs them: a tenant's
//! log moved to another database keeps its chain (the same `verify` head),
//! a file that does not verify stores nothing, an interrupted import goes
//! on, and a foreign history imported twice is stored once.

use std::io::{Read, Write};

use memd::db::ScratchDatabase;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{TestApp, memd_cli, message, spawn_daemon, tool_result, wait_projected};

fn file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}-{name}", ulid::Ulid::generate()))
}

/// `memd verify --tenant` printed head, or the whole output when it failed.
async fn verified_head(url: &str, tenant: &str) -> String {
    let (code, printed, err) = memd_cli(url, &["verify", "--tenant", tenant]).await;
    assert_eq!(code, 0, "{printed}{err}");
    printed
        .split_whitespace()
        .find_map(|w| w.strip_prefix("head="))
        .unwrap_or_else(|| panic!("no head in {printed}"))
        .to_owned()
}

/// A fresh, migrated database on the test's server, and its URL.
async fn other_database(app: &TestApp) -> (ScratchDatabase, String) {
    let url = app.database_url().await;
    let scratch = ScratchDatabase::create(&url, "memd_import").await.unwrap();
    let other = memd::db::with_database(&url, &scratch.name);
    let (code, _, err) = memd_cli(&other, &["migrate"]).await;
    assert_eq!(code, 0, "{err}");
    (scratch, other)
}

async fn history(app: &TestApp, token: &str, from: usize, to: usize) {
    for i in from..to {
        app.append(
            token,
            &message("s1", &format!("note {i}: the queue runs on PostgreSQL")),
        )
        .await;
    }
}

#[sqlx::test]
async fn an_exported_log_imports_elsewhere_with_the_same_chain_and_goes_on_after_an_interruption(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let token = app.tenant("acme").await;
    history(&app, &token, 0, 3).await;
    // An artifact (a tool output past the excerpt), sealed memory (high),
    // and numbers, whose rendering the hashes cover.
    app.append(
        &token,
        &tool_result("big.log", &"line of output\n".repeat(8_000)),
    )
    .await;
    let mut secret = message("s1", "the staging password rotates on Fridays");
    secret["sensitivity"] = json!("high");
    app.append(&token, &secret).await;
    // A number with a trailing zero, sent as text.
    let response = app
        .client
        .post(format!("{}/api/v1/events", app.base_url))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(
            r#"{"session_id": "s1", "channel": "private", "actor": {"type": "agent", "id": "a"},
                "kind": "message", "content": {"text": "ratio", "ratio": 1.10}}"#,
        )
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    wait_projected(&app.pool, "acme").await;
    let first = file("acme-first.ndjson.gz");
    let (code, printed, err) = memd_cli(
        &url,
        &[
            "export",
            "--tenant",
            "acme",
            "--out",
            first.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{printed}{err}");
    assert!(printed.contains("6 events, 1 artifacts"), "{printed}");
    // More history after the first export, then a second one.
    history(&app, &token, 3, 9).await;
    let second = file("acme-second.ndjson.gz");
    let (code, _, err) = memd_cli(
        &url,
        &[
            "export",
            "--tenant",
            "acme",
            "--out",
            second.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");

    let (scratch, other) = other_database(&app).await;
    // The first file: an import that stopped after 6 events.
    let (code, printed, err) = memd_cli(&other, &["import", first.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{printed}{err}");
    assert!(
        printed.contains("6 events stored (0 were already here)"),
        "{printed}"
    );
    assert!(printed.contains("memd tenant token acme"), "{printed}");
    // The second goes on from there.
    let (code, printed, err) = memd_cli(&other, &["import", second.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{printed}{err}");
    assert!(
        printed.contains("6 events stored (6 were already here)"),
        "{printed}"
    );
    // Again: nothing to do.
    let (code, printed, _) = memd_cli(&other, &["import", second.to_str().unwrap()]).await;
    assert_eq!(code, 0);
    assert!(
        printed.contains("0 events stored (12 were already here)"),
        "{printed}"
    );

    assert_eq!(
        verified_head(&other, "acme").await,
        verified_head(&url, "acme").await,
        "the imported chain is the exporter's"
    );
    let imported = sqlx::PgPool::connect(&other).await.unwrap();
    let (events, artifacts, sealed_in_clear): (i64, i64, bool) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM events WHERE tenant_id = 'acme'),
                (SELECT count(*) FROM artifacts WHERE tenant_id = 'acme'),
                EXISTS (SELECT 1 FROM events WHERE content::text LIKE '%staging password%')",
    )
    .fetch_one(&imported)
    .await
    .unwrap();
    assert_eq!((events, artifacts, sealed_in_clear), (12, 1, false));
    // Every stored content renders the same in both databases.
    let rendered = "SELECT md5(string_agg(content::text, '\n' ORDER BY seq)) FROM events
                     WHERE tenant_id = 'acme'";
    let there: String = sqlx::query_scalar(rendered)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let here: String = sqlx::query_scalar(rendered)
        .fetch_one(&imported)
        .await
        .unwrap();
    assert_eq!(there, here);
    imported.close().await;

    // A database whose tenant of that name is another log: refused.
    let (other_scratch, third) = other_database(&app).await;
    let (code, token3, _) = memd_cli(&third, &["tenant", "create", "acme"]).await;
    assert_eq!(code, 0);
    let _ = token3;
    let third_pool = sqlx::PgPool::connect(&third).await.unwrap();
    memd::write::append(
        &third_pool,
        &memd_core::seal::Keyring::none(),
        &memd::domain::tenant::TenantId::parse("acme").unwrap(),
        vec![
            memd::domain::event::NewEvent::parse(
                serde_json::from_value(message("s9", "another history")).unwrap(),
                &memd::domain::redact::Redactor::default(),
            )
            .unwrap(),
        ],
    )
    .await
    .unwrap();
    third_pool.close().await;
    let (code, _, err) = memd_cli(&third, &["import", second.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(err.contains("is not a beginning of the file"), "{err}");

    scratch.drop_now().await.unwrap();
    other_scratch.drop_now().await.unwrap();
    let _ = std::fs::remove_file(first);
    let _ = std::fs::remove_file(second);
}

/// The export as plain lines.
fn read_lines(path: &std::path::Path) -> Vec<String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines().map(str::to_owned).collect()
}

fn write_lines(path: &std::path::Path, lines: &[String]) {
    let mut out = std::fs::File::create(path).unwrap();
    for line in lines {
        writeln!(out, "{line}").unwrap();
    }
}

#[sqlx::test]
async fn a_file_that_does_not_verify_is_refused_naming_the_event_and_stores_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let token = app.tenant("acme").await;
    history(&app, &token, 0, 5).await;
    let exported = file("acme.ndjson.gz");
    let (code, _, err) = memd_cli(
        &url,
        &[
            "export",
            "--tenant",
            "acme",
            "--out",
            exported.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let lines = read_lines(&exported);
    assert_eq!(lines.len(), 7, "header, 5 events, end");
    let (scratch, other) = other_database(&app).await;

    // One word of event 3 changed (its hash left as it was).
    let mut altered = lines.clone();
    let mut event: Value = serde_json::from_str(&altered[3]).unwrap();
    let event_id = event["event_id"].as_str().unwrap().to_owned();
    event["content"]["text"] = json!("note 2: the queue runs on MySQL");
    altered[3] = event.to_string();
    let tampered = file("tampered.ndjson");
    write_lines(&tampered, &altered);
    let (code, _, err) = memd_cli(&other, &["import", tampered.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("event {event_id} (seq 3) does not verify")),
        "{err}"
    );

    // Rehashed to hide it: the next event's prev_hash gives it away.
    let hash = rehash(&event, "acme", true);
    event["hash"] = json!(hash);
    let content = pg_rendering(&event["content"]);
    event["content"] = json!("CONTENT");
    altered[3] = event.to_string().replace("\"CONTENT\"", &content);
    write_lines(&tampered, &altered);
    let (code, _, err) = memd_cli(&other, &["import", tampered.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("(seq 4) does not verify: its prev_hash is not the previous event's hash"),
        "{err}"
    );
    // The last event hashed over its content written otherwise than
    // PostgreSQL renders it (header and end line made to agree): the chain
    // holds in the file, and would not once stored.
    let mut compact: Value = serde_json::from_str(&lines[5]).unwrap();
    let hash = rehash(&compact, "acme", false);
    compact["hash"] = json!(hash);
    let mut recomputed = lines.clone();
    recomputed[5] = compact.to_string();
    for at in [0, 6] {
        let mut line: Value = serde_json::from_str(&recomputed[at]).unwrap();
        line["head_hash"] = json!(hash);
        recomputed[at] = line.to_string();
    }
    write_lines(&tampered, &recomputed);
    let (code, _, err) = memd_cli(&other, &["import", tampered.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("(seq 5) does not verify: its content is not written as PostgreSQL stores it"),
        "{err}"
    );

    // Cut short: no end line.
    let cut = file("cut.ndjson");
    write_lines(&cut, &lines[..5]);
    let (code, _, err) = memd_cli(&other, &["import", cut.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(err.contains("cut short after seq 4"), "{err}");
    // A missing event.
    let mut gap = lines.clone();
    gap.remove(2);
    write_lines(&cut, &gap);
    let (code, _, err) = memd_cli(&other, &["import", cut.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("(seq 3) does not verify: expected seq 2"),
        "{err}"
    );

    let pool = sqlx::PgPool::connect(&other).await.unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "a refused file stores nothing");
    pool.close().await;
    scratch.drop_now().await.unwrap();
    for path in [exported, tampered, cut] {
        let _ = std::fs::remove_file(path);
    }
}

#[sqlx::test]
async fn a_foreign_history_goes_through_the_write_path_and_a_rerun_stores_nothing_twice(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let lines: Vec<String> = vec![
        message("chat-1", "we moved the queue to PostgreSQL").to_string(),
        message("chat-1", "ok").to_string(),
        // The same line again: another event, not a duplicate.
        message("chat-1", "ok").to_string(),
        message("chat-1", "the deploy key is AKIAIOSFODNN7EXAMPLE").to_string(),
        json!({"session_id": "chat-1", "channel": "private", "actor": {"type": "human", "id": "bo"},
               "kind": "message", "content": {"text": "thanks"}, "ts": "2024-03-01T10:00:00Z",
               "idempotency_key": "bo-thanks"})
        .to_string(),
    ];
    let part = file("part.ndjson");
    write_lines(&part, &lines[..3]);
    let whole = file("whole.ndjson");
    write_lines(&whole, &lines);

    // Interrupted after three lines, then the whole file.
    let import = |file: &std::path::Path| {
        let (url, file) = (url.clone(), file.to_str().unwrap().to_owned());
        async move {
            let (code, printed, err) =
                memd_cli(&url, &["import", "--foreign", "--tenant", "legacy", &file]).await;
            assert_eq!(code, 0, "{printed}{err}");
            printed
        }
    };
    let printed = import(&part).await;
    assert!(
        printed.contains("3 events, 3 stored, 0 already stored"),
        "{printed}"
    );
    let printed = import(&whole).await;
    assert!(
        printed.contains("5 events, 2 stored, 3 already stored"),
        "{printed}"
    );
    let printed = import(&whole).await;
    assert!(
        printed.contains("5 events, 0 stored, 5 already stored"),
        "{printed}"
    );

    let (events, oks, leaked, old): (i64, i64, bool, bool) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE content ->> 'text' = 'ok'),
                bool_or(content::text LIKE '%AKIAIOSFODNN7EXAMPLE%'),
                bool_or(ts = '2024-03-01T10:00:00Z')
           FROM events WHERE tenant_id = 'legacy'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((events, oks, leaked, old), (5, 2, false, true));
    verified_head(&url, "legacy").await;

    // A bad line is refused by line and field, before anything is stored.
    let bad = file("bad.ndjson");
    write_lines(
        &bad,
        &[
            message("chat-2", "fine").to_string(),
            json!({"session_id": "chat-2", "channel": "nowhere", "actor": {"type": "human", "id": "x"},
                   "kind": "message", "content": {"text": "?"}})
            .to_string(),
        ],
    );
    let (code, _, err) = memd_cli(
        &url,
        &[
            "import",
            "--foreign",
            "--tenant",
            "other",
            bad.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("line 2: channel"), "{err}");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE tenant_id = 'other'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    for path in [part, whole, bad] {
        let _ = std::fs::remove_file(path);
    }
}

/// The hash an event line would have with its fields as they are now, its
/// content rendered as PostgreSQL renders `jsonb` (`pg_style`, for a
/// content of strings) or compact.
fn rehash(event: &Value, tenant: &str, pg_style: bool) -> String {
    let text = |key: &str| event[key].as_str().unwrap().to_owned();
    let list = |key: &str| -> Vec<String> {
        event[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let micros = |key: &str| {
        chrono::DateTime::parse_from_rfc3339(&text(key))
            .unwrap()
            .timestamp_micros()
    };
    let (tags, refs) = (list("tags"), list("refs"));
    // PostgreSQL's rendering of the content: ", " and ": " between items.
    let content = if pg_style {
        pg_rendering(&event["content"])
    } else {
        serde_json::to_string(&event["content"]).unwrap()
    };
    let prev: [u8; 32] = hex::decode(text("prev_hash")).unwrap().try_into().unwrap();
    hex::encode(
        memd_core::hash_chain::ChainedEvent {
            tenant_id: tenant,
            seq: event["seq"].as_i64().unwrap(),
            event_id: &text("event_id"),
            created_at_us: micros("created_at"),
            ts_us: micros("ts"),
            session_id: &text("session_id"),
            channel: &text("channel"),
            actor_type: &text("actor_type"),
            actor_id: &text("actor_id"),
            agent_id: event["agent_id"].as_str(),
            subject_id: event["subject_id"].as_str(),
            kind: &text("kind"),
            sensitivity: &text("sensitivity"),
            tags: &tags,
            refs: &refs,
            idempotency_key: event["idempotency_key"].as_str(),
            artifact_id: event["artifact_id"].as_str(),
            content_text: &content,
        }
        .hash(&prev),
    )
}

/// PostgreSQL's rendering of a `jsonb` object of strings: ", " and ": "
/// between items.
fn pg_rendering(content: &Value) -> String {
    serde_json::to_string(content)
        .unwrap()
        .replace("\",\"", "\", \"")
        .replace("\":", "\": ")
}
