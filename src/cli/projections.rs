//! Commands over the projections: `rebuild`, `drift-check`, `erase` (which
//! rebuilds without the subject) and `embedder use|status`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use memd_core::seal::Keyring;
use memd_projectors::{drift, embed_worker::EmbeddingWork, projections::Encoding, rebuild};

use memd::{
    admin::{self, progress::ProgressPrinter},
    config::SemanticArgs,
    domain::tenant::TenantId,
    startup::ProjectionConfig,
};

use super::{Globals, parse_tenant, tenant_arg};

#[derive(Args)]
pub struct RebuildArgs {
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
}

#[derive(Args)]
pub struct DriftCheckArgs {
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, env = "MEMD_TOKEN_ENCODING", default_value = "o200k_base")]
    token_encoding: Encoding,
}

#[derive(Args)]
pub struct EraseArgs {
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
}

#[derive(Subcommand)]
pub enum EmbedderCommand {
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

/// The projection engine of the operator commands (no workers).
fn engine_config(encoding: Encoding, keyring: Keyring) -> ProjectionConfig {
    ProjectionConfig {
        encoding,
        keyring,
        ..Default::default()
    }
}

pub async fn rebuild(args: RebuildArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let tenant = parse_tenant(args.tenant)?;
    let engine = engine_config(args.token_encoding, globals.keyring()?)
        .engine_with_embeddings(&args.projectors, &args.semantic.config()?.models)?
        .only(&args.projectors)?;
    let pool = globals.connect_giving_up_on_locks(2).await?;
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
    rebuild::vacuum_analyze(&pool, &engine, tenant.is_some().then_some(&rebuilt[..])).await?;
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
    Ok(ExitCode::SUCCESS)
}

pub async fn drift_check(args: DriftCheckArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let tenant = parse_tenant(args.tenant)?;
    let engine = engine_config(args.token_encoding, globals.keyring()?).engine();
    let pool = globals.connect_giving_up_on_locks(2).await?;
    let mut printer = ProgressPrinter::new("drift-check");
    let report = drift::drift_check(
        &pool,
        &engine,
        tenant.as_ref().map(TenantId::as_str),
        &mut |p| printer.update(p),
    )
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", drift::render(&report));
    }
    Ok(if report.drifted() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

pub async fn erase(args: EraseArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let tenant = tenant_arg(&args.tenant, "--tenant")?;
    let keyring = globals.keyring()?;
    let pool = globals.connect_giving_up_on_locks(2).await?;
    let erased = admin::erase::erase(&pool, &keyring, &tenant, &args.subject, &args.by).await?;
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
    let engine = engine_config(args.token_encoding, keyring).engine();
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
    Ok(ExitCode::SUCCESS)
}

pub async fn embedder(command: EmbedderCommand, globals: &Globals) -> anyhow::Result<ExitCode> {
    match command {
        EmbedderCommand::Use {
            name,
            tenant,
            no_wait,
            semantic,
        } => {
            let keyring = globals.keyring()?;
            let name =
                admin::embedder::known(&name).map_err(|e| anyhow::anyhow!("{}", e.message))?;
            let config = semantic.config()?;
            let pool = globals.connect(2).await?;
            let tenants = match parse_tenant(tenant)? {
                Some(tenant) => vec![tenant.as_str().to_owned()],
                None => admin::embedder::tenants(&pool).await?,
            };
            let embedder = if no_wait {
                None
            } else {
                Some(memd_embedder::load(name, &config.models)?)
            };
            let work = EmbeddingWork::new(
                config
                    .embedder
                    .as_deref()
                    .and_then(|n| admin::embedder::known(n).ok()),
                embedder.as_slice(),
                &keyring,
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
            let pool = globals.connect(2).await?;
            for tenant in admin::embedder::tenants(&pool).await? {
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
    Ok(ExitCode::SUCCESS)
}
