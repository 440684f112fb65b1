//! `spawn_daemon` and typed helpers shared by the integration tests.

use std::time::Duration;

use memd::{
    db,
    domain::tenant::{Scope, TenantId},
    startup::{Daemon, ServeConfig},
    tenants,
};

use memd_core::hash_chain::ChainedEvent;
use memd_core::seal::Keyring;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{PgPool, Row, postgres::PgConnectOptions};
use tokio::{sync::oneshot, task::JoinHandle};

pub struct TestApp {
    pub base_url: String,
    /// The metrics listener's base URL, when the config asked for one.
    pub metrics_url: Option<String>,
    pub client: reqwest::Client,
    /// A pool on the test's database, for asserting on what was stored.
    pub pool: PgPool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    /// Dropped with the app, which ends its [`watchdog`].
    _watchdog: std::sync::mpsc::Sender<()>,
}

/// How long a test may keep its daemon before [`watchdog`] reports what
/// its database is doing: well under nextest's kill (5 × 60 s), so a
/// stuck test says where it is stuck.
const WATCHDOG_AFTER: Duration = Duration::from_secs(100);

/// Starts a thread that, if the test still holds its daemon after
/// [`WATCHDOG_AFTER`], prints every session of the test's database and the
/// locks they wait for. A thread of its own, and `psql` rather than the
/// test's pool: a stuck test may have its runtime or its pool stuck too.
fn watchdog(connect: &PgConnectOptions) -> std::sync::mpsc::Sender<()> {
    let (alive, dropped) = std::sync::mpsc::channel::<()>();
    let database = connect.get_database().unwrap_or("postgres").to_owned();
    let server = std::env::var("DATABASE_URL").unwrap_or_default();
    std::thread::spawn(move || {
        if dropped.recv_timeout(WATCHDOG_AFTER) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            return;
        }
        let report = std::process::Command::new("psql")
            .arg(db::with_database(&server, &database))
            .args(["-X", "-c"])
            .arg(
                "SELECT a.pid, a.state, a.wait_event_type, a.wait_event,
                        now() - a.xact_start AS in_transaction, regexp_replace(left(a.query, 200), '\\s+', ' ', 'g') AS query,
                        (SELECT string_agg(l.locktype || ' ' || l.mode || ' on ' ||
                                coalesce(l.relation::regclass::text, '-'), '; ')
                           FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted) AS waiting_for,
                        pg_blocking_pids(a.pid) AS blocked_by
                   FROM pg_stat_activity a
                  WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                  ORDER BY a.pid",
            )
            .output();
        let report = match report {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(err) => format!("psql did not run: {err}"),
        };
        eprintln!(
            "watchdog: the test has held its daemon for {WATCHDOG_AFTER:?}; sessions of {database}:\n{report}"
        );
    });
    alive
}

/// Starts the daemon on a free port over the test's (already migrated) database.
/// The daemon seals high and secret memory with [`test_keyring`], so every
/// test that stores such memory goes through encryption at rest.
pub async fn spawn_daemon(connect: PgConnectOptions) -> TestApp {
    spawn_daemon_with(
        connect,
        ServeConfig {
            keyring: test_keyring(),
            ..ServeConfig::default()
        },
    )
    .await
}

const TEST_KEY: [u8; 32] = [42; 32];

/// The key tests seal with (a fixed one: tests compare stored bytes).
pub fn test_keyring() -> Keyring {
    Keyring::from_bytes(&TEST_KEY)
}

/// [`test_keyring`] as a key file, for the CLI.
pub fn test_key_file() -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("memd-test.key");
    if !path.exists() {
        // Written aside and renamed: tests in other processes may read it.
        let aside = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&aside, format!("memd-key-v1:{}\n", hex::encode(TEST_KEY)))
            .expect("write the test key");
        std::fs::rename(&aside, &path).expect("place the test key");
    }
    path
}

/// An event's content as stored, opened with the test key.
pub fn opened(tenant: &str, mut content: Value) -> Value {
    test_keyring()
        .open_content(tenant, &mut content)
        .expect("sealed with the test key");
    content
}

