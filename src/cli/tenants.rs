//! `memd tenant create|token|revoke`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use memd::{
    domain::tenant::{ApiToken, Scope},
    tenants,
};

use super::{Globals, parse_tenant, tenant_arg};

#[derive(Subcommand)]
pub enum TenantCommand {
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

pub async fn run(command: TenantCommand, globals: &Globals) -> anyhow::Result<ExitCode> {
    let pool = globals.connect(2).await?;
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
    Ok(ExitCode::SUCCESS)
}
