//! Many writers at once: per-tenant sequences stay gap-free, every
//! acknowledged event is stored exactly once, and the chains verify.

use std::collections::{HashMap, HashSet};

use memd::audit::verify_chains;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon};

const WRITERS: usize = 32;
const APPENDS_PER_WRITER: usize = 15;

async fn hammer(connect: PgConnectOptions, tenant_count: usize) {
    let app = spawn_daemon(connect).await;
    let mut tokens = Vec::new();
    for t in 0..tenant_count {
        tokens.push(app.tenant(&format!("tenant-{t}")).await);
    }
    let tasks: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (client, url) = (app.client.clone(), format!("{}/api/v1/events", app.base_url));
            let tenant = writer % tenant_count;
            let token = tokens[tenant].clone();
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0..APPENDS_PER_WRITER {
                    // Every third request is a small batch, so singles and batches interleave.
                    let body = if i % 3 == 0 {
                        json!({"events": [message("s", &format!("w{writer} i{i} a")), message("s", &format!("w{writer} i{i} b"))]})
                    } else {
                        message("s", &format!("w{writer} i{i}"))
                    };
                    let response = client.post(&url).bearer_auth(&token).json(&body).send().await.unwrap();
                    assert!(response.status().is_success(), "{}", response.status());
                    let body: serde_json::Value = response.json().await.unwrap();
                    let items = body.get("events").and_then(|e| e.as_array()).cloned().unwrap_or_else(|| vec![body]);
                    for item in items {
                        acknowledged.push((tenant, item["event_id"].as_str().unwrap().to_string(), item["seq"].as_i64().unwrap()));
                    }
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }

    let ids: HashSet<&String> = acknowledged.iter().map(|(_, id, _)| id).collect();
    assert_eq!(
        ids.len(),
        acknowledged.len(),
        "every acknowledgement names a distinct event"
    );
    let mut per_tenant: HashMap<usize, Vec<i64>> = HashMap::new();
    for (tenant, _, seq) in &acknowledged {
        per_tenant.entry(*tenant).or_default().push(*seq);
    }
    for (tenant, mut seqs) in per_tenant {
        seqs.sort_unstable();
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, expected, "tenant-{tenant} acknowledged seqs are 1..N");
        let stored: Vec<i64> =
            sqlx::query_scalar("SELECT seq FROM events WHERE tenant_id = $1 ORDER BY seq")
                .bind(format!("tenant-{tenant}"))
                .fetch_all(&app.pool)
                .await
                .unwrap();
        assert_eq!(
            stored, expected,
            "tenant-{tenant} stored seqs are 1..N, no gap, no duplicate"
        );
    }
    for (tenant, event_id, seq) in &acknowledged {
        let stored: (String, i64) =
            sqlx::query_as("SELECT tenant_id, seq FROM events WHERE event_id = $1")
                .bind(event_id)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        assert_eq!(stored, (format!("tenant-{tenant}"), *seq));
    }
    assert_eq!(
        app.count("SELECT count(*) FROM events").await as usize,
        acknowledged.len()
    );
    let reports = verify_chains(&app.pool, None).await.unwrap();
    assert!(reports.iter().all(|r| r.broken.is_none()), "{reports:?}");
}

#[sqlx::test]
async fn thirty_two_writers_on_one_tenant(_: PgPoolOptions, connect: PgConnectOptions) {
    hammer(connect, 1).await;
}

#[sqlx::test]
async fn thirty_two_writers_over_five_tenants(_: PgPoolOptions, connect: PgConnectOptions) {
    hammer(connect, 5).await;
}

/// Two daemons on one database append to the same tenant in turn: each
/// daemon's remembered head goes stale whenever the other appends, and the
/// log must still come out gap-free, time-ordered and verifiable, with an
/// idempotency key honoured across the two.
#[sqlx::test]
async fn two_daemons_taking_turns_on_one_tenant(_: PgPoolOptions, connect: PgConnectOptions) {
    let first = spawn_daemon(connect.clone()).await;
    let second = spawn_daemon(connect).await;
    let token = first.tenant("acme").await;
    let mut acknowledged = Vec::new();
    for round in 0..6 {
        for (name, app) in [("first", &first), ("second", &second)] {
            let body = if round % 2 == 0 {
                message("s", &format!("{name} round {round}"))
            } else {
                json!({"events": [message("s", &format!("{name} {round} a")), message("s", &format!("{name} {round} b"))]})
            };
            let answer = app.append(&token, &body).await;
            let items = answer["events"]
                .as_array()
                .cloned()
                .unwrap_or_else(|| vec![answer]);
            acknowledged.extend(items.iter().map(|item| item["seq"].as_i64().unwrap()));
        }
    }
    let keyed = json!({"session_id": "s", "channel": "private", "actor": {"type": "agent", "id": "a"},
                       "kind": "message", "content": {"text": "once"}, "idempotency_key": "k-1"});
    let original = first.append(&token, &keyed).await;
    let replay = second.append(&token, &keyed).await;
    assert_eq!(
        replay["event_id"], original["event_id"],
        "the key was taken by the other daemon"
    );
    assert_eq!(replay["replayed"], json!(true));
    let again = first.append(&token, &keyed).await;
    assert_eq!(again["event_id"], original["event_id"]);
    acknowledged.push(original["seq"].as_i64().unwrap());

    let expected: Vec<i64> = (1..=acknowledged.len() as i64).collect();
    assert_eq!(acknowledged, expected, "each daemon extends the true head");
    let times: Vec<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT created_at FROM events WHERE tenant_id = 'acme' ORDER BY seq")
            .fetch_all(&first.pool)
            .await
            .unwrap();
    assert_eq!(times.len(), expected.len());
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "created_at never goes back: {times:?}"
    );
    let reports = verify_chains(&first.pool, None).await.unwrap();
    assert!(reports.iter().all(|r| r.broken.is_none()), "{reports:?}");
}
