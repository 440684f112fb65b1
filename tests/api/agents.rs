//! Agents inside a tenant: a token bound to an agent acts as that agent
//! only. What it records is stamped with its agent; its bundles, log reads,
//! decisions and artifacts never hold another agent's private memory, by
//! words or by meaning; tenant-wide operator tokens still see everything.

use memd::{
    domain::tenant::{Scope, TenantId},
    read::semantic::SemanticConfig,
    startup::ServeConfig,
    tenants,
};
use std::ops::Not;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::section,
    helpers::{TestApp, memd_cli, spawn_daemon_with, tool_result, wait_embedded, wait_projected},
};

fn said(channel: &str, text: &str) -> Value {
    json!({
        "session_id": "s1",
        "channel": channel,
        "actor": {"type": "human", "id": "alice"},
        "kind": "message",
        "content": {"text": text},
    })
}

pub async fn agent_token(app: &TestApp, tenant: &str, agent: &str) -> String {
    tenants::issue_token(
        &app.pool,
        &TenantId::parse(tenant).unwrap(),
        Scope::Write,
        Some(agent),
    )
    .await
    .unwrap()
    .expect("the tenant exists")
    .expose()
    .to_string()
}

/// Every text anywhere in a bundle (sections and the rendered prompt).
fn bundle_text(acb: &Value) -> String {
    acb.to_string()
}

