//! A tenant's bundle policy as a file: `memd policy export FILE` writes the
//! JSON document `GET /api/v1/policy` returns; `memd policy import FILE`
//! checks one (absent fields take their defaults) and stores it, exactly as
//! `PUT /api/v1/policy` does, so policies can live in version control.

use std::path::Path;

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    domain::tenant::TenantId,
    read::policy::{self, Policy},
};

/// Writes the tenant's policy (stored, or the defaults) to `path`.
pub async fn export(pool: &PgPool, tenant: &TenantId, path: &Path) -> anyhow::Result<Policy> {
    let policy = policy::load(pool, tenant.as_str()).await?;
    let mut document = serde_json::to_string_pretty(&policy).expect("a policy serializes");
    document.push('\n');
    std::fs::write(path, document).with_context(|| format!("writing {}", path.display()))?;
    Ok(policy)
}

/// Reads, checks and stores the policy in `path`; a bad document is refused
/// with the failing field named, and the stored policy stays as it was.
pub async fn import(pool: &PgPool, tenant: &TenantId, path: &Path) -> anyhow::Result<Policy> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let document: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON document", path.display()))?;
    let policy =
        Policy::parse(document).map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
    policy::store(pool, tenant.as_str(), &policy).await?;
    Ok(policy)
}
