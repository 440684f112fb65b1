//! `memd export` and `memd import`: a tenant's log moved between databases,
//! or another system's history appended.

use std::{path::PathBuf, process::ExitCode, sync::Arc};

use clap::Args;

use memd::{
    admin::{self, progress::ProgressPrinter},
    audit,
    domain::{redact::Redactor, tenant::TenantId},
};

use super::{Globals, tenant_arg};

#[derive(Args)]
pub struct ExportArgs {
    #[arg(long)]
    tenant: String,
    /// Where to write (`acme.memd.ndjson.gz`).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
pub struct ImportArgs {
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
}

pub async fn export(args: ExportArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let pool = globals.connect(4).await?;
    let tenant = tenant_arg(&args.tenant, "--tenant")?;
    let mut printer = ProgressPrinter::new("export");
    let exported =
        admin::transfer::export(&pool, &tenant, &args.out, &mut |p| printer.update(p)).await?;
    println!(
        "exported {tenant}: {} events, {} artifacts, head {} to {}",
        exported.events,
        exported.artifacts,
        exported.head_hash,
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn import(args: ImportArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    if args.foreign {
        import_foreign(args, globals).await
    } else {
        import_export_file(args, globals).await
    }
}

async fn import_foreign(args: ImportArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let keyring = globals.keyring()?;
    let pool = globals.connect(4).await?;
    let tenant = tenant_arg(&args.tenant.unwrap_or_default(), "--tenant")?;
    let redactor = Redactor::from_patterns_file(args.redact_patterns.as_deref())?;
    let mut printer = ProgressPrinter::new("import");
    let imported = admin::transfer::import_foreign(
        &pool,
        &keyring,
        Arc::new(redactor),
        &tenant,
        &args.file,
        &mut |p| printer.update(p),
    )
    .await?;
    println!(
        "imported into {tenant}: {} events, {} stored, {} already stored (their idempotency keys)",
        imported.events, imported.stored, imported.replayed
    );
    if imported.created {
        println!("the tenant is new here: `memd tenant token {tenant}` issues its first token");
    }
    Ok(ExitCode::SUCCESS)
}

async fn import_export_file(args: ImportArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.tenant.is_none(),
        "--tenant is for --foreign imports; an export file names its tenant (its hashes cover the name)"
    );
    let pool = globals.connect(4).await?;
    let mut printer = ProgressPrinter::new("import");
    let imported = admin::transfer::import(&pool, &args.file, &mut |p| printer.update(p)).await?;
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
    Ok(ExitCode::SUCCESS)
}
