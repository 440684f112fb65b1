//! The `memd` binary: flag parsing and wiring only.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use memd_projectors::{
    drift,
    embed::worker::EmbeddingWork,
    notifications::Listener,
    projections::Encoding,
    rebuild,
    runtime::{Runtime, RuntimeConfig},
    seal::Keyring,
};
use sqlx::{PgPool, postgres::PgConnectOptions};

use memd::{
    admin::{self, jobs::JobWorker, progress::ProgressPrinter},
    audit,
    audit::checkpoint,
    bench,
    calls::rate_limit::RateLimits,
    config::{ConfigFile, SemanticArgs},
    db::{self, ScratchDatabase},
    domain::{
        limits,
        redact::Redactor,
        tenant::{ApiToken, Scope, TenantId},
    },
    read::{
        replica::ReplicaConfig,
        semantic::{Semantic, SemanticConfig},
    },
    scenario,
    startup::{Daemon, ProjectionConfig, ServeConfig, shutdown_signal},
    telemetry, tenants,
};

/// A bundle allocates and frees thousands of small strings (candidate
/// ids, row fields); glibc's allocator spent a fifth of the daemon's time
/// on them under concurrent bundles, mimalloc much less (see README,
/// Benchmarks).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "memd", version, about = "Memory daemon for AI agents")]
struct Cli {
    /// PostgreSQL URL of memd's database (created on first use by serve/migrate).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/memd",
        global = true
    )]
    database_url: String,
    /// Key file (`memd key generate`) that seals high and secret memory at
    /// rest; without it such memory is stored in the clear. Keep it outside
    /// the database and its backups.
    #[arg(long, env = "MEMD_KEY_FILE", global = true)]
    key_file: Option<PathBuf>,
    /// How long `rebuild` and `drift-check` wait for a lock another process
    /// holds (a projector mid-batch, another rebuild) before giving up.
    #[arg(
        long,
        env = "MEMD_LOCK_TIMEOUT_MS",
        default_value_t = 30_000,
        global = true
    )]
    lock_timeout_ms: u64,
    /// A YAML file of option values (`listen: 127.0.0.1:7070`); flags and
    /// environment variables override it (see README, Operating memd).
    #[arg(long, env = "MEMD_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    fn keyring(&self) -> anyhow::Result<Keyring> {
        match &self.key_file {
            Some(path) => Ok(Keyring::load(path)?),
            None => Ok(Keyring::none()),
        }
    }
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Write a new random key file (mode 0600; never overwrites).
    Generate {
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the key file's checkpoint public key (hex): what auditors
    /// trust checkpoints by.
    Public,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print what `memd serve` would run with (each option's value and
    /// where it came from: flag, environment, file or default; passwords
    /// masked), after checking the file and the key file.
    Check,
}

#[derive(Subcommand)]
enum Command {
    /// The configuration file and the effective configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// The key that seals high and secret memory at rest.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Run the daemon (HTTP API).
    Serve {
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
    },
    /// Run projection workers only, without the HTTP API (to scale out).
    Project {
        #[command(flatten)]
        projection: ProjectionArgs,
        #[command(flatten)]
        semantic: SemanticArgs,
    },
    /// Delete projections and replay them from the log; prints progress and the rate.
    Rebuild {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only these projectors (chunks, decisions, tasks, views,
        /// handoffs, or an embeddings projection: embeddings_minilm,
        /// embeddings_minilm_int8, embeddings_hashed); repeatable.
        /// Default: all but the embeddings.
        #[arg(long = "projector")]
        projectors: Vec<String>,
        #[arg(long, env = "MEMD_TOKEN_ENCODING", default_value = "o200k_base")]
        token_encoding: Encoding,
        #[command(flatten)]
        semantic: SemanticArgs,
    },
    /// Rebuild into a shadow schema and diff with the live projections; exit 1 on drift.
    DriftCheck {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[arg(long, env = "MEMD_TOKEN_ENCODING", default_value = "o200k_base")]
        token_encoding: Encoding,
    },
    /// Erase a data subject: destroy its key (its content in the log and
    /// artifacts can never be opened again; the hash chain still verifies),
    /// record the erasure in the log, delete its events' vectors, and
    /// rebuild the tenant's other projections without it.
    Erase {
        #[arg(long)]
        tenant: String,
        /// The `subject_id` its events carry.
        #[arg(long)]
        subject: String,
        /// Who erases it, for the record (an operator's name or ticket).
        #[arg(long, default_value = "operator")]
        by: String,
        #[arg(long, env = "MEMD_TOKEN_ENCODING", default_value = "o200k_base")]
        token_encoding: Encoding,
    },
    /// Write a tenant's log (events and artifacts, with their hashes) to a
    /// file: NDJSON, gzip-compressed when FILE ends in .gz.
    Export {
        #[arg(long)]
        tenant: String,
        /// Where to write (`acme.memd.ndjson.gz`).
        #[arg(long)]
        out: PathBuf,
    },
    /// Read a `memd export` file into this database: the whole chain is
    /// checked first (a file that does not verify is refused, naming the
    /// first bad event, and nothing is stored), then the events go in with
    /// their hashes; an interrupted import goes on where it stopped.
    Import {
        /// The file `memd export` wrote (or, with --foreign, the history to
        /// append).
        file: PathBuf,
        /// Import history from elsewhere: one event per line in the append
        /// envelope, without hashes, appended through the write path to
        /// --tenant (redacted, chained); re-running it stores nothing twice.
        #[arg(long, requires = "tenant")]
        foreign: bool,
        /// The tenant a --foreign import appends to (created if missing).
        #[arg(long)]
        tenant: Option<String>,
        /// Extra redaction patterns for a --foreign import, one `NAME REGEX` per line.
        #[arg(long, env = "MEMD_REDACT_PATTERNS")]
        redact_patterns: Option<PathBuf>,
    },
    /// Human-editable views (identity, rules, preferences) as Markdown files.
    Views {
        #[command(subcommand)]
        command: ViewsCommand,
    },
    /// A tenant's bundle policy as a JSON file.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Which embedder a tenant's bundles use for semantic retrieval.
    Embedder {
        #[command(subcommand)]
        command: EmbedderCommand,
    },
    /// Apply pending migrations and exit.
    Migrate,
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Walk every tenant's hash chain; exit 1 and name the first broken link if one is found.
    Verify {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Also prove the log still extends these signed checkpoints (files
        /// from `memd checkpoint --out`; one checkpoint or a JSON array each).
        #[arg(long = "checkpoint")]
        checkpoints: Vec<PathBuf>,
        /// The checkpoint public key you trust (hex, `memd key public`);
        /// default: the key file's.
        #[arg(long)]
        public_key: Option<String>,
    },
    /// Check an inclusion proof (`GET /api/v1/events/{id}/proof`) against a
    /// signed checkpoint, offline: the checkpoint is signed by the trusted
    /// key, signs the tree root (format v2) at the proof's size, and the
    /// proof's hashes lead from the event's hash to that root. No database.
    VerifyProof {
        /// The proof, as the route answered it (JSON).
        #[arg(long)]
        proof: PathBuf,
        /// The checkpoint whose `seq` is the proof's `tree_size`.
        #[arg(long)]
        checkpoint: PathBuf,
        /// The checkpoint public key you trust (hex, `memd key public`);
        /// default: the one the checkpoint names (then only the key's
        /// holder could have signed it, but check the key is memd's).
        #[arg(long)]
        public_key: Option<String>,
    },
    /// Sign each tenant's head now (or one tenant's) and store the
    /// checkpoint; with --out, also write them as files to keep elsewhere.
    Checkpoint {
        #[arg(long)]
        tenant: Option<String>,
        /// Folder for the files (`<tenant>-<seq>.json`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Fault drills: kill the daemon under load, check nothing acknowledged
    /// was lost (figures to bench/drills.md).
    Drill {
        #[command(subcommand)]
        command: memd::drill::DrillCommand,
    },
    /// Measure memd against the raw PostgreSQL it runs on.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Acceptance scenarios (scenarios/*.yaml).
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
}

#[derive(Subcommand)]
enum ScenarioCommand {
    /// Run scenario files (or every *.yaml of folders) and print a pass/fail
    /// table; exit 1 if any fails. Without --url, starts a daemon in this
    /// process on a fresh database on the server of --database-url (dropped
    /// afterwards unless --keep-database).
    Run {
        /// Scenario files or folders.
        #[arg(default_value = "scenarios")]
        paths: Vec<PathBuf>,
        /// A running daemon to test instead (black box over HTTP); then
        /// --database-url must be its database (tenants are created there
        /// and `no_secret_anywhere` scans it).
        #[arg(long)]
        url: Option<String>,
        /// With --url: a shell command that restarts that daemon, for
        /// scenarios with a `restart` step (skipped without one). It runs
        /// with MEMD_RESTART_PROJECTORS=true, or =false when the scenario
        /// needs a daemon without projection workers (`memd serve
        /// --no-projectors`).
        #[arg(long)]
        restart_command: Option<String>,
        /// Where to write the JSON report (default
        /// scenario-reports/run_<UTC time>.report.json).
        #[arg(long)]
        report: Option<PathBuf>,
        /// Keep the fresh database for inspection.
        #[arg(long)]
        keep_database: bool,
    },
}

#[derive(Subcommand)]
enum EmbedderCommand {
    /// Switch to another embedder: build its projection from the log beside
    /// the current one (progress on stderr), switch bundles to it once
    /// caught up, drop the old one. Bundles keep working throughout.
    Use {
        /// minilm, minilm_int8, mpnet or hashed.
        name: String,
        /// Only this tenant (default: every tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// Only record the choice; running daemons build and switch.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        semantic: SemanticArgs,
    },
    /// Each tenant's embedder and its projection's progress.
    Status {
        #[command(flatten)]
        semantic: SemanticArgs,
    },
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

#[derive(Subcommand)]
enum ViewsCommand {
    /// Write each view of a tenant to DIR/<view>.md.
    Export {
        dir: PathBuf,
        #[arg(long)]
        tenant: String,
    },
    /// Append a view_update for each DIR/<view>.md that differs from the log.
    Import {
        dir: PathBuf,
        #[arg(long)]
        tenant: String,
        /// Who made the edits (recorded as a human actor).
        #[arg(long, default_value = "operator")]
        actor: String,
        /// Extra redaction patterns, one `NAME REGEX` per line.
        #[arg(long, env = "MEMD_REDACT_PATTERNS")]
        redact_patterns: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Write the tenant's policy (stored, or the defaults) to FILE.
    Export {
        file: PathBuf,
        #[arg(long)]
        tenant: String,
    },
    /// Check the policy in FILE (absent fields take their defaults) and store it.
    Import {
        file: PathBuf,
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Create a tenant; prints its first API token, alone, on stdout.
    Create {
        name: String,
        #[arg(long, value_enum, default_value = "admin")]
        scope: Scope,
    },
    /// Issue another token for an existing tenant; prints it alone on stdout.
    /// With `--agent ID` the token is bound to that agent: it acts as that
    /// agent only (its events are stamped with it, its bundles never see
    /// another agent's private memory) and cannot have scope admin.
    Token {
        name: String,
        /// admin by default; write for an agent's token.
        #[arg(long, value_enum)]
        scope: Option<Scope>,
        #[arg(long)]
        agent: Option<String>,
    },
    /// Revoke one token (TOKEN, or `-` to read it from stdin), or with
    /// `--tenant NAME --all` every token of a tenant. Every daemon on the
    /// database refuses it at once (a NOTIFY empties their token caches).
    Revoke {
        #[arg(required_unless_present = "all")]
        token: Option<String>,
        #[arg(long, requires = "tenant", conflicts_with = "token")]
        all: bool,
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The configuration file's values become the options' defaults: flags
    // and environment variables still win (memd::config).
    let file = match ConfigFile::locate(&args).and_then(|file| {
        let command = file.apply(Cli::command())?;
        Ok((file, command))
    }) {
        Ok(found) => found,
        Err(err) => {
            eprintln!("memd: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let (file, command) = file;
    let cli = Cli::from_arg_matches(&command.get_matches_from(&args)).unwrap_or_else(|e| e.exit());
    telemetry::init("info,sqlx=warn");
    if let Command::Config {
        command: ConfigCommand::Check,
    } = &cli.command
    {
        return config_check(&cli, &file);
    }
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("memd: error: {err:#}");
            if let Some(hint) = lock_timeout_hint(&err) {
                eprintln!("memd: gave up waiting for a lock: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `memd config check`: the effective configuration of `memd serve`, and
/// whether its key file and model files are there.
fn config_check(cli: &Cli, file: &ConfigFile) -> ExitCode {
    let report = match memd::config::effective(Cli::command(), file, &["memd", "serve"]) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("memd: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    match &file.path {
        Some(path) => println!("# configuration file: {}", path.display()),
        None => println!("# no configuration file (--config or MEMD_CONFIG)"),
    }
    println!("# memd serve would run with (highest first: flag, env, file, default):");
    let width = report.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for entry in &report {
        println!(
            "{:width$} = {}    ({})",
            entry.name, entry.value, entry.source
        );
    }
    let mut ok = true;
    if let Err(err) = cli.keyring() {
        eprintln!("memd: error: key file: {err:#}");
        ok = false;
    }
    if let Some(model_dir) = report.iter().find(|e| e.name == "model-dir")
        && !std::path::Path::new(&model_dir.value)
            .join("model.safetensors")
            .is_file()
    {
        println!(
            "# note: no model in {}: semantic retrieval would be off ({})",
            model_dir.value,
            SemanticConfig::FETCH_COMMAND
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let options: PgConnectOptions = cli
        .database_url
        .parse()
        .context("DATABASE_URL is not a PostgreSQL URL")?;
    if let Command::Key {
        command: KeyCommand::Generate { out },
    } = &cli.command
    {
        write_key_file(out)?;
        println!("wrote {}: start memd with --key-file {0}", out.display());
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::VerifyProof {
        proof,
        checkpoint,
        public_key,
    } = &cli.command
    {
        return verify_proof(proof, checkpoint, public_key.as_deref());
    }
    let keyring = cli.keyring()?;
    let lock_timeout_ms = cli.lock_timeout_ms;
    match cli.command {
        Command::Key {
            command: KeyCommand::Public,
        } => match keyring.public_key() {
            Some(public) => println!("{public}"),
            None => anyhow::bail!("no key file (--key-file, MEMD_KEY_FILE)"),
        },
        Command::Key { .. } => unreachable!("generate is handled above"),
        Command::Config { .. } => unreachable!("handled in main, without a database"),
        Command::VerifyProof { .. } => unreachable!("handled above, without a database"),
        Command::Serve {
            listen,
            no_migrate,
            max_body_bytes,
            redact_patterns,
            db_connections,
            db_acquire_timeout_ms,
            no_projectors,
            rate_limit_rps,
            rate_limit_bytes,
            checkpoint_interval_secs,
            max_clock_skew_secs,
            warm_up_ms,
            header_read_timeout_secs,
            body_read_timeout_secs,
            max_connections,
            shutdown_deadline_secs,
            metrics_listen,
            metrics_tenant_labels,
            read_database_url,
            read_max_lag_ms,
            read_wait_ms,
            projection,
            semantic,
        } => {
            anyhow::ensure!(
                rate_limit_rps >= 0.0 && rate_limit_bytes >= 0.0,
                "rate limits must be 0 (off) or positive"
            );
            let redactor = match redact_patterns {
                Some(path) => Redactor::with_patterns_file(&path)?,
                None => Redactor::default(),
            };
            if !no_migrate {
                db::create_database_if_missing(&cli.database_url)
                    .await
                    .context(
                        "connecting to PostgreSQL (to create the database if it is missing)",
                    )?;
            }
            let pool = db::connect_waiting_at_most(
                options,
                db_connections,
                Duration::from_millis(db_acquire_timeout_ms),
            )
            .await?;
            if !no_migrate {
                db::migrate(&pool).await?;
            }
            let config = ServeConfig {
                listen,
                max_body_bytes,
                redactor: Arc::new(redactor),
                token_cache_ttl: Duration::from_secs(5),
                projection: (!no_projectors).then(|| projection.config(&keyring)),
                encoding: projection.token_encoding,
                rate_limits: RateLimits::new(rate_limit_rps, rate_limit_bytes),
                semantic: semantic.config()?,
                keyring: keyring.clone(),
                checkpoint_interval: Duration::from_secs(checkpoint_interval_secs),
                max_clock_skew: Duration::from_secs(max_clock_skew_secs),
                warm_up: Duration::from_millis(warm_up_ms),
                http: memd::serve::HttpLimits {
                    header_read_timeout: Duration::from_secs(header_read_timeout_secs.max(1)),
                    body_read_timeout: Duration::from_secs(body_read_timeout_secs.max(1)),
                    max_connections: max_connections
                        .unwrap_or_else(memd::serve::default_max_connections),
                    shutdown_deadline: Duration::from_secs(shutdown_deadline_secs),
                },
                metrics_listen,
                metrics_tenant_labels,
                read_replica: read_database_url
                    .map(|url| -> anyhow::Result<ReplicaConfig> {
                        Ok(ReplicaConfig {
                            options: url
                                .parse()
                                .context("--read-database-url is not a PostgreSQL URL")?,
                            max_connections: db_connections,
                            max_lag: Duration::from_millis(read_max_lag_ms),
                            wait: Duration::from_millis(read_wait_ms),
                        })
                    })
                    .transpose()?,
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
        }
        Command::Migrate => {
            db::create_database_if_missing(&cli.database_url)
                .await
                .context("connecting to PostgreSQL (to create the database if it is missing)")?;
            let pool = connect(options, 2).await?;
            db::migrate(&pool).await?;
            eprintln!("migrations applied");
        }
        Command::Tenant { command } => {
            let pool = connect(options, 2).await?;
            match command {
                TenantCommand::Create { name, scope } => {
                    let tenant = tenant_arg(&name, "tenant name")?;
                    let token = tenants::create_tenant(&pool, &tenant, scope).await?;
                    println!("{}", token.expose());
                }
                TenantCommand::Token { name, scope, agent } => {
                    let tenant = tenant_arg(&name, "tenant name")?;
                    if let Some(agent) = &agent {
                        memd::domain::event::check_id("--agent", agent)
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                    }
                    let scope = match (scope, &agent) {
                        (Some(Scope::Admin), Some(_)) => anyhow::bail!(
                            "an agent's token cannot have scope admin (use a tenant-wide token)"
                        ),
                        (Some(scope), _) => scope,
                        (None, Some(_)) => Scope::Write,
                        (None, None) => Scope::Admin,
                    };
                    let token = tenants::issue_token(&pool, &tenant, scope, agent.as_deref())
                        .await?
                        .with_context(|| format!("no tenant {tenant}"))?;
                    println!("{}", token.expose());
                }
                TenantCommand::Revoke {
                    all: true, tenant, ..
                } => {
                    let tenant = parse_tenant(tenant)?.expect("--all requires --tenant");
                    let revoked = tenants::revoke_all_tokens(&pool, &tenant).await?;
                    println!("revoked {revoked} token(s) of {tenant}");
                }
                TenantCommand::Revoke { token, .. } => {
                    let mut raw = token.expect("clap requires a token without --all");
                    if raw == "-" {
                        raw.clear();
                        std::io::stdin().read_line(&mut raw)?;
                    }
                    let token = ApiToken::parse(raw.trim())
                        .context("that is not a memd token (memd_ followed by 64 hex digits)")?;
                    match tenants::revoke_token(&pool, &token).await? {
                        Some(tenant) => println!("revoked a token of {tenant}"),
                        None => anyhow::bail!("no active token matches"),
                    }
                }
            }
        }
        Command::Checkpoint { tenant, out } => {
            let tenant = parse_tenant(tenant)?;
            let pool = connect(options, 2).await?;
            let taken = checkpoint::take(&pool, &keyring, tenant.as_ref()).await?;
            if let Some(dir) = &out {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            for checkpoint in &taken.signed {
                let written = match &out {
                    Some(dir) => {
                        let path =
                            dir.join(format!("{}-{}.json", checkpoint.tenant, checkpoint.seq));
                        std::fs::write(&path, serde_json::to_string_pretty(checkpoint)?)
                            .with_context(|| format!("writing {}", path.display()))?;
                        format!(" -> {}", path.display())
                    }
                    None => String::new(),
                };
                println!(
                    "checkpoint tenant={} seq={} head={}{written}",
                    checkpoint.tenant, checkpoint.seq, checkpoint.head_hash
                );
            }
            for refused in &taken.refused {
                println!(
                    "REFUSED tenant={} (newest checkpoint seq={}): {}",
                    refused.tenant, refused.checkpoint_seq, refused.reason
                );
            }
            if taken.signed.is_empty() && taken.refused.is_empty() {
                println!("no tenant with events to checkpoint");
            }
            if !taken.refused.is_empty() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Verify {
            tenant,
            checkpoints,
            public_key,
        } => {
            let tenant = parse_tenant(tenant)?;
            let trusted = if checkpoints.is_empty() {
                None
            } else {
                Some(public_key.or_else(|| keyring.public_key()).context(
                    "--checkpoint needs the public key you trust: --public-key HEX, or the key file",
                )?)
            };
            let pool = connect(options, 2).await?;
            let reports = audit::verify_chains(&pool, tenant.as_ref()).await?;
            let mut broken = false;
            for report in &reports {
                match &report.broken {
                    None => println!(
                        "ok      tenant={} events={} head={}",
                        report.tenant, report.events_ok, report.head_hash
                    ),
                    Some(link) => {
                        broken = true;
                        println!(
                            "BROKEN  tenant={} seq={} event_id={} after {} good events: {}",
                            report.tenant,
                            link.seq,
                            link.event_id.as_deref().unwrap_or("-"),
                            report.events_ok,
                            link.reason
                        );
                    }
                }
            }
            if reports.is_empty() {
                println!("no tenants to verify");
            }
            if let Some(trusted) = trusted {
                let mut read = Vec::new();
                for path in &checkpoints {
                    read.extend(checkpoint::read_file(path)?);
                }
                for checked in checkpoint::check(&pool, &trusted, read).await? {
                    broken |= !checked.holds();
                    println!("{}", checked.line(&trusted));
                }
            }
            if broken {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Bench { command } => bench::run(command, &cli.database_url).await?,
        Command::Drill { command } => memd::drill::run(command, &cli.database_url).await?,
        Command::Scenario {
            command:
                ScenarioCommand::Run {
                    paths,
                    url,
                    restart_command,
                    report,
                    keep_database,
                },
        } => {
            let files = scenario::files(&paths)?;
            let report_path = report.unwrap_or_else(|| {
                PathBuf::from(format!(
                    "scenario-reports/run_{}.report.json",
                    chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
                ))
            });
            let (run, scratch) = match url {
                Some(url) => {
                    let pool = connect(options, 4).await?;
                    let mut target = scenario::Target::External {
                        url: url.clone(),
                        restart_command,
                        projecting: true,
                    };
                    let run = scenario::run_all(&mut target, &pool, &files, url).await;
                    (run, None)
                }
                None => {
                    let scratch =
                        ScratchDatabase::create(&cli.database_url, "memd_scenarios").await?;
                    let pool = connect(scratch.options.clone(), 4).await?;
                    // The scratch database is dropped after the run: without
                    // a key file, a key for this run alone seals it.
                    let sealing = if keyring.is_on() {
                        keyring.clone()
                    } else {
                        Keyring::ephemeral()
                    };
                    let mut target =
                        scenario::Target::managed(scratch.options.clone(), sealing).await?;
                    let described = format!(
                        "a daemon started here on the fresh database {}",
                        scratch.name
                    );
                    let run = scenario::run_all(&mut target, &pool, &files, described).await;
                    target.stop().await?;
                    pool.close().await;
                    (run, Some(scratch))
                }
            };
            scenario::write_report(&run, &report_path)?;
            println!(
                "passed {}, failed {}, skipped {} in {:.1} s; report: {}",
                run.passed,
                run.failed,
                run.skipped,
                run.total_ms / 1000.0,
                report_path.display()
            );
            if let Some(scratch) = scratch {
                if keep_database {
                    println!("database kept: {}", scratch.name);
                } else {
                    scratch.drop_now().await?;
                }
            }
            if !run.ok() {
                std::process::exit(1);
            }
        }
        Command::Project {
            projection,
            semantic,
        } => {
            let config = projection.config(&keyring);
            let semantic = Semantic::load(&semantic.config()?);
            let pool = connect(options, config.runtime.workers as u32 + 3).await?;
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
        }
        Command::Embedder { command } => embedder_command(options, &keyring, command).await?,
        Command::Rebuild {
            tenant,
            projectors,
            token_encoding,
            semantic,
        } => {
            let tenant = parse_tenant(tenant)?;
            let engine = ProjectionConfig {
                encoding: token_encoding,
                keyring: keyring.clone(),
                ..Default::default()
            }
            .engine_with_embeddings(&projectors, &semantic.config()?.models)?
            .only(&projectors)?;
            let pool = connect(with_lock_timeout(options, lock_timeout_ms), 2).await?;
            let mut printer = ProgressPrinter::new("rebuild");
            let started = std::time::Instant::now();
            let done = rebuild::rebuild(
                &pool,
                &engine,
                tenant.as_ref().map(TenantId::as_str),
                &mut |p| printer.update(p),
            )
            .await?;
            let events: i64 = done.iter().map(|t| t.events).sum();
            let elapsed = started.elapsed().as_secs_f64();
            // Every tenant rebuilt: the tables whole, partitions and all.
            let rebuilt: Vec<String> = done.iter().map(|t| t.tenant.clone()).collect();
            rebuild::vacuum_analyze(&pool, &engine, tenant.is_some().then_some(&rebuilt[..]))
                .await?;
            for tenant in &done {
                println!(
                    "rebuilt tenant={} events={} in {:.2}s",
                    tenant.tenant,
                    tenant.events,
                    tenant.elapsed.as_secs_f64()
                );
            }
            println!(
                "rebuilt {} tenant(s), {events} events in {elapsed:.2}s ({:.0} events/s)",
                done.len(),
                events as f64 / elapsed.max(1e-9)
            );
        }
        Command::DriftCheck {
            tenant,
            json,
            token_encoding,
        } => {
            let tenant = parse_tenant(tenant)?;
            let engine = ProjectionConfig {
                encoding: token_encoding,
                keyring: keyring.clone(),
                ..Default::default()
            }
            .engine();
            let pool = connect(with_lock_timeout(options, lock_timeout_ms), 2).await?;
            let mut printer = ProgressPrinter::new("drift-check");
            let report = drift::drift_check(
                &pool,
                &engine,
                tenant.as_ref().map(TenantId::as_str),
                &mut |p| printer.update(p),
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", drift::render(&report));
            }
            if report.drifted() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Erase {
            tenant,
            subject,
            by,
            token_encoding,
        } => {
            let tenant = tenant_arg(&tenant, "--tenant")?;
            let pool = connect(with_lock_timeout(options, lock_timeout_ms), 2).await?;
            let erased = admin::erase::erase(&pool, &keyring, &tenant, &subject, &by).await?;
            println!(
                "erased subject={} tenant={tenant} events={} by={} at={} record={} (seq {}); \
                 vectors deleted={}",
                erased.subject_id,
                erased.events,
                erased.erased_by,
                erased.erased_at.to_rfc3339(),
                erased.erasure_event_id,
                erased.erasure_seq,
                erased.vectors_deleted
            );
            let engine = ProjectionConfig {
                encoding: token_encoding,
                keyring: keyring.clone(),
                ..Default::default()
            }
            .engine();
            let mut printer = ProgressPrinter::new("rebuild");
            let done = rebuild::rebuild(&pool, &engine, Some(tenant.as_str()), &mut |p| {
                printer.update(p)
            })
            .await?;
            for tenant in &done {
                println!(
                    "rebuilt tenant={} events={} in {:.2}s: nothing of the subject is left in the projections",
                    tenant.tenant,
                    tenant.events,
                    tenant.elapsed.as_secs_f64()
                );
            }
        }
        Command::Export { tenant, out } => {
            let pool = connect(options, 4).await?;
            let tenant = tenant_arg(&tenant, "--tenant")?;
            let mut printer = ProgressPrinter::new("export");
            let exported =
                admin::transfer::export(&pool, &tenant, &out, &mut |p| printer.update(p)).await?;
            println!(
                "exported {tenant}: {} events, {} artifacts, head {} to {}",
                exported.events,
                exported.artifacts,
                exported.head_hash,
                out.display()
            );
        }
        Command::Import {
            file,
            foreign: true,
            tenant,
            redact_patterns,
        } => {
            let pool = connect(options, 4).await?;
            let tenant = tenant_arg(&tenant.unwrap_or_default(), "--tenant")?;
            let redactor = match redact_patterns {
                Some(path) => Redactor::with_patterns_file(&path)?,
                None => Redactor::default(),
            };
            let mut printer = ProgressPrinter::new("import");
            let imported = admin::transfer::import_foreign(
                &pool,
                &keyring,
                Arc::new(redactor),
                &tenant,
                &file,
                &mut |p| printer.update(p),
            )
            .await?;
            println!(
                "imported into {tenant}: {} events, {} stored, {} already stored (their idempotency keys)",
                imported.events, imported.stored, imported.replayed
            );
            if imported.created {
                println!(
                    "the tenant is new here: `memd tenant token {tenant}` issues its first token"
                );
            }
        }
        Command::Import { file, tenant, .. } => {
            anyhow::ensure!(
                tenant.is_none(),
                "--tenant is for --foreign imports; an export file names its tenant (its hashes cover the name)"
            );
            let pool = connect(options, 4).await?;
            let mut printer = ProgressPrinter::new("import");
            let imported =
                admin::transfer::import(&pool, &file, &mut |p| printer.update(p)).await?;
            let report = audit::verify_chains(
                &pool,
                Some(&TenantId::parse(&imported.tenant).map_err(|e| anyhow::anyhow!("{e}"))?),
            )
            .await?;
            let verified = &report[0];
            anyhow::ensure!(
                verified.broken.is_none() && verified.head_hash == imported.head_hash,
                "after the import, {} does not verify: {:?}",
                imported.tenant,
                verified.broken
            );
            println!(
                "imported {}: {} events stored ({} were already here); verify ok, head {}",
                imported.tenant, imported.stored, imported.already, verified.head_hash
            );
            if imported.created {
                println!(
                    "the tenant is new here: `memd tenant token {}` issues its first token",
                    imported.tenant
                );
            }
        }
        Command::Views { command } => {
            let pool = connect(options, 2).await?;
            match command {
                ViewsCommand::Export { dir, tenant } => {
                    let tenant = tenant_arg(&tenant, "--tenant")?;
                    for view in admin::views::export(&pool, &keyring, &tenant, &dir).await? {
                        println!(
                            "{} {} (from {})",
                            view.view,
                            view.path.display(),
                            view.event_id
                        );
                    }
                }
                ViewsCommand::Import {
                    dir,
                    tenant,
                    actor,
                    redact_patterns,
                } => {
                    let tenant = tenant_arg(&tenant, "--tenant")?;
                    let redactor = match redact_patterns {
                        Some(path) => Redactor::with_patterns_file(&path)?,
                        None => Redactor::default(),
                    };
                    for result in
                        admin::views::import(&pool, &keyring, &redactor, &tenant, &dir, &actor)
                            .await?
                    {
                        match result {
                            admin::views::Imported::Unchanged { view } => {
                                println!("{view} unchanged")
                            }
                            admin::views::Imported::Updated { view, event_id } => {
                                println!("{view} updated ({event_id})")
                            }
                        }
                    }
                }
            }
        }
        Command::Policy { command } => {
            let pool = connect(options, 2).await?;
            match command {
                PolicyCommand::Export { file, tenant } => {
                    let tenant = tenant_arg(&tenant, "--tenant")?;
                    admin::policy_file::export(&pool, &tenant, &file).await?;
                    println!("policy of {tenant} written to {}", file.display());
                }
                PolicyCommand::Import { file, tenant } => {
                    let tenant = tenant_arg(&tenant, "--tenant")?;
                    admin::policy_file::import(&pool, &tenant, &file).await?;
                    println!("policy of {tenant} replaced from {}", file.display());
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_tenant(tenant: Option<String>) -> anyhow::Result<Option<TenantId>> {
    tenant.map(|t| tenant_arg(&t, "--tenant")).transpose()
}

/// A tenant named on the command line; an error names the argument.
fn tenant_arg(name: &str, arg: &str) -> anyhow::Result<TenantId> {
    TenantId::parse(name).map_err(|e| anyhow::anyhow!("{arg} {name:?} {}", e.message))
}

/// Writes a new key file readable by its owner only, refusing to replace
/// one (a lost key loses what it sealed).
fn write_key_file(path: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| {
        format!(
            "creating key file {} (it must not exist yet)",
            path.display()
        )
    })?;
    file.write_all(Keyring::generate().as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// Connections whose statements give up waiting for a lock after `ms`
/// (PostgreSQL's `lock_timeout`), so an operator command never hangs.
fn with_lock_timeout(options: PgConnectOptions, ms: u64) -> PgConnectOptions {
    options.options([("lock_timeout", format!("{ms}ms"))])
}

/// What to tell an operator when an error is a lock wait that gave up.
fn lock_timeout_hint(err: &anyhow::Error) -> Option<&'static str> {
    let gave_up = |e: &sqlx::Error| {
        e.as_database_error()
            .and_then(|d| d.code())
            .is_some_and(|code| code == "55P03")
    };
    let hit = err.chain().any(|cause| {
        cause.downcast_ref::<sqlx::Error>().is_some_and(gave_up)
            || cause
                .downcast_ref::<memd_projectors::engine::ProjectError>()
                .and_then(|e| e.database_error())
                .is_some_and(gave_up)
    });
    hit.then_some(
        "another transaction holds a lock it needs (a projector in the middle of a batch, \
         another rebuild, a schema change); try again, or wait longer with --lock-timeout-ms",
    )
}

async fn connect(options: PgConnectOptions, max_connections: u32) -> anyhow::Result<PgPool> {
    db::connect(options, max_connections)
        .await
        .context("connecting to PostgreSQL")
}

/// `memd embedder use|status`.
async fn embedder_command(
    options: PgConnectOptions,
    keyring: &Keyring,
    command: EmbedderCommand,
) -> anyhow::Result<()> {
    match command {
        EmbedderCommand::Use {
            name,
            tenant,
            no_wait,
            semantic,
        } => {
            let name =
                admin::embedder::known(&name).map_err(|e| anyhow::anyhow!("{}", e.message))?;
            let config = semantic.config()?;
            let pool = connect(options, 2).await?;
            let tenants = match parse_tenant(tenant)? {
                Some(tenant) => vec![tenant.as_str().to_owned()],
                None => {
                    sqlx::query_scalar("SELECT tenant_id FROM tenants ORDER BY tenant_id")
                        .fetch_all(&pool)
                        .await?
                }
            };
            let embedder = if no_wait {
                None
            } else {
                Some(memd_projectors::embed::load(name, &config.models)?)
            };
            let work = EmbeddingWork::new(
                config
                    .embedder
                    .as_deref()
                    .and_then(|n| admin::embedder::known(n).ok()),
                embedder.as_slice(),
                keyring,
            );
            for tenant in &tenants {
                let choice =
                    admin::embedder::choose(&pool, tenant, name, config.embedder.as_deref())
                        .await?;
                if choice.building.is_none() {
                    println!("tenant={tenant} embedder={name} (already in use)");
                    continue;
                }
                if no_wait {
                    println!("tenant={tenant} building={name}: daemons build it and switch");
                    continue;
                }
                let started = std::time::Instant::now();
                let mut printer = ProgressPrinter::new("embed");
                let switched = admin::embedder::build_and_switch(&pool, &work, tenant, &mut |p| {
                    printer.update(p)
                })
                .await?;
                println!(
                    "tenant={tenant} embedder={name} {} in {:.1}s",
                    if switched {
                        "switched"
                    } else {
                        "not switched (choice changed meanwhile)"
                    },
                    started.elapsed().as_secs_f64()
                );
            }
            pool.close().await;
        }
        EmbedderCommand::Status { semantic } => {
            let config = semantic.config()?;
            let pool = connect(options, 2).await?;
            let tenants: Vec<String> =
                sqlx::query_scalar("SELECT tenant_id FROM tenants ORDER BY tenant_id")
                    .fetch_all(&pool)
                    .await?;
            for tenant in tenants {
                let status =
                    admin::embedder::status(&pool, &tenant, config.embedder.as_deref()).await?;
                println!(
                    "tenant={tenant} active={} embedded={}/{}{}",
                    status.active.as_deref().unwrap_or("none"),
                    status.active_seq,
                    status.head_seq,
                    match (&status.building, status.building_seq) {
                        (Some(building), Some(seq)) =>
                            format!(" building={building} {seq}/{}", status.head_seq),
                        _ => String::new(),
                    }
                );
            }
            pool.close().await;
        }
    }
    Ok(())
}

/// `memd verify-proof`: prints what holds, or why not (exit 1).
fn verify_proof(
    proof: &std::path::Path,
    checkpoint: &std::path::Path,
    trusted: Option<&str>,
) -> anyhow::Result<ExitCode> {
    use memd::audit::tree::InclusionProof;
    let proof: InclusionProof = serde_json::from_str(
        &std::fs::read_to_string(proof).with_context(|| format!("reading {}", proof.display()))?,
    )
    .with_context(|| format!("{} is not an inclusion proof", proof.display()))?;
    let checkpoints = memd::audit::checkpoint::read_file(checkpoint)?;
    let [checkpoint] = checkpoints.as_slice() else {
        anyhow::bail!("{} must hold exactly one checkpoint", checkpoint.display());
    };
    let trusted = trusted.unwrap_or(&checkpoint.public_key);
    let refuse = |why: String| {
        println!("FAILED  {why}");
        Ok(ExitCode::FAILURE)
    };
    if !checkpoint.signed_by(trusted) {
        return refuse(format!("the checkpoint is not signed by key {trusted}"));
    }
    let Some(tree_root) = &checkpoint.tree_root else {
        return refuse("the checkpoint signs no tree root (format v1)".to_owned());
    };
    if checkpoint.tenant != proof.tenant || checkpoint.seq as u64 != proof.tree_size {
        return refuse(format!(
            "the proof is for {} at tree size {}, the checkpoint for {} at seq {}",
            proof.tenant, proof.tree_size, checkpoint.tenant, checkpoint.seq
        ));
    }
    if !proof.root.eq_ignore_ascii_case(tree_root) {
        return refuse("the proof leads to another root than the checkpoint signed".to_owned());
    }
    if !proof.holds() {
        return refuse(format!(
            "the proof's hashes do not lead from event {} to the root",
            proof.event_id
        ));
    }
    println!(
        "ok      event {} (seq {}, hash {}) is in {}'s log as of the checkpoint at seq {} signed by {}",
        proof.event_id, proof.seq, proof.event_hash, proof.tenant, checkpoint.seq, trusted
    );
    Ok(ExitCode::SUCCESS)
}
