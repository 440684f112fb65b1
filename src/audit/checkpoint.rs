//! Signed checkpoints (RFC 6962's signed tree heads, for a hash chain).
//!
//! The hash chain alone catches an edited row only while nobody recomputes
//! the hashes after it; anyone who can write the database can. A checkpoint
//! is a tenant's head (seq and hash) at a time, signed with the Ed25519 key
//! derived from memd's key file, which is not in the database. An operator
//! keeps checkpoints elsewhere (`memd checkpoint --out DIR`); later,
//! `memd verify --checkpoint FILE...` proves the log still extends each:
//! the event at the checkpoint's seq must still have the hash it signed, and
//! the chain must still verify. A rewrite that rehashes the tail cannot
//! produce a matching signature without the key.

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};
use memd_core::{
    merkle,
    seal::{Keyring, signature_holds},
};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::domain::tenant::TenantId;

/// The signed statement's format tag (first line of what is signed): v2
/// also signs the root of the tenant's Merkle tree at `seq`, against which
/// inclusion proofs are checked; v1 (without it) still verifies.
pub const FORMAT: &str = "memd-checkpoint-v2";
pub const FORMAT_V1: &str = "memd-checkpoint-v1";

/// A tenant's head, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpoint {
    /// `memd-checkpoint-v2` (`-v1` for checkpoints signed before the tree).
    pub format: String,
    pub tenant: String,
    /// The last event it covers.
    pub seq: i64,
    /// That event's hash (hex): it covers every event before it.
    pub head_hash: String,
    /// The root (hex) of the Merkle tree of the first `seq` events (v2):
    /// what an inclusion proof leads to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_root: Option<String>,
    pub signed_at: DateTime<Utc>,
    /// Ed25519 public key (hex) that signed it; trust it only if it is
    /// the key you expect (`memd key public`).
    pub public_key: String,
    /// Ed25519 signature (hex) of [`Checkpoint::message`].
    pub signature: String,
}

impl Checkpoint {
    /// What is signed: one line each of format, tenant, seq, head hash and
    /// time (RFC 3339, microseconds, UTC).
    pub fn message(&self) -> String {
        statement(
            &self.tenant,
            self.seq,
            &self.head_hash,
            self.tree_root.as_deref(),
            self.signed_at,
        )
    }

    /// Whether it is signed by `trusted` (hex public key).
    pub fn signed_by(&self, trusted: &str) -> bool {
        let well_formed = match self.format.as_str() {
            FORMAT => self.tree_root.is_some(),
            FORMAT_V1 => self.tree_root.is_none(),
            _ => false,
        };
        well_formed
            && self.public_key.eq_ignore_ascii_case(trusted)
            && signature_holds(trusted, self.message().as_bytes(), &self.signature)
    }
}

/// v2 (with a tree root): format, tenant, seq, head hash, tree root, time;
/// v1: the same without the root.
fn statement(
    tenant: &str,
    seq: i64,
    head_hash: &str,
    tree_root: Option<&str>,
    signed_at: DateTime<Utc>,
) -> String {
    let time = signed_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    match tree_root {
        Some(root) => format!("{FORMAT}\n{tenant}\n{seq}\n{head_hash}\n{root}\n{time}"),
        None => format!("{FORMAT_V1}\n{tenant}\n{seq}\n{head_hash}\n{time}"),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(
        "no key to sign with: checkpoints need memd's key file (--key-file, MEMD_KEY_FILE; memd key generate)"
    )]
    NoKey,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("the tree root: {0}")]
    Tree(#[from] super::tree::ProofError),
}

/// What [`take`] did: the checkpoints it signed (or found signed), and the
/// tenants whose log it refused to sign.
#[derive(Debug, Default)]
pub struct Taken {
    pub signed: Vec<Checkpoint>,
    pub refused: Vec<Refusal>,
}

/// A head not signed: the log no longer extends the tenant's newest
/// checkpoint, so signing it would vouch for a rewritten history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub tenant: String,
    /// The checkpoint the log should extend.
    pub checkpoint_seq: i64,
    pub reason: String,
}

