//! `memd-bench console`: the console's pages timed against a tenant of a
//! large chat history, twice: what each page asks the daemon for (its files
//! and API calls, from a plain HTTP client), and, when chromedriver is
//! installed, each page in a real browser from the click (or the
//! navigation) to its data on screen.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{
    harness::{
        ScratchDatabase, environment, percentile, report_header, start_daemon, wait_projected,
        write_report,
    },
    histories::{History, load},
};
use memd::{
    db,
    domain::tenant::{Scope, TenantId},
    read::semantic::SemanticConfig,
    tenants,
};

const TENANT: &str = "console";

/// One page: its name and the requests it makes on opening, in order.
struct Page {
    name: &'static str,
    requests: Vec<(reqwest::Method, String, Option<Value>)>,
}

pub async fn run(database_url: &str, size: u64, repeats: usize, out: &Path) -> anyhow::Result<()> {
    let scratch = ScratchDatabase::create(database_url, "memd_bench").await?;
    let result = measure(&scratch, size, repeats).await;
    scratch.drop_now().await?;
    let (rows, browser, verify, environment) = result?;
    super::charts::bars(
        &super::charts::path_beside(out, "api"),
        &format!(
            "Console pages at {} events: what each asks the daemon for",
            super::charts::number(size as f64)
        ),
        "ms per page load",
        &rows
            .iter()
            .map(|(name, ..)| name.to_string())
            .collect::<Vec<_>>(),
        &[
            ("p50".into(), rows.iter().map(|r| r.2).collect()),
            ("p95".into(), rows.iter().map(|r| r.3).collect()),
        ],
    )?;
    if let Ok((_, browser_rows)) = &browser {
        super::charts::bars(
            &super::charts::path_beside(out, "browser"),
            &format!(
                "Console pages at {} events in Chromium",
                super::charts::number(size as f64)
            ),
            "ms until on screen",
            &browser_rows
                .iter()
                .map(|(name, ..)| name.to_string())
                .collect::<Vec<_>>(),
            &[
                ("p50".into(), browser_rows.iter().map(|r| r.1).collect()),
                ("p95".into(), browser_rows.iter().map(|r| r.2).collect()),
            ],
        )?;
    }
    let mut report = report_header("console", &environment);
    report.push_str(&format!(
        "\nA tenant of {size} chat events (the `{}` history), fully projected; one client, {repeats} loads of each \
         page after one unmeasured. A load is the page's requests in the order the console makes them (its HTML, \
         script and style, then its API calls), each waited for; the browser's rendering is not timed. \
         Embedder: none (lexical retrieval).\n\n\
         | page | requests | p50 ms | p95 ms |\n|---|---:|---:|---:|\n",
        History::Chat.name()
    ));
    for (name, requests, p50, p95) in &rows {
        report.push_str(&format!("| {name} | {requests} | {p50:.1} | {p95:.1} |\n"));
    }
    match browser {
        Ok((version, rows)) => {
            report.push_str(&format!(
                "\nThe same pages in a real browser ({version}, headless, via chromedriver; 1400×900): {repeats} \
                 loads of each after one unmeasured. A cold load is timed from the navigation's start (the page, its \
                 files, sign-in check, the page's API calls) to the first frame after its data is on screen; an \
                 in-page step from the click or the change of address to that frame.\n\n\
                 | page | p50 ms | p95 ms |\n|---|---:|---:|\n"
            ));
            for (name, p50, p95) in rows {
                report.push_str(&format!("| {name} | {p50:.1} | {p95:.1} |\n"));
            }
        }
        Err(why) => report.push_str(&format!("\nNot measured in a browser: {why:#}.\n")),
    }
    report.push_str(&format!(
        "\nVerify is a background job, not a page load: verifying the {size} events took {:.1} s from queueing to \
         its result.\n",
        verify.as_secs_f64()
    ));
    write_report(out, &report)
}

