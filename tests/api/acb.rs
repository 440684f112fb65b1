//! Active Context Bundles over HTTP: what goes in, what stays out and why,
//! and the budget, on the real daemon and database.

use std::collections::HashSet;

use memd::startup::ServeConfig;
use memd_projectors::projections::{Encoding, TokenCounter};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{
    TestApp, event, message, spawn_daemon, spawn_daemon_with, tool_result, wait_projected,
};

impl TestApp {
    pub async fn post_acb(&self, token: &str, body: &Value) -> (StatusCode, Value) {
        self.send_json(reqwest::Method::POST, "/api/v1/acb/build", token, body)
            .await
    }

    /// Builds a bundle and insists on success.
    pub async fn acb(&self, token: &str, body: Value) -> Value {
        let (status, acb) = self.post_acb(token, &body).await;
        assert_eq!(status, StatusCode::OK, "{acb}");
        acb
    }
}

/// The items of a section (empty when the section is absent).
pub fn section<'a>(acb: &'a Value, name: &str) -> Vec<&'a Value> {
    acb["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .map(|s| s["items"].as_array().unwrap().iter().collect())
        .unwrap_or_default()
}

pub fn texts(acb: &Value, name: &str) -> Vec<String> {
    section(acb, name)
        .iter()
        .map(|item| item["text"].as_str().unwrap().to_owned())
        .collect()
}

pub fn omission<'a>(acb: &'a Value, reason: &str) -> Vec<&'a Value> {
    acb["omissions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["reason"] == reason)
        .collect()
}

fn id(response: &Value) -> String {
    response["event_id"].as_str().unwrap().to_owned()
}

fn counter() -> TokenCounter {
    TokenCounter::new(Encoding::O200kBase)
}

#[sqlx::test]
async fn a_question_retrieves_cited_evidence_within_the_budget(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for i in 0..30 {
        app.append(
            &token,
            &message("old", &format!("Standup {i}: nothing new on the frontend.")),
        )
        .await;
    }
    let readme = app
        .append(
            &token,
            &tool_result(
                "README.md",
                "# legacy-billing\nInvoices customers monthly and exports them to the ledger.\n",
            ),
        )
        .await;
    wait_projected(&app.pool, "acme").await;

    let acb = app
        .acb(
            &token,
            json!({"session_id": "new", "agent_id": "agent-1", "channel": "private",
                   "intent": "repo_onboarding", "query_text": "what is this project for? invoices?",
                   "max_tokens": 3000, "render": true}),
        )
        .await;
    let evidence = section(&acb, "retrieved_evidence");
    assert!(!evidence.is_empty(), "{acb}");
    let first = evidence[0];
    assert_eq!(first["handle"], "E1");
    assert_eq!(first["event_id"], readme["event_id"], "{acb}");
    let chunk_id = first["chunk_id"].as_str().unwrap();
    assert_eq!(first["refs"], json!([chunk_id, readme["event_id"]]));
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .contains("Invoices customers")
    );
    assert_eq!(first["kind"], "tool_result");

    let provenance = &acb["provenance"];
    assert_eq!(provenance["path"], "retrieval");
    assert_eq!(provenance["intent"], "repo_onboarding");
    assert!(
        provenance["query_terms"]
            .as_array()
            .unwrap()
            .contains(&json!("invoic"))
    );
    assert!(provenance["candidate_pool_size"].as_u64().unwrap() >= 1);
    assert_eq!(provenance["candidate_pool_max"], 2000);
    assert_eq!(provenance["scoring"]["alpha"], 0.6);
    assert_eq!(
        provenance["filters"]["sensitivity_allowed"],
        json!(["none", "low", "high"])
    );
    assert_eq!(provenance["head_seq"], 31);
    assert_eq!(provenance["projected_seq"], 31);
    assert_eq!(provenance["lag_events"], 0);

    // The rendered prompt is exactly the tokens reported, within budget.
    let prompt = acb["prompt"].as_str().unwrap();
    assert_eq!(
        counter().count(prompt),
        acb["token_used_est"].as_u64().unwrap() as usize
    );
    assert!(acb["token_used_est"].as_u64().unwrap() <= 3000);
    assert_eq!(acb["budget_tokens"], 3000);
    // Evidence is shown under the day it was recorded, the time of day in
    // each meta line.
    let first_day = acb["sections"][0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["ts"].as_str().unwrap()[..10].to_owned())
        .min()
        .unwrap();
    assert!(
        prompt.starts_with(&format!("## retrieved_evidence\n### {first_day}\n[E")),
        "{prompt}"
    );
    assert!(
        prompt.contains("\n[E1] fs · tool_result fs.read_file README.md lines 1-2 · "),
        "{prompt}"
    );
    let sections_sum: u64 = acb["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["token_est"].as_u64().unwrap())
        .sum();
    assert_eq!(sections_sum, acb["token_used_est"].as_u64().unwrap());
}

#[sqlx::test]
async fn public_channels_get_neither_private_memory_nor_preferences(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = |channel: &str, sensitivity: &str, text: &str| {
        json!({"session_id": "s1", "channel": channel, "sensitivity": sensitivity,
               "actor": {"type": "human", "id": "alice"}, "kind": "message",
               "content": {"text": text}})
    };
    app.append(
        &token,
        &said("private", "none", "I prefer green tea in the mornings."),
    )
    .await;
    app.append(
        &token,
        &said("public", "high", "The green tea supplier owes us money."),
    )
    .await;
    app.append(
        &token,
        &said("public", "none", "Our shop sells green tea and coffee."),
    )
    .await;
    for (view, text) in [
        ("preferences", "Alice prefers green tea."),
        ("rules", "Be polite about tea."),
    ] {
        app.append(
            &token,
            &json!({"session_id": "views", "channel": "private", "actor": {"type": "human", "id": "alice"},
                    "kind": "view_update", "content": {"view": view, "text": text}}),
        )
        .await;
    }
    wait_projected(&app.pool, "acme").await;

    let ask = |channel: &str| {
        json!({"session_id": "s1", "channel": channel, "query_text": "what about green tea?",
               "render": true})
    };
    let public = app.acb(&token, ask("public")).await;
    let prompt = public["prompt"].as_str().unwrap();
    assert!(prompt.contains("Our shop sells green tea"), "{prompt}");
    assert!(
        !prompt.contains("I prefer green tea"),
        "private message leaked: {prompt}"
    );
    assert!(
        !prompt.contains("owes us money"),
        "high sensitivity leaked: {prompt}"
    );
    assert!(
        !prompt.contains("Alice prefers"),
        "preferences view leaked: {prompt}"
    );
    assert!(
        prompt.contains("Be polite about tea."),
        "rules apply everywhere: {prompt}"
    );
    let privacy: Vec<String> = omission(&public, "privacy")
        .iter()
        .flat_map(|o| o["candidates"].as_array().unwrap().iter())
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert!(privacy.contains(&"view:preferences".to_owned()), "{public}");
    assert!(
        privacy.len() >= 3,
        "two chunks and a view withheld: {privacy:?}"
    );
    assert_eq!(
        public["provenance"]["filters"]["channels_allowed"],
        json!(["public"])
    );

    // The agent channel: public and none/low only as well.
    let agent = app.acb(&token, ask("agent")).await;
    let prompt = agent["prompt"].as_str().unwrap();
    assert!(!prompt.contains("I prefer green tea") && !prompt.contains("owes us money"));

    let private = app.acb(&token, ask("private")).await;
    let prompt = private["prompt"].as_str().unwrap();
    for text in [
        "I prefer green tea",
        "owes us money",
        "Alice prefers green tea",
        "Our shop",
    ] {
        assert!(prompt.contains(text), "private sees {text:?}: {prompt}");
    }
}

