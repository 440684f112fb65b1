//! The `memd` binary: flag parsing and wiring only.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use sqlx::postgres::PgConnectOptions;

use memd::{
    audit, bench, db,
    domain::{
        limits,
        redact::Redactor,
        tenant::{Scope, TenantId},
    },
    startup::{Daemon, ServeConfig, shutdown_signal},
    telemetry, tenants,
};

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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    },
    /// Measure memd against the raw PostgreSQL it runs on.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
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
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init("info,sqlx=warn");
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("memd: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let options: PgConnectOptions = cli
        .database_url
        .parse()
        .context("DATABASE_URL is not a PostgreSQL URL")?;
    match cli.command {
        Command::Serve {
            listen,
            no_migrate,
            max_body_bytes,
            redact_patterns,
            db_connections,
        } => {
            let redactor = match redact_patterns {
                Some(path) => Redactor::with_patterns_file(&path)?,
                None => Redactor::default(),
            };
            if !no_migrate {
                db::create_database_if_missing(&cli.database_url)
                    .await
                    .context("creating the database")?;
            }
            let pool = db::connect(options, db_connections)
                .await
                .context("connecting to PostgreSQL")?;
            if !no_migrate {
                db::MIGRATOR
                    .run(&pool)
                    .await
                    .context("applying migrations")?;
            }
            let config = ServeConfig {
                listen,
                max_body_bytes,
                redactor: Arc::new(redactor),
                token_cache_ttl: Duration::from_secs(5),
            };
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
                .context("creating the database")?;
            let pool = db::connect(options, 2)
                .await
                .context("connecting to PostgreSQL")?;
            db::MIGRATOR
                .run(&pool)
                .await
                .context("applying migrations")?;
            eprintln!("migrations applied");
        }
        Command::Tenant {
            command: TenantCommand::Create { name, scope },
        } => {
            let tenant = TenantId::parse(&name)
                .map_err(|e| anyhow::anyhow!("tenant name {name:?} {}", e.message))?;
            let pool = db::connect(options, 2)
                .await
                .context("connecting to PostgreSQL")?;
            let token = tenants::create_tenant(&pool, &tenant, scope).await?;
            println!("{}", token.expose());
        }
        Command::Verify { tenant } => {
            let tenant = tenant
                .map(|t| TenantId::parse(&t).map_err(|e| anyhow::anyhow!("--tenant {}", e.message)))
                .transpose()?;
            let pool = db::connect(options, 2)
                .await
                .context("connecting to PostgreSQL")?;
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
            if broken {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Bench { command } => bench::run(command, &cli.database_url).await?,
    }
    Ok(ExitCode::SUCCESS)
}
