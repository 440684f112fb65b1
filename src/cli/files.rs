//! What people edit as files: `memd views export|import` (Markdown) and
//! `memd policy export|import` (JSON).

use std::{path::PathBuf, process::ExitCode};

use clap::Subcommand;

use memd::{admin, domain::redact::Redactor};

use super::{Globals, tenant_arg};

#[derive(Subcommand)]
pub enum ViewsCommand {
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
pub enum PolicyCommand {
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

pub async fn views(command: ViewsCommand, globals: &Globals) -> anyhow::Result<ExitCode> {
    let keyring = globals.keyring()?;
    let pool = globals.connect(2).await?;
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
            let redactor = Redactor::from_patterns_file(redact_patterns.as_deref())?;
            for result in
                admin::views::import(&pool, &keyring, &redactor, &tenant, &dir, &actor).await?
            {
                match result {
                    admin::views::Imported::Unchanged { view } => println!("{view} unchanged"),
                    admin::views::Imported::Updated { view, event_id } => {
                        println!("{view} updated ({event_id})")
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn policy(command: PolicyCommand, globals: &Globals) -> anyhow::Result<ExitCode> {
    let pool = globals.connect(2).await?;
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
    Ok(ExitCode::SUCCESS)
}
