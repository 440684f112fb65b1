//! `memd bench console`: what each console page asks the daemon for, timed
//! against a tenant of a large chat history. A page's load is its files
//! plus the API calls it makes on opening; the browser's own rendering is
//! not timed.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{
    harness::{
        ScratchDatabase, environment, percentile, report_header, start_daemon, wait_projected,
        write_report,
    },
    histories::{History, load},
};
use crate::{
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
    let (rows, verify, environment) = result?;
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
) -> anyhow::Result<(Vec<(&'static str, usize, f64, f64)>, Duration, String)> {
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
    let (middle, session, actor): (i64, String, String) = sqlx::query_as(
        "SELECT seq, session_id, actor_id FROM events WHERE tenant_id = $1 ORDER BY seq OFFSET $2 LIMIT 1",
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
            name: "Decisions",
            requests: with_files(vec![
                get("/api/v1/decisions?limit=1000".into()),
                get("/api/v1/tasks?limit=1000".into()),
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
    daemon.stop().await?;
    pool.close().await;
    Ok((rows, verify, environment))
}