/// Signs the current head of `tenant` (or of every tenant with events) and
/// stores it; a head already checkpointed is returned as it was signed.
/// A head is signed only if the log still extends the tenant's newest
/// stored checkpoint ([`extends`]): otherwise it is refused (logged as an
/// error; the caller raises its alarms).
pub async fn take(
    pool: &PgPool,
    keyring: &Keyring,
    tenant: Option<&TenantId>,
) -> Result<Taken, CheckpointError> {
    let public_key = keyring.public_key().ok_or(CheckpointError::NoKey)?;
    let heads = sqlx::query!(
        "SELECT tenant_id, seq, hash FROM tenant_heads
          WHERE seq > 0 AND ($1::text IS NULL OR tenant_id = $1)
          ORDER BY tenant_id",
        tenant.map(TenantId::as_str)
    )
    .fetch_all(pool)
    .await?;
    let mut taken = Taken::default();
    for head in heads {
        let (tenant, seq, hash) = (head.tenant_id, head.seq, head.hash);
        // PostgreSQL keeps microseconds: sign exactly what is stored.
        let signed_at = Utc::now().trunc_subsecs(6);
        let head_hash = hex::encode(&hash);
        let tree_root = super::tree::root(pool, &tenant, seq as u64).await?;
        if let Some(refusal) = extends(pool, &tenant, seq, &hash, &tree_root).await? {
            tracing::error!(
                tenant = %refusal.tenant,
                checkpoint_seq = refusal.checkpoint_seq,
                reason = %refusal.reason,
                "REFUSED to sign a checkpoint: the log no longer extends the newest signed one \
                 (a rewritten log?); run `memd verify --checkpoint` with the copies you keep"
            );
            taken.refused.push(refusal);
            continue;
        }
        let signature = keyring
            .sign(
                statement(
                    &tenant,
                    seq,
                    &head_hash,
                    Some(&hex::encode(tree_root)),
                    signed_at,
                )
                .as_bytes(),
            )
            .ok_or(CheckpointError::NoKey)?;
        let row = sqlx::query_as!(
            Row,
            r#"WITH new AS (
                   INSERT INTO checkpoints (tenant_id, seq, head_hash, signed_at, public_key,
                                            signature, tree_root)
                   VALUES ($1, $2, $3, $4, decode($5, 'hex'), decode($6, 'hex'), $7)
                   ON CONFLICT (tenant_id, seq) DO NOTHING
                   RETURNING tenant_id, seq, head_hash, signed_at, public_key, signature, tree_root)
               SELECT tenant_id AS "tenant_id!", seq AS "seq!", head_hash AS "head_hash!",
                      signed_at AS "signed_at!", public_key AS "public_key!",
                      signature AS "signature!", tree_root
                 FROM new
               UNION ALL
               SELECT tenant_id, seq, head_hash, signed_at, public_key, signature, tree_root
                 FROM checkpoints
                WHERE tenant_id = $1 AND seq = $2 AND NOT EXISTS (SELECT FROM new)"#,
            tenant,
            seq,
            hash,
            signed_at,
            public_key,
            signature,
            tree_root.as_slice()
        )
        .fetch_one(pool)
        .await?;
        taken.signed.push(row.into());
    }
    Ok(taken)
}

/// Why the log of `tenant`, whose head is `seq` with `hash` and tree
/// `tree_root`, does not extend its newest stored checkpoint, if it does
/// not: the event at the checkpoint's seq no longer has the hash it signed,
/// the chain since it does not hold (links, hashes recomputed from the
/// rows), or the tree of the head is not proven to extend the tree it
/// signed (RFC 9162's consistency proof). The cost is the events since the
/// last checkpoint, not the whole log.
async fn extends(
    pool: &PgPool,
    tenant: &str,
    seq: i64,
    hash: &[u8],
    tree_root: &merkle::Hash,
) -> Result<Option<Refusal>, CheckpointError> {
    let Some(newest) = latest(pool, tenant).await? else {
        return Ok(None);
    };
    let refuse = |reason: String| {
        Ok(Some(Refusal {
            tenant: tenant.to_owned(),
            checkpoint_seq: newest.seq,
            reason,
        }))
    };
    if newest.seq > seq {
        return refuse(format!(
            "the log's head is seq {seq}, but a checkpoint signed seq {}: the log was cut",
            newest.seq
        ));
    }
    let stored: Option<Vec<u8>> = sqlx::query_scalar!(
        "SELECT hash FROM events WHERE tenant_id = $1 AND seq = $2",
        tenant,
        newest.seq
    )
    .fetch_optional(pool)
    .await?;
    let signed_hash: [u8; 32] = match hex::decode(&newest.head_hash)
        .ok()
        .and_then(|h| h.try_into().ok())
    {
        Some(hash) => hash,
        None => return refuse("the newest checkpoint's head hash is not 32 bytes".to_owned()),
    };
    match stored {
        Some(stored) if stored == signed_hash => {}
        Some(stored) => {
            return refuse(format!(
                "event {} now has hash {}, the checkpoint signed {}",
                newest.seq,
                hex::encode(stored),
                newest.head_hash
            ));
        }
        None => return refuse(format!("event {} is gone", newest.seq)),
    }
    if newest.seq == seq {
        return Ok((hash != signed_hash.as_slice()).then(|| Refusal {
            tenant: tenant.to_owned(),
            checkpoint_seq: newest.seq,
            reason: "the head row's hash is not the signed event's".to_owned(),
        }));
    }
    let walked = super::verify_from(pool, tenant, newest.seq, signed_hash).await?;
    if let Some(broken) = walked.broken {
        return refuse(format!(
            "the chain since it does not hold at seq {}: {}",
            broken.seq, broken.reason
        ));
    }
    if let Some(signed_root) = &newest.tree_root {
        let proof = super::tree::consistency(pool, tenant, newest.seq as u64, seq as u64).await?;
        if !proof.first_root.eq_ignore_ascii_case(signed_root)
            || proof.second_root != hex::encode(tree_root)
            || !proof.holds()
        {
            return refuse(format!(
                "the tree of {seq} events is not proven to extend the tree of {} the checkpoint \
                 signed (root {signed_root}; the log's tree there is {})",
                newest.seq, proof.first_root
            ));
        }
    }
    Ok(None)
}

