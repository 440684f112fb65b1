//! The audit console in a real browser (headless Chromium) against a real
//! daemon with real data: sign in, read and filter the log, open an event;
//! a bad token and another tenant's token see nothing.

use memd::{
    audit::checkpoint,
    domain::tenant::{Scope, TenantId},
};
use reqwest::StatusCode;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    browser::Browser,
    helpers::{
        event, message, rewrite_and_rehash, spawn_daemon, test_keyring, tool_result, wait_projected,
    },
};

/// Where the tests leave their screenshots (docs/console.md shows copies).
fn screenshot(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("console-screenshots")
        .join(format!("{name}.png"))
}

#[sqlx::test]
async fn the_console_is_served_from_the_binary_under_a_strict_policy(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        let response = app
            .client
            .get(format!("{}{path}", app.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers();
        assert!(headers["content-type"].to_str().unwrap().starts_with(kind));
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("default-src 'none'"), "{policy}");
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        let body = response.text().await.unwrap();
        // Nothing from another host.
        assert!(!body.contains("https://"), "{path} loads from elsewhere");
    }
}

#[sqlx::test]
async fn an_auditor_signs_in_reads_filters_and_opens_the_log(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    for i in 0..60 {
        let session = if i % 3 == 0 { "planning" } else { "coding" };
        app.append(
            &token,
            &message(session, &format!("turn {i} of the export work")),
        )
        .await;
    }
    // What an agent wrote is shown as text, never run as HTML.
    let mut hostile = message("planning", "<img src=x onerror=\"document.title='pwned'\">");
    hostile["actor"] = json!({"type": "agent", "id": "coder"});
    app.append(&token, &hostile).await;
    // A tool output over 64 KiB: kept whole as an artifact, its event cut.
    let long_output: String = (0..3000)
        .map(|line| format!("line {line}: invoice export row\n"))
        .collect();
    let long = app
        .append(&token, &tool_result("exports/invoices.csv", &long_output))
        .await;
    let decision = app
        .append(
            &token,
            &event(
                "decision",
                json!({"decision": "Export invoices in pages of 200", "key": "export.page_size", "scope": "project"}),
                &[],
            ),
        )
        .await;
    let newest_seq = decision["seq"].as_i64().unwrap();

    let browser = Browser::start().await;
    browser.open(&format!("{}/console", app.base_url)).await;
    browser
        .wait_for("!document.getElementById('sign-in').hidden")
        .await;
    browser.screenshot(&screenshot("sign-in")).await;

    // A bad token: the sign-in page again, saying why.
    browser.type_into("#token", "memd_not-a-real-token").await;
    browser.click("#sign-in-form button").await;
    browser
        .wait_for("!document.getElementById('sign-in-error').hidden")
        .await;
    assert!(
        browser
            .text("#sign-in-error")
            .await
            .contains("refused the token"),
        "{}",
        browser.text("#sign-in-error").await
    );

    // The real token: the log, newest first, a page at a time.
    browser.type_into("#token", &token).await;
    browser.click("#sign-in-form button").await;
    browser
        .wait_for("document.querySelectorAll('#log-table tbody tr').length > 0")
        .await;
    let first = browser.text("#log-table tbody tr td").await;
    assert_eq!(first, newest_seq.to_string());
    assert_eq!(
        browser
            .run("return document.querySelectorAll('#log-table tbody tr').length;")
            .await,
        json!(50)
    );
    // The token is in session storage, never in the address.
    assert!(
        !browser
            .run("return location.href;")
            .await
            .as_str()
            .unwrap()
            .contains(&token)
    );
    assert_eq!(
        browser.run("return document.title;").await,
        json!("memd console")
    );
    assert!(
        browser
            .run("return document.querySelector('#log-table img') === null;")
            .await
            == json!(true)
    );
    browser.screenshot(&screenshot("log")).await;
    browser.click("#log-older").await;
    browser
        .wait_for("document.querySelector('#log-table tbody td').textContent === '13'")
        .await;
    browser.click("#log-newest").await;

    // Filter by session and actor; open an event.
    browser
        .type_into("#log-filters [name=session_id]", "planning")
        .await;
    browser
        .type_into("#log-filters [name=actor_id]", "coder")
        .await;
    browser.click("#log-filters button[type=submit]").await;
    browser
        .wait_for("document.querySelectorAll('#log-table tbody tr').length === 1")
        .await;
    browser.click("#log-table tbody tr").await;
    browser
        .wait_for("!document.getElementById('event').hidden")
        .await;
    let content = browser.text("#event-content").await;
    assert!(content.contains("<img src=x"), "{content}");
    let fields = browser.text("#event-fields").await;
    assert!(fields.contains("previous hash"), "{fields}");
    assert_eq!(
        browser.run("return document.title;").await,
        json!("memd console")
    );
    // The chunks it produced: what bundles can cite of it.
    wait_projected(&app.pool, "acme").await;
    browser
        .wait_for("document.querySelectorAll('#event-chunks tbody tr').length === 1")
        .await;
    assert!(browser.text("#event-chunks").await.contains("onerror"));
    browser.screenshot(&screenshot("event")).await;

    // Filter by text: every word, in any order, as retrieval matches them.
    browser.click("#log-filters button[type=reset]").await;
    browser
        .type_into("#log-filters [name=text]", "7 turn")
        .await;
    browser.click("#log-filters button[type=submit]").await;
    browser
        .wait_for("document.querySelectorAll('#log-table tbody tr').length === 1")
        .await;
    let found = browser.text("#log-table tbody tr").await;
    assert!(found.contains("turn 7 of the export work"), "{found}");

    // A link to an event (as bundles and refs give them) opens it, its
    // artifact included.
    let long_id = long["event_id"].as_str().unwrap();
    browser
        .open(&format!("{}/console#/event/{long_id}", app.base_url))
        .await;
    browser
        .wait_for("!document.getElementById('event-artifact').hidden")
        .await;
    assert_eq!(browser.text("#event-id").await, long_id);
    browser.click("#load-artifact").await;
    browser
        .wait_for("!document.getElementById('event-artifact-text').hidden")
        .await;
    assert_eq!(
        browser
            .run("return document.getElementById('event-artifact-text').textContent.length;")
            .await,
        json!(long_output.len())
    );
    browser
        .wait_for("document.querySelectorAll('#event-chunks tbody tr').length > 1")
        .await;

    // Another tenant's token sees none of it.
    browser.click("#sign-out").await;
    browser.sign_in(&other).await;
    browser
        .wait_for("!document.getElementById('log-empty').hidden")
        .await;
    assert_eq!(
        browser
            .run("return document.querySelectorAll('#log-table tbody tr').length;")
            .await,
        json!(0)
    );
    browser.close().await;
}

