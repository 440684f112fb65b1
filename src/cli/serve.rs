//! `memd serve` and `memd project`: the daemon, and projection workers
//! alone.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context;
use clap::Args;
use memd_core::seal::Keyring;
use memd_projectors::{
    notifications::Listener,
    projections::Encoding,
    runtime::{Runtime, RuntimeConfig},
};

use memd::{
    admin::jobs::JobWorker,
    calls::rate_limit::RateLimits,
    config::SemanticArgs,
    db,
    domain::{limits, redact::Redactor},
    read::{replica::ReplicaConfig, semantic::Semantic},
    startup::{Daemon, ProjectionConfig, ServeConfig, shutdown_signal},
};

use super::Globals;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "MEMD_LISTEN", default_value = "127.0.0.1:7070")]
    listen: String,
    /// Do not apply pending migrations at start.
    #[arg(long)]
    no_migrate: bool,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "MEMD_MAX_BODY_BYTES", default_value_t = limits::DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// Extra redaction patterns, one `NAME REGEX` per line.
    #[arg(long, env = "MEMD_REDACT_PATTERNS")]
    redact_patterns: Option<PathBuf>,
    /// Database connections in the pool.
    #[arg(long, env = "MEMD_DB_CONNECTIONS", default_value_t = 16)]
    db_connections: u32,
    /// How long a request waits for a database connection before it is
    /// answered 503 with `Retry-After` (ms). While PostgreSQL is down,
    /// every request waits this long: keep it well under clients' timeouts.
    #[arg(long, env = "MEMD_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 2_000)]
    db_acquire_timeout_ms: u64,
    /// Do not run projection workers here (run `memd project` elsewhere).
    #[arg(long)]
    no_projectors: bool,
    /// Requests per second each tenant may send this daemon (bursts of
    /// twice as many); 0 turns the limit off.
    #[arg(long, env = "MEMD_RATE_LIMIT_RPS", default_value_t = 1000.0)]
    rate_limit_rps: f64,
    /// Request-body bytes per second each tenant may send this daemon
    /// (bursts of twice as many); 0 turns the limit off.
    #[arg(long, env = "MEMD_RATE_LIMIT_BYTES", default_value_t = 16.0 * 1024.0 * 1024.0)]
    rate_limit_bytes: f64,
    /// With a key file: how often each tenant's head is signed (when it
    /// moved), in seconds; 0 leaves it to `memd checkpoint`.
    #[arg(long, env = "MEMD_CHECKPOINT_INTERVAL_SECS", default_value_t = 300)]
    checkpoint_interval_secs: u64,
    /// How far ahead of the daemon's clock an event's `ts` may be, in
    /// seconds (clients' clock skew); an event dated further ahead is
    /// refused (400 naming `ts`), one within it is recorded at the
    /// daemon's time. Past times are always accepted (imports).
    #[arg(long, env = "MEMD_MAX_CLOCK_SKEW_SECS", default_value_t = limits::DEFAULT_MAX_CLOCK_SKEW.as_secs())]
    max_clock_skew_secs: u64,
    /// Milliseconds the daemon may spend before serving on building a
    /// few bundles for its most recently active tenants, so that the
    /// first requests after a restart find connections open, statements
    /// planned and vector indexes loaded; 0 serves at once.
    #[arg(long, env = "MEMD_WARM_UP_MS", default_value_t = memd::startup::DEFAULT_WARM_UP.as_millis() as u64)]
    warm_up_ms: u64,
    /// Seconds a connection may take to send a request's headers, from
    /// when it waits for one (a new connection, or a kept-alive one
    /// between requests): slow and idle clients are closed after it.
    #[arg(long, env = "MEMD_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    header_read_timeout_secs: u64,
    /// Seconds a request's body may take after its headers (then 408).
    #[arg(long, env = "MEMD_BODY_READ_TIMEOUT_SECS", default_value_t = 30)]
    body_read_timeout_secs: u64,
    /// Connections served at once; more wait in the kernel's backlog.
    /// Default: the open-file limit (ulimit -n) less 128, 16 to 4,096.
    #[arg(long, env = "MEMD_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Seconds a stop (SIGTERM) waits for requests in flight before it
    /// closes their connections.
    #[arg(long, env = "MEMD_SHUTDOWN_DEADLINE_SECS", default_value_t = 30)]
    shutdown_deadline_secs: u64,
    /// Serve `GET /metrics` (Prometheus) on this address, a listener of
    /// its own: the figures span every tenant, so no tenant token may
    /// read them. Bind it to localhost or a private interface. Off
    /// unless given.
    #[arg(long, env = "MEMD_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Label the metrics by tenant too (one series per tenant: fine for
    /// tens of tenants, not for thousands).
    #[arg(long, env = "MEMD_METRICS_TENANT_LABELS")]
    metrics_tenant_labels: bool,
    /// A streaming-replication standby of the database: bundles read it
    /// while it keeps up (appends, projectors and admin stay on the
    /// primary). Off unless given.
    #[arg(long, env = "MEMD_READ_DATABASE_URL")]
    read_database_url: Option<String>,
    /// Further behind the primary than this (ms), the standby is not read.
    #[arg(long, env = "MEMD_READ_MAX_LAG_MS", default_value_t = 5_000)]
    read_max_lag_ms: u64,
    /// How long a bundle that must see given writes (`after`, `consistency:
    /// strong`) waits for the standby to have them before it reads the
    /// primary (ms).
    #[arg(long, env = "MEMD_READ_WAIT_MS", default_value_t = 500)]
    read_wait_ms: u64,
    #[command(flatten)]
    projection: ProjectionArgs,
    #[command(flatten)]
    semantic: SemanticArgs,
}