/// The newest checkpoint of `tenant`, if any.
pub async fn latest(pool: &PgPool, tenant: &str) -> Result<Option<Checkpoint>, sqlx::Error> {
    let row = sqlx::query_as!(
        Row,
        "SELECT tenant_id, seq, head_hash, signed_at, public_key, signature, tree_root
           FROM checkpoints WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1",
        tenant
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Checkpoint::from))
}

/// A checkpoint as its table holds it.
struct Row {
    tenant_id: String,
    seq: i64,
    head_hash: Vec<u8>,
    signed_at: DateTime<Utc>,
    public_key: Vec<u8>,
    signature: Vec<u8>,
    tree_root: Option<Vec<u8>>,
}

impl From<Row> for Checkpoint {
    fn from(row: Row) -> Self {
        Checkpoint {
            format: if row.tree_root.is_some() {
                FORMAT
            } else {
                FORMAT_V1
            }
            .to_owned(),
            tenant: row.tenant_id,
            seq: row.seq,
            head_hash: hex::encode(row.head_hash),
            tree_root: row.tree_root.map(hex::encode),
            signed_at: row.signed_at,
            public_key: hex::encode(row.public_key),
            signature: hex::encode(row.signature),
        }
    }
}

/// What checking one checkpoint against the log found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The log still extends it.
    Holds,
    /// Not signed by the trusted key (or not a memd checkpoint): it proves
    /// nothing.
    BadSignature,
    /// The log no longer extends it.
    Broken { reason: String },
}

/// A checkpoint and what was found.
#[derive(Debug, Clone)]
pub struct Checked {
    pub checkpoint: Checkpoint,
    pub finding: Finding,
    /// For a broken one: the newest earlier checkpoint of its tenant that
    /// still holds; the first rewritten event comes after its seq.
    pub last_holding_seq: Option<i64>,
}

impl Checked {
    /// Whether the log still extends it, as signed by the trusted key.
    pub fn holds(&self) -> bool {
        self.finding == Finding::Holds
    }

    /// One line, as `memd verify --checkpoint` prints it and the console
    /// shows it.
    pub fn line(&self, trusted: &str) -> String {
        let c = &self.checkpoint;
        match &self.finding {
            Finding::Holds => format!(
                "ok      checkpoint tenant={} seq={} signed_at={}: the log extends it",
                c.tenant, c.seq, c.signed_at
            ),
            Finding::BadSignature => format!(
                "UNSIGNED checkpoint tenant={} seq={}: not signed by key {trusted}",
                c.tenant, c.seq
            ),
            Finding::Broken { reason } => {
                let after = self.last_holding_seq.map_or_else(
                    || "no earlier checkpoint holds".to_owned(),
                    |seq| format!("the first rewritten event is after seq {seq}"),
                );
                format!(
                    "BROKEN  checkpoint tenant={} seq={}: {reason}; {after}",
                    c.tenant, c.seq
                )
            }
        }
    }

