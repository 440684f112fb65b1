//! Secrets are never stored: planted in every field, none of them is found
//! anywhere in a full `pg_dump` of the database.

use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::spawn_daemon;

/// (a secret as an agent might leak it, a marker unique to it). Each marker
/// appears in nothing but its secret, so finding it in the dump means a leak.
const SECRETS: &[(&str, &str)] = &[
    ("sk-proj-TESTSECRET01abcdefghijkl", "TESTSECRET01"),
    ("AKIATESTSECRET020000", "TESTSECRET02"),
    (
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANTESTSECRET03kqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
        "TESTSECRET03",
    ),
    ("password=hunter2-TESTSECRET04", "TESTSECRET04"),
    (
        "Authorization: Bearer TESTSECRET05abcdefghij",
        "TESTSECRET05",
    ),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJURVNUU0VDUkVUMDYifQ.TESTSECRET06sig",
        "TESTSECRET06",
    ),
    ("token=TESTSECRET07xyz", "TESTSECRET07"),
    (
        "postgres://app:TESTSECRET08pw@db.internal/x",
        "TESTSECRET08",
    ),
    ("ghp_TESTSECRET09abcdefghijklmnopqrstuvwxyz", "TESTSECRET09"),
    // Environment lines, flags, connection strings and other vendors'
    // tokens, as tool output prints them.
    ("DB_PASSWORD=TESTSECRET11pw", "TESTSECRET11"),
    ("GITHUB_TOKEN=TESTSECRET12tok", "TESTSECRET12"),
    ("OPENAI_API_KEY=TESTSECRET13key", "TESTSECRET13"),
    ("PGPASSWORD=TESTSECRET14", "TESTSECRET14"),
    ("psql --password TESTSECRET15", "TESTSECRET15"),
    (
        "AccountName=x;AccountKey=TESTSECRET16abc==;",
        "TESTSECRET16",
    ),
    ("credentials: TESTSECRET17", "TESTSECRET17"),
    ("sk_live_TESTSECRET18abcdefghijkl", "TESTSECRET18"),
    ("AIzaTESTSECRET19abcdefghijklmnopqrstuvw", "TESTSECRET19"),
    ("hf_TESTSECRET20abcdefghijklmnopqrstuvwxyz", "TESTSECRET20"),
    (
        "aws wJalrXUtnFEMI/K7MDENG/TESTSECRET21EXAMPL",
        "TESTSECRET21",
    ),
    // A card number (Luhn) and an SSN: their digits are their marker.
    ("card 4111 1111 1111 1111", "4111 1111 1111 1111"),
    ("ssn 078-05-1120", "078-05-1120"),
    (
        "MEMD_TOKEN memd_7e57000000000000000000000000000000000000000000000000000000000022",
        "7e5700000000000000000000000000000000000000000000000000000000",
    ),
];

/// Text that matches no pattern, sent with `sensitivity: "secret"`.
const PRIVATE_NOTE: &str = "my diary says TESTSECRET10 about the merger";

fn every_secret() -> String {
    SECRETS
        .iter()
        .map(|(secret, _)| *secret)
        .collect::<Vec<_>>()
        .join(" | ")
}

fn envelope(i: usize, kind: &str, content: Value) -> Value {
    let (secret, _) = SECRETS[i % SECRETS.len()];
    json!({
        "session_id": format!("session {secret}"),
        "channel": "private",
        "actor": {"type": "agent", "id": format!("agent {secret}")},
        "kind": kind,
        "tags": [format!("tag:{secret}")],
        "refs": [format!("ref {secret}")],
        "idempotency_key": format!("key-{i}"),
        "content": content,
    })
}

