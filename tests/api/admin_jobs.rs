//! Rebuild and drift check as background jobs over HTTP: queued with
//! apalis, run by the daemon's job worker, status readable by the tenant
//! that queued them and by nobody else.

use std::time::Duration;

use memd::domain::tenant::Scope;
use memd_projectors::{Schema, rebuild};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{TestApp, event, message, spawn_daemon, wait_projected, wait_until};

impl TestApp {
    pub async fn post_admin(
        &self,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .post(format!("{}/api/v1/admin/{path}", self.base_url))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `POST /api/v1/admin/erase` with `body`, then its rebuild job, which
    /// must finish: the erasure's answer.
    pub async fn erase_and_rebuild(&self, token: &str, body: Value) -> Value {
        let (status, erased) = self.post_admin("erase", token, Some(body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{erased}");
        let job = self
            .wait_job(token, erased["rebuild"]["job_id"].as_str().unwrap())
            .await;
        assert_eq!(job["status"], "done", "{job}");
        erased
    }

    /// Polls the job until it is done or failed.
    pub async fn wait_job(&self, token: &str, job_id: &str) -> Value {
        wait_until(
            Duration::from_secs(60),
            "the job done or failed",
            async || {
                let response = self
                    .get(&format!("/api/v1/admin/jobs/{job_id}"), token)
                    .await;
                assert_eq!(response.status(), StatusCode::OK);
                let job: Value = response.json().await.unwrap();
                if job["status"] == "done" || job["status"] == "failed" {
                    Ok(job)
                } else {
                    Err(job.to_string())
                }
            },
        )
        .await
    }
}

async fn history(app: &TestApp, token: &str) {
    let said = app
        .append(token, &message("s1", "which queue do we use?"))
        .await;
    let evidence = [said["event_id"].as_str().unwrap()];
    app.append(
        token,
        &event(
            "decision",
            json!({"decision": "Use PostgreSQL as the queue", "key": "queue", "scope": "project"}),
            &evidence,
        ),
    )
    .await;
    app.append(
        token,
        &event(
            "task_update",
            json!({"task_id": "T1", "status": "doing"}),
            &[],
        ),
    )
    .await;
}

#[sqlx::test]
async fn a_rebuild_job_replays_the_callers_tenant_and_reports_its_rate(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    history(&app, &token).await;
    wait_projected(&app.pool, "acme").await;
    let engine = memd::startup::ProjectionConfig::default().engine();
    let before = rebuild::digests(&app.pool, &engine, &Schema::live(), "acme")
        .await
        .unwrap();

    let (status, queued) = app.post_admin("rebuild", &token, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    assert_eq!(queued["kind"], "rebuild");
    let job_id = queued["job_id"].as_str().unwrap();
    assert_eq!(queued["status_url"], format!("/api/v1/admin/jobs/{job_id}"));
    let job = app.wait_job(&token, job_id).await;
    assert_eq!(job["status"], "done", "{job}");
    assert_eq!(job["result"]["events"], 3, "{job}");
    assert_eq!(job["result"]["tenant"], "acme");
    assert!(job["result"]["events_per_second"].as_f64().unwrap() > 0.0);
    assert!(job["finished_at"].is_string(), "{job}");
    assert_eq!(
        rebuild::digests(&app.pool, &engine, &Schema::live(), "acme")
            .await
            .unwrap(),
        before
    );

    // Only some projectors.
    let (status, queued) = app
        .post_admin("rebuild", &token, Some(json!({"projectors": ["tasks"]})))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let job = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["result"]["projectors"], json!(["tasks"]), "{job}");
}

/// Found by the fuzz drill: dozens of jobs queued at once ran at once, their
/// `VACUUM`s queued on each other's locks, each holding a connection, and
/// the daemon's other requests got 503s. Jobs now run one at a time.
#[sqlx::test]
async fn many_jobs_queued_at_once_all_finish_while_requests_are_served(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    history(&app, &token).await;
    let mut jobs = Vec::new();
    for i in 0..24 {
        let path = if i % 2 == 0 { "rebuild" } else { "drift-check" };
        let (status, queued) = app.post_admin(path, &token, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
        jobs.push(queued["job_id"].as_str().unwrap().to_owned());
        let tasks = app.get("/api/v1/tasks", &token).await;
        assert_eq!(tasks.status(), StatusCode::OK);
    }
    for job_id in jobs {
        let job = app.wait_job(&token, &job_id).await;
        assert_eq!(job["status"], "done", "{job}");
    }
}

#[sqlx::test]
async fn a_drift_check_job_reports_tampered_rows(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    history(&app, &token).await;
    wait_projected(&app.pool, "acme").await;

    let (status, queued) = app.post_admin("drift-check", &token, Some(json!({}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let job = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["result"]["drifted"], false, "{job}");

    sqlx::query("UPDATE projections.tasks SET status = 'done' WHERE tenant_id = 'acme'")
        .execute(&app.pool)
        .await
        .unwrap();
    let (_, queued) = app.post_admin("drift-check", &token, None).await;
    let job = app
        .wait_job(&token, queued["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["status"], "done", "{job}");
    assert_eq!(job["result"]["drifted"], true, "{job}");
    let text = job["result"]["text"].as_str().unwrap();
    assert!(text.contains("~ tasks [\"acme\",\"T1\"]"), "{text}");
    assert!(
        text.contains("status: live \"done\" != rebuilt \"doing\""),
        "{text}"
    );
}

#[sqlx::test]
async fn admin_jobs_refuse_bad_input_other_tenants_and_lesser_scopes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let writer = app.tenant_with_scope("writer", Scope::Write).await;

    let (status, body) = app
        .post_admin(
            "rebuild",
            &token,
            Some(json!({"projectors": ["chunks", "vectors"]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "projectors[1]");
    let (status, body) = app
        .post_admin("drift-check", &token, Some(json!({"tenant": "other"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "tenant");
    // A struct would read from an array of its fields (found by schemathesis).
    for path in ["rebuild", "drift-check"] {
        let (status, body) = app.post_admin(path, &token, Some(json!([]))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["field"], "body", "{path}");
    }
    let (status, body) = app.post_admin("rebuild", &writer, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_scope");

    let (_, queued) = app.post_admin("drift-check", &token, None).await;
    let job_id = queued["job_id"].as_str().unwrap();
    let theirs = app
        .get(&format!("/api/v1/admin/jobs/{job_id}"), &other)
        .await;
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND);
    let missing = app
        .get("/api/v1/admin/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", &token)
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let theirs: Value = theirs.json().await.unwrap();
    let missing: Value = missing.json().await.unwrap();
    assert_eq!(theirs["error"]["code"], missing["error"]["code"]);
    app.wait_job(&token, job_id).await;
}

#[sqlx::test]
async fn projections_report_their_cursor_version_and_lag_to_admins_only(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let reader = app.tenant_with_scope("reader", Scope::Read).await;
    history(&app, &token).await;
    wait_projected(&app.pool, "acme").await;
    let response = app.get("/api/v1/admin/projections", &token).await;
    assert_eq!(response.status(), StatusCode::OK);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["head_seq"], 3, "{status}");
    let names: Vec<&str> = status["projections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, memd_projectors::projections::NAMES);
    for projection in status["projections"].as_array().unwrap() {
        assert_eq!(projection["cursor_seq"], 3, "{status}");
        assert_eq!(projection["lag"], 0, "{status}");
        assert!(projection["version"].as_i64().unwrap() >= 1, "{status}");
    }
    let refused = app.get("/api/v1/admin/projections", &reader).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
}
