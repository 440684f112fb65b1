//! A daemon warms up before it serves: its first bundle for a recently
//! active tenant finds the tenant's vector index loaded, where a cold one
//! retrieves by words alone while the index loads in the background.

use std::time::Duration;

use memd::{read::semantic::SemanticConfig, startup::ServeConfig};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon_with, wait_embedded, wait_projected};

fn config(warm_up: Duration) -> ServeConfig {
    ServeConfig {
        semantic: SemanticConfig::hashed(),
        warm_up,
        ..ServeConfig::default()
    }
}

async fn first_bundle(connect: &PgConnectOptions, token: &str, warm_up: Duration) -> Value {
    let app = spawn_daemon_with(connect.clone(), config(warm_up)).await;
    let (status, acb) = app
        .send_json(
            Method::POST,
            "/api/v1/acb/build",
            token,
            &json!({"query_text": "which exporter runs the invoices?"}),
        )
        .await;
    assert_eq!(status, 200, "{acb}");
    acb
}

#[sqlx::test]
async fn a_restarted_daemon_serves_its_first_bundle_with_the_vector_index_loaded(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(connect.clone(), config(Duration::ZERO)).await;
    let token = app.tenant("acme").await;
    // More history than a bundle catches up with inline (5,000 events).
    for batch in 0..6 {
        let events: Vec<Value> = (0..1000)
            .map(|i| {
                message(
                    "s1",
                    &format!("turn {batch}-{i}: the exporter writes invoices"),
                )
            })
            .collect();
        let (status, body) = app.post_events(&token, &json!({ "events": events })).await;
        assert_eq!(status, 201, "{body}");
    }
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;

    // Cold: the index loads in the background, the bundle says so.
    let cold = first_bundle(&connect, &token, Duration::ZERO).await;
    let semantic = &cold["provenance"]["semantic"];
    assert_eq!(semantic["used"], false, "{semantic}");
    assert!(
        semantic["reason"].as_str().unwrap().contains("loading"),
        "{semantic}"
    );
    // Warmed: loaded before the daemon served, and the tenant's state read
    // (the caches heard notifications before the warm-up began, so what it
    // cached stays right).
    let warm = first_bundle(&connect, &token, Duration::from_secs(60)).await;
    assert_eq!(
        warm["provenance"]["semantic"]["used"], true,
        "{:#}",
        warm["provenance"]
    );
    assert_eq!(warm["provenance"]["cache"], "hit");
}

/// What the warm-up read stays right as any bundle's cached state does: a
/// change recorded after it reaches the next bundle (cached state is
/// checked against the events since it was read, and dropped when
/// projections go back, which the caches hear from before the warm-up
/// began).
#[sqlx::test]
async fn what_the_warm_up_read_is_dropped_when_the_tenant_changes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let rules = |text: &str| {
        json!({"session_id": "v", "channel": "private", "actor": {"type": "human", "id": "a"},
               "kind": "view_update", "content": {"view": "rules", "text": text}})
    };
    let first = spawn_daemon_with(connect.clone(), config(Duration::ZERO)).await;
    let token = first.tenant("acme").await;
    first
        .append(&token, &rules("Invoices go out on Mondays."))
        .await;
    wait_projected(&first.pool, "acme").await;

    let warmed = spawn_daemon_with(connect.clone(), config(Duration::from_secs(60))).await;
    let ask = json!({"query_text": "when do invoices go out?", "render": true});
    let before = warmed.acb(&token, ask.clone()).await;
    assert_eq!(
        before["provenance"]["cache"], "hit",
        "{:#}",
        before["provenance"]
    );
    assert!(
        before["prompt"].as_str().unwrap().contains("Mondays"),
        "{before:#}"
    );

    warmed
        .append(&token, &rules("Invoices go out on Fridays."))
        .await;
    wait_projected(&warmed.pool, "acme").await;
    let after = warmed.acb(&token, ask).await;
    let prompt = after["prompt"].as_str().unwrap();
    assert!(prompt.contains("Fridays"), "{after:#}");
    assert!(!prompt.contains("Mondays"), "{after:#}");
}
