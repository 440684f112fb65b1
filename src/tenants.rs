//! Tenants and their API tokens: creating them (CLI) and resolving a bearer
//! token to its tenant (every API call).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use sqlx::PgPool;

use crate::{
    domain::tenant::{ApiToken, Scope, TenantId},
    invalidation::Invalidated,
};

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("tenant {0} already exists")]
    Exists(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Creates a tenant with its head row and a first token, in one transaction.
/// The token is returned in clear, once; only its hash is stored.
pub async fn create_tenant(
    pool: &PgPool,
    tenant: &TenantId,
    scope: Scope,
) -> Result<ApiToken, TenantError> {
    let mut tx = memd_projectors::transaction::begin(pool).await?;
    let created = sqlx::query!(
        "INSERT INTO tenants (tenant_id) VALUES ($1) ON CONFLICT DO NOTHING",
        tenant.as_str()
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if created == 0 {
        return Err(TenantError::Exists(tenant.to_string()));
    }
    sqlx::query!(
        "INSERT INTO tenant_heads (tenant_id) VALUES ($1)",
        tenant.as_str()
    )
    .execute(&mut *tx)
    .await?;
    let token = ApiToken::generate();
    let hash = token.hash();
    sqlx::query!(
        "INSERT INTO api_tokens (token_hash, tenant_id, scope) VALUES ($1, $2, $3)",
        hash.as_slice(),
        tenant.as_str(),
        scope.as_str()
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(token)
}

/// Creates `tenant` with its head row unless it exists, issuing no token
/// (an import fills it; `memd tenant token` issues its first token). True
/// when it was created.
pub async fn ensure_tenant(pool: &PgPool, tenant: &TenantId) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query!(
        "WITH t AS (INSERT INTO tenants (tenant_id) VALUES ($1)
                    ON CONFLICT DO NOTHING RETURNING tenant_id)
         INSERT INTO tenant_heads (tenant_id) SELECT tenant_id FROM t",
        tenant.as_str()
    )
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}

/// Issues another token for an existing tenant (rotation: issue, switch
/// the agents over, revoke the old one), bound to `agent` when given (an
/// agent's token: it acts as that agent only, and never with scope admin).
/// `None` if there is no such tenant.
pub async fn issue_token(
    pool: &PgPool,
    tenant: &TenantId,
    scope: Scope,
    agent: Option<&str>,
) -> Result<Option<ApiToken>, sqlx::Error> {
    let token = ApiToken::generate();
    let hash = token.hash();
    let inserted = sqlx::query!(
        "INSERT INTO api_tokens (token_hash, tenant_id, scope, agent_id)
         SELECT $1, tenant_id, $3, $4 FROM tenants WHERE tenant_id = $2",
        hash.as_slice(),
        tenant.as_str(),
        scope.as_str(),
        agent
    )
    .execute(pool)
    .await?
    .rows_affected();
    Ok((inserted == 1).then_some(token))
}

/// Revokes one token; returns its tenant, or `None` if no active token
/// matches. Daemons stop accepting it once their [`TokenCache`] entry
/// expires.
pub async fn revoke_token(pool: &PgPool, token: &ApiToken) -> Result<Option<String>, sqlx::Error> {
    let hash = token.hash();
    sqlx::query_scalar!(
        "UPDATE api_tokens SET revoked_at = now()
          WHERE token_hash = $1 AND revoked_at IS NULL RETURNING tenant_id",
        hash.as_slice()
    )
    .fetch_optional(pool)
    .await
}

/// Revokes every active token of a tenant; returns how many.
pub async fn revoke_all_tokens(pool: &PgPool, tenant: &TenantId) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "UPDATE api_tokens SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at IS NULL",
        tenant.as_str()
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// Who is calling: the tenant and scope of a valid, unrevoked token, and
/// the agent it is bound to (`None`: a tenant-wide operator token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: TenantId,
    pub scope: Scope,
    pub agent: Option<String>,
}

/// Channel on which a revoked (or deleted) token's hash is announced, hex,
/// by a trigger on `api_tokens`.
pub const TOKENS_CHANNEL: &str = "memd_tokens";

/// Resolves tokens, remembering answers for a short while so that a busy
/// agent's appends do not each pay a lookup. A revoked token is forgotten
/// as soon as its revocation is announced ([`TOKENS_CHANNEL`]), by every
/// daemon on the database; `ttl` bounds how stale an answer can be if a
/// notification is lost.
pub struct TokenCache {
    ttl: Duration,
    entries: Mutex<Remembered>,
    /// Counts the tokens notifications dropped (the metrics'
    /// `token_cache_invalidations`).
    invalidations: prometheus_client::metrics::counter::Counter,
}

impl TokenCache {
    pub fn new(ttl: Duration, invalidations: prometheus_client::metrics::counter::Counter) -> Self {
        Self {
            ttl,
            entries: Mutex::new(Remembered::default()),
            invalidations,
        }
    }

    pub async fn resolve(
        &self,
        pool: &PgPool,
        token: &ApiToken,
    ) -> Result<Option<Caller>, sqlx::Error> {
        let hash = token.hash();
        if let Some(caller) = self
            .entries
            .lock()
            .expect("token cache lock")
            .get(&hash, self.ttl)
        {
            return Ok(caller);
        }
        let row = sqlx::query!(
            "SELECT tenant_id, scope, agent_id FROM api_tokens
              WHERE token_hash = $1 AND revoked_at IS NULL",
            hash.as_slice()
        )
        .fetch_optional(pool)
        .await?;
        let caller =
            row.and_then(
                |row| match (TenantId::parse(&row.tenant_id), Scope::parse(&row.scope)) {
                    (Ok(tenant), Some(scope)) => Some(Caller {
                        tenant,
                        scope,
                        agent: row.agent_id,
                    }),
                    _ => None,
                },
            );
        self.entries
            .lock()
            .expect("token cache lock")
            .insert(hash, caller.clone(), self.ttl);
        Ok(caller)
    }
}