#[sqlx::test]
async fn the_fast_path_uses_views_tasks_decisions_and_the_recent_window_only(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = id(&app
        .append(
            &token,
            &message("s1", "Let's write the scenario tests next."),
        )
        .await);
    app.append(
        &token,
        &event(
            "task_update",
            json!({"task_id": "T1", "status": "doing", "title": "Write scenario tests"}),
            &[],
        ),
    )
    .await;
    app.append(
        &token,
        &event(
            "task_update",
            json!({"task_id": "T0", "status": "done", "title": "Old task"}),
            &[],
        ),
    )
    .await;
    app.append(
        &token,
        &event("decision", json!({"decision": "Scenarios are YAML files", "key": "scenario-format", "scope": "project"}), &[&said]),
    )
    .await;
    app.append(
        &token,
        &json!({"session_id": "v", "channel": "private", "actor": {"type": "human", "id": "a"},
                "kind": "view_update", "content": {"view": "identity", "text": "You are memd's test agent."}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let acb = app
        .acb(&token, json!({"session_id": "s1", "intent": "continue", "query_text": "continue writing scenario tests"}))
        .await;
    assert_eq!(acb["provenance"]["path"], "fast");
    assert_eq!(acb["provenance"]["candidate_pool_size"], 0);
    assert!(section(&acb, "retrieved_evidence").is_empty());
    assert_eq!(texts(&acb, "identity"), ["You are memd's test agent.\n"]);
    let tasks = section(&acb, "task_state");
    assert_eq!(tasks.len(), 1, "done tasks are not task state");
    assert_eq!(tasks[0]["task_id"], "T1");
    assert_eq!(tasks[0]["status"], "doing");
    let decisions = section(&acb, "decision_ledger");
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0]["status"], "active");
    assert!(
        decisions[0]["refs"]
            .as_array()
            .unwrap()
            .contains(&json!(said))
    );
    let recent = texts(&acb, "recent_window");
    assert_eq!(
        recent[0], "Let's write the scenario tests next.\n",
        "oldest first: {recent:?}"
    );
    assert_eq!(
        recent.len(),
        4,
        "message, two task updates, decision: {recent:?}"
    );
    // Section order as rendered.
    let names: Vec<&str> = acb["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["identity", "task_state", "decision_ledger", "recent_window"]
    );
}

#[sqlx::test]
async fn only_active_decisions_unless_history_is_asked_for(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let evidence = id(&app
        .append(&token, &message("s1", "We must decide on secret storage."))
        .await);
    let v1 = id(&app
        .append(
            &token,
            &event("decision", json!({"decision": "Never store secrets", "key": "secret-storage", "scope": "project"}), &[&evidence]),
        )
        .await);
    let v2 = id(&app
        .append(
            &token,
            &event("decision", json!({"decision": "Store secrets, but encrypted", "key": "secret-storage", "scope": "project", "supersedes": v1}), &[&evidence]),
        )
        .await);
    wait_projected(&app.pool, "acme").await;

    let now = app
        .acb(
            &token,
            json!({"session_id": "q", "query_text": "what is the secret storage policy now?"}),
        )
        .await;
    let ledger = section(&now, "decision_ledger");
    assert_eq!(ledger.len(), 1, "{now}");
    assert_eq!(ledger[0]["decision_id"], v2);
    let superseded = omission(&now, "superseded");
    assert_eq!(superseded.len(), 1, "{now}");
    assert_eq!(superseded[0]["decision_id"], v1);
    assert_eq!(superseded[0]["superseded_by"], v2);
    assert!(
        section(&now, "retrieved_evidence")
            .iter()
            .all(|e| e["kind"] != "decision"),
        "decisions live in the ledger"
    );

    let then = app
        .acb(
            &token,
            json!({"session_id": "q", "query_text": "how has the secret storage policy changed?"}),
        )
        .await;
    assert_eq!(then["provenance"]["history"], true);
    let ledger = section(&then, "decision_ledger");
    let statuses: HashSet<(String, String)> = ledger
        .iter()
        .map(|d| {
            (
                d["decision_id"].as_str().unwrap().to_owned(),
                d["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        HashSet::from([
            (v1.clone(), "superseded".to_owned()),
            (v2.clone(), "active".to_owned())
        ])
    );
    let old = ledger.iter().find(|d| d["decision_id"] == v1).unwrap();
    assert_eq!(old["superseded_by"], v2);
    assert!(
        old["text"]
            .as_str()
            .unwrap()
            .contains(&format!("Superseded by: {v2}"))
    );

    // Explicitly off, even with history words.
    let off = app
        .acb(&token, json!({"query_text": "how has the secret storage policy changed?", "include_history": false}))
        .await;
    assert_eq!(section(&off, "decision_ledger").len(), 1);
}

#[sqlx::test]
async fn a_summary_that_contradicts_a_decision_gives_way_to_it(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = id(&app
        .append(&token, &message("s1", "Our token budget is 65K."))
        .await);
    let decision = id(&app
        .append(
            &token,
            &event("decision", json!({"decision": "The token budget is 65K", "key": "budget", "value": "65K", "scope": "project"}), &[&said]),
        )
        .await);
    let wrong = id(&app
        .append(
            &token,
            &event("summary", json!({"text": "Session summary: the token budget is 32K.", "claims": [{"key": "budget", "value": "32K"}]}), &[&said]),
        )
        .await);
    let floating = id(&app
        .append(
            &token,
            &event(
                "summary",
                json!({"text": "The token budget is unlimited."}),
                &[],
            ),
        )
        .await);
    wait_projected(&app.pool, "acme").await;

    let acb = app
        .acb(
            &token,
            json!({"session_id": "q", "query_text": "what is our token budget?", "render": true}),
        )
        .await;
    let prompt = acb["prompt"].as_str().unwrap();
    assert!(!prompt.contains("32K"), "{prompt}");
    assert!(!prompt.contains("unlimited"), "{prompt}");
    assert_eq!(section(&acb, "decision_ledger")[0]["decision_id"], decision);
    assert!(
        section(&acb, "retrieved_evidence")
            .iter()
            .any(|e| e["event_id"] == said),
        "the event the decision rests on: {acb}"
    );
    let conflicts = omission(&acb, "conflict");
    let summaries: HashSet<&str> = conflicts
        .iter()
        .map(|c| c["summary_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        summaries,
        HashSet::from([wrong.as_str(), floating.as_str()]),
        "{acb}"
    );
    let contradiction = conflicts.iter().find(|c| c["summary_id"] == wrong).unwrap();
    assert_eq!(
        contradiction["conflicts"][0]["reason"],
        "contradicts_decision"
    );
    assert_eq!(contradiction["conflicts"][0]["decision_id"], decision);
}

#[sqlx::test]
async fn a_fact_repeated_twenty_times_takes_few_places(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let phrasings = [
        "The token budget is 65K.",
        "Reminder: our token budget is 65K tokens.",
        "token budget = 65k",
        "Remember, the budget is 65K tokens",
    ];
    for i in 0..20 {
        app.append(&token, &message("s1", phrasings[i % phrasings.len()]))
            .await;
    }
    app.append(
        &token,
        &message("s1", "The deploy budget is three engineers."),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    let ask =
        json!({"session_id": "q", "query_text": "what's the token budget?", "max_tokens": 4000});
    let acb = app.acb(&token, ask.clone()).await;
    let about_budget = texts(&acb, "retrieved_evidence")
        .iter()
        .filter(|t| t.to_lowercase().contains("65k"))
        .count();
    assert!(
        (1..=3).contains(&about_budget),
        "{about_budget} places: {acb}"
    );
    assert_eq!(
        acb["provenance"]["dedupe"]["collapsed"].as_u64().unwrap() as usize,
        20 - about_budget
    );
    let duplicates: usize = omission(&acb, "duplicate")
        .iter()
        .map(|o| o["count"].as_u64().unwrap() as usize)
        .sum();
    assert_eq!(duplicates, 20 - about_budget);

    // More repetitions do not grow the bundle.
    let before = acb["token_used_est"].as_u64().unwrap();
    for i in 0..20 {
        app.append(&token, &message("s1", phrasings[i % phrasings.len()]))
            .await;
    }
    wait_projected(&app.pool, "acme").await;
    let after = app.acb(&token, ask).await;
    assert_eq!(after["token_used_est"].as_u64().unwrap(), before);
}

#[sqlx::test]
async fn the_same_inputs_give_the_same_bundle(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    // Identical texts tie on everything but their ids.
    for i in 0..40 {
        app.append(
            &token,
            &message(
                "s1",
                &format!("Retry policy note {}: backoff doubles.", i % 4),
            ),
        )
        .await;
    }
    wait_projected(&app.pool, "acme").await;
    let ask = json!({"session_id": "s2", "query_text": "retry backoff policy", "max_tokens": 1500, "render": true});
    let first = app.acb(&token, ask.clone()).await;
    let second = app.acb(&token, ask).await;
    assert_eq!(first["sections"], second["sections"]);
    assert_eq!(first["omissions"], second["omissions"]);
    assert_eq!(first["prompt"], second["prompt"]);
    assert_ne!(first["acb_id"], second["acb_id"]);
}

#[sqlx::test]
async fn the_recent_window_reads_the_log_even_when_projections_lag(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // No projection workers at all: only the log is current.
    let app = spawn_daemon_with(
        connect,
        ServeConfig {
            projection: None,
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    app.append(&token, &message("s1", "First thing I said."))
        .await;
    let long: String = (1..=400)
        .map(|i| format!("line {i} of the log file\n"))
        .collect();
    app.append(&token, &tool_result("app.log", &long)).await;
    app.append(&token, &message("s1", "What I just said."))
        .await;
    let acb = app
        .acb(
            &token,
            json!({"session_id": "s1", "intent": "continue", "render": true}),
        )
        .await;
    let recent = texts(&acb, "recent_window");
    assert_eq!(recent.first().unwrap(), "First thing I said.\n");
    assert_eq!(recent.last().unwrap(), "What I just said.\n");
    // The long output is chunked on the spot, and shows its head only.
    assert_eq!(recent.len(), 3, "{recent:?}");
    assert!(recent[1].starts_with("line 1 of the log file\n"));
    let trimmed = acb["omissions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["reason"] == "truncated_tool_output")
        .expect("the rest of the output is named as left out");
    assert_eq!(trimmed["section"], "recent_window");
    assert_eq!(trimmed["parts_shown"], 1);
    assert!(trimmed["parts"].as_u64().unwrap() > 1);
    assert_eq!(
        trimmed["count"].as_u64().unwrap() + 1,
        trimmed["parts"].as_u64().unwrap()
    );
    assert_eq!(acb["provenance"]["head_seq"], 3);
    assert_eq!(acb["provenance"]["projected_seq"], 0);
    assert_eq!(acb["provenance"]["lag_events"], 3);
    // Counted on the spot, exactly as projection would have.
    let prompt = acb["prompt"].as_str().unwrap();
    assert_eq!(
        counter().count(prompt),
        acb["token_used_est"].as_u64().unwrap() as usize
    );

    // Strong consistency cannot be had without projectors: bounded wait.
    let strong = app
        .acb(
            &token,
            json!({"session_id": "s1", "intent": "continue", "consistency": "strong"}),
        )
        .await;
    assert_eq!(strong["provenance"]["consistency"]["caught_up"], false);
    assert!(
        strong["provenance"]["consistency"]["waited_ms"]
            .as_f64()
            .unwrap()
            >= 1900.0
    );
}

#[sqlx::test]
async fn strong_consistency_waits_for_projections(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut last = Value::Null;
    for i in 0..50 {
        last = app
            .append(
                &token,
                &message("s1", &format!("Fresh fact number {i} about zeppelins.")),
            )
            .await;
    }
    let acb = app
        .acb(&token, json!({"session_id": "other", "query_text": "zeppelins fact 49", "consistency": "strong"}))
        .await;
    let consistency = &acb["provenance"]["consistency"];
    assert_eq!(consistency["requested"], "strong");
    assert_eq!(consistency["caught_up"], true, "{acb}");
    assert_eq!(acb["provenance"]["projected_seq"], last["seq"]);
    assert!(
        section(&acb, "retrieved_evidence")
            .iter()
            .any(|e| e["event_id"] == last["event_id"]),
        "{acb}"
    );
}

#[sqlx::test]
async fn cached_state_is_dropped_when_projections_change(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let rules = |text: &str| {
        json!({"session_id": "v", "channel": "private", "actor": {"type": "human", "id": "a"},
               "kind": "view_update", "content": {"view": "rules", "text": text}})
    };
    app.append(&token, &rules("Rule one.")).await;
    wait_projected(&app.pool, "acme").await;
    let ask = json!({"intent": "continue"});
    let first = app.acb(&token, ask.clone()).await;
    assert_eq!(first["provenance"]["cache"], "miss");
    let second = app.acb(&token, ask.clone()).await;
    assert_eq!(second["provenance"]["cache"], "hit");
    assert_eq!(texts(&second, "rules"), ["Rule one.\n"]);

    app.append(&token, &rules("Rule two.")).await;
    wait_projected(&app.pool, "acme").await;
    let third = app.acb(&token, ask).await;
    assert_eq!(third["provenance"]["cache"], "miss");
    assert_eq!(texts(&third, "rules"), ["Rule two.\n"]);
}

/// An agent's own turns (messages, tool results) advance the projections
/// but change nothing the cached state holds: the state stands without
/// being read again, and the new message still shows in the recent window.
/// A task update, a decision and a rebuild each make the next bundle read
/// it again, and show what changed.
#[sqlx::test]
async fn an_agents_turns_leave_the_cached_state_standing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    app.append(
        &token,
        &json!({"session_id": "v", "channel": "private", "actor": {"type": "human", "id": "a"},
                "kind": "view_update", "content": {"view": "rules", "text": "Rule one."}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let ask = json!({"session_id": "s1", "intent": "continue"});
    let first = app.acb(&token, ask.clone()).await;
    assert_eq!(first["provenance"]["cache"], "miss");

    let said = app
        .append(&token, &message("s1", "Looking at the export now."))
        .await["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.append(&token, &tool_result("export.log", "3 pages read"))
        .await;
    wait_projected(&app.pool, "acme").await;
    let after_turn = app.acb(&token, ask.clone()).await;
    assert_eq!(after_turn["provenance"]["cache"], "hit", "{after_turn:#}");
    assert!(
        texts(&after_turn, "recent_window")
            .iter()
            .any(|text| text.contains("Looking at the export now.")),
        "{after_turn:#}"
    );
    assert_eq!(texts(&after_turn, "rules"), ["Rule one.\n"]);

    app.append(
        &token,
        &event(
            "task_update",
            json!({"task_id": "T-1", "status": "open", "title": "Fix the export"}),
            &[],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let after_task = app.acb(&token, ask.clone()).await;
    assert_eq!(after_task["provenance"]["cache"], "miss");
    assert!(
        texts(&after_task, "task_state")
            .iter()
            .any(|text| text.contains("Fix the export")),
        "{after_task:#}"
    );

    app.append(
        &token,
        &event(
            "decision",
            json!({"decision": "Export pages of 200 rows", "key": "page-size", "scope": "project"}),
            &[&said],
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let after_decision = app.acb(&token, ask.clone()).await;
    assert_eq!(after_decision["provenance"]["cache"], "miss");
    assert!(
        texts(&after_decision, "decision_ledger")
            .iter()
            .any(|text| text.contains("Export pages of 200 rows")),
        "{after_decision:#}"
    );
    assert_eq!(
        app.acb(&token, ask.clone()).await["provenance"]["cache"],
        "hit"
    );

    // A rebuild in another process, after a message no bundle has seen: its
    // projections were made again, so the state is read again, though the
    // events since the cached state could not have changed it.
    app.append(&token, &message("s1", "Still on the export."))
        .await;
    wait_projected(&app.pool, "acme").await;
    let (code, _, stderr) =
        crate::helpers::memd_cli(&app.database_url().await, &["rebuild", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    crate::helpers::wait_until(
        std::time::Duration::from_secs(10),
        "a bundle after the rebuild reads the state again (cache miss)",
        async || {
            let acb = app.acb(&token, ask.clone()).await;
            if acb["provenance"]["cache"] == "miss" {
                Ok(())
            } else {
                Err(format!("{acb:#}"))
            }
        },
    )
    .await;
}

#[sqlx::test]
async fn bad_requests_are_refused_by_field(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let reader = app
        .tenant_with_scope("reader", memd::domain::tenant::Scope::Read)
        .await;
    for (body, field) in [
        (json!({"max_tokens": 65_001}), "max_tokens"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"max_tokens": "lots"}), "max_tokens"),
        (json!({"channel": "radio"}), "channel"),
        (json!({"consistency": "eventually"}), "consistency"),
        (json!({"query_text": "x".repeat(20_000)}), "query_text"),
        (json!({"quer_text": "typo"}), "quer_text"),
        (json!({"handoff_id": "evt_x"}), "handoff_id"),
        (json!({"after": 0}), "after"),
        (json!({"after": "soon"}), "after"),
    ] {
        let (status, error) = app.post_acb(&token, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{error}");
    }
    let (status, error) = app.post_acb(&token, &json!({"tenant_id": "other"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(error["error"]["code"], "tenant_mismatch");
    // Reading is enough to build a bundle.
    let (status, _) = app
        .post_acb(&reader, &json!({"query_text": "anything"}))
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[sqlx::test]
async fn a_tenant_never_retrieves_another_tenants_memory(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    app.append(&acme, &message("s1", "Acme's launch code word is pelican."))
        .await;
    app.append(&other, &message("s1", "Other's notes mention a heron."))
        .await;
    wait_projected(&app.pool, "acme").await;
    wait_projected(&app.pool, "other").await;
    let acb = app
        .acb(
            &other,
            json!({"session_id": "s1", "query_text": "pelican code word", "render": true}),
        )
        .await;
    let prompt = acb["prompt"].as_str().unwrap();
    assert!(!prompt.contains("pelican"), "{prompt}");
    assert!(prompt.contains("heron"), "its own recent window: {prompt}");
}

/// Arbitrary text: line breaks, slashes, punctuation, digits, words of
/// several scripts, and words a query will share.
fn arbitrary_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    proptest::collection::vec(
        prop_oneof![
            Just("\n".to_owned()),
            Just(" \n".to_owned()),
            Just("/".to_owned()),
            Just(" ".to_owned()),
            "[.,;:!?#*()\\[\\]\"'-]{1,3}",
            "[0-9]{1,4}",
            "[a-zA-Z]{1,9}",
            "[éЖ中🙂]{1,2}",
            Just(" invoice ".to_owned()),
            Just(" export ".to_owned()),
        ],
        1..80,
    )
    .prop_map(|parts| parts.concat())
}

/// The budget holds for whatever is stored: random content of every kind,
/// channel and sensitivity, random budgets, channels and paths. Each case
/// is a fresh tenant; the rendered prompt is counted independently.
#[sqlx::test]
async fn bundles_never_exceed_max_tokens_over_arbitrary_stored_content(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    use proptest::{
        prelude::*,
        strategy::ValueTree,
        test_runner::{Config, TestRunner},
    };
    let app = spawn_daemon(connect).await;
    let counter = counter();
    let content = proptest::collection::vec(
        (
            0..5usize,
            arbitrary_text(),
            prop::sample::select(vec!["private", "team", "agent", "public"]),
            prop::sample::select(vec!["none", "low", "high"]),
        ),
        1..25,
    );
    let request = (
        1u32..6_000,
        prop::sample::select(vec!["private", "team", "agent", "public"]),
        any::<bool>(),
        arbitrary_text(),
    );
    let mut runner = TestRunner::new(Config::default());
    for case in 0..12 {
        let events = content.new_tree(&mut runner).unwrap().current();
        let tenant = format!("case{case}");
        let token = app.tenant(&tenant).await;
        let mut last = None;
        for (kind, text, channel, sensitivity) in &events {
            let mut body = match kind {
                0 => message("s1", text),
                1 => tool_result("src/main.rs", text),
                2 => event(
                    "decision",
                    json!({"decision": text, "scope": "project", "key": "k"}),
                    &[],
                ),
                3 => event(
                    "task_update",
                    json!({"task_id": "T", "status": "doing", "title": text}),
                    &[],
                ),
                _ => {
                    json!({"session_id": "s1", "channel": "private", "actor": {"type": "human", "id": "h"},
                            "kind": "view_update", "content": {"view": "rules", "text": text}})
                }
            };
            if let Some(previous) = &last
                && *kind == 2
            {
                body["refs"] = json!([previous]);
            }
            body["channel"] = json!(channel);
            body["sensitivity"] = json!(sensitivity);
            // Text that is only whitespace is refused by the API: skip it.
            let (status, appended) = app.post_events(&token, &body).await;
            if status.is_success() {
                last = appended["event_id"].as_str().map(str::to_owned);
            }
        }
        wait_projected(&app.pool, &tenant).await;
        for _ in 0..4 {
            let (max_tokens, channel, fast, query) =
                request.new_tree(&mut runner).unwrap().current();
            let mut body = json!({"session_id": "s1", "channel": channel, "query_text": query,
                                  "max_tokens": max_tokens, "render": true});
            if fast {
                body["intent"] = json!("continue");
            }
            let acb = app.acb(&token, body).await;
            let prompt = acb["prompt"].as_str().unwrap();
            let used = acb["token_used_est"].as_u64().unwrap() as usize;
            assert_eq!(counter.count(prompt), used, "case {case}: {prompt:?}");
            assert!(
                used <= max_tokens as usize,
                "case {case}: {used} > {max_tokens}"
            );
        }
    }
}

#[sqlx::test]
async fn common_query_terms_share_one_branch_and_a_rare_terms_old_matches_still_come(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let small = app.tenant("small").await;
    app.put_policy(&token, &json!({"candidate_pool_max": 200}))
        .await;
    // The oldest event holds the rare word; 1,500 newer ones the common one.
    app.append(
        &token,
        &message("old", "The zeppelin budget was approved by finance."),
    )
    .await;
    // A word common in older history only: the newest chunks never hold it,
    // its 150 matches are counted.
    let ledger: Vec<Value> = (0..150)
        .map(|i| message("old", &format!("Ledger entry {i} was reconciled.")))
        .collect();
    app.append(&token, &json!({ "events": ledger })).await;
    for batch in 0..3 {
        let events: Vec<Value> = (0..500)
            .map(|i| {
                message(
                    "chatter",
                    &format!(
                        "Export job {} finished for account {}.",
                        batch * 500 + i,
                        i % 7
                    ),
                )
            })
            .collect();
        app.append(&token, &json!({ "events": events })).await;
    }
    // A tenant with fewer chunks than the sample has no common terms.
    let few: Vec<Value> = (0..50)
        .map(|i| message("chatter", &format!("Export job {i} finished.")))
        .collect();
    app.append(&small, &json!({ "events": few })).await;
    wait_projected(&app.pool, "acme").await;
    wait_projected(&app.pool, "small").await;

    let ask = json!({"session_id": "today", "query_text": "zeppelin export", "max_tokens": 4000});
    let acb = app.acb(&token, ask.clone()).await;
    let provenance = &acb["provenance"];
    assert_eq!(provenance["query_terms"], json!(["export", "zeppelin"]));
    assert_eq!(provenance["common_terms"], json!(["export"]));
    assert!(provenance["candidate_pool_size"].as_u64().unwrap() <= 200);
    let evidence = texts(&acb, "retrieved_evidence");
    assert!(
        evidence.iter().any(|t| t.contains("zeppelin budget")),
        "the rare term's old match is found: {evidence:?}"
    );
    assert_eq!(
        app.acb(&token, ask.clone()).await["sections"],
        acb["sections"]
    );
    let theirs = app.acb(&small, ask).await;
    assert_eq!(theirs["provenance"]["common_terms"], json!([]));

    // Three terms: a share of 66 each. 150 matches are more than that.
    let ask = json!({"session_id": "today", "query_text": "zeppelin ledger export",
                     "max_tokens": 4000});
    let acb = app.acb(&token, ask).await;
    assert_eq!(
        acb["provenance"]["common_terms"],
        json!(["export", "ledger"])
    );
    assert!(
        texts(&acb, "retrieved_evidence")
            .iter()
            .any(|t| t.contains("zeppelin budget")),
        "the rare term still has a branch of its own"
    );
}

/// Which terms are common is kept per judged seq (the projected seq itself
/// in a tenant this small): the same question again, or from a daemon that
/// kept nothing, gets the same bundle, and events that make a rare term
/// common are seen at once.
#[sqlx::test]
async fn common_term_verdicts_are_kept_until_the_judged_seq_moves(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon(connect.clone()).await;
    let token = app.tenant("acme").await;
    app.put_policy(&token, &json!({"candidate_pool_max": 200}))
        .await;
    let zeppelins: Vec<Value> = (0..5)
        .map(|i| message("old", &format!("Zeppelin hangar {i} was inspected.")))
        .collect();
    app.append(&token, &json!({ "events": zeppelins })).await;
    let chatter: Vec<Value> = (0..300)
        .map(|i| message("chatter", &format!("Export job {i} finished.")))
        .collect();
    app.append(&token, &json!({ "events": chatter })).await;
    wait_projected(&app.pool, "acme").await;

    let ask = json!({"session_id": "today", "query_text": "zeppelin export", "max_tokens": 4000});
    let first = app.acb(&token, ask.clone()).await;
    assert_eq!(first["provenance"]["common_terms"], json!(["export"]));
    let again = app.acb(&token, ask.clone()).await;
    assert_eq!(again["provenance"]["common_terms"], json!(["export"]));
    assert_eq!(again["sections"], first["sections"]);
    app.stop().await;

    let mut app = spawn_daemon(connect).await;
    let fresh = app.acb(&token, ask.clone()).await;
    assert_eq!(fresh["provenance"]["common_terms"], json!(["export"]));
    assert_eq!(fresh["sections"], first["sections"]);

    // The newest chunks now hold "zeppelin": common.
    let zeppelins: Vec<Value> = (0..250)
        .map(|i| message("new", &format!("Zeppelin flight {i} landed.")))
        .collect();
    app.append(&token, &json!({ "events": zeppelins })).await;
    wait_projected(&app.pool, "acme").await;
    let after = app.acb(&token, ask).await;
    assert_eq!(
        after["provenance"]["common_terms"],
        json!(["export", "zeppelin"])
    );
    app.stop().await;
}

/// A tenant whose newest chunks speak other words than its history: the
/// history's everyday term is still common (settled by chunks spread over
/// the whole history, not by counting its matches), while a term held by a
/// few dozen old chunks, often enough in the spread sample but with fewer
/// matches than its share, is not.
#[sqlx::test]
async fn a_term_common_only_in_older_history_is_common_and_a_few_old_matches_are_not(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let (token, small) = (app.tenant("acme").await, app.tenant("small").await);
    for tenant in [&token, &small] {
        app.put_policy(tenant, &json!({"candidate_pool_max": 200}))
            .await;
    }
    let batch = |n: usize, text: &dyn Fn(usize) -> String| -> Value {
        json!({"events": (0..n).map(|i| message("s", &text(i))).collect::<Vec<_>>()})
    };
    for part in 0..2 {
        app.append(
            &token,
            &batch(500, &|i| format!("Export job {} finished.", part * 500 + i)),
        )
        .await;
    }
    app.append(
        &small,
        &batch(60, &|i| format!("Ledger entry {i} reconciled.")),
    )
    .await;
    for tenant in [&token, &small] {
        app.append(
            tenant,
            &batch(300, &|i| format!("Weather note {i}: sunny and mild.")),
        )
        .await;
    }
    wait_projected(&app.pool, "acme").await;
    wait_projected(&app.pool, "small").await;

    let acb = app
        .acb(
            &token,
            json!({"session_id": "today", "query_text": "export"}),
        )
        .await;
    assert_eq!(
        acb["provenance"]["common_terms"],
        json!(["export"]),
        "{acb:#}"
    );
    // 60 matches, fewer than a share of 200: not common, though the spread
    // sample holds it (its last block of eight falls among the 60).
    let acb = app
        .acb(
            &small,
            json!({"session_id": "today", "query_text": "ledger"}),
        )
        .await;
    assert_eq!(acb["provenance"]["common_terms"], json!([]), "{acb:#}");
}

#[sqlx::test]
async fn every_part_of_a_long_superseded_decision_or_conflicting_summary_stays_out(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = app
        .append(
            &token,
            &message("s1", "quokka hosting goes to the blue region"),
        )
        .await;
    let said = said["event_id"].as_str().unwrap().to_owned();
    // Long enough to be projected as several chunks, every one about quokkas.
    let rationale: Vec<String> = (0..60)
        .map(|i| format!("quokka hosting reason {i}: the green region had latency spikes"))
        .collect();
    let old = app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Host quokka in the green region", "key": "quokka.region",
                       "scope": "project", "rationale": rationale}),
                &[&said],
            ),
        )
        .await;
    let old = old["event_id"].as_str().unwrap().to_owned();
    app.append(
        &token,
        &event(
            "decision",
            json!({"decision": "Host quokka in the blue region", "key": "quokka.region",
                   "scope": "project", "value": "blue", "supersedes": old}),
            &[&said],
        ),
    )
    .await;
    let long_summary: String = (0..60)
        .map(|i| format!("Summary line {i}: quokka hosting stays in the green region.\n"))
        .collect();
    let summary = app
        .append(
            &token,
            &event(
                "summary",
                json!({"text": long_summary, "claims": [{"key": "quokka.region", "value": "green"}]}),
                &[&said],
            ),
        )
        .await;
    let summary = summary["event_id"].as_str().unwrap().to_owned();
    wait_projected(&app.pool, "acme").await;
    let parts = |event_id: &str| {
        let event_id = event_id.to_owned();
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM projections.chunks WHERE event_id = $1",
            )
            .bind(event_id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(parts(&old).await > 1, "the old decision is several chunks");
    assert!(parts(&summary).await > 1, "the summary is several chunks");

    let acb = app
        .acb(
            &token,
            json!({"session_id": "s2", "query_text": "which region hosts quokka?", "max_tokens": 16000}),
        )
        .await;
    for item in section(&acb, "retrieved_evidence") {
        let cites = item["event_id"].as_str().unwrap();
        assert_ne!(
            cites, old,
            "a part of the superseded decision came back: {item}"
        );
        assert_ne!(
            cites, summary,
            "a part of the conflicting summary came back: {item}"
        );
    }
    let superseded = omission(&acb, "superseded");
    assert!(!superseded.is_empty());
    let conflicts = omission(&acb, "conflict");
    assert_eq!(
        conflicts
            .iter()
            .map(|o| o["count"].as_u64().unwrap())
            .sum::<u64>(),
        parts(&summary).await as u64,
        "every part of the summary is left out as a conflict"
    );
}

#[sqlx::test]
async fn looking_for_pinned_memory_reads_only_pinned_chunks(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let chatter: Vec<Value> = (0..200)
        .map(|i| message("s1", &format!("message {i} about exports")))
        .collect();
    app.append(&token, &json!({ "events": chatter })).await;
    wait_projected(&app.pool, "acme").await;
    let mut conn = app.pool.acquire().await.unwrap();
    sqlx::query("ANALYZE projections.chunks")
        .execute(&mut *conn)
        .await
        .unwrap();
    // The predicate as `retrieve::pinned` writes it.
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT chunk_id FROM projections.chunks c
          WHERE c.tenant_id = 'acme' AND c.tags && '{pinned,pin}'::text[]
          ORDER BY c.seq DESC, c.part LIMIT 50",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    // The table is partitioned by tenant: the plan names the partition's
    // own copy of `chunks_pinned`.
    let pinned_indexes: Vec<String> = sqlx::query_scalar(
        "SELECT relid::regclass::text FROM pg_partition_tree('projections.chunks_pinned')
          WHERE isleaf",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(
        pinned_indexes
            .iter()
            .any(|index| plan.contains(index.trim_start_matches("projections."))),
        "{plan}\n{pinned_indexes:?}"
    );
}

/// A tenant with nothing pinned is not asked for pinned memory (its cached
/// state says so), and that answer does not outlive the first pin.
#[sqlx::test]
async fn memory_pinned_after_a_bundle_is_in_the_next(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for i in 0..5 {
        app.append(
            &token,
            &message("s1", &format!("the export job {i} finished")),
        )
        .await;
    }
    wait_projected(&app.pool, "acme").await;
    let fast = json!({"session_id": "other", "intent": "continue"});
    let before = app.acb(&token, fast.clone()).await;
    assert!(
        section(&before, "retrieved_evidence").is_empty(),
        "{before:#}"
    );
    let mut pinned = message("s1", "Always answer the customer in French.");
    pinned["tags"] = json!(["pinned"]);
    app.append(&token, &pinned).await;
    wait_projected(&app.pool, "acme").await;
    let after = app.acb(&token, fast).await;
    let texts: Vec<&str> = section(&after, "retrieved_evidence")
        .iter()
        .map(|item| item["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.len() == 1 && texts[0].contains("answer the customer in French"),
        "{texts:?}"
    );
}

#[sqlx::test]
async fn pinned_memory_is_in_every_bundle_while_it_fits(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut pinned = message("old", "Always answer the customer in French.");
    pinned["tags"] = json!(["pinned"]);
    app.append(&token, &pinned).await;
    let mut public_pin = message("old", "Never reveal the staging hostname.");
    public_pin["tags"] = json!(["pin"]);
    public_pin["sensitivity"] = json!("high");
    app.append(&token, &public_pin).await;
    for i in 0..30 {
        app.append(
            &token,
            &message("new", &format!("the export job {i} finished")),
        )
        .await;
    }
    wait_projected(&app.pool, "acme").await;
    let texts = |acb: &Value| -> Vec<String> {
        section(acb, "retrieved_evidence")
            .iter()
            .map(|item| item["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let fast = app
        .acb(&token, json!({"session_id": "new", "intent": "continue"}))
        .await;
    assert_eq!(fast["provenance"]["path"], "fast");
    assert!(
        texts(&fast)
            .iter()
            .any(|t| t.contains("answer the customer in French")),
        "{:#?}",
        texts(&fast)
    );
    let retrieval = app
        .acb(
            &token,
            json!({"session_id": "new", "query_text": "did the export job finish?"}),
        )
        .await;
    assert_eq!(retrieval["provenance"]["path"], "retrieval");
    assert!(texts(&retrieval).iter().any(|t| t.contains("in French")));
    // Pinned or not, privacy first: a high-sensitivity pin stays out of a
    // public bundle.
    let public = app
        .acb(
            &token,
            json!({"session_id": "new", "intent": "continue", "channel": "public"}),
        )
        .await;
    assert!(!public.to_string().contains("staging hostname"));
}

/// Memory that no longer holds never reaches the model as if it did: a
/// task update a later one replaced is left out of the evidence as
/// `outdated` (naming the task's state now), and a superseded or rejected
/// decision or a conflicting summary is left out of the recent window and
/// the prompt with its reason, as it is left out of the evidence.
#[sqlx::test]
async fn outdated_tasks_and_decisions_that_no_longer_stand_are_left_out_and_named(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = id(&app
        .append(
            &token,
            &message("s1", "the quokka exporter drops rows above 500"),
        )
        .await);
    let task = |status: &str| {
        event(
            "task_update",
            json!({"task_id": "T3", "status": status, "title": "Fix the quokka exporter",
                   "details": format!("quokka exporter fix is {status}")}),
            &[],
        )
    };
    let open = app.append(&token, &task("open")).await;
    app.append(&token, &task("done")).await;
    let old = id(&app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Quokka exports run in pages of 500", "key": "quokka.page",
                       "scope": "project"}),
                &[&said],
            ),
        )
        .await);
    app.append(
        &token,
        &event(
            "decision",
            json!({"decision": "Quokka exports run in pages of 200", "key": "quokka.page",
                   "scope": "project", "supersedes": old}),
            &[&said],
        ),
    )
    .await;
    let rejected = id(&app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Quokka exports skip the audit table", "scope": "project"}),
                &[],
            ),
        )
        .await);
    let summary = id(&app
        .append(
            &token,
            &event(
                "summary",
                json!({"text": "Quokka exports run in pages of 500, as agreed",
                       "claims": [{"key": "quokka.page", "value": "500"}]}),
                &[&said],
            ),
        )
        .await);
    wait_projected(&app.pool, "acme").await;

    // Evidence, asked from another session (the whole of s1 is its window).
    let elsewhere = app
        .acb(
            &token,
            json!({"session_id": "s2", "query_text": "where does the quokka exporter fix stand?",
                   "max_tokens": 4000}),
        )
        .await;
    let evidence = texts(&elsewhere, "retrieved_evidence").join("\n");
    assert!(evidence.contains("fix is done"), "{evidence}");
    assert!(!evidence.contains("fix is open"), "{evidence}");
    let outdated = omission(&elsewhere, "outdated");
    assert_eq!(outdated.len(), 1, "{:#?}", elsewhere["omissions"]);
    assert_eq!(outdated[0]["task_id"], "T3");
    assert_eq!(outdated[0]["status_now"], "done");
    let open_chunk = open["chunk_ids"][0].as_str().unwrap();
    assert!(
        outdated[0]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == open_chunk),
        "{outdated:?}"
    );

    let acb = app
        .acb(
            &token,
            json!({"session_id": "s1", "query_text": "where does the quokka exporter fix stand?",
                   "max_tokens": 4000, "render": true}),
        )
        .await;
    let window = texts(&acb, "recent_window").join("\n");
    let prompt = acb["prompt"].as_str().unwrap();
    for stale in ["pages of 500", "skip the audit table"] {
        assert!(!window.contains(stale), "{stale} in the window: {window}");
        assert!(!prompt.contains(stale), "{stale} in the prompt: {prompt}");
    }
    assert!(
        prompt.contains("pages of 200"),
        "the decision in force stays: {prompt}"
    );
    let in_window = |reason: &str, id_field: &str, id: &str| {
        omission(&acb, reason)
            .iter()
            .any(|o| o["section"] == "recent_window" && o[id_field] == id)
    };
    assert!(
        in_window("superseded", "decision_id", &old),
        "{:#?}",
        acb["omissions"]
    );
    assert!(
        in_window("rejected", "decision_id", &rejected),
        "{:#?}",
        acb["omissions"]
    );
    assert!(
        in_window("conflict", "summary_id", &summary),
        "{:#?}",
        acb["omissions"]
    );
}

/// Who said a message is found with its words, whether the speaker was
/// recorded as the actor or written into the text: "what did Caroline
/// say?" finds what Caroline recorded as "I painted a sunset".
#[sqlx::test]
async fn a_speaker_is_found_however_the_conversation_was_recorded(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = |speaker: &str, text: &str| {
        json!({"session_id": "s1", "channel": "private", "kind": "message",
               "actor": {"type": "human", "id": speaker}, "content": {"text": text}})
    };
    app.append(
        &token,
        &json!({"events": [
            said("caroline", "I painted a sunset with my kids."),
            said("melanie", "The pottery class starts on Monday."),
            said("notetaker", "Melanie: I bought new running shoes."),
        ]}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let ask = |question: &str| json!({"session_id": "questions", "query_text": question, "max_tokens": 2000});
    let evidence = |acb: Value| -> Vec<String> {
        texts(&acb, "retrieved_evidence")
            .iter()
            .map(|t| t.trim_end().to_owned())
            .collect()
    };
    assert_eq!(
        evidence(app.acb(&token, ask("What did Caroline say?")).await),
        ["I painted a sunset with my kids."]
    );
    let melanie = evidence(app.acb(&token, ask("Anything from Melanie?")).await);
    assert_eq!(melanie.len(), 2, "{melanie:?}");
    assert!(melanie.contains(&"The pottery class starts on Monday.".to_owned()));
    assert!(melanie.contains(&"Melanie: I bought new running shoes.".to_owned()));
    app.stop().await;
}

/// The rerank stage: a reply that shares only its speaker's name with the
/// question ranks right after the turn it answers, above newer turns of the
/// same speaker that share as much with the question; without the stage
/// (`neighbour_weight` 0) those newer turns outrank it.
#[sqlx::test]
async fn a_reply_ranks_beside_the_turn_it_answers(_: PgPoolOptions, connect: PgConnectOptions) {
    let mut app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = |session: &str, speaker: &str, text: &str| {
        json!({"session_id": session, "channel": "private", "kind": "message",
               "actor": {"type": "human", "id": speaker}, "content": {"text": text}})
    };
    app.append(
        &token,
        &json!({"events": [
            said("s1", "melanie", "What did you paint for the gallery last weekend?"),
            said("s1", "caroline", "A sunset over the lake, with my kids, while the sky went orange and purple."),
            said("s1", "melanie", "My dog chewed the garden hose again."),
            said("s2", "caroline", "I went running today."),
            said("s3", "caroline", "Cold weather again."),
            said("s4", "caroline", "My car needs tyres."),
        ]}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    // Words alone, with no floor: every turn of Caroline's shares her name
    // with the question, and the newer ones win the ties.
    let words_alone = json!({"semantic_weight": 0.0, "min_relevance": 0.0});
    let ask = json!({"session_id": "questions", "query_text": "What did Caroline paint for the gallery?",
                     "max_tokens": 2000});
    let evidence = |acb: &Value| -> Vec<String> {
        texts(acb, "retrieved_evidence")
            .iter()
            .map(|t| t.trim_end().to_owned())
            .collect()
    };

    app.put_policy(&token, &json!({"scoring": words_alone}))
        .await;
    let acb = app.acb(&token, ask.clone()).await;
    let found = evidence(&acb);
    assert_eq!(found[0], "What did you paint for the gallery last weekend?");
    assert_eq!(
        found[1], "A sunset over the lake, with my kids, while the sky went orange and purple.",
        "{found:?}"
    );
    assert_eq!(acb["provenance"]["neighbours"]["lifted"], 1);
    assert!(acb["provenance"]["stages_ms"]["rerank"].is_number());

    let mut without = words_alone.clone();
    without["neighbour_weight"] = json!(0.0);
    app.put_policy(&token, &json!({"scoring": without})).await;
    let acb = app.acb(&token, ask).await;
    let found = evidence(&acb);
    assert_eq!(found[0], "What did you paint for the gallery last weekend?");
    assert_eq!(
        found.last().unwrap(),
        "A sunset over the lake, with my kids, while the sky went orange and purple.",
        "{found:?}"
    );
    assert_eq!(acb["provenance"]["neighbours"]["lifted"], 0);
    assert_eq!(acb["provenance"]["neighbours"]["considered"], 0);
    app.stop().await;
}
