//! Tokens and tenant isolation over every endpoint: the tenant is always the
//! token's; another tenant's ids answer exactly like ids that do not exist;
//! missing, malformed and revoked tokens get 401, lesser scopes 403.

use std::time::{Duration, Instant};

use memd::{calls::rate_limit::RateLimits, domain::tenant::Scope, startup::ServeConfig};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{
    TestApp, event, memd_cli, message, spawn_daemon, spawn_daemon_with, tool_result, wait_projected,
};

/// Every route under `/api/v1`, with a body that is valid for it.
fn endpoints(ids: &Ids) -> Vec<(Method, String, Option<Value>)> {
    let Ids {
        artifact,
        job,
        event,
        chunk,
        ..
    } = ids;
    vec![
        (Method::GET, "/api/v1/events?session_id=a1".into(), None),
        (Method::GET, format!("/api/v1/events/{event}"), None),
        (Method::GET, format!("/api/v1/chunks/{chunk}"), None),
        (
            Method::POST,
            "/api/v1/events".into(),
            Some(message("s9", "hello")),
        ),
        (
            Method::POST,
            "/api/v1/acb/build".into(),
            Some(json!({"query_text": "zebra quartz"})),
        ),
        (
            Method::POST,
            "/api/v1/handoffs".into(),
            Some(json!({"from_agent": "a", "to_agent": "b", "task": "go on"})),
        ),
        (Method::GET, "/api/v1/decisions".into(), None),
        (Method::GET, "/api/v1/policy".into(), None),
        (Method::PUT, "/api/v1/policy".into(), Some(json!({}))),
        (Method::GET, format!("/api/v1/artifacts/{artifact}"), None),
        (Method::POST, "/api/v1/admin/rebuild".into(), None),
        (Method::POST, "/api/v1/admin/drift-check".into(), None),
        (Method::GET, format!("/api/v1/admin/jobs/{job}"), None),
    ]
}

impl TestApp {
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base_url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// Ids of tenant A's memory.
struct Ids {
    artifact: String,
    job: String,
    decision: String,
    /// The first message's event and chunk.
    event: String,
    chunk: String,
}

impl Ids {
    /// The ids in `path`, swapped for ids that never existed.
    fn made_up(&self, path: &str) -> String {
        path.replace(&self.artifact, "art_01M8000000000000000000000")
            .replace(&self.job, "01M8000000000000000000000")
            .replace(&self.event, "evt_01M8000000000000000000000")
            .replace(&self.chunk, "chk_01M8000000000000000000000_0")
    }