/// Tokens that resolve to a caller and tokens that resolve to none are
/// remembered apart, each bounded: anyone can send made-up tokens, so a
/// flood of them fills and empties only the unknown side, and every real
/// caller's answer stays. (Real tokens can only come from the database, so
/// the known side grows only as tokens are issued and used.)
#[derive(Default)]
struct Remembered {
    /// When each was looked up, and its caller.
    known: HashMap<[u8; 32], (Instant, Caller)>,
    unknown: HashMap<[u8; 32], Instant>,
}

impl Remembered {
    /// Known tokens kept at most: past this, the expired ones go first.
    const KNOWN_MAX: usize = 100_000;
    /// Unknown tokens kept at most: past this, they are all forgotten (a
    /// flood of made-up tokens costs a lookup each either way).
    const UNKNOWN_MAX: usize = 10_000;

    /// The remembered answer, while younger than `ttl`: `Some(None)` for a
    /// token known not to resolve.
    fn get(&self, hash: &[u8; 32], ttl: Duration) -> Option<Option<Caller>> {
        if let Some((at, caller)) = self.known.get(hash)
            && at.elapsed() < ttl
        {
            return Some(Some(caller.clone()));
        }
        match self.unknown.get(hash) {
            Some(at) if at.elapsed() < ttl => Some(None),
            _ => None,
        }
    }

    fn insert(&mut self, hash: [u8; 32], caller: Option<Caller>, ttl: Duration) {
        let now = Instant::now();
        match caller {
            Some(caller) => {
                self.unknown.remove(&hash);
                if self.known.len() >= Self::KNOWN_MAX {
                    self.known.retain(|_, (at, _)| at.elapsed() < ttl);
                }
                if self.known.len() >= Self::KNOWN_MAX {
                    self.known.clear();
                }
                self.known.insert(hash, (now, caller));
            }
            None => {
                self.known.remove(&hash);
                if self.unknown.len() >= Self::UNKNOWN_MAX {
                    self.unknown.clear();
                }
                self.unknown.insert(hash, now);
            }
        }
    }

    fn remove(&mut self, hash: &[u8; 32]) {
        self.known.remove(hash);
        self.unknown.remove(hash);
    }

    fn len(&self) -> usize {
        self.known.len() + self.unknown.len()
    }

    fn clear(&mut self) {
        self.known.clear();
        self.unknown.clear();
    }
}

impl Invalidated for TokenCache {
    fn channels(&self) -> &'static [&'static str] {
        &[TOKENS_CHANNEL]
    }

    fn heard(&self, _: &str, payload: &str) {
        let hash: Option<[u8; 32]> = hex::decode(payload)
            .ok()
            .and_then(|bytes| bytes.try_into().ok());
        let mut entries = self.entries.lock().expect("token cache lock");
        match hash {
            Some(hash) => {
                entries.remove(&hash);
                self.invalidations.inc();
            }
            // Not a hash: forget every token rather than miss one.
            None => self.forget(&mut entries),
        }
    }

    fn forget_all(&self) {
        self.forget(&mut self.entries.lock().expect("token cache lock"));
    }
}

impl TokenCache {
    /// Drops every cached token, counted as one invalidation each.
    fn forget(&self, entries: &mut Remembered) {
        self.invalidations.inc_by(entries.len() as u64);
        entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(tenant: &str) -> Caller {
        Caller {
            tenant: TenantId::parse(tenant).unwrap(),
            scope: Scope::Admin,
            agent: None,
        }
    }

    fn hash(n: u64) -> [u8; 32] {
        let mut hash = [0; 32];
        hash[..8].copy_from_slice(&n.to_le_bytes());
        hash
    }

    #[test]
    fn a_flood_of_made_up_tokens_never_forgets_a_real_caller() {
        let ttl = Duration::from_secs(60);
        let mut remembered = Remembered::default();
        remembered.insert(hash(u64::MAX), Some(caller("acme")), ttl);
        for n in 0..(3 * Remembered::UNKNOWN_MAX as u64) {
            remembered.insert(hash(n), None, ttl);
        }
        assert_eq!(
            remembered.get(&hash(u64::MAX), ttl),
            Some(Some(caller("acme")))
        );
        assert!(remembered.len() <= Remembered::UNKNOWN_MAX + 1);
        // The newest unknown token is remembered as unknown.
        let newest = hash(3 * Remembered::UNKNOWN_MAX as u64 - 1);
        assert_eq!(remembered.get(&newest, ttl), Some(None));
        // An answer older than the ttl is asked again.
        assert_eq!(remembered.get(&hash(u64::MAX), Duration::ZERO), None);
        // A token that became valid (or was revoked) moves sides.
        remembered.insert(newest, Some(caller("acme")), ttl);
        assert_eq!(remembered.get(&newest, ttl), Some(Some(caller("acme"))));
        remembered.insert(newest, None, ttl);
        assert_eq!(remembered.get(&newest, ttl), Some(None));
        remembered.remove(&newest);
        assert_eq!(remembered.get(&newest, ttl), None);
    }
}
