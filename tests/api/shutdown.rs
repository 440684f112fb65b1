//! Graceful shutdown: appends in flight when the stop comes are finished,
//! answered and stored; none is acknowledged and lost. A batch being
//! embedded is not waited for: it is rolled back and embedded again later.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use memd::startup::ServeConfig;
use memd_embedder::{EmbedError, Embedder, HashedEmbedder};
use memd_projectors::{
    embed_worker::EmbeddingWork,
    runtime::{Runtime, RuntimeConfig},
};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{message, spawn_daemon, spawn_daemon_with, test_keyring, wait_embedded};

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

/// `hashed`, except that a batch does not finish until the test lets it:
/// a batch of the real model starved of CPU (it runs at the lowest
/// priority, and other work can hold both cores for minutes).
struct Starved {
    started: tokio::sync::mpsc::UnboundedSender<()>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Embedder for Starved {
    fn name(&self) -> &'static str {
        HashedEmbedder::NAME
    }

    fn dimensions(&self) -> usize {
        HashedEmbedder::DIMENSIONS
    }

    fn version(&self) -> i32 {
        HashedEmbedder::VERSION
    }

    fn unrelated_similarity(&self) -> f64 {
        HashedEmbedder.unrelated_similarity()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let _ = self.started.send(());
        let _ = self.release.lock().expect("release lock").recv();
        HashedEmbedder.embed(texts)
    }
}

#[sqlx::test]
async fn stopping_does_not_wait_for_a_batch_being_embedded(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // No projection workers of the daemon's own: this test runs them.
    let app = spawn_daemon_with(
        connect,
        ServeConfig {
            projection: None,
            keyring: test_keyring(),
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    for i in 0..3 {
        app.append(&token, &message("s1", &format!("note {i}")))
            .await;
    }
    let (started, mut embedding) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = std::sync::mpsc::channel();
    let starved: Arc<dyn Embedder> = Arc::new(Starved {
        started,
        release: Mutex::new(released),
    });
    let embeddings = |pool: sqlx::PgPool, embedder: Arc<dyn Embedder>| {
        let work = EmbeddingWork::new(Some(HashedEmbedder::NAME), &[embedder], &test_keyring());
        Runtime::spawn(pool, Arc::new(work), RuntimeConfig::default())
    };
    // The workers run in a runtime of their own, as a daemon's do, which
    // then ends: neither the workers' stop nor the runtime's end may wait
    // for the batch.
    let (ended, runtime_ended) = tokio::sync::oneshot::channel();
    let options = app.pool.connect_options().as_ref().clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            let pool = memd::db::connect(options, 4).await.expect("a pool");
            let workers = embeddings(pool.clone(), starved);
            embedding.recv().await.expect("a batch starts embedding");
            workers.shutdown().await;
            pool.close().await;
        });
        drop(runtime);
        let _ = ended.send(());
    });
    // Awaited, not received blocking: this test's own runtime keeps going.
    tokio::time::timeout(Duration::from_secs(60), runtime_ended)
        .await
        .expect("the workers stop, and their runtime ends, while the batch is still being embedded")
        .expect("the runtime's thread reports");
    let stored: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM projections.embeddings_hashed)
              + (SELECT coalesce(max(seq), 0) FROM projections.cursors
                  WHERE projector = 'embeddings_hashed')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        stored, 0,
        "the abandoned batch left no vector and no cursor"
    );

    // The batch finishes computing in the background and is thrown away;
    // the next start embeds those events again.
    drop(release);
    let workers = embeddings(app.pool.clone(), Arc::new(HashedEmbedder));
    wait_embedded(&app, "acme", HashedEmbedder::NAME).await;
    workers.shutdown().await;
}