#[derive(Args)]
pub struct ProjectArgs {
    #[command(flatten)]
    projection: ProjectionArgs,
    #[command(flatten)]
    semantic: SemanticArgs,
}

#[derive(Args)]
struct ProjectionArgs {
    /// Token encoding for chunk token counts (o200k_base or cl100k_base).
    #[arg(long, env = "MEMD_TOKEN_ENCODING", default_value = "o200k_base")]
    token_encoding: Encoding,
    /// Projection worker tasks; tenants are partitioned among them.
    #[arg(long, env = "MEMD_PROJECTOR_WORKERS", default_value_t = 2)]
    projector_workers: usize,
    /// How often workers look for lagging tenants besides LISTEN/NOTIFY, in ms.
    #[arg(long, env = "MEMD_PROJECTOR_POLL_MS", default_value_t = 1000)]
    poll_interval_ms: u64,
    /// How long a woken worker waits for more appends before projecting, in
    /// ms: longer carries more events per projection transaction (less CPU
    /// per event), shorter projects sooner.
    #[arg(
        long,
        env = "MEMD_PROJECTOR_GATHER_MS",
        default_value_t = memd_projectors::runtime::DEFAULT_GATHER.as_millis() as u64
    )]
    projector_gather_ms: u64,
}

impl ProjectionArgs {
    fn config(&self, keyring: &Keyring) -> ProjectionConfig {
        ProjectionConfig {
            keyring: keyring.clone(),
            runtime: RuntimeConfig {
                poll_interval: Duration::from_millis(self.poll_interval_ms.max(10)),
                workers: self.projector_workers.max(1),
                listen: true,
                gather: Duration::from_millis(self.projector_gather_ms),
            },
            encoding: self.token_encoding,
        }
    }
}

pub async fn serve(args: ServeArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let options = globals.options()?;
    let keyring = globals.keyring()?;
    anyhow::ensure!(
        args.rate_limit_rps >= 0.0 && args.rate_limit_bytes >= 0.0,
        "rate limits must be 0 (off) or positive"
    );
    let redactor = Redactor::from_patterns_file(args.redact_patterns.as_deref())?;
    if !args.no_migrate {
        db::create_database_if_missing(&globals.database_url)
            .await
            .context("connecting to PostgreSQL (to create the database if it is missing)")?;
    }
    let pool = db::connect_waiting_at_most(
        options,
        args.db_connections,
        Duration::from_millis(args.db_acquire_timeout_ms),
    )
    .await?;
    if !args.no_migrate {
        db::migrate(&pool).await?;
    }
    let config = ServeConfig {
        max_body_bytes: args.max_body_bytes,
        redactor: Arc::new(redactor),
        token_cache_ttl: Duration::from_secs(5),
        projection: (!args.no_projectors).then(|| args.projection.config(&keyring)),
        encoding: args.projection.token_encoding,
        rate_limits: RateLimits::new(args.rate_limit_rps, args.rate_limit_bytes),
        semantic: args.semantic.config()?,
        keyring: keyring.clone(),
        checkpoint_interval: Duration::from_secs(args.checkpoint_interval_secs),
        max_clock_skew: Duration::from_secs(args.max_clock_skew_secs),
        warm_up: Duration::from_millis(args.warm_up_ms),
        http: memd::serve::HttpLimits {
            header_read_timeout: Duration::from_secs(args.header_read_timeout_secs.max(1)),
            body_read_timeout: Duration::from_secs(args.body_read_timeout_secs.max(1)),
            max_connections: args
                .max_connections
                .unwrap_or_else(memd::serve::default_max_connections),
            shutdown_deadline: Duration::from_secs(args.shutdown_deadline_secs),
        },
        metrics_listen: args.metrics_listen,
        metrics_tenant_labels: args.metrics_tenant_labels,
        read_replica: args
            .read_database_url
            .map(|url| -> anyhow::Result<ReplicaConfig> {
                Ok(ReplicaConfig {
                    options: url
                        .parse()
                        .context("--read-database-url is not a PostgreSQL URL")?,
                    max_connections: args.db_connections,
                    max_lag: Duration::from_millis(args.read_max_lag_ms),
                    wait: Duration::from_millis(args.read_wait_ms),
                })
            })
            .transpose()?,
        listen: args.listen,
    };
    match keyring.key_id() {
        Some(id) => tracing::info!(key = id, "high and secret memory is sealed at rest"),
        None => tracing::warn!(
            "no key file: high and secret memory is stored in the clear \
             (memd key generate --out FILE, then --key-file FILE or MEMD_KEY_FILE)"
        ),
    }
    let daemon = Daemon::bind(&config, pool.clone())
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    daemon.run(shutdown_signal()).await?;
    pool.close().await;
    tracing::info!("memd stopped");
    Ok(ExitCode::SUCCESS)
}

pub async fn project(args: ProjectArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let config = args.projection.config(&globals.keyring()?);
    let semantic = Semantic::load(&args.semantic.config()?);
    let pool = globals.connect(config.runtime.workers as u32 + 3).await?;
    tracing::info!(workers = config.runtime.workers, "projecting");
    let mut listener = Listener::default();
    let runtimes: Vec<Runtime> = config.spawn(pool.clone(), &semantic, &mut listener);
    let jobs = JobWorker::spawn(pool.clone(), Arc::new(config.engine()), &mut listener);
    let (stop_listening, listening) = tokio::sync::watch::channel(false);
    let notifications = listener.spawn(pool.clone(), listening);
    shutdown_signal().await;
    jobs.shutdown().await;
    for runtime in runtimes {
        runtime.shutdown().await;
    }
    let _ = stop_listening.send(true);
    let _ = notifications.await;
    pool.close().await;
    Ok(ExitCode::SUCCESS)
}
