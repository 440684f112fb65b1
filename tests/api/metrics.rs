//! `GET /metrics` as Prometheus reads it: scraped from the daemon's metrics
//! listener and parsed by the Prometheus project's own (strict) OpenMetrics
//! parser, the Python `prometheus_client`, then checked against what the
//! test did.

use std::{collections::HashMap, path::PathBuf, time::Duration};

use memd::{calls::rate_limit::RateLimits, startup::ServeConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon_with, test_keyring, wait_projected};

/// The parser's package, pinned.
const PROMETHEUS_CLIENT: &str = "prometheus-client==0.26.0";

/// A Python with `prometheus_client` (a virtualenv under the target
/// directory, made on first use, as `memd drill fuzz` makes its own).
///
/// Several tests ask for it at once, each in its own process: each builds
/// into a folder of its own and renames it into place, so none runs a venv
/// another is still filling (renaming onto a finished one fails, and the
/// loser's copy is dropped).
async fn parser_python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("metrics-parser-venv");
    let python = venv.join("bin").join("python");
    if venv.join(".installed").exists() {
        return python;
    }
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let made = tokio::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&building)
        .status()
        .await
        .expect("python3 -m venv");
    assert!(made.success(), "python3 -m venv {}", building.display());
    // `python -m pip`, not `bin/pip`: the script's first line names the
    // building folder, which the rename below takes away.
    let pip = tokio::process::Command::new(building.join("bin").join("python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PROMETHEUS_CLIENT,
        ])
        .status()
        .await
        .expect("pip install");
    assert!(pip.success(), "pip install {PROMETHEUS_CLIENT}");
    std::fs::write(building.join(".installed"), PROMETHEUS_CLIENT).expect("mark the venv");
    if std::fs::rename(&building, &venv).is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    assert!(
        venv.join(".installed").exists(),
        "{} was not made",
        venv.display()
    );
    python
}

/// One sample as the parser read it: (name, labels) → value.
type Samples = HashMap<(String, Vec<(String, String)>), f64>;