#[sqlx::test]
async fn the_api_reference_renders_offline_from_the_daemon_alone(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let browser = Browser::start().await;
    browser.open(&format!("{}/api/v1/docs", app.base_url)).await;
    browser
        .wait_for("document.body.dataset.rendered === 'true'")
        .await;
    let text = browser.run("return document.body.innerText;").await;
    let text = text.as_str().unwrap();
    for expected in [
        "/api/v1/events",
        "/api/v1/acb/build",
        "Schemas",
        "AcbRequest",
    ] {
        assert!(
            text.contains(expected),
            "{expected} missing from the reference"
        );
    }
    browser.screenshot(&screenshot("api-reference")).await;
    browser.close().await;
}

#[sqlx::test]
async fn an_admin_watches_projections_and_runs_a_drift_check_and_a_rebuild(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let reader = app.tenant_with_scope("reader", Scope::Read).await;
    for i in 0..20 {
        app.append(&token, &message("s1", &format!("note {i}")))
            .await;
    }
    wait_projected(&app.pool, "acme").await;
    // The tasks projection meets a row its table refuses: its batch rolls
    // back and is retried, and the page names the failure.
    sqlx::query(
        "ALTER TABLE projections.tasks ADD CONSTRAINT refuse_boom CHECK (title <> 'boom') NOT VALID",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    app.append(
        &token,
        &event(
            "task_update",
            json!({"task_id": "t1", "status": "open", "title": "boom"}),
            &[],
        ),
    )
    .await;

    let browser = Browser::start().await;
    browser
        .open(&format!("{}/console#/projections", app.base_url))
        .await;
    browser.sign_in(&token).await;
    browser
        .wait_for("document.querySelectorAll('#projections-table tbody tr').length > 0")
        .await;
    let failing = "[...document.querySelectorAll('#projections-table td.failing')]";
    crate::helpers::wait_until(
        std::time::Duration::from_secs(30),
        "a failing projection shown",
        async || {
            if browser.run(&format!("return {failing}.length;")).await != json!(0) {
                return Ok(());
            }
            browser.run("loadProjections(); return true;").await;
            Err("none failing yet".to_owned())
        },
    )
    .await;
    let failure = browser
        .run(&format!(
            "return {failing}.map(td => td.parentElement.innerText);"
        ))
        .await;
    let failure = failure.to_string();
    assert!(
        failure.contains("tasks") && failure.contains("refuse_boom"),
        "{failure}"
    );
    assert!(
        browser.text("#projections-head").await.contains("seq 21"),
        "{}",
        browser.text("#projections-head").await
    );
    browser.screenshot(&screenshot("projections-failing")).await;
    // Mended, it catches up; the failure stays, marked as past.
    sqlx::query("ALTER TABLE projections.tasks DROP CONSTRAINT refuse_boom")
        .execute(&app.pool)
        .await
        .unwrap();
    wait_projected(&app.pool, "acme").await;
    browser.run("loadProjections(); return true;").await;
    browser
        .wait_for("document.querySelector('#projections-table td.recovered') !== null")
        .await;
    let table = browser.text("#projections-table").await;
    assert!(table.contains("chunks"), "{table}");
    assert!(table.contains("caught up since"), "{table}");
    browser.click("#start-drift-check").await;
    browser
        .wait_for("document.getElementById('job-status').textContent.includes('no drift')")
        .await;
    browser.screenshot(&screenshot("projections")).await;
    browser.click("#start-rebuild").await;
    browser
        .wait_for(
            "document.getElementById('job-status').textContent.includes('21 events replayed')",
        )
        .await;

    // A read token: no Projections page offered.
    browser.click("#sign-out").await;
    browser.sign_in(&reader).await;
    browser
        .wait_for("!document.getElementById('log').hidden")
        .await;
    assert_eq!(
        browser
            .run("return document.querySelector('#nav [data-page=projections]').hidden;")
            .await,
        json!(true)
    );
    browser.close().await;
}

#[sqlx::test]
async fn the_verify_page_proves_the_chain_and_names_the_first_rewritten_event(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut third = String::new();
    for i in 1..=5 {
        let appended = app
            .append(&token, &message("s1", &format!("note {i}")))
            .await;
        if i == 3 {
            third = appended["event_id"].as_str().unwrap().to_owned();
        }
    }
    let acme = TenantId::parse("acme").unwrap();
    let kept = checkpoint::take(&app.pool, &test_keyring(), Some(&acme))
        .await
        .unwrap()
        .signed;
    let browser = Browser::start().await;
    browser
        .open(&format!("{}/console#/verify", app.base_url))
        .await;
    browser.sign_in(&token).await;
    browser
        .wait_for("!document.getElementById('verify').hidden")
        .await;
    browser.click("#start-verify").await;
    browser
        .wait_for("document.getElementById('verify-status').textContent.includes('The chain verifies: 5 events')")
        .await;
    browser.screenshot(&screenshot("verify")).await;

    // A superuser rewrites the third event behind the daemon's back.
    let mut tx = memd_projectors::transaction::begin(&app.pool)
        .await
        .unwrap();
    for statement in [
        "ALTER TABLE events DISABLE TRIGGER USER",
        "UPDATE events SET content = '{\"text\": \"rewritten\"}' WHERE seq = 3",
        "ALTER TABLE events ENABLE TRIGGER USER",
    ] {
        sqlx::query(statement).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    browser.click("#start-verify").await;
    browser
        .wait_for("document.getElementById('verify-status').textContent.includes('BROKEN')")
        .await;
    let result = browser.text("#verify-result").await;
    assert!(result.contains(&third), "{result}");
    assert!(browser.text("#verify-status").await.contains("seq 3"));
    browser.screenshot(&screenshot("verify-broken")).await;

    // Whoever rewrote it recomputes every hash from there: the chain alone
    // passes again, the checkpoint signed before the rewrite does not.
    rewrite_and_rehash(&app.pool, "acme", 3, "rewritten").await;
    browser.click("#start-verify").await;
    browser
        .wait_for("document.getElementById('verify-status').textContent.includes('The chain verifies: 5 events.')")
        .await;
    let pasted = serde_json::to_string(&kept).unwrap();
    browser.type_into("#verify-checkpoints", &pasted).await;
    let public = test_keyring().public_key().unwrap();
    browser.type_into("#verify-public-key", &public).await;
    browser.click("#start-verify").await;
    browser
        .wait_for("document.getElementById('verify-status').textContent.startsWith('BROKEN')")
        .await;
    let status = browser.text("#verify-status").await;
    assert!(
        status.contains("checkpoint at seq 5 no longer holds")
            && status.contains("The chain alone verifies"),
        "{status}"
    );
    let findings = browser.text("#verify-checkpoint-results").await;
    assert!(
        findings.starts_with("BROKEN") && findings.contains("checkpoint tenant=acme seq=5"),
        "{findings}"
    );
    browser.screenshot(&screenshot("verify-checkpoint")).await;

    // A key that is not hex is named before anything runs.
    browser.type_into("#verify-public-key", "not a key").await;
    browser.click("#start-verify").await;
    browser
        .wait_for("!document.getElementById('verify-error').hidden")
        .await;
    assert!(
        browser
            .text("#verify-error")
            .await
            .starts_with("public_key:")
    );
    browser.close().await;
}

#[sqlx::test]
async fn the_bundle_explainer_shows_scores_and_why_private_memory_is_left_out(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    app.append(&token, &message("s1", "the launch code name is Bluebird"))
        .await;
    let mut shared = message("s1", "the launch happens on Tuesday at noon");
    shared["channel"] = json!("public");
    app.append(&token, &shared).await;
    wait_projected(&app.pool, "acme").await;

    let browser = Browser::start().await;
    browser
        .open(&format!("{}/console#/bundle", app.base_url))
        .await;
    browser.sign_in(&token).await;
    browser
        .wait_for("!document.getElementById('bundle').hidden")
        .await;

    // In the private channel the fact is retrieved, with its scores.
    browser
        .type_into("#bundle-form [name=session_id]", "s2")
        .await;
    browser
        .type_into("#bundle-form [name=query_text]", "launch code name")
        .await;
    browser.click("#bundle-form button[type=submit]").await;
    browser
        .wait_for("!document.getElementById('bundle-result').hidden")
        .await;
    let sections = browser.text("#bundle-sections").await;
    assert!(sections.contains("Bluebird"), "{sections}");
    assert!(sections.contains("relevance"), "{sections}");
    browser.screenshot(&screenshot("bundle")).await;

    // For a public channel it is left out, and the page says why.
    browser
        .run("document.querySelector('#bundle-form [name=channel]').value = 'public'; return true;")
        .await;
    browser.click("#bundle-form button[type=submit]").await;
    browser
        .wait_for("document.getElementById('bundle-omissions').innerText.includes('privacy')")
        .await;
    let sections = browser.text("#bundle-sections").await;
    assert!(!sections.contains("Bluebird"), "{sections}");
    browser.screenshot(&screenshot("bundle-public")).await;
    browser.close().await;
}

#[sqlx::test]
async fn the_decisions_page_draws_the_supersession_chain_and_the_tasks(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let said = app
        .append(&token, &message("s1", "pages of 100 time out"))
        .await;
    let evidence = said["event_id"].as_str().unwrap().to_owned();
    let post = |path: &'static str, body: serde_json::Value| {
        let (client, url, token) = (
            app.client.clone(),
            format!("{}{path}", app.base_url),
            token.clone(),
        );
        async move {
            let response = client
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            response.json::<serde_json::Value>().await.unwrap()
        }
    };
    let actor = json!({"type": "agent", "id": "coder"});
    // Deciding a key again supersedes the decision before without naming
    // it: the chain is drawn all the same, its newest steps first shown.
    for attempt in 1..=7 {
        post(
            "/api/v1/decisions",
            json!({"session_id": "s1", "actor": actor, "refs": [evidence],
                   "decision": format!("Retry failed exports {attempt} times"), "key": "export.retries",
                   "scope": "project"}),
        )
        .await;
    }
    let first = post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": actor, "refs": [evidence],
               "decision": "Export invoices in pages of 100", "key": "export.page_size", "scope": "project"}),
    )
    .await;
    post(
        "/api/v1/decisions",
        json!({"session_id": "s1", "actor": actor, "refs": [evidence],
               "decision": "Export invoices in pages of 200", "key": "export.page_size", "scope": "project",
               "supersedes": first["event_id"]}),
    )
    .await;
    post(
        "/api/v1/tasks",
        json!({"session_id": "s1", "actor": actor, "task_id": "export-fix", "status": "doing",
               "title": "Fix the nightly export"}),
    )
    .await;
    // A summary that still says 100 contradicts the decision in force.
    let summary = |text: &str, value: &str| {
        event(
            "summary",
            json!({"text": text, "claims": [{"key": "export.page_size", "value": value}]}),
            &[&evidence],
        )
    };
    app.append(&token, &summary("Exports run in pages of 100", "100"))
        .await;
    app.append(&token, &summary("Exports now run in pages of 200", "200"))
        .await;
    wait_projected(&app.pool, "acme").await;

    let browser = Browser::start().await;
    browser
        .open(&format!("{}/console#/decisions", app.base_url))
        .await;
    browser.sign_in(&token).await;
    browser
        .wait_for("document.querySelectorAll('#decision-chains .decision').length === 2 + 5")
        .await;
    // The chain changed last comes first, oldest step first: the superseded
    // decision, then the one in force.
    let statuses = browser
        .run("return [...document.querySelectorAll('#decision-chains .chain:first-child .decision')].map(d => d.className);")
        .await;
    assert_eq!(statuses, json!(["decision superseded", "decision active"]));
    let chain = browser.text("#decision-chains .chain:first-child").await;
    assert!(chain.contains("export.page_size"), "{chain}");
    assert!(chain.contains("pages of 200"), "{chain}");
    let retries = "#decision-chains .chain:nth-child(2)";
    let chain = browser.text(retries).await;
    assert!(
        chain.contains("export.retries")
            && chain.contains("Show the 2 earlier decisions of this chain")
            && chain.contains("Retry failed exports 7 times")
            && !chain.contains("Retry failed exports 2 times"),
        "{chain}"
    );
    browser.screenshot(&screenshot("decisions")).await;
    browser.click(&format!("{retries} li.earlier button")).await;
    let steps = browser
        .run(&format!(
            "return [...document.querySelectorAll('{retries} .decision')].map(d => d.className + ': ' + d.querySelector('.decision-text').textContent);"
        ))
        .await;
    let expected: Vec<String> = (1..=7)
        .map(|n| {
            let status = if n == 7 { "active" } else { "superseded" };
            format!("decision {status}: Retry failed exports {n} times")
        })
        .collect();
    assert_eq!(steps, json!(expected));
    let tasks = browser.text("#tasks-table").await;
    assert!(
        tasks.contains("Fix the nightly export") && tasks.contains("doing"),
        "{tasks}"
    );
    // Summaries with their standing: the stale one flagged, naming the
    // decision it contradicts.
    let standings = browser
        .run("return [...document.querySelectorAll('#summaries-table .badge')].map(b => b.textContent);")
        .await;
    assert_eq!(standings, json!(["consistent", "conflict"]));
    let summaries = browser.text("#summaries-table").await;
    assert!(
        summaries.contains("but the active decision says otherwise")
            && summaries.contains("pages of 200"),
        "{summaries}"
    );
    browser
        .run("document.getElementById('summaries-table').scrollIntoView();")
        .await;
    browser.screenshot(&screenshot("summaries")).await;
    // What a decision cites opens in the log.
    browser.click("#decision-chains .decision .refs a").await;
    browser
        .wait_for("!document.getElementById('event').hidden")
        .await;
    assert_eq!(browser.text("#event-id").await, evidence);
    assert!(
        browser
            .text("#event-content")
            .await
            .contains("pages of 100 time out")
    );
    browser.close().await;
}

