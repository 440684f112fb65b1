//! The command line: the options every command shares, the command table,
//! and one module per command group, each parsing its own arguments and
//! printing its own results.

mod audit;
mod config;
mod files;
mod keys;
mod lab;
mod projections;
mod serve;
mod tenants;
mod transfer;

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use memd_core::seal::Keyring;
use sqlx::{PgPool, postgres::PgConnectOptions};

use memd::{config::ConfigFile, db, domain::tenant::TenantId};

#[derive(Parser)]
#[command(name = "memd", version, about = "Memory daemon for AI agents")]
pub struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Args)]
pub struct Globals {
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
    /// environment variables override it (see docs/operations.md).
    #[arg(long, env = "MEMD_CONFIG", global = true)]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// The configuration file and the effective configuration.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// The key that seals high and secret memory at rest.
    Key {
        #[command(subcommand)]
        command: keys::KeyCommand,
    },
    /// Run the daemon (HTTP API).
    Serve(serve::ServeArgs),
    /// Run projection workers only, without the HTTP API (to scale out).
    Project(serve::ProjectArgs),
    /// Delete projections and replay them from the log; prints progress and the rate.
    Rebuild(projections::RebuildArgs),
    /// Rebuild into a shadow schema and diff with the live projections; exit 1 on drift.
    DriftCheck(projections::DriftCheckArgs),
    /// Erase a data subject: destroy its key (its content in the log and
    /// artifacts can never be opened again; the hash chain still verifies),
    /// record the erasure in the log, delete its events' vectors, and
    /// rebuild the tenant's other projections without it.
    Erase(projections::EraseArgs),
    /// Write a tenant's log (events and artifacts, with their hashes) to a
    /// file: NDJSON, gzip-compressed when FILE ends in .gz.
    Export(transfer::ExportArgs),
    /// Read a `memd export` file into this database: the whole chain is
    /// checked first (a file that does not verify is refused, naming the
    /// first bad event, and nothing is stored), then the events go in with
    /// their hashes; an interrupted import goes on where it stopped.
    Import(transfer::ImportArgs),
    /// Human-editable views (identity, rules, preferences) as Markdown files.
    Views {
        #[command(subcommand)]
        command: files::ViewsCommand,
    },
    /// A tenant's bundle policy as a JSON file.
    Policy {
        #[command(subcommand)]
        command: files::PolicyCommand,
    },
    /// Which embedder a tenant's bundles use for semantic retrieval.
    Embedder {
        #[command(subcommand)]
        command: projections::EmbedderCommand,
    },
    /// Apply pending migrations and exit.
    Migrate,
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        command: tenants::TenantCommand,
    },
    /// Walk every tenant's hash chain; exit 1 and name the first broken link if one is found.
    Verify(audit::VerifyArgs),
    /// Check an inclusion proof (`GET /api/v1/events/{id}/proof`) against a
    /// signed checkpoint, offline: the checkpoint is signed by the trusted
    /// key, signs the tree root (format v2) at the proof's size, and the
    /// proof's hashes lead from the event's hash to that root. No database.
    VerifyProof(audit::VerifyProofArgs),
    /// Sign each tenant's head now (or one tenant's) and store the
    /// checkpoint; with --out, also write them as files to keep elsewhere.
    Checkpoint(audit::CheckpointArgs),
    /// Fault drills: kill the daemon under load, check nothing acknowledged
    /// was lost (figures to lab/results/drills.md).
    Drill {
        #[command(subcommand)]
        command: memd::drill::DrillCommand,
    },
    /// The benchmarks moved to the lab's own binary, `memd-bench`; this
    /// only says so.
    #[command(hide = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Acceptance scenarios (scenarios/*.yaml).
    Scenario {
        #[command(subcommand)]
        command: lab::ScenarioCommand,
    },
}

/// Runs the command; `file` is the configuration file the options' defaults
/// came from.
pub async fn run(cli: Cli, file: &ConfigFile) -> anyhow::Result<ExitCode> {
    let globals = &cli.globals;
    match cli.command {
        Command::Config { command } => Ok(config::run(command, globals, file)),
        Command::Key { command } => keys::run(command, globals),
        Command::Serve(args) => serve::serve(args, globals).await,
        Command::Project(args) => serve::project(args, globals).await,
        Command::Rebuild(args) => projections::rebuild(args, globals).await,
        Command::DriftCheck(args) => projections::drift_check(args, globals).await,
        Command::Erase(args) => projections::erase(args, globals).await,
        Command::Embedder { command } => projections::embedder(command, globals).await,
        Command::Export(args) => transfer::export(args, globals).await,
        Command::Import(args) => transfer::import(args, globals).await,
        Command::Views { command } => files::views(command, globals).await,
        Command::Policy { command } => files::policy(command, globals).await,
        Command::Migrate => migrate(globals).await,
        Command::Tenant { command } => tenants::run(command, globals).await,
        Command::Verify(args) => audit::verify(args, globals).await,
        Command::VerifyProof(args) => audit::verify_proof(&args),
        Command::Checkpoint(args) => audit::checkpoint(args, globals).await,
        Command::Drill { command } => {
            memd::drill::run(command, &globals.database_url).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { args } => anyhow::bail!(
            "the benchmarks are not part of the daemon: build the lab with \
             `cargo build --release -p memd-lab`, then run `target/release/memd-bench {}`",
            args.join(" ")
        ),
        Command::Scenario { command } => lab::scenario(command, globals).await,
    }
}

async fn migrate(globals: &Globals) -> anyhow::Result<ExitCode> {
    db::create_database_if_missing(&globals.database_url)
        .await
        .context("connecting to PostgreSQL (to create the database if it is missing)")?;
    let pool = globals.connect(2).await?;
    db::migrate(&pool).await?;
    eprintln!("migrations applied");
    Ok(ExitCode::SUCCESS)
}

impl Globals {
    fn keyring(&self) -> anyhow::Result<Keyring> {
        match &self.key_file {
            Some(path) => Ok(Keyring::load(path)?),
            None => Ok(Keyring::none()),
        }
    }

    fn options(&self) -> anyhow::Result<PgConnectOptions> {
        self.database_url
            .parse()
            .context("DATABASE_URL is not a PostgreSQL URL")
    }

    async fn connect(&self, max_connections: u32) -> anyhow::Result<PgPool> {
        connect(self.options()?, max_connections).await
    }

    /// Connections whose statements give up waiting for a lock after
    /// `--lock-timeout-ms` (PostgreSQL's `lock_timeout`), so an operator
    /// command never hangs.
    async fn connect_giving_up_on_locks(&self, max_connections: u32) -> anyhow::Result<PgPool> {
        let options = self
            .options()?
            .options([("lock_timeout", format!("{}ms", self.lock_timeout_ms))]);
        connect(options, max_connections).await
    }
}

async fn connect(options: PgConnectOptions, max_connections: u32) -> anyhow::Result<PgPool> {
    db::connect(options, max_connections)
        .await
        .context("connecting to PostgreSQL")
}

/// What to tell an operator when an error is a lock wait that gave up.
pub fn lock_timeout_hint(err: &anyhow::Error) -> Option<&'static str> {
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

fn parse_tenant(tenant: Option<String>) -> anyhow::Result<Option<TenantId>> {
    tenant.map(|t| tenant_arg(&t, "--tenant")).transpose()
}

/// A tenant named on the command line; an error names the argument.
fn tenant_arg(name: &str, arg: &str) -> anyhow::Result<TenantId> {
    TenantId::parse(name).map_err(|e| anyhow::anyhow!("{arg} {name:?} {}", e.message))
}
