//! Bundles from a streaming-replication standby: a real one, made with
//! `pg_basebackup` from a primary of the test's own (both private servers
//! on free ports), then made to lag (replay paused) and to disappear.

use std::time::Duration;

use memd::{
    db::{self, private_server::PrivateServer},
    read::replica::ReplicaConfig,
    startup::ServeConfig,
};
use serde_json::{Value, json};

use crate::helpers::{TestApp, message, spawn_daemon_with, test_keyring, wait_until};

struct Pair {
    app: TestApp,
    token: String,
    standby: PrivateServer,
    // Dropped last: the standby streams from it.
    _primary: PrivateServer,
}

async fn pair(max_lag: Duration, wait: Duration) -> Pair {
    pair_with_metrics(max_lag, wait, None).await
}

async fn pair_with_metrics(max_lag: Duration, wait: Duration, metrics: Option<String>) -> Pair {
    let primary = PrivateServer::create().await.expect("a primary");
    let standby = PrivateServer::standby_of(&primary)
        .await
        .expect("a standby");
    let url = primary.url("memd");
    db::create_database_if_missing(&url)
        .await
        .expect("create memd");
    let app = spawn_daemon_with(
        url.parse().unwrap(),
        ServeConfig {
            keyring: test_keyring(),
            read_replica: Some(ReplicaConfig {
                options: standby.url("memd").parse().unwrap(),
                max_connections: 4,
                max_lag,
                wait,
            }),
            metrics_listen: metrics,
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    Pair {
        app,
        token,
        standby,
        _primary: primary,
    }
}

/// Bundles until one's `provenance.read` satisfies `wanted`, for at most
/// 20 s; returns that bundle.
async fn bundle_until(
    app: &TestApp,
    token: &str,
    body: Value,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    wait_until(Duration::from_secs(20), "the read wanted", async || {
        let acb = app.acb(token, body.clone()).await;
        if wanted(&acb["provenance"]["read"]) {
            Ok(acb)
        } else {
            Err(acb["provenance"]["read"].to_string())
        }
    })
    .await
}

fn holds(acb: &Value, text: &str) -> bool {
    acb.to_string().contains(text)
}

#[tokio::test]
async fn bundles_read_a_standby_that_keeps_up_and_see_the_callers_own_append() {
    let pair = pair_with_metrics(
        Duration::from_secs(5),
        Duration::from_secs(5),
        Some("127.0.0.1:0".into()),
    )
    .await;
    let (app, token) = (&pair.app, pair.token.as_str());
    let appended = app
        .append(token, &message("s1", "The deploy key rotates on Fridays"))
        .await;
    let seq = appended["seq"].as_i64().unwrap();
    let request = json!({"session_id": "s1", "query_text": "when does the deploy key rotate?",
                         "after": seq});
    // The monitor's first measurement takes a moment; then the standby.
    let acb = bundle_until(app, token, request, |read| read["from"] == "standby").await;
    assert!(holds(&acb, "rotates on Fridays"), "{acb}");
    let read = &acb["provenance"]["read"];
    assert!(read["standby_lag_ms"].as_f64().is_some(), "{read}");
    assert!(read["reason"].is_null(), "{read}");

    // Read-your-writes on the standby: each append, then at once a bundle
    // that must hold it, read from the standby.
    for i in 0..5 {
        let text = format!("Fact number {i} for the standby");
        let seq = app.append(token, &message("s1", &text)).await["seq"]
            .as_i64()
            .unwrap();
        let acb = app
            .acb(token, json!({"session_id": "s1", "after": seq}))
            .await;
        assert_eq!(acb["provenance"]["read"]["from"], "standby", "{acb}");
        assert!(holds(&acb, &text), "append {seq} missing: {acb}");
    }

    // Strong consistency: the projections up to the head, on the standby.
    let acb = app
        .acb(
            token,
            json!({"session_id": "s1", "query_text": "deploy key", "consistency": "strong"}),
        )
        .await;
    assert_eq!(acb["provenance"]["read"]["from"], "standby", "{acb}");
    assert_eq!(acb["provenance"]["consistency"]["caught_up"], true, "{acb}");

    // Operators see it in the metrics.
    let scraped = app
        .client
        .get(format!("{}/metrics", app.metrics_url.as_ref().unwrap()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(scraped.contains("\nmemd_standby_readable 1\n"), "{scraped}");
    assert!(scraped.contains("\nmemd_standby_lag_seconds "), "{scraped}");
    let standby_reads: f64 = scraped
        .lines()
        .find_map(|l| l.strip_prefix("memd_bundle_reads_total{from=\"standby\"} "))
        .expect("bundles read on the standby are counted")
        .parse()
        .unwrap();
    assert!(standby_reads >= 7.0, "{scraped}");
}

#[tokio::test]
async fn a_standby_that_lags_or_disappears_sends_bundles_to_the_primary() {
    let wait = Duration::from_millis(300);
    let mut pair = pair(Duration::from_millis(1_000), wait).await;
    let token = pair.token.clone();
    let app = &pair.app;
    app.append(&token, &message("s1", "First words")).await;
    bundle_until(app, &token, json!({"session_id": "s1"}), |read| {
        read["from"] == "standby"
    })
    .await;

    // The standby stops replaying: a bundle that needs a newer append
    // waits its bound, then reads the primary, and says why.
    let standby = db::connect(pair.standby.url("memd").parse().unwrap(), 1)
        .await
        .unwrap();
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&standby)
        .await
        .unwrap();
    let seq = app
        .append(&token, &message("s1", "Written while the standby waits"))
        .await["seq"]
        .as_i64()
        .unwrap();
    let acb = app
        .acb(&token, json!({"session_id": "s1", "after": seq}))
        .await;
    let read = &acb["provenance"]["read"];
    assert_eq!(read["from"], "primary", "{read}");
    assert!(
        read["reason"].as_str().unwrap().contains("did not have"),
        "{read}"
    );
    assert!(
        read["waited_ms"].as_f64().unwrap() >= wait.as_millis() as f64,
        "{read}"
    );
    assert!(holds(&acb, "Written while the standby waits"), "{acb}");

    // Any bundle leaves it once it is further behind than the bound.
    let acb = bundle_until(app, &token, json!({"session_id": "s1"}), |read| {
        read["reason"]
            .as_str()
            .is_some_and(|r| r.contains("behind"))
    })
    .await;
    assert_eq!(acb["provenance"]["read"]["from"], "primary");
    assert!(holds(&acb, "Written while the standby waits"), "{acb}");

    // Replaying again, it is read again.
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&standby)
        .await
        .unwrap();
    standby.close().await;
    bundle_until(app, &token, json!({"session_id": "s1"}), |read| {
        read["from"] == "standby"
    })
    .await;

    // Gone: every bundle still answers, from the primary.
    pair.standby.stop().await.unwrap();
    let acb = bundle_until(app, &token, json!({"session_id": "s1"}), |read| {
        read["from"] == "primary"
    })
    .await;
    assert!(holds(&acb, "Written while the standby waits"), "{acb}");
    for _ in 0..3 {
        let acb = app
            .acb(&token, json!({"session_id": "s1", "query_text": "words"}))
            .await;
        assert_eq!(acb["provenance"]["read"]["from"], "primary", "{acb}");
    }
    pair.app.stop().await;
}

#[tokio::test]
async fn the_log_routes_read_the_standby_and_the_primary_for_what_it_lacks() {
    let pair = pair(Duration::from_secs(60), Duration::from_millis(300)).await;
    let (app, token) = (&pair.app, pair.token.as_str());
    app.append(token, &message("s1", "Replicated before the pause"))
        .await;
    bundle_until(app, token, json!({"session_id": "s1"}), |read| {
        read["from"] == "standby"
    })
    .await;
    let standby = db::connect(pair.standby.url("memd").parse().unwrap(), 1)
        .await
        .unwrap();
    // Wait until the standby has the first event, then stop its replay.
    wait_until(
        Duration::from_secs(20),
        "the event on the standby",
        async || match sqlx::query_scalar::<_, i64>("SELECT count(*) FROM events")
            .fetch_one(&standby)
            .await
            .unwrap()
        {
            0 => Err("no events".to_owned()),
            _ => Ok(()),
        },
    )
    .await;
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&standby)
        .await
        .unwrap();
    let appended = app
        .append(token, &message("s1", "Appended during the pause"))
        .await;
    let event_id = appended["event_id"].as_str().unwrap();

    // A page of the log comes from the standby (within the lag bound): it
    // does not have the new event yet.
    let page: Value = app
        .get("/api/v1/events?session_id=s1", token)
        .await
        .json()
        .await
        .unwrap();
    let texts: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Replicated before the pause"], "{page}");
    // The event by id: not on the standby, so read on the primary.
    let response = app.get(&format!("/api/v1/events/{event_id}"), token).await;
    assert_eq!(response.status(), 200);
    let event: Value = response.json().await.unwrap();
    assert_eq!(event["content"]["text"], "Appended during the pause");

    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&standby)
        .await
        .unwrap();
    // Replayed, the page has it too.
    wait_until(Duration::from_secs(20), "both events paged", async || {
        let page: Value = app
            .get("/api/v1/events?session_id=s1", token)
            .await
            .json()
            .await
            .unwrap();
        if page["events"].as_array().unwrap().len() == 2 {
            Ok(())
        } else {
            Err(page.to_string())
        }
    })
    .await;
}