#[sqlx::test]
async fn planted_secrets_appear_nowhere_in_the_database(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let all = every_secret();
    let huge_output = format!(
        "{}\n{all}\n{}",
        "filler line\n".repeat(10_000),
        "tail\n".repeat(100)
    );
    let mut events = vec![
        envelope(
            0,
            "message",
            json!({"text": all, "nested": {"deeper": [all.clone()]}, all.clone(): "secret as a key"}),
        ),
        envelope(
            1,
            "tool_call",
            json!({"tool": "http.get", "args": {"headers": all, "url": SECRETS[7].0}}),
        ),
        envelope(
            2,
            "tool_result",
            json!({"tool": "cat", "path": SECRETS[6].0, "output": all}),
        ),
        envelope(
            3,
            "tool_result",
            json!({"tool": "cat", "path": ".env", "output": huge_output}),
        ),
        envelope(
            4,
            "decision",
            json!({"decision": all, "scope": "project", "key": SECRETS[0].0,
            "rationale": [all.clone()], "constraints": [all.clone()], "alternatives": [all.clone()], "consequences": [all.clone()]}),
        ),
        envelope(
            5,
            "task_update",
            json!({"task_id": SECRETS[1].0, "status": "doing", "title": all, "details": all}),
        ),
        envelope(
            6,
            "summary",
            json!({"text": all, "claims": [{"key": SECRETS[2].0, "value": all}]}),
        ),
        envelope(7, "view_update", json!({"view": "rules", "text": all})),
    ];
    let mut private = envelope(8, "message", json!({"text": PRIVATE_NOTE}));
    private["sensitivity"] = json!("secret");
    events.push(private);
    app.append(&token, &json!({ "events": events })).await;
    for (i, (secret, _)) in SECRETS.iter().enumerate() {
        app.append(
            &token,
            &envelope(
                i + 20,
                "message",
                json!({"text": format!("single {secret}")}),
            ),
        )
        .await;
    }
    assert!(app.count("SELECT count(*) FROM artifacts").await >= 1);
    // A secret in an idempotency key is refused, not stored nor redacted.
    let mut keyed = envelope(30, "message", json!({"text": "hi"}));
    keyed["idempotency_key"] = json!(format!("retry {}", SECRETS[3].0));
    let (status, response) = app.post_events(&token, &keyed).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
    assert_eq!(response["error"]["field"], "idempotency_key");

    let dump = app.pg_dump().await;
    assert!(
        dump.contains("[REDACTED:"),
        "the dump holds the redacted events"
    );
    let markers = SECRETS
        .iter()
        .map(|(_, marker)| *marker)
        .chain(["TESTSECRET10"]);
    for marker in markers {
        // Artifacts are dumped as hex bytea: look for both spellings.
        let hex = hex::encode(marker);
        assert!(!dump.contains(marker), "{marker} is stored in clear");
        assert!(!dump.contains(&hex), "{marker} is stored in an artifact");
    }
    let content: Value =
        sqlx::query_scalar("SELECT content FROM events WHERE idempotency_key = 'key-8'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        crate::helpers::opened("acme", content),
        json!({"redacted": true, "reason": "sensitivity:secret"})
    );
}

#[sqlx::test]
async fn a_detected_secret_marks_its_event_secret_and_keeps_it_out_of_bundles(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let leaked = app
        .append(
            &token,
            &crate::helpers::message(
                "s1",
                "the deploy key for the billing ledger is AKIATESTSECRET020000",
            ),
        )
        .await;
    app.append(
        &token,
        &crate::helpers::message("s1", "the billing ledger deploys on friday"),
    )
    .await;
    let (sensitivity, content): (String, Value) =
        sqlx::query_as("SELECT sensitivity, content FROM events WHERE event_id = $1")
            .bind(leaked["event_id"].as_str().unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(sensitivity, "secret");
    let content = crate::helpers::opened("acme", content);
    assert!(content.to_string().contains("[REDACTED:"), "{content}");
    assert!(!content.to_string().contains("TESTSECRET02"));
    crate::helpers::wait_projected(&app.pool, "acme").await;
    let acb = app
        .acb(
            &token,
            json!({"session_id": "s1", "query_text": "billing ledger deploy key", "render": true}),
        )
        .await;
    let text = acb.to_string();
    assert!(text.contains("deploys on friday"), "{text}");
    assert!(
        !text.contains("deploy key for the billing ledger"),
        "{text}"
    );
}