pub async fn spawn_daemon_with(connect: PgConnectOptions, config: ServeConfig) -> TestApp {
    // A pool of our own: the one #[sqlx::test] hands out is small, and 32
    // concurrent appenders should queue on the tenant lock, not on the pool.
    let watchdog = watchdog(&connect);
    let pool = db::connect(connect, 20)
        .await
        .expect("connect to the test database");
    // #[sqlx::test] applied memd's migrations; the job queue has its own.
    db::migrate(&pool).await.expect("migrate");
    let config = ServeConfig {
        listen: "127.0.0.1:0".into(),
        ..config
    };
    let daemon = Daemon::bind(&config, pool.clone()).await.expect("bind");
    let base_url = format!("http://{}", daemon.local_addr());
    let metrics_url = daemon.metrics_addr().map(|addr| format!("http://{addr}"));
    let mut serving = daemon.serving();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    // Bounded: the warm-up ends within its budget; a run that failed drops
    // the sender.
    let _ = serving.wait_for(|serving| *serving).await;
    TestApp {
        base_url,
        metrics_url,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client"),
        pool,
        stop: Some(stop),
        task: Some(task),
        _watchdog: watchdog,
    }
}

impl TestApp {
    /// Creates a tenant and returns an admin token for it.
    pub async fn tenant(&self, name: &str) -> String {
        self.tenant_with_scope(name, Scope::Admin).await
    }

    pub async fn tenant_with_scope(&self, name: &str, scope: Scope) -> String {
        let tenant = TenantId::parse(name).expect("valid tenant name");
        tenants::create_tenant(&self.pool, &tenant, scope)
            .await
            .expect("create tenant")
            .expose()
            .to_string()
    }

    /// Sends `body` as JSON with `token` and returns the status and the
    /// JSON answer (`Null` when the answer is not JSON).
    pub async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: &Value,
    ) -> (StatusCode, Value) {
        let response = self
            .client
            .request(method, format!("{}{path}", self.base_url))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request sent");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_events(&self, token: &str, body: &Value) -> (StatusCode, Value) {
        self.send_json(reqwest::Method::POST, "/api/v1/events", token, body)
            .await
    }

    /// Appends and insists on success, returning the response body.
    pub async fn append(&self, token: &str, body: &Value) -> Value {
        let (status, response) = self.post_events(token, body).await;
        assert!(status.is_success(), "append failed: {status} {response}");
        response
    }

    pub async fn put_json(&self, path: &str, token: &str, body: &Value) -> (StatusCode, Value) {
        self.send_json(reqwest::Method::PUT, path, token, body)
            .await
    }

    pub async fn get_json(&self, path: &str, token: &str) -> (StatusCode, Value) {
        let response = self.get(path, token).await;
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Stores `policy` (fields absent take their defaults) for the token's
    /// tenant and insists on success, returning the stored policy.
    pub async fn put_policy(&self, token: &str, policy: &Value) -> Value {
        let (status, stored) = self.put_json("/api/v1/policy", token, policy).await;
        assert!(status.is_success(), "policy not stored: {status} {stored}");
        stored
    }

    pub async fn get(&self, path: &str, token: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.base_url))
            .bearer_auth(token)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .expect("count query")
    }

    /// The URL of the test's database, for the `memd` binary and `pg_dump`.
    pub async fn database_url(&self) -> String {
        let name: String = sqlx::query_scalar("SELECT current_database()")
            .fetch_one(&self.pool)
            .await
            .expect("database name");
        let server = std::env::var("DATABASE_URL").expect("DATABASE_URL is set for sqlx::test");
        db::with_database(&server, &name)
    }

    /// `GET /readyz`'s body.
    pub async fn readyz(&self) -> Value {
        self.client
            .get(format!("{}/readyz", self.base_url))
            .send()
            .await
            .expect("readyz answers")
            .json()
            .await
            .expect("readyz is JSON")
    }

    /// A `pg_dump` of the test's database, as text.
    pub async fn pg_dump(&self) -> String {
        let output = tokio::process::Command::new("pg_dump")
            .arg("--dbname")
            .arg(self.database_url().await)
            .output()
            .await
            .expect("pg_dump runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Stops the daemon gracefully and waits until it has finished.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(STOP_TIMEOUT, task)
                .await
                .unwrap_or_else(|_| panic!("the daemon did not stop within {STOP_TIMEOUT:?}"))
                .expect("daemon task")
                .expect("daemon ran");
        }
    }
}

