//! Slow and idle clients, over real sockets: headers or a body trickled,
//! a kept-alive connection left silent, more connections than the cap,
//! and a stop while a client holds a request half sent. None may hold the
//! daemon, its connection slots or its shutdown.

use std::time::{Duration, Instant};

use memd::{serve::HttpLimits, startup::ServeConfig};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{TestApp, spawn_daemon_with, test_keyring};

/// Generous bounds: each wait below ends well before them unless the
/// daemon fails to close or answer.
const BOUND: Duration = Duration::from_secs(15);

async fn daemon(connect: PgConnectOptions, http: HttpLimits) -> TestApp {
    spawn_daemon_with(
        connect,
        ServeConfig {
            keyring: test_keyring(),
            http,
            ..ServeConfig::default()
        },
    )
    .await
}

fn limits(header: u64, body: u64, connections: usize, shutdown: u64) -> HttpLimits {
    HttpLimits {
        header_read_timeout: Duration::from_secs(header),
        body_read_timeout: Duration::from_secs(body),
        max_connections: connections,
        shutdown_deadline: Duration::from_secs(shutdown),
    }
}

async fn connect_to(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.base_url.trim_start_matches("http://"))
        .await
        .expect("connect")
}

/// Reads until the server closes the connection (or `BOUND` passes):
/// what it sent, and whether it closed.
async fn read_until_closed(stream: &mut TcpStream) -> (String, bool) {
    let mut seen = Vec::new();
    let mut buffer = [0_u8; 4096];
    let deadline = Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&seen).into_owned(), true),
            Ok(Ok(n)) => seen.extend_from_slice(&buffer[..n]),
            Err(_) => return (String::from_utf8_lossy(&seen).into_owned(), false),
        }
    }
}

/// A connection that sent an append's headers (a 200-byte body promised)
/// and the body's first bytes, then nothing more.
async fn half_sent_append(app: &TestApp, token: &str) -> TcpStream {
    let mut stream = connect_to(app).await;
    stream
        .write_all(
            format!(
                "POST /api/v1/events HTTP/1.1\r\nHost: memd\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"session_id\""
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    stream
}

#[sqlx::test]
async fn trickled_headers_and_idle_keep_alive_connections_are_closed(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = daemon(connect, limits(1, 30, 64, 5)).await;
    // Headers, a line every 300 ms: closed once the header timeout passes.
    let mut trickling = connect_to(&app).await;
    trickling
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < BOUND {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if trickling.write_all(b"X-Slow: yes\r\n").await.is_err() {
            closed = true;
            break;
        }
        let mut byte = [0_u8; 1];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(1), trickling.read(&mut byte)).await
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "a client trickling its headers was never closed");

    // One request answered, then silence on the kept-alive connection.
    let mut idle = connect_to(&app).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: memd\r\n\r\n")
        .await
        .unwrap();
    let (answered, closed) = read_until_closed(&mut idle).await;
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    assert!(closed, "an idle kept-alive connection was never closed");
}

#[sqlx::test]
async fn a_trickled_body_is_answered_408_in_the_error_shape(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = daemon(connect, limits(10, 1, 64, 5)).await;
    let token = app.tenant("acme").await;
    let stream = half_sent_append(&app, &token).await;
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let mut answered = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !String::from_utf8_lossy(&answered).contains("\"field\":\"body\"") {
        match tokio::time::timeout(BOUND, reader.read(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => answered.extend_from_slice(&buffer[..n]),
            _ => break,
        }
    }
    trickle.abort();
    let answered = String::from_utf8_lossy(&answered).into_owned();
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
    assert!(
        answered.contains("\"code\":\"request_timeout\""),
        "{answered}"
    );
    assert!(answered.contains("\"field\":\"body\""), "{answered}");
    assert_eq!(app.count("SELECT count(*) FROM events").await, 0);
}

#[sqlx::test]
async fn connections_past_the_cap_wait_for_a_free_slot(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = daemon(connect, limits(60, 30, 1, 5)).await;
    let silent = connect_to(&app).await;
    // Let the daemon take the silent one before the next arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut waiting = connect_to(&app).await;
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: memd\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0_u8; 64];
    let early = tokio::time::timeout(Duration::from_secs(1), waiting.read(&mut buffer)).await;
    assert!(early.is_err(), "served past the cap of one connection");
    drop(silent);
    let (answered, _) = read_until_closed(&mut waiting).await;
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
}

#[sqlx::test]
async fn a_stop_does_not_wait_past_its_deadline_for_a_half_sent_request(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = daemon(connect, limits(60, 60, 64, 1)).await;
    let token = app.tenant("acme").await;
    let stream = half_sent_append(&app, &token).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    app.stop().await;
    assert!(
        started.elapsed() < BOUND,
        "the stop waited {:?} for a client that never finished",
        started.elapsed()
    );
    drop(stream);
}