    fn in_path(&self, path: &str) -> bool {
        [&self.artifact, &self.job, &self.event, &self.chunk]
            .iter()
            .any(|id| path.contains(id.as_str()))
    }
}

/// Tenant A's memory: a marked message, a decision, a handoff, a large
/// tool output (an artifact), a policy of its own and an admin job.
async fn tenant_a(app: &TestApp, token: &str) -> Ids {
    let said = app
        .append(
            token,
            &message("a1", "the zebra quartz vault code is kept by ops"),
        )
        .await;
    let said = said["event_id"].as_str().unwrap().to_owned();
    let decision = app
        .append(
            token,
            &event(
                "decision",
                json!({"decision": "zebra quartz rotates monthly", "key": "zebra", "scope": "project"}),
                &[&said],
            ),
        )
        .await;
    let decision = decision["event_id"].as_str().unwrap().to_owned();
    let (status, _) = app
        .call(
            Method::POST,
            "/api/v1/handoffs",
            Some(token),
            Some(
                &json!({"from_agent": "a", "to_agent": "b", "session_id": "a-handoff",
                          "task": "zebra quartz follow-up"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let output: String = (0..4000)
        .map(|i| format!("zebra quartz line {i}\n"))
        .collect();
    let tool = app.append(token, &tool_result("vault.log", &output)).await;
    let artifact: String = sqlx::query_scalar("SELECT artifact_id FROM events WHERE event_id = $1")
        .bind(tool["event_id"].as_str().unwrap())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let (status, _) = app
        .call(
            Method::PUT,
            "/api/v1/policy",
            Some(token),
            Some(&json!({"max_tokens": 3000})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, job) = app
        .call(Method::POST, "/api/v1/admin/rebuild", Some(token), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    wait_projected(&app.pool, "acme").await;
    let chunk: String =
        sqlx::query_scalar("SELECT chunk_id FROM projections.chunks WHERE event_id = $1")
            .bind(&said)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    Ids {
        artifact,
        job: job["job_id"].as_str().unwrap().to_owned(),
        decision,
        event: said,
        chunk,
    }
}

#[sqlx::test]
async fn another_tenant_sees_nothing_of_a_tenant_on_any_endpoint(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let acme = app.tenant("acme").await;
    let globex = app.tenant("globex").await;
    let ids = tenant_a(&app, &acme).await;
    let decision = ids.decision.clone();
    app.append(
        &globex,
        &message("g1", "globex talks about zebra quartz too"),
    )
    .await;
    wait_projected(&app.pool, "globex").await;

    for (method, path, body) in endpoints(&ids) {
        let (status, response) = app
            .call(method.clone(), &path, Some(&globex), body.as_ref())
            .await;
        let text = response.to_string();
        for leaked in ["vault", "monthly", "acme", &decision, "a-handoff"] {
            assert!(
                !text.contains(leaked),
                "{method} {path} showed globex {leaked:?} of acme: {text}"
            );
        }
        if ids.in_path(&path) {
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
            // Exactly what an id that never existed gets.
            let made_up = ids.made_up(&path);
            let (status_missing, missing) = app.call(method, &made_up, Some(&globex), None).await;
            assert_eq!(status_missing, StatusCode::NOT_FOUND);
            assert_eq!(
                missing["error"]["code"], response["error"]["code"],
                "{path}: another tenant's id must look missing"
            );
        } else {
            assert!(status.is_success(), "{method} {path}: {status} {response}");
        }
    }
    let (_, policy) = app
        .call(Method::GET, "/api/v1/policy", Some(&globex), None)
        .await;
    assert_eq!(policy["max_tokens"], 65_000, "acme's policy is its own");
    let (status, refused) = app
        .call(
            Method::POST,
            "/api/v1/handoffs",
            Some(&globex),
            Some(&json!({"from_agent": "a", "to_agent": "b", "task": "t",
                          "decision_ids": [decision]})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "acme's decision is unknown to globex"
    );
    assert_eq!(refused["error"]["field"], "decision_ids[0]");
}

#[sqlx::test]
async fn every_endpoint_refuses_missing_malformed_and_unknown_tokens_and_lesser_scopes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let admin = app.tenant("acme").await;
    let reader = app.tenant_with_scope("readers", Scope::Read).await;
    let writer = app.tenant_with_scope("writers", Scope::Write).await;
    let ids = tenant_a(&app, &admin).await;
    let events_before = app.count("SELECT count(*) FROM events").await;

    for (method, path, body) in endpoints(&ids) {
        for token in [
            None,
            Some("nonsense"),
            Some("memd_0000000000000000000000000000000000000000000000000000000000000000"),
        ] {
            let (status, response) = app.call(method.clone(), &path, token, body.as_ref()).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} {token:?}"
            );
            assert_eq!(response["error"]["code"], "unauthorized");
        }
        // Scopes: read < write < admin.
        let needs = match (method.as_str(), path.as_str()) {
            ("POST", "/api/v1/events" | "/api/v1/handoffs") => Scope::Write,
            ("PUT", _) => Scope::Admin,
            (_, p) if p.starts_with("/api/v1/admin") => Scope::Admin,
            _ => Scope::Read,
        };
        for (token, scope) in [(&reader, Scope::Read), (&writer, Scope::Write)] {
            let (status, response) = app
                .call(method.clone(), &path, Some(token), body.as_ref())
                .await;
            if scope < needs {
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} as {scope:?}"
                );
                assert_eq!(response["error"]["code"], "insufficient_scope");
            } else {
                assert_ne!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} as {scope:?}"
                );
                assert_ne!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} as {scope:?}"
                );
            }
        }
    }
    let events_after = app.count("SELECT count(*) FROM events").await;
    // Only the writer's event and handoff landed, in its own tenant.
    assert_eq!(events_after, events_before + 2);
}