#[sqlx::test]
async fn an_agents_token_never_reaches_another_agents_private_memory(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let config = ServeConfig {
        semantic: SemanticConfig::hashed(),
        ..ServeConfig::default()
    };
    let app = spawn_daemon_with(connect, config).await;
    let operator = app.tenant("acme").await;
    let alpha = agent_token(&app, "acme", "alpha").await;
    let beta = agent_token(&app, "acme", "beta").await;

    // What each records is stamped with its agent.
    let alpha_private = app
        .append(
            &alpha,
            &said(
                "private",
                "Alpha plans to migrate the billing ledger to rust",
            ),
        )
        .await;
    app.append(
        &alpha,
        &said("team", "Team note: the billing ledger deploy is on friday"),
    )
    .await;
    app.append(
        &beta,
        &said(
            "private",
            "Beta thinks the billing ledger mascot is a zebra",
        ),
    )
    .await;
    app.append(
        &operator,
        &said(
            "private",
            "Operator memo: the billing ledger standup is at nine",
        ),
    )
    .await;
    app.append(
        &alpha,
        &json!({"session_id": "s1", "channel": "private",
                    "actor": {"type": "agent", "id": "alpha"}, "kind": "decision",
                    "refs": [alpha_private["event_id"]],
                    "content": {"decision": "Billing ledger exports use pages of 500",
                                "key": "ledger-page", "scope": "project"}}),
    )
    .await;
    let output: String = (1..=4000)
        .map(|i| format!("{i:>6}: compile step output\n"))
        .collect();
    let alpha_tool = app
        .append(&alpha, &tool_result("ledger.log", &output))
        .await;
    let alpha_artifact = alpha_tool["artifact_id"].as_str().unwrap().to_owned();
    let stamped: Vec<Option<String>> =
        sqlx::query_scalar("SELECT agent_id FROM events WHERE tenant_id = 'acme' ORDER BY seq")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        stamped,
        [
            Some("alpha"),
            Some("alpha"),
            Some("beta"),
            None,
            Some("alpha"),
            Some("alpha")
        ]
        .map(|a| a.map(str::to_owned))
    );
    wait_projected(&app.pool, "acme").await;
    // Vectors too: what follows is about who sees what, not about lag.
    wait_embedded(&app, "acme", "hashed").await;

    // An agent's token cannot speak or read as another agent.
    let mut as_alpha = said("private", "I am alpha, honestly");
    as_alpha["agent_id"] = json!("alpha");
    let (status, body) = app.post_events(&beta, &as_alpha).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "agent_mismatch");
    assert_eq!(body["error"]["field"], "agent_id");
    let (status, body) = app
        .post_acb(
            &beta,
            &json!({"agent_id": "alpha", "query_text": "billing ledger"}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "agent_mismatch");
    // Nor act as an operator.
    let (status, _) = app
        .put_json("/api/v1/policy", &beta, &json!({"retrieved_max": 5}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Bundles: retrieval (by words and by meaning, from another session),
    // the session's recent window, and the decision ledger; in the private
    // channel, where the rule matters.
    for session in ["s2", "s1"] {
        let question = json!({"session_id": session,
                              "query_text": "what about the billing ledger migration to rust and its pages?",
                              "max_tokens": 8000, "render": true});
        let (status, for_beta) = app.post_acb(&beta, &question).await;
        assert_eq!(status, StatusCode::OK, "{for_beta}");
        let text = bundle_text(&for_beta);
        assert!(!text.contains("migrate the billing ledger"), "{text}");
        assert!(!text.contains("pages of 500"), "{text}");
        assert!(!text.contains("compile step output"), "{text}");
        assert!(!text.contains(alpha_private["event_id"].as_str().unwrap()));
        assert!(text.contains("mascot is a zebra"), "its own private memory");
        assert!(
            text.contains("deploy is on friday"),
            "team memory is shared"
        );
        assert!(
            text.contains("standup is at nine"),
            "the tenant's unowned private memory is shared"
        );
        assert!(section(&for_beta, "decision_ledger").is_empty());

        let (_, for_alpha) = app.post_acb(&alpha, &question).await;
        let text = bundle_text(&for_alpha);
        assert!(text.contains("migrate the billing ledger"), "{text}");
        assert!(text.contains("mascot is a zebra").not());
        assert_eq!(section(&for_alpha, "decision_ledger").len(), 1);

        // The operator's token sees every agent's memory.
        let (_, for_operator) = app.post_acb(&operator, &question).await;
        let text = bundle_text(&for_operator);
        assert!(text.contains("migrate the billing ledger") && text.contains("mascot is a zebra"));
        assert_eq!(section(&for_operator, "decision_ledger").len(), 1);
    }
    // By meaning alone: no word of alpha's private message in the question.
    let (_, for_beta) = app.post_acb(&beta, &json!({"session_id": "s2", "query_text": "Alpha plans to migrate the billing ledger to rust",
               "max_tokens": 8000}),
    )
    .await;
    assert_eq!(for_beta["provenance"]["semantic"]["used"], true);
    assert!(!bundle_text(&for_beta).contains("Alpha plans"));

    // The log, one event, one chunk, the ledger, an artifact.
    let listed: Value = app
        .get("/api/v1/events?limit=100", &beta)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["events"].as_array().unwrap().len(), 3, "{listed}");
    let listed = listed.to_string();
    assert!(listed.contains("friday") && listed.contains("zebra") && listed.contains("nine"));
    assert!(!listed.contains("migrate the billing ledger"));
    let all: Value = app
        .get("/api/v1/events?limit=100", &operator)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["events"].as_array().unwrap().len(), 6);

    let private_id = alpha_private["event_id"].as_str().unwrap();
    let chunk_id = format!("chk_{}_0", &private_id["evt_".len()..]);
    for path in [
        format!("/api/v1/events/{private_id}"),
        format!("/api/v1/chunks/{chunk_id}"),
        format!("/api/v1/events/{private_id}/chunks"),
        format!("/api/v1/artifacts/{alpha_artifact}"),
    ] {
        assert_eq!(
            app.get(&path, &beta).await.status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
        assert_eq!(
            app.get(&path, &alpha).await.status(),
            StatusCode::OK,
            "{path}"
        );
        assert_eq!(
            app.get(&path, &operator).await.status(),
            StatusCode::OK,
            "{path}"
        );
    }
    let task = app
        .client
        .post(format!("{}/api/v1/tasks", app.base_url))
        .bearer_auth(&alpha)
        .json(&json!({"session_id": "s1", "actor": {"type": "agent", "id": "alpha"},
                      "task_id": "ledger-migration", "status": "doing", "title": "Migrate the ledger"}))
        .send()
        .await
        .unwrap();
    assert_eq!(task.status(), StatusCode::CREATED);
    app.append(
        &alpha,
        &json!({"session_id": "s1", "channel": "private",
                "actor": {"type": "agent", "id": "alpha"}, "kind": "summary",
                "refs": [alpha_private["event_id"]],
                "content": {"text": "Alpha's ledger migration plan, summarized"}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let count = |path: &'static str, list: &'static str, token: String| {
        let app = &app;
        async move {
            let body: Value = app.get(path, &token).await.json().await.unwrap();
            body[list].as_array().unwrap().len()
        }
    };
    let ledger = |token| count("/api/v1/decisions", "decisions", token);
    let summaries = |token| count("/api/v1/summaries", "summaries", token);
    assert_eq!(summaries(beta.clone()).await, 0);
    assert_eq!(summaries(alpha.clone()).await, 1);
    assert_eq!(summaries(operator.clone()).await, 1);
    // The log's text filter finds only what the token may read.
    let found = |token| count("/api/v1/events?text=migrate%20rust", "events", token);
    assert_eq!(found(beta.clone()).await, 0);
    assert_eq!(found(alpha.clone()).await, 1);
    assert_eq!(found(operator.clone()).await, 1);
    let tasks = |token| count("/api/v1/tasks", "tasks", token);
    assert_eq!(tasks(beta.clone()).await, 0);
    assert_eq!(tasks(alpha.clone()).await, 1);
    assert_eq!(tasks(operator.clone()).await, 1);
    assert_eq!(ledger(beta.clone()).await, 0);
    assert_eq!(ledger(alpha.clone()).await, 1);
    assert_eq!(ledger(operator.clone()).await, 1);
}

#[sqlx::test]
async fn the_cli_issues_agent_tokens_never_with_scope_admin(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(connect, ServeConfig::default()).await;
    app.tenant("acme").await;
    let url = app.database_url().await;
    let (code, token, stderr) =
        memd_cli(&url, &["tenant", "token", "acme", "--agent", "alpha"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (agent, scope): (Option<String>, String) = sqlx::query_as(
        "SELECT agent_id, scope FROM api_tokens WHERE tenant_id = 'acme' AND agent_id IS NOT NULL",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((agent.as_deref(), scope.as_str()), (Some("alpha"), "write"));
    let appended = app.append(token.trim(), &said("private", "hello")).await;
    assert!(appended["event_id"].is_string());

    let (code, _, stderr) = memd_cli(
        &url,
        &[
            "tenant", "token", "acme", "--agent", "alpha", "--scope", "admin",
        ],
    )
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("cannot have scope admin"), "{stderr}");
}

/// An agent's private view is its own, as all its private memory is:
/// another agent sees neither it (views, bundles) nor its private task's
/// id in omissions; the agent itself sees its own version of the view.
#[sqlx::test]
async fn an_agents_private_views_and_tasks_stay_its_own_even_in_omissions(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = crate::helpers::spawn_daemon(connect).await;
    let operator = app.tenant("acme").await;
    let alpha = agent_token(&app, "acme", "alpha").await;
    let beta = agent_token(&app, "acme", "beta").await;
    let view = |text: &str| {
        json!({"session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "x"},
               "kind": "view_update", "content": {"view": "rules", "text": text}})
    };
    app.append(&operator, &view("Shared rule: answer politely."))
        .await;
    app.append(
        &alpha,
        &view("Alpha's own rule: the vault is behind the ferns."),
    )
    .await;
    let task = app
        .send_json(
            reqwest::Method::POST,
            "/api/v1/tasks",
            &alpha,
            &json!({"session_id": "s1", "actor": {"type": "agent", "id": "alpha"},
                    "task_id": "QX-1", "status": "doing", "title": "Alpha's private chore"}),
        )
        .await;
    assert_eq!(task.0, StatusCode::CREATED, "{}", task.1);
    crate::helpers::wait_projected(&app.pool, "acme").await;

    let views = |token: String| {
        let app = &app;
        async move {
            let (_, listed) = app.get_json("/api/v1/views", &token).await;
            listed["views"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["text"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(views(beta.clone()).await, ["Shared rule: answer politely."]);
    assert_eq!(
        views(alpha.clone()).await.len(),
        2,
        "its own and the shared"
    );
    assert_eq!(views(operator.clone()).await.len(), 2);

    let bundle = |token: String, agent: &'static str| {
        let app = &app;
        async move {
            app.acb(
                &token,
                json!({"session_id": "s2", "agent_id": agent, "max_tokens": 2000}),
            )
            .await
        }
    };
    let beta_bundle = bundle(beta.clone(), "beta").await;
    let rules = crate::acb::texts(&beta_bundle, "rules").join("\n");
    assert!(rules.contains("answer politely"), "{rules}");
    assert!(!beta_bundle.to_string().contains("ferns"), "{beta_bundle}");
    assert!(
        !beta_bundle["omissions"].to_string().contains("QX-1"),
        "{:#?}",
        beta_bundle["omissions"]
    );
    let alpha_bundle = bundle(alpha.clone(), "alpha").await;
    let rules = crate::acb::texts(&alpha_bundle, "rules").join("\n");
    assert!(rules.contains("ferns"), "its own version: {rules}");
    assert!(
        !rules.contains("answer politely"),
        "its own version stands for the view: {rules}"
    );
}

/// A summary's conflicts quote the decision it contradicts. Another agent
/// writing a summary that claims a key must not read, through them, a
/// private decision of that key; nor may a public bundle or search read a
/// private or high-sensitivity decision that way. The operator, who may see
/// the decision, still sees the conflict.
#[sqlx::test]
async fn a_summarys_conflicts_never_quote_a_decision_the_reader_may_not_see(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(connect, ServeConfig::default()).await;
    let operator = app.tenant("acme").await;
    let planner = agent_token(&app, "acme", "planner").await;
    let coder = agent_token(&app, "acme", "coder").await;
    let event =
        |channel: &str, sensitivity: &str, agent: &str, kind: &str, content: Value, refs: Value| {
            json!({"session_id": "s1", "channel": channel, "sensitivity": sensitivity,
               "actor": {"type": "agent", "id": agent}, "kind": kind,
               "content": content, "refs": refs})
        };
    let weighed = app
        .append(
            &planner,
            &said("private", "Planner weighs the zebraco acquisition"),
        )
        .await;
    let weighed = weighed["event_id"].clone();
    // The planner's own decision, and a high-sensitivity one of the tenant.
    app.append(
        &planner,
        &event(
            "private",
            "none",
            "planner",
            "decision",
            json!({"decision": "planner-only: acquire zebraco for 40M", "key": "corp.acquisition",
                      "scope": "project"}),
            json!([weighed]),
        ),
    )
    .await;
    app.append(
        &operator,
        &event(
            "private",
            "high",
            "agent-1",
            "decision",
            json!({"decision": "HIGH: layoffs of 30 percent in Q3", "key": "hr.plan",
                      "scope": "project"}),
            json!([weighed]),
        ),
    )
    .await;
    let public_said = app
        .append(&operator, &said("public", "zebraco hr plan chat"))
        .await;
    // The coder's summary claims the planner's key; a public one claims
    // the high decision's.
    let coder_said = app
        .append(&coder, &said("private", "coder notes on zebraco"))
        .await;
    let coder_summary = app
        .append(
            &coder,
            &event("private", "none", "coder", "summary",
                   json!({"text": "zebraco summary by coder", "claims": [{"key": "corp.acquisition", "value": "none"}]}),
                   json!([coder_said["event_id"]])),
        )
        .await;
    let public_summary = app
        .append(
            &operator,
            &event("public", "none", "agent-1", "summary",
                   json!({"text": "hr plan summary public", "claims": [{"key": "hr.plan", "value": "no change"}]}),
                   json!([public_said["event_id"]])),
        )
        .await;
    wait_projected(&app.pool, "acme").await;

    // What a reader must not find: the planner's decision (another
    // agent's private memory) and, on a public channel, the tenant's high
    // one too (the coder may see that one: unowned private memory is the
    // tenant's, shared by its agents).
    let leaks = |what: &str, body: &Value, secrets: &[&str]| {
        for secret in secrets {
            assert!(
                !body.to_string().contains(secret),
                "{what} quotes {secret}: {body:#}"
            );
        }
    };
    // The coder: its summaries page, a search and a bundle.
    let (_, page) = app.get_json("/api/v1/summaries", &coder).await;
    leaks("the coder's summaries", &page, &["40M"]);
    let mine = page["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["event_id"] == coder_summary["event_id"])
        .expect("the coder sees its own summary");
    assert_eq!(mine["conflicted"], false, "{mine}");
    for query in ["zebraco summary by coder", "hr plan summary public"] {
        let (status, found) = app
            .send_json(
                reqwest::Method::POST,
                "/api/v1/search",
                &coder,
                &json!({"query": query}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{found}");
        leaks("the coder's search", &found, &["40M"]);
        let acb = app
            .acb(&coder, json!({"session_id": "q", "query_text": query}))
            .await;
        leaks("the coder's bundle", &acb, &["40M"]);
    }
    // A public reader, even the operator's.
    let (_, page) = app
        .get_json("/api/v1/summaries?channel=public", &operator)
        .await;
    leaks("public summaries", &page, &["40M", "layoffs"]);
    let acb = app
        .acb(
            &operator,
            json!({"session_id": "q", "channel": "public", "query_text": "hr plan summary public"}),
        )
        .await;
    leaks("a public bundle", &acb, &["40M", "layoffs"]);
    let (status, found) = app
        .send_json(
            reqwest::Method::POST,
            "/api/v1/search",
            &operator,
            &json!({"query": "hr plan summary public", "channel": "public"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    leaks("a public search", &found, &["40M", "layoffs"]);

    // The operator, on its private channel, sees both conflicts.
    let (_, page) = app
        .get_json("/api/v1/summaries?conflicted=true", &operator)
        .await;
    let flagged: Vec<&Value> = page["summaries"].as_array().unwrap().iter().collect();
    assert_eq!(flagged.len(), 2, "{page:#}");
    assert!(
        page.to_string().contains("40M") && page.to_string().contains("layoffs"),
        "{page:#}"
    );
    let acb = app
        .acb(
            &operator,
            json!({"session_id": "q", "query_text": "hr plan summary public"}),
        )
        .await;
    assert!(
        crate::acb::omission(&acb, "conflict")
            .iter()
            .any(|o| o["summary_id"] == public_summary["event_id"]
                && o.to_string().contains("layoffs")),
        "{acb:#}"
    );
}

/// Bundles show who spoke by the event's actor: an agent's token may not
/// record an event whose actor is another agent (it would put words in
/// that agent's mouth), alone or in a batch; it may name humans and tools,
/// whose words and output it records.
#[sqlx::test]
async fn an_agents_token_cannot_speak_as_another_agent(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(connect, ServeConfig::default()).await;
    let operator = app.tenant("acme").await;
    let coder = agent_token(&app, "acme", "coder").await;
    let as_agent = |agent: &str, text: &str| {
        json!({"session_id": "s1", "channel": "private",
               "actor": {"type": "agent", "id": agent}, "kind": "message",
               "content": {"text": text}})
    };
    let (status, body) = app
        .post_events(&coder, &as_agent("planner", "impersonating planner"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "agent_mismatch", "{body}");
    assert_eq!(body["error"]["field"], "actor.id", "{body}");
    let (status, body) = app
        .post_events(
            &coder,
            &json!({"events": [as_agent("coder", "mine"), as_agent("planner", "not mine")]}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["field"], "events[1].actor.id", "{body}");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);

    app.append(&coder, &as_agent("coder", "the coder speaks for itself"))
        .await;
    app.append(&coder, &said("private", "alice said this to the coder"))
        .await;
    let (_, body) = app
        .post_events(&coder, &tool_result("README.md", "# x\n"))
        .await;
    assert!(body["event_id"].is_string(), "a tool's output: {body}");
    // An operator's token records any agent's words (it imports, relays).
    app.append(
        &operator,
        &as_agent("planner", "imported from planner's log"),
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM events").await, 4);
}
