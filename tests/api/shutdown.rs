//! Graceful shutdown: appends in flight when the stop comes are finished,
//! answered and stored; none is acknowledged and lost.

use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon};

#[sqlx::test]
async fn appends_in_flight_finish_when_the_daemon_stops(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    // No connection reuse: a request either reached the daemon on its own
    // connection before the stop, or could not connect at all.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let (first_done, mut first_done_rx) = tokio::sync::mpsc::channel::<()>(64);
    let requests: Vec<_> = (0..64)
        .map(|i| {
            let (client, token, done) = (client.clone(), token.clone(), first_done.clone());
            let url = format!("{}/api/v1/events", app.base_url);
            tokio::spawn(async move {
                let body = message("s", &format!("in flight {i} {}", "x".repeat(20_000)));
                let result = client.post(url).bearer_auth(token).json(&body).send().await;
                let _ = done.send(()).await;
                match result {
                    Ok(response) => {
                        assert!(response.status().is_success(), "{}", response.status());
                        let body: Value = response.json().await.expect("a complete answer");
                        Some(body["event_id"].as_str().unwrap().to_string())
                    }
                    Err(err) => {
                        assert!(err.is_connect(), "a request cut mid-flight: {err:?}");
                        None
                    }
                }
            })
        })
        .collect();
    // Stop once the daemon is demonstrably busy.
    first_done_rx.recv().await;
    app.stop().await;

    let mut acknowledged = Vec::new();
    for request in requests {
        acknowledged.extend(request.await.expect("request task"));
    }
    assert!(!acknowledged.is_empty());
    for event_id in &acknowledged {
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE event_id = $1")
            .bind(event_id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        assert_eq!(stored, 1, "acknowledged {event_id} is stored");
    }
    assert_eq!(
        app.count("SELECT count(*) FROM events").await as usize,
        acknowledged.len()
    );
}