    /// What the verify job reports for it.
    pub fn to_json(&self, trusted: &str) -> serde_json::Value {
        let (finding, reason) = match &self.finding {
            Finding::Holds => ("holds", None),
            Finding::BadSignature => ("bad_signature", None),
            Finding::Broken { reason } => ("broken", Some(reason)),
        };
        serde_json::json!({
            "seq": self.checkpoint.seq,
            "signed_at": self.checkpoint.signed_at,
            "finding": finding,
            "reason": reason,
            "last_holding_seq": self.last_holding_seq,
            "line": self.line(trusted),
        })
    }
}

/// Checks each checkpoint: signed by `trusted` (hex public key), the tree
/// root it signed (v2) is the root recomputed from the log's first `seq`
/// hashes, and the event at its seq still has the hash it signed. (The
/// chain from there on is `memd verify`'s walk.)
pub async fn check(
    pool: &PgPool,
    trusted: &str,
    checkpoints: Vec<Checkpoint>,
) -> Result<Vec<Checked>, sqlx::Error> {
    // Oldest first per tenant, so a break is bracketed by the last holding one.
    let mut by_tenant: BTreeMap<String, Vec<Checkpoint>> = BTreeMap::new();
    for checkpoint in checkpoints {
        by_tenant
            .entry(checkpoint.tenant.clone())
            .or_default()
            .push(checkpoint);
    }
    let mut checked = Vec::new();
    for (tenant, mut checkpoints) in by_tenant {
        checkpoints.sort_by_key(|c| c.seq);
        // The roots they signed, recomputed from the log's hashes alone.
        let sizes: Vec<u64> = checkpoints.iter().map(|c| c.seq.max(0) as u64).collect();
        let roots = super::tree::roots_from_log(pool, &tenant, &sizes).await?;
        let mut last_holding = None;
        for (checkpoint, root) in checkpoints.into_iter().zip(roots) {
            let finding = if !checkpoint.signed_by(trusted) {
                Finding::BadSignature
            } else {
                let stored: Option<Vec<u8>> = sqlx::query_scalar!(
                    "SELECT hash FROM events WHERE tenant_id = $1 AND seq = $2",
                    &tenant,
                    checkpoint.seq
                )
                .fetch_optional(pool)
                .await?;
                match stored {
                    Some(hash) if hex::encode(&hash) == checkpoint.head_hash => {
                        tree_root_differs(&checkpoint, root).unwrap_or(Finding::Holds)
                    }
                    Some(hash) => Finding::Broken {
                        reason: format!(
                            "event {} of {tenant} now has hash {}, the checkpoint signed {}: \
                             the log was rewritten at or before seq {}",
                            checkpoint.seq,
                            hex::encode(hash),
                            checkpoint.head_hash,
                            checkpoint.seq
                        ),
                    },
                    None => Finding::Broken {
                        reason: format!(
                            "{tenant} has no event {} any more: the log was cut",
                            checkpoint.seq
                        ),
                    },
                }
            };
            let holds = finding == Finding::Holds;
            checked.push(Checked {
                checkpoint: checkpoint.clone(),
                last_holding_seq: (!holds && finding != Finding::BadSignature)
                    .then_some(last_holding)
                    .flatten(),
                finding,
            });
            if holds {
                last_holding = Some(checkpoint.seq);
            }
        }
    }
    Ok(checked)
}

/// A v2 checkpoint whose signed tree root is not the root of the log's
/// first `seq` hashes: the log was rewritten, or the tree was built over
/// other leaves than the log's.
fn tree_root_differs(checkpoint: &Checkpoint, log_root: Option<merkle::Hash>) -> Option<Finding> {
    let signed = checkpoint.tree_root.as_deref()?;
    let (tenant, seq) = (&checkpoint.tenant, checkpoint.seq);
    let reason = match log_root {
        None => format!("{tenant} has no event {seq} any more: the log was cut"),
        Some(root) if hex::encode(root).eq_ignore_ascii_case(signed) => return None,
        Some(root) => format!(
            "the tree root of {tenant}'s first {seq} events, recomputed from the log, is {}; \
             the checkpoint signed {signed}: the log was rewritten at or before seq {seq}",
            hex::encode(root)
        ),
    };
    Some(Finding::Broken { reason })
}

/// Reads checkpoints from a file: one checkpoint, or a JSON array of them.
pub fn read_file(path: &std::path::Path) -> anyhow::Result<Vec<Checkpoint>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading checkpoint file {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let checkpoints = match value {
        serde_json::Value::Array(_) => serde_json::from_value(value),
        _ => serde_json::from_value(value).map(|one| vec![one]),
    }
    .with_context(|| format!("{} does not hold memd checkpoints", path.display()))?;
    Ok(checkpoints)
}
