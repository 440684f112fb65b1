//! What auditors run: `verify`, `verify-proof` and `checkpoint`.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::Args;

use memd::audit::{self, checkpoint, tree::InclusionProof};

use super::{Globals, parse_tenant};

#[derive(Args)]
pub struct VerifyArgs {
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
}

#[derive(Args)]
pub struct VerifyProofArgs {
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
}

#[derive(Args)]
pub struct CheckpointArgs {
    #[arg(long)]
    tenant: Option<String>,
    /// Folder for the files (`<tenant>-<seq>.json`).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub async fn verify(args: VerifyArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let tenant = parse_tenant(args.tenant)?;
    let trusted = match (args.checkpoints.is_empty(), args.public_key) {
        (true, _) => None,
        (false, Some(key)) => Some(key),
        (false, None) => Some(globals.keyring()?.public_key().context(
            "--checkpoint needs the public key you trust: --public-key HEX, or the key file",
        )?),
    };
    let pool = globals.connect(2).await?;
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
        for path in &args.checkpoints {
            read.extend(checkpoint::read_file(path)?);
        }
        for checked in checkpoint::check(&pool, &trusted, read).await? {
            broken |= !checked.holds();
            println!("{}", checked.line(&trusted));
        }
    }
    Ok(if broken {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

pub async fn checkpoint(args: CheckpointArgs, globals: &Globals) -> anyhow::Result<ExitCode> {
    let tenant = parse_tenant(args.tenant)?;
    let keyring = globals.keyring()?;
    let pool = globals.connect(2).await?;
    let taken = checkpoint::take(&pool, &keyring, tenant.as_ref()).await?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for checkpoint in &taken.signed {
        let written = match &args.out {
            Some(dir) => {
                let path = dir.join(format!("{}-{}.json", checkpoint.tenant, checkpoint.seq));
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
    Ok(if taken.refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints what holds, or why not (exit 1).
pub fn verify_proof(args: &VerifyProofArgs) -> anyhow::Result<ExitCode> {
    let (proof, checkpoint) = (&args.proof, &args.checkpoint);
    let proof: InclusionProof = serde_json::from_str(
        &std::fs::read_to_string(proof).with_context(|| format!("reading {}", proof.display()))?,
    )
    .with_context(|| format!("{} is not an inclusion proof", proof.display()))?;
    let checkpoints = checkpoint::read_file(checkpoint)?;
    let [checkpoint] = checkpoints.as_slice() else {
        anyhow::bail!("{} must hold exactly one checkpoint", checkpoint.display());
    };
    let trusted = args.public_key.as_deref().unwrap_or(&checkpoint.public_key);
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