#[sqlx::test]
async fn a_retracted_event_is_marked_in_the_log_and_names_its_retraction(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let wrong = app
        .append(&token, &message("s1", "the deploy bucket is exports-old"))
        .await;
    let wrong_id = wrong["event_id"].as_str().unwrap();
    let retraction = app
        .append(
            &token,
            &event("retraction", json!({"reason": "renamed"}), &[wrong_id]),
        )
        .await;

    let browser = Browser::start().await;
    browser.open(&format!("{}/console", app.base_url)).await;
    browser
        .wait_for("!document.getElementById('sign-in').hidden")
        .await;
    browser.type_into("#token", &token).await;
    browser.click("#sign-in-form button").await;
    browser
        .wait_for("document.querySelectorAll('#log-table tbody tr').length === 2")
        .await;
    // Newest first: the retraction, then the event it withdrew, struck out.
    assert_eq!(
        browser
            .run("return [...document.querySelectorAll('#log-table tbody tr')].map(r => r.className);")
            .await,
        json!(["", "retracted"])
    );
    browser
        .click(&format!("#log-table tr[data-event-id='{wrong_id}']"))
        .await;
    browser
        .wait_for("!document.getElementById('event').hidden")
        .await;
    browser.screenshot(&screenshot("retracted")).await;
    let fields = browser.text("#event-fields").await;
    assert!(fields.contains("retracted by"), "{fields}");
    assert!(
        fields.contains(retraction["event_id"].as_str().unwrap()),
        "{fields}"
    );
    // Ends the WebDriver session, which quits Chromium: dropping the
    // browser only kills chromedriver, and would leave Chromium running.
    browser.close().await;
}