async fn measure(
    scratch: &ScratchDatabase,
    size: u64,
    repeats: usize,
) -> anyhow::Result<(
    Vec<(&'static str, usize, f64, f64)>,
    anyhow::Result<(String, Vec<(&'static str, f64, f64)>)>,
    Duration,
    String,
)> {
    let pool = db::connect(scratch.options.clone(), 8).await?;
    db::migrate(&pool).await?;
    let environment = environment(&pool).await?;
    let tenant = TenantId::parse(TENANT).expect("valid tenant id");
    let token = tenants::create_tenant(&pool, &tenant, Scope::Admin)
        .await?
        .expose()
        .to_string();
    let daemon = start_daemon(pool.clone(), SemanticConfig::off()).await?;
    load(&pool, &tenant, History::Chat, 0, size).await?;
    wait_projected(&pool).await?;
    let base = daemon.base_url.clone();
    let http = reqwest::Client::new();
    // A seq in the middle of the log, its session and actor, for the
    // paged and filtered views.
    let (middle, middle_id, session, actor, word): (i64, String, String, String, String) =
        sqlx::query_as(
            // The event's longest word: one the text filter finds, rare or not.
            "SELECT seq, event_id, session_id, actor_id,
                    (SELECT w FROM regexp_split_to_table(content->>'text', '[^a-zA-Z]+') AS w
                      ORDER BY length(w) DESC, w LIMIT 1)
               FROM events WHERE tenant_id = $1 ORDER BY seq OFFSET $2 LIMIT 1",
        )
        .bind(TENANT)
        .bind((size / 2) as i64)
        .fetch_one(&pool)
        .await?;
    let get = |path: String| (reqwest::Method::GET, format!("{base}{path}"), None);
    let files = || {
        vec![
            get("/console".into()),
            get("/console/app.js".into()),
            get("/console/app.css".into()),
        ]
    };
    let with_files = |mut calls: Vec<(reqwest::Method, String, Option<Value>)>| {
        let mut all = files();
        all.append(&mut calls);
        all
    };
    let pages = vec![
        Page {
            name: "Log, newest page",
            requests: with_files(vec![
                get("/api/v1/events?limit=1".into()),
                get("/api/v1/openapi.json".into()),
                get("/api/v1/events?order=desc&limit=50".into()),
            ]),
        },
        Page {
            name: "Log, a page in the middle (Older)",
            requests: vec![get(format!(
                "/api/v1/events?order=desc&limit=50&before_seq={middle}"
            ))],
        },
        Page {
            name: "Log, filtered by session",
            requests: vec![get(format!(
                "/api/v1/events?order=desc&limit=50&session_id={session}"
            ))],
        },
        Page {
            name: "Log, filtered by actor",
            requests: vec![get(format!(
                "/api/v1/events?order=desc&limit=50&actor_id={actor}"
            ))],
        },
        Page {
            name: "Log, filtered by text",
            requests: vec![get(format!(
                "/api/v1/events?order=desc&limit=50&text={word}"
            ))],
        },
        Page {
            name: "Event, opened with its chunks",
            requests: vec![
                get(format!("/api/v1/events/{middle_id}")),
                get(format!("/api/v1/events/{middle_id}/chunks")),
            ],
        },
        Page {
            name: "Decisions",
            requests: with_files(vec![
                get("/api/v1/decisions?limit=1000".into()),
                get("/api/v1/tasks?limit=1000".into()),
                get("/api/v1/summaries?limit=200".into()),
            ]),
        },
        Page {
            name: "Bundle explainer, one bundle",
            requests: vec![(
                reqwest::Method::POST,
                format!("{base}/api/v1/acb/build"),
                Some(
                    json!({"session_id": session, "query_text": "what did we decide about the export page size",
                            "max_tokens": 2000, "render": true}),
                ),
            )],
        },
        Page {
            name: "Projections",
            requests: with_files(vec![get("/api/v1/admin/projections".into())]),
        },
        Page {
            name: "API reference",
            requests: vec![
                get("/api/v1/docs".into()),
                get("/console/app.css".into()),
                get("/console/docs.js".into()),
                get("/api/v1/openapi.json".into()),
            ],
        },
    ];
    let mut rows = Vec::new();
    for page in &pages {
        let mut took = Vec::with_capacity(repeats);
        for round in 0..=repeats {
            let started = Instant::now();
            for (method, url, body) in &page.requests {
                let mut request = http.request(method.clone(), url).bearer_auth(&token);
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request.send().await?.error_for_status()?;
                response.bytes().await?;
            }
            if round > 0 {
                took.push(started.elapsed());
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (p50, p95) = (ms(percentile(&took, 50.0)), ms(percentile(&took, 95.0)));
        eprintln!("{}: p50 {p50:.1} ms, p95 {p95:.1} ms", page.name);
        rows.push((page.name, page.requests.len(), p50, p95));
    }
    // Verify, as the console runs it: queue, then poll until done.
    let started = Instant::now();
    let queued: Value = http
        .post(format!("{base}/api/v1/admin/verify"))
        .bearer_auth(&token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let status_url = format!(
        "{base}{}",
        queued["status_url"].as_str().unwrap_or_default()
    );
    loop {
        let job: Value = http
            .get(&status_url)
            .bearer_auth(&token)
            .send()
            .await?
            .json()
            .await?;
        match job["status"].as_str() {
            Some("done") => {
                anyhow::ensure!(
                    job["result"]["ok"] == true,
                    "the chain did not verify: {job}"
                );
                break;
            }
            Some("failed") => anyhow::bail!("verify failed: {job}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let verify = started.elapsed();
    let in_browser = browser_loads(
        &base,
        &token,
        &BrowserCase {
            session,
            actor,
            word,
            event_id: middle_id,
        },
        repeats,
    )
    .await;
    daemon.stop().await?;
    pool.close().await;
    Ok((rows, in_browser, verify, environment))
}

/// What the browser's pages are asked for.
struct BrowserCase {
    session: String,
    actor: String,
    word: String,
    event_id: String,
}

/// How one page is reached in the browser, and when it is done: `ready`
/// is the page's `<body data-ready>` once it has shown what it loaded.
enum Step {
    /// A new document at this path: timed from the navigation's start.
    Cold {
        path: &'static str,
        ready: &'static str,
    },
    /// Script run in the page, first `setup` (untimed, until `set_up`
    /// holds), then `action`, timed until `ready`.
    InPage {
        setup: Option<(String, &'static str)>,
        action: String,
        ready: &'static str,
    },
}

/// Each console page in headless Chromium: the browser's version and, per
/// page, p50 and p95 in ms.
async fn browser_loads(
    base: &str,
    token: &str,
    case: &BrowserCase,
    repeats: usize,
) -> anyhow::Result<(String, Vec<(&'static str, f64, f64)>)> {
    use super::browser::Browser;
    let browser = Browser::start().await?;
    let result = async {
        browser.open(&format!("{base}/console")).await?;
        browser.sign_in(token).await?;
        browser
            .wait_for("document.body.dataset.ready === 'log'")
            .await?;
        let version = browser
            .run("return navigator.userAgent.match(/(?:Headless)?Chrome\\/[0-9.]+/)[0];")
            .await?
            .as_str()
            .unwrap_or("Chromium")
            .replace("HeadlessChrome/", "Chromium ");
        // Leaves the log's filters as given (the rest empty) and submits.
        let filter = |field: &str, value: &str| {
            format!(
                "const form = document.getElementById('log-filters');
                 for (const input of form.querySelectorAll('input')) input.value = '';
                 form.elements.kind.value = '';
                 form.elements['{field}'].value = {value};
                 form.requestSubmit();",
                value = serde_json::Value::from(value)
            )
        };
        let away = Some((
            "location.hash = '#/bundle';".to_owned(),
            "!document.getElementById('bundle').hidden",
        ));
        let steps: Vec<(&'static str, Step)> = vec![
            (
                "Log, newest page (cold: the console opened in a new document)",
                Step::Cold { path: "/console#/log", ready: "log" },
            ),
            (
                "Log, Older (the next page)",
                Step::InPage {
                    setup: None,
                    action: "document.getElementById('log-older').click();".into(),
                    ready: "log",
                },
            ),
            (
                "Log, filtered by session",
                Step::InPage { setup: None, action: filter("session_id", &case.session), ready: "log" },
            ),
            (
                "Log, filtered by actor",
                Step::InPage { setup: None, action: filter("actor_id", &case.actor), ready: "log" },
            ),
            (
                "Log, filtered by text",
                Step::InPage { setup: None, action: filter("text", &case.word), ready: "log" },
            ),
            (
                "Event, opened with its chunks (by link)",
                Step::InPage {
                    setup: away.clone(),
                    action: format!("location.hash = '#/event/{}';", case.event_id),
                    ready: "event",
                },
            ),
            (
                "Decisions",
                Step::InPage {
                    setup: away.clone(),
                    action: "location.hash = '#/decisions';".into(),
                    ready: "decisions",
                },
            ),
            (
                "Bundle explainer, one bundle built and shown",
                Step::InPage {
                    setup: away.clone(),
                    action: format!(
                        "const form = document.getElementById('bundle-form');
                         form.elements.session_id.value = {};
                         form.elements.query_text.value = 'what did we decide about the export page size';
                         form.requestSubmit();",
                        serde_json::Value::from(case.session.as_str())
                    ),
                    ready: "bundle",
                },
            ),
            (
                "Projections",
                Step::InPage {
                    setup: away.clone(),
                    action: "location.hash = '#/projections';".into(),
                    ready: "projections",
                },
            ),
            (
                "API reference (cold)",
                Step::Cold { path: "/api/v1/docs", ready: "docs" },
            ),
        ];
        let mut rows = Vec::new();
        for (name, step) in &steps {
            let mut took = Vec::with_capacity(repeats);
            for round in 0..=repeats {
                let ms = match step {
                    Step::Cold { path, ready } => {
                        browser.open("about:blank").await?;
                        browser.open(&format!("{base}{path}")).await?;
                        browser
                            .run_async(&format!(
                                "(function poll() {{
                                   if (document.body.dataset.ready === '{ready}')
                                     requestAnimationFrame(() => done(performance.now()));
                                   else setTimeout(poll, 2);
                                 }})();"
                            ))
                            .await?
                    }
                    Step::InPage { setup, action, ready } => {
                        if let Some((script, set_up)) = setup {
                            browser.run(script).await?;
                            browser.wait_for(set_up).await?;
                        }
                        browser
                            .run_async(&format!(
                                "document.body.dataset.ready = '';
                                 const started = performance.now();
                                 {action}
                                 (function poll() {{
                                   if (document.body.dataset.ready === '{ready}')
                                     requestAnimationFrame(() => done(performance.now() - started));
                                   else setTimeout(poll, 2);
                                 }})();"
                            ))
                            .await?
                    }
                };
                let ms = ms.as_f64().with_context(|| format!("{name}: no time: {ms}"))?;
                // A page that failed is ready too, and fast: it must not count.
                let shown_errors = browser
                    .run(
                        "return [...document.querySelectorAll('.error')]
                           .filter(e => !e.hidden && e.textContent).map(e => e.textContent);",
                    )
                    .await?;
                anyhow::ensure!(
                    shown_errors == json!([]),
                    "{name}: the page shows an error: {shown_errors}"
                );
                if round > 0 {
                    took.push(Duration::from_secs_f64(ms / 1e3));
                }
            }
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let (p50, p95) = (ms(percentile(&took, 50.0)), ms(percentile(&took, 95.0)));
            eprintln!("browser, {name}: p50 {p50:.1} ms, p95 {p95:.1} ms");
            rows.push((*name, p50, p95));
        }
        Ok((version, rows))
    }
    .await;
    browser.close().await;
    result
}
