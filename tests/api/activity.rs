//! `GET /api/v1/sessions` and `GET /api/v1/agents`: the tenant's sessions
//! and agents as the sessions projection folds them, with agent isolation,
//! filters and paging; a rebuild from the log gives the same.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    agents::agent_token,
    helpers::{memd_cli, message, spawn_daemon, wait_projected},
};

fn said(session: &str, ts: &str) -> Value {
    let mut event = message(session, "hello");
    event["ts"] = json!(ts);
    event
}

fn ids(page: &Value, list: &str, id: &str) -> Vec<String> {
    page[list]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|s| s[id].as_str().unwrap().to_owned())
        .collect()
}

#[sqlx::test]
async fn sessions_and_agents_are_listed_as_each_caller_may_see_them(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let operator = app.tenant("acme").await;
    let other_tenant = app.tenant("other").await;
    let ann = agent_token(&app, "acme", "ann").await;
    let bob = agent_token(&app, "acme", "bob").await;
    // A dormant agent: a token, nothing recorded.
    agent_token(&app, "acme", "cleo").await;
    app.append(&operator, &said("planning", "2026-01-01T09:00:00Z"))
        .await;
    app.append(&ann, &said("planning", "2026-01-02T09:00:00Z"))
        .await;
    app.append(&ann, &said("ann-notes", "2026-01-03T09:00:00Z"))
        .await;
    let mut shared = said("review", "2026-01-04T09:00:00Z");
    shared["channel"] = json!("team");
    app.append(&bob, &shared).await;
    app.append(&other_tenant, &said("elsewhere", "2026-01-05T09:00:00Z"))
        .await;
    wait_projected(&app.pool, "acme").await;

    // The operator: every session, most recently active first.
    let (status, page) = app.get_json("/api/v1/sessions", &operator).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        ids(&page, "sessions", "session_id"),
        ["review", "ann-notes", "planning"]
    );
    let planning = &page["sessions"][2];
    assert_eq!(planning["events"], 2);
    assert_eq!(planning["agents"], json!(["ann"]));
    assert_eq!(planning["kinds"], json!(["message"]));
    assert_eq!(planning["first_ts"], "2026-01-01T09:00:00Z");
    assert_eq!(planning["last_ts"], "2026-01-02T09:00:00Z");
    assert_eq!(page["next_before_seq"], Value::Null);

    // Bob: not Ann's private notes, nor her private turn in planning.
    let (_, page) = app.get_json("/api/v1/sessions", &bob).await;
    assert_eq!(ids(&page, "sessions", "session_id"), ["review", "planning"]);
    assert_eq!(page["sessions"][1]["events"], 1, "{page}");
    assert_eq!(page["sessions"][1]["agents"], json!([]), "{page}");

    // Filters: an agent that took part, a time window; paging.
    let (_, page) = app
        .get_json("/api/v1/sessions?agent_id=ann", &operator)
        .await;
    assert_eq!(
        ids(&page, "sessions", "session_id"),
        ["ann-notes", "planning"]
    );
    let (_, page) = app
        .get_json(
            "/api/v1/sessions?since=2026-01-03T00:00:00Z&until=2026-01-04T00:00:00Z",
            &operator,
        )
        .await;
    assert_eq!(ids(&page, "sessions", "session_id"), ["ann-notes"]);
    let (_, first) = app.get_json("/api/v1/sessions?limit=2", &operator).await;
    assert_eq!(
        ids(&first, "sessions", "session_id"),
        ["review", "ann-notes"]
    );
    let before = first["next_before_seq"].as_i64().unwrap();
    let (_, rest) = app
        .get_json(
            &format!("/api/v1/sessions?limit=2&before_seq={before}"),
            &operator,
        )
        .await;
    assert_eq!(ids(&rest, "sessions", "session_id"), ["planning"]);
    assert_eq!(rest["next_before_seq"], Value::Null);
    for bad in ["limit=0", "since=yesterday", "colour=red"] {
        let (status, refused) = app
            .get_json(&format!("/api/v1/sessions?{bad}"), &operator)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {refused}");
    }

    // Agents: activity and tokens; an agent sees itself alone.
    let (status, page) = app.get_json("/api/v1/agents", &operator).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(ids(&page, "agents", "agent_id"), ["ann", "bob", "cleo"]);
    let ann_row = &page["agents"][0];
    assert_eq!(ann_row["events"], 2);
    assert_eq!(ann_row["first_ts"], "2026-01-02T09:00:00Z");
    assert_eq!(ann_row["last_ts"], "2026-01-03T09:00:00Z");
    assert_eq!(ann_row["tokens_issued"], 1);
    assert_eq!(ann_row["tokens_active"], 1);
    let cleo_row = &page["agents"][2];
    assert_eq!(cleo_row["events"], 0);
    assert_eq!(cleo_row["first_seq"], Value::Null);
    let (_, page) = app.get_json("/api/v1/agents", &bob).await;
    assert_eq!(ids(&page, "agents", "agent_id"), ["bob"]);
    let (_, page) = app.get_json("/api/v1/agents?limit=1", &operator).await;
    assert_eq!(page["next_after"], "ann");
    let (_, page) = app
        .get_json("/api/v1/agents?limit=5&after=ann", &operator)
        .await;
    assert_eq!(ids(&page, "agents", "agent_id"), ["bob", "cleo"]);

    // Another tenant's sessions are never listed; a rebuild gives the same.
    let (_, before) = app.get_json("/api/v1/sessions", &operator).await;
    let (code, out, err) =
        memd_cli(&app.database_url().await, &["rebuild", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (_, after) = app.get_json("/api/v1/sessions", &operator).await;
    assert_eq!(before, after);
    assert!(!after.to_string().contains("elsewhere"));
}