/// `text` through `prometheus_client.openmetrics.parser`, which raises on
/// anything the format does not allow; panics with its complaint.
async fn parse(text: &str) -> (Samples, HashMap<String, String>) {
    let script = "import json, sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        out = {'samples': [], 'types': {}}\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   out['types'][family.name] = family.type\n\
        \x20   for s in family.samples:\n\
        \x20       out['samples'].append([s.name, sorted(s.labels.items()), s.value])\n\
        print(json.dumps(out))\n";
    let mut child = tokio::process::Command::new(parser_python().await)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the parser");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).await.expect("write");
    }
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the parser finished")
        .expect("parser output");
    assert!(
        output.status.success(),
        "Prometheus' parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Value = serde_json::from_slice(&output.stdout).expect("parser JSON");
    let samples = parsed["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            let labels = s[1]
                .as_array()
                .expect("labels")
                .iter()
                .map(|pair| {
                    (
                        pair[0].as_str().unwrap().to_owned(),
                        pair[1].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            (
                (s[0].as_str().unwrap().to_owned(), labels),
                s[2].as_f64().unwrap(),
            )
        })
        .collect();
    let types = parsed["types"]
        .as_object()
        .expect("types")
        .iter()
        .map(|(name, kind)| (name.clone(), kind.as_str().unwrap().to_owned()))
        .collect();
    (samples, types)
}

/// The value of sample `name` with exactly `labels`.
fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    samples.get(&(name.to_owned(), labels)).copied()
}

/// The sum of every sample called `name` whose labels include `having`.
fn total(samples: &Samples, name: &str, having: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|((n, labels), _)| {
            n == name
                && having
                    .iter()
                    .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(url: &str) -> String {
    let response = reqwest::get(format!("{url}/metrics"))
        .await
        .expect("scrape");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    response.text().await.expect("body")
}

#[sqlx::test]
async fn metrics_count_appends_bundles_refusals_and_read_lag_from_the_database(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(
        connect,
        ServeConfig {
            keyring: test_keyring(),
            metrics_listen: Some("127.0.0.1:0".into()),
            // Bursts of 10 requests, 5 a second after: the test's requests
            // fit, a flood at the end is refused.
            rate_limits: RateLimits::new(5.0, 0.0),
            ..ServeConfig::default()
        },
    )
    .await;
    let metrics_url = app.metrics_url.clone().expect("a metrics listener");
    let token = app.tenant("acme").await;

    // Three stored events in two requests, one idempotent replay, one refusal.
    app.append(&token, &message("s1", "we chose PostgreSQL for the queue"))
        .await;
    let mut keyed = message("s1", "the export runs nightly");
    keyed["idempotency_key"] = json!("k1");
    app.append(
        &token,
        &json!({"events": [keyed.clone(), message("s1", "page sizes are 500 rows")]}),
    )
    .await;
    let (status, _) = app.post_events(&token, &keyed).await;
    assert_eq!(status, StatusCode::OK, "a replay");
    let (status, _) = app.post_events(&token, &json!({"session_id": "s1"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Two bundles: the fast path and a question.
    for body in [
        json!({"session_id": "s1", "intent": "continue", "max_tokens": 2000}),
        json!({"session_id": "s2", "query_text": "which database for the queue?", "max_tokens": 2000}),
    ] {
        let response = app
            .client
            .post(format!("{}/api/v1/acb/build", app.base_url))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    wait_projected(&app.pool, "acme").await;

    let (samples, types) = parse(&scrape(&metrics_url).await).await;
    let ok = [("outcome", "ok")];
    assert_eq!(
        value(&samples, "memd_append_requests_total", &ok),
        Some(2.0)
    );
    assert_eq!(
        value(
            &samples,
            "memd_append_requests_total",
            &[("outcome", "replayed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "memd_append_requests_total",
            &[("outcome", "refused")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "memd_appended_events_total", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "memd_append_duration_seconds_count", &[]),
        Some(3.0)
    );
    assert_eq!(types["memd_append_duration_seconds"], "histogram");
    // Both bundles built; each is fast, retrieval or cold (first of the tenant).
    assert_eq!(
        total(&samples, "memd_bundle_duration_seconds_count", &ok),
        2.0
    );
    assert_eq!(
        total(&samples, "memd_bundle_cache_total", &[]),
        2.0,
        "every bundle is a hit or a miss"
    );
    assert!(value(&samples, "memd_bundle_tokens_budget_total", &[]) == Some(4000.0));
    assert!(value(&samples, "memd_bundle_tokens_used_total", &[]).unwrap() > 0.0);
    // Read from the database: the log and the caught-up projections.
    assert_eq!(value(&samples, "memd_log_events", &[]), Some(3.0));
    assert_eq!(value(&samples, "memd_tenants", &[]), Some(1.0));
    for projection in ["chunks", "decisions", "tasks", "views", "handoffs"] {
        let labels = [("projection", projection)];
        assert_eq!(
            value(&samples, "memd_projection_lag_events", &labels),
            Some(0.0),
            "{projection}"
        );
        assert_eq!(
            value(&samples, "memd_projection_lag_seconds", &labels),
            Some(0.0)
        );
    }
    assert_eq!(
        value(&samples, "memd_db_pool_max_connections", &[]),
        Some(20.0)
    );
    assert!(value(&samples, "memd_db_pool_connections", &[("state", "idle")]).is_some());
    // Single events without an idempotency key have a pool of their own
    // (planned once, `db::for_appends`), and it has served this test's first.
    let appends_open = value(
        &samples,
        "memd_db_append_pool_connections",
        &[("state", "idle")],
    )
    .unwrap_or(0.0)
        + value(
            &samples,
            "memd_db_append_pool_connections",
            &[("state", "in_use")],
        )
        .unwrap_or(0.0);
    assert!(
        appends_open >= 1.0,
        "the append pool has {appends_open} connections"
    );
    assert_eq!(
        value(&samples, "memd_rate_limited_requests_total", &[]),
        None
    );

    // A flood past the burst is refused, and counted.
    let mut refused = 0;
    for _ in 0..20 {
        if app.get("/api/v1/views", &token).await.status() == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        }
    }
    assert!(refused > 0);
    let (samples, _) = parse(&scrape(&metrics_url).await).await;
    assert_eq!(
        value(&samples, "memd_rate_limited_requests_total", &[]),
        Some(f64::from(refused))
    );
}

#[sqlx::test]
async fn a_lagging_projection_shows_its_lag_and_metrics_stay_off_the_api_port(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // No projectors in this daemon: what it appends stays unprojected.
    let app = spawn_daemon_with(
        connect,
        ServeConfig {
            keyring: test_keyring(),
            metrics_listen: Some("127.0.0.1:0".into()),
            metrics_tenant_labels: true,
            projection: None,
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    for text in ["one", "two", "three"] {
        app.append(&token, &message("s1", text)).await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (samples, _) = parse(&scrape(app.metrics_url.as_deref().unwrap()).await).await;
    let labels = [("projection", "chunks"), ("tenant", "acme")];
    assert_eq!(
        value(&samples, "memd_projection_lag_events", &labels),
        Some(3.0)
    );
    let seconds = value(&samples, "memd_projection_lag_seconds", &labels).unwrap();
    assert!(
        seconds >= 1.0,
        "the oldest unprojected event's age: {seconds}"
    );
    assert_eq!(
        value(
            &samples,
            "memd_append_requests_total",
            &[("outcome", "ok"), ("tenant", "acme")]
        ),
        Some(3.0)
    );

    // The API listener does not serve them, with or without a token: no
    // tenant's token may read every tenant's figures.
    let response = app.get("/metrics", &token).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