/// A port nobody listens on now, for a `memd` process of a test.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A message event in `session` with `text`.
pub fn message(session: &str, text: &str) -> Value {
    json!({
        "session_id": session,
        "channel": "private",
        "actor": {"type": "human", "id": "user-1"},
        "kind": "message",
        "content": {"text": text},
    })
}

/// A `tool_result` event: `output` of `fs.read_file` on `path`.
pub fn tool_result(path: &str, output: &str) -> Value {
    json!({
        "session_id": "s1",
        "channel": "private",
        "actor": {"type": "tool", "id": "fs"},
        "kind": "tool_result",
        "content": {"tool": "fs.read_file", "path": path, "output": output, "exit_code": 0},
    })
}

/// Runs the `memd` binary against `database_url`; returns (exit code,
/// stdout, stderr). Awaited, not blocking: a daemon in the same test runs on
/// this runtime, and a blocked thread would stop it mid-transaction while the
/// command waits on its locks. Killed after [`CLI_TIMEOUT`], failing the test
/// instead of hanging it.
pub async fn memd_cli(database_url: &str, args: &[&str]) -> (i32, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_memd"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("MEMD_KEY_FILE", test_key_file())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(CLI_TIMEOUT, child)
        .await
        .unwrap_or_else(|_| panic!("memd {args:?} ran past {CLI_TIMEOUT:?}"))
        .expect("run memd");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// How long a test's daemon may take to stop: requests in flight and the
/// workers' current batches take seconds.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a `memd` command of a test may run.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// Asks `check` every 50 ms until it answers `Ok`, and returns that; after
/// `bound`, fails the test with `what` and the last `Err` it gave (what was
/// seen instead). Bounded, so a condition that never comes fails, never
/// hangs.
pub async fn wait_until<T, F, Fut>(bound: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = std::time::Instant::now() + bound;
    loop {
        match check().await {
            Ok(found) => return found,
            Err(seen) if std::time::Instant::now() >= deadline => {
                panic!("{what} within {bound:?}; instead: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Waits until every projector has applied `tenant`'s log up to its head.
pub async fn wait_projected(pool: &PgPool, tenant: &str) {
    let engine = memd::startup::ProjectionConfig::default().engine();
    wait_until(
        Duration::from_secs(30),
        &format!("projections of {tenant} caught up"),
        async || {
            let lagging = memd_projectors::runtime::lagging_tenants(pool, &engine)
                .await
                .expect("lagging tenants");
            if !lagging.iter().any(|t| t == tenant) {
                return Ok(());
            }
            let failures: Vec<(String, String)> = sqlx::query_as(
                "SELECT projector, error FROM projections.failures WHERE tenant_id = $1",
            )
            .bind(tenant)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
            Err(format!("lagging; failures: {failures:?}"))
        },
    )
    .await
}

/// Waits until `tenant`'s embeddings (of `embedder`) reach its log's head.
/// Embedding runs at the lowest CPU priority, so on two cores busy with
/// other tests it gets only what they leave: the bound is generous (nextest
/// still ends a stuck test at 5 minutes).
pub async fn wait_embedded(app: &TestApp, tenant: &str, embedder: &str) {
    wait_until(
        Duration::from_secs(180),
        &format!("{tenant}'s {embedder} embeddings caught up"),
        async || {
            let (cursor, head): (i64, i64) = sqlx::query_as(
                "SELECT coalesce(c.seq, 0), h.seq FROM tenant_heads h
                   LEFT JOIN projections.cursors c
                     ON c.tenant_id = h.tenant_id AND c.projector = 'embeddings_' || $2
                  WHERE h.tenant_id = $1",
            )
            .bind(tenant)
            .bind(embedder)
            .fetch_one(&app.pool)
            .await
            .unwrap();
            if cursor < head {
                Err(format!("embedded to {cursor} of {head}"))
            } else {
                Ok(())
            }
        },
    )
    .await
}

/// An event of `kind` with `content` and `refs`, from an agent in session s1.
pub fn event(kind: &str, content: Value, refs: &[&str]) -> Value {
    json!({
        "session_id": "s1",
        "channel": "private",
        "actor": {"type": "agent", "id": "agent-1"},
        "kind": kind,
        "content": content,
        "refs": refs,
    })
}

/// What a superuser can do: turn the append-only trigger off, change event
/// `seq`'s text, recompute the hash of it and of every event after it, and
/// move the head. `memd verify` cannot tell.
pub async fn rewrite_and_rehash(pool: &PgPool, tenant: &str, seq: i64, text: &str) {
    // Bounded, and naming who holds the table if it fails: a session left
    // writing `events` would otherwise stall the test without a word.
    let mut conn = pool.acquire().await.expect("a connection");
    sqlx::query("SET lock_timeout = '30s'")
        .execute(&mut *conn)
        .await
        .unwrap();
    if let Err(err) = sqlx::query("ALTER TABLE events DISABLE TRIGGER events_append_only")
        .execute(&mut *conn)
        .await
    {
        let sessions: Vec<String> = sqlx::query_scalar(
            "SELECT concat_ws(' ', pid, state, wait_event, left(query, 200)) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(pool)
        .await
        .unwrap_or_default();
        panic!("disabling the append-only trigger failed: {err}; sessions: {sessions:?}");
    }
    sqlx::query("RESET lock_timeout")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    sqlx::query(
        "UPDATE events SET content = jsonb_build_object('text', $3::text)
          WHERE tenant_id = $1 AND seq = $2",
    )
    .bind(tenant)
    .bind(seq)
    .bind(text)
    .execute(pool)
    .await
    .unwrap();
    let mut prev: [u8; 32] = sqlx::query_scalar::<_, Vec<u8>>(
        "SELECT prev_hash FROM events WHERE tenant_id = $1 AND seq = $2",
    )
    .bind(tenant)
    .bind(seq)
    .fetch_one(pool)
    .await
    .unwrap()
    .try_into()
    .unwrap();
    let rows = sqlx::query(
        "SELECT seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id,
                agent_id, subject_id, kind, sensitivity, tags, refs, idempotency_key, artifact_id,
                content::text AS content_text
           FROM events WHERE tenant_id = $1 AND seq >= $2 ORDER BY seq",
    )
    .bind(tenant)
    .bind(seq)
    .fetch_all(pool)
    .await
    .unwrap();
    for row in rows {
        let tags: Vec<String> = row.get("tags");
        let refs: Vec<String> = row.get("refs");
        let created_at: chrono::DateTime<chrono::Utc> = row.get("created_at");
        let ts: chrono::DateTime<chrono::Utc> = row.get("ts");
        let agent_id: Option<String> = row.get("agent_id");
        let subject_id: Option<String> = row.get("subject_id");
        let idempotency_key: Option<String> = row.get("idempotency_key");
        let artifact_id: Option<String> = row.get("artifact_id");
        let hash = ChainedEvent {
            tenant_id: tenant,
            seq: row.get("seq"),
            event_id: row.get("event_id"),
            created_at_us: created_at.timestamp_micros(),
            ts_us: ts.timestamp_micros(),
            session_id: row.get("session_id"),
            channel: row.get("channel"),
            actor_type: row.get("actor_type"),
            actor_id: row.get("actor_id"),
            agent_id: agent_id.as_deref(),
            subject_id: subject_id.as_deref(),
            kind: row.get("kind"),
            sensitivity: row.get("sensitivity"),
            tags: &tags,
            refs: &refs,
            idempotency_key: idempotency_key.as_deref(),
            artifact_id: artifact_id.as_deref(),
            content_text: row.get("content_text"),
        }
        .hash(&prev);
        sqlx::query(
            "UPDATE events SET prev_hash = $3, hash = $4 WHERE tenant_id = $1 AND seq = $2",
        )
        .bind(tenant)
        .bind(row.get::<i64, _>("seq"))
        .bind(prev.as_slice())
        .bind(hash.as_slice())
        .execute(pool)
        .await
        .unwrap();
        prev = hash;
    }
    sqlx::query("UPDATE tenant_heads SET hash = $2 WHERE tenant_id = $1")
        .bind(tenant)
        .bind(prev.as_slice())
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE events ENABLE TRIGGER events_append_only")
        .execute(pool)
        .await
        .unwrap();
}