#[sqlx::test]
async fn a_revoked_token_is_refused_by_every_daemon_on_the_database_at_once(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // Caches that would trust a resolved token for ten minutes: only the
    // revocation notice can make the daemons refuse it sooner.
    let trusting = || ServeConfig {
        token_cache_ttl: Duration::from_secs(600),
        keyring: crate::helpers::test_keyring(),
        ..ServeConfig::default()
    };
    let first = spawn_daemon_with(connect.clone(), trusting()).await;
    let second = spawn_daemon_with(connect, trusting()).await;
    let token = first.tenant("acme").await;
    for app in [&first, &second] {
        app.append(&token, &message("s1", "cached now")).await;
    }
    let url = first.database_url().await;
    let (code, _, stderr) = memd_cli(&url, &["tenant", "revoke", &token]).await;
    assert_eq!(code, 0, "{stderr}");
    for app in [&first, &second] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, _) = app.post_events(&token, &message("s1", "after")).await;
            if status == StatusCode::UNAUTHORIZED {
                break;
            }
            assert_eq!(status, StatusCode::CREATED);
            assert!(
                Instant::now() < deadline,
                "a revoked token still works on {}",
                app.base_url
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[sqlx::test]
async fn revoked_tokens_stop_working_and_rotation_keeps_the_tenant_reachable(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let url = app.database_url().await;
    let (code, first, stderr) = memd_cli(&url, &["tenant", "create", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    let first = first.trim().to_owned();
    app.append(&first, &message("s1", "before rotation")).await;

    let (code, second, stderr) =
        memd_cli(&url, &["tenant", "token", "acme", "--scope", "read"]).await;
    assert_eq!(code, 0, "{stderr}");
    let second = second.trim().to_owned();
    let (code, stdout, stderr) = memd_cli(&url, &["tenant", "revoke", &first]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("acme"), "{stdout}");
    // The daemon had the first token cached; the revocation notice makes it
    // refuse it.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = app.post_events(&first, &message("s1", "after")).await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert_eq!(status, StatusCode::CREATED);
        assert!(Instant::now() < deadline, "a revoked token still works");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = app
        .call(Method::GET, "/api/v1/decisions", Some(&second), None)
        .await;
    assert_eq!(status, StatusCode::OK, "the new token still works");

    let (code, _, stderr) = memd_cli(&url, &["tenant", "revoke", &first]).await;
    assert_ne!(code, 0, "revoking twice is reported");
    assert!(stderr.contains("no active token"), "{stderr}");
    let (code, _, stderr) = memd_cli(&url, &["tenant", "revoke", "not-a-token"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("not a memd token"), "{stderr}");

    let (code, stdout, stderr) =
        memd_cli(&url, &["tenant", "revoke", "--all", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("revoked 1 token(s) of acme"), "{stdout}");
    let (code, _, _) = memd_cli(&url, &["tenant", "token", "nobody"]).await;
    assert_ne!(code, 0, "no tokens for tenants that do not exist");
}

#[sqlx::test]
async fn a_tenant_over_its_rate_gets_429_with_retry_after_and_others_do_not(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // 2 requests/s (bursts of 4) and 2000 bytes/s (bursts of 4000).
    let config = ServeConfig {
        rate_limits: RateLimits::new(2.0, 2_000.0),
        ..ServeConfig::default()
    };
    let app = spawn_daemon_with(connect, config).await;
    let acme = app.tenant("acme").await;
    let globex = app.tenant("globex").await;

    let mut admitted: i64 = 0;
    let refused = loop {
        let (status, response) = app.post_events(&acme, &message("s1", "hi")).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            break response;
        }
        assert_eq!(status, StatusCode::CREATED);
        admitted += 1;
        assert!(admitted <= 5, "the burst of 4 was not enforced");
    };
    assert!(
        admitted >= 4,
        "the burst is 4 requests, {admitted} admitted"
    );
    assert_eq!(refused["error"]["code"], "rate_limited");
    let response = app.get("/api/v1/decisions", &acme).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    // MCP shares the tenant's budget.
    let response = app
        .client
        .post(format!("{}/mcp", app.base_url))
        .bearer_auth(&acme)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        app.count("SELECT count(*) FROM events").await,
        admitted,
        "a refused append stores nothing"
    );
    let (status, _) = app.post_events(&globex, &message("g1", "hi")).await;
    assert_eq!(status, StatusCode::CREATED, "globex has its own budget");

    // After Retry-After, acme is admitted again.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let (status, _) = app.post_events(&acme, &message("s1", "again")).await;
    assert_eq!(status, StatusCode::CREATED);

    // Bytes: one 6 KB body goes through, then the balance is 4000 - 6000
    // and globex waits about a second before its next request.
    let (status, _) = app
        .post_events(&globex, &message("g1", &"x".repeat(6_000)))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let response = app.get("/api/v1/policy", &globex).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
}

#[sqlx::test]
async fn two_daemons_on_one_database_serve_the_same_tenants(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // Each with its own pool, projector workers, caches and token cache:
    // what two `memd serve` processes share is only the database.
    let a = spawn_daemon(connect.clone()).await;
    let b = spawn_daemon(connect).await;
    let token = a.tenant("acme").await;

    // Concurrent appends through both: one gap-free, hash-chained log.
    let writer = |app: &'static str, daemon: &TestApp| {
        let token = token.clone();
        let base = daemon.base_url.clone();
        let client = daemon.client.clone();
        async move {
            for i in 0..20 {
                let response = client
                    .post(format!("{base}/api/v1/events"))
                    .bearer_auth(&token)
                    .json(&message(
                        "s1",
                        &format!("turn {i} via {app} about the ledger"),
                    ))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::CREATED);
            }
        }
    };
    tokio::join!(writer("a", &a), writer("b", &b));
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM events ORDER BY seq")
        .fetch_all(&a.pool)
        .await
        .unwrap();
    assert_eq!(seqs, (1..=40).collect::<Vec<i64>>());
    let reports = memd::audit::verify_chains(&a.pool, None).await.unwrap();
    assert!(reports.iter().all(|r| r.broken.is_none()), "{reports:?}");

    // Both daemons' workers projected it, each event exactly once.
    wait_projected(&a.pool, "acme").await;
    assert_eq!(
        b.count("SELECT count(*) FROM projections.chunks").await,
        40,
        "no event applied twice"
    );

    // What one daemon stored, the other serves at once (recent window from
    // the log) and after projection (retrieval).
    let said = a
        .append(
            &token,
            &message("s2", "the zebra quartz runbook lives in ops/"),
        )
        .await;
    let acb = b
        .acb(
            &token,
            json!({"session_id": "s2", "query_text": "zebra quartz"}),
        )
        .await;
    assert!(acb.to_string().contains(said["event_id"].as_str().unwrap()));

    // A policy changed through one daemon reaches the other's cache.
    let (status, _) = a
        .call(
            Method::PUT,
            "/api/v1/policy",
            Some(&token),
            Some(&json!({"max_tokens": 5000})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.acb(&token, json!({"query_text": "zebra"})).await["budget_tokens"] != 5000 {
        assert!(Instant::now() < deadline, "b kept the old policy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
