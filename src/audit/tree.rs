//! Proofs from each tenant's Merkle tree ([`memd_core::merkle`]): the
//! root at a size, an event's inclusion proof, and the consistency proof
//! between two sizes. The complete subtrees a proof needs come from the
//! `event_tree` projection where it has them, and from the log's own hashes
//! otherwise (subtrees under 16 leaves, or ones the projection has not
//! written yet), so proofs are right even while the projection lags.

use std::collections::{BTreeSet, HashMap};

use memd_core::merkle::{self, Hash, STORED_LEVEL, Subtree};

use memd_projectors::projections::tree as event_tree;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// The leaf of one event, and the hashes that lead from it to the root of
/// the tree of `tree_size` leaves (RFC 9162's inclusion proof).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InclusionProof {
    pub tenant: String,
    pub event_id: String,
    pub seq: i64,
    /// `seq - 1`.
    pub leaf_index: u64,
    /// Leaves of the tree proven against: the log's first `tree_size`
    /// events (a checkpoint's `seq`).
    pub tree_size: u64,
    /// The event's chain hash (hex), as `GET /api/v1/events/{id}` shows it.
    pub event_hash: String,
    /// The audit path (hex), leaf to root.
    pub path: Vec<String>,
    /// The root these hashes lead to (hex): a checkpoint's `tree_root`.
    pub root: String,
}

impl InclusionProof {
    /// Whether the path leads from the event's hash to `root`.
    pub fn holds(&self) -> bool {
        let (Some(event_hash), Some(path), Some(root)) = (
            decode(&self.event_hash),
            self.path
                .iter()
                .map(|h| decode(h))
                .collect::<Option<Vec<_>>>(),
            decode(&self.root),
        ) else {
            return false;
        };
        self.leaf_index.checked_add(1) == u64::try_from(self.seq).ok()
            && merkle::verify_inclusion(
                self.leaf_index,
                self.tree_size,
                &merkle::leaf_hash(&event_hash),
                &path,
                &root,
            )
    }
}

/// That the tree of `second` leaves extends the tree of `first` leaves
/// (RFC 9162's consistency proof).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsistencyProof {
    pub tenant: String,
    pub first: u64,
    pub second: u64,
    pub first_root: String,
    pub second_root: String,
    /// Hex hashes.
    pub proof: Vec<String>,
}

impl ConsistencyProof {
    pub fn holds(&self) -> bool {
        let (Some(first_root), Some(second_root), Some(proof)) = (
            decode(&self.first_root),
            decode(&self.second_root),
            self.proof
                .iter()
                .map(|h| decode(h))
                .collect::<Option<Vec<_>>>(),
        ) else {
            return false;
        };
        merkle::verify_consistency(self.first, self.second, &first_root, &second_root, &proof)
    }
}

fn decode(hex_hash: &str) -> Option<Hash> {
    hex::decode(hex_hash).ok()?.try_into().ok()
}

#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// A size outside the log, or a leaf outside the size.
    #[error("{0}")]
    OutOfRange(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The seq and chain hash of `event_id`, a leaf of `tenant`'s tree, when
/// the agent `agent` (or a tenant-wide caller: `None`) may read the event.
pub async fn leaf(
    pool: &PgPool,
    tenant: &str,
    event_id: &str,
    agent: Option<&str>,
) -> Result<Option<(i64, Vec<u8>)>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT seq, hash FROM events WHERE tenant_id = $1 AND event_id = $2 AND {owner}",
        owner = crate::read::privacy::event_row_condition(3)
    )))
    .bind(tenant)
    .bind(event_id)
    .bind(agent)
    .fetch_optional(pool)
    .await
}

/// Events in `tenant`'s log.
pub async fn log_size(pool: &PgPool, tenant: &str) -> Result<u64, sqlx::Error> {
    let seq: Option<i64> =
        sqlx::query_scalar!("SELECT seq FROM tenant_heads WHERE tenant_id = $1", tenant)
            .fetch_optional(pool)
            .await?;
    Ok(seq.unwrap_or(0).max(0) as u64)
}

/// The root of the tree of `tenant`'s first `size` events.
pub async fn root(pool: &PgPool, tenant: &str, size: u64) -> Result<Hash, ProofError> {
    check_size(pool, tenant, size).await?;
    let subtrees = resolve(
        pool,
        tenant,
        merkle::needed(|lookup| merkle::root(size, &lookup)),
    )
    .await?;
    Ok(merkle::root(size, &|s| subtrees[&s]))
}

/// The inclusion proof of the event at `seq` (its chain hash
/// `event_hash`) in the tree of `tree_size`.
pub async fn inclusion(
    pool: &PgPool,
    tenant: &str,
    event_id: &str,
    seq: i64,
    event_hash: &[u8],
    tree_size: u64,
) -> Result<InclusionProof, ProofError> {
    check_size(pool, tenant, tree_size).await?;
    let leaf = (seq - 1) as u64;
    if seq < 1 || leaf >= tree_size {
        return Err(ProofError::OutOfRange(format!(
            "event {event_id} (seq {seq}) is not among the first {tree_size} events"
        )));
    }
    let needed = merkle::needed(|lookup| {
        merkle::inclusion_path(leaf, tree_size, &lookup);
        merkle::root(tree_size, &lookup);
    });
    let subtrees = resolve(pool, tenant, needed).await?;
    let lookup = |s: Subtree| subtrees[&s];
    Ok(InclusionProof {
        tenant: tenant.to_owned(),
        event_id: event_id.to_owned(),
        seq,
        leaf_index: leaf,
        tree_size,
        event_hash: hex::encode(event_hash),
        path: merkle::inclusion_path(leaf, tree_size, &lookup)
            .iter()
            .map(hex::encode)
            .collect(),
        root: hex::encode(merkle::root(tree_size, &lookup)),
    })
}

/// The proof that the tree of `second` extends the tree of `first`.
pub async fn consistency(
    pool: &PgPool,
    tenant: &str,
    first: u64,
    second: u64,
) -> Result<ConsistencyProof, ProofError> {
    if first == 0 || first > second {
        return Err(ProofError::OutOfRange(format!(
            "first ({first}) must be at least 1 and at most second ({second})"
        )));
    }
    check_size(pool, tenant, second).await?;
    let needed = merkle::needed(|lookup| {
        merkle::consistency_proof(first, second, &lookup);
        merkle::root(first, &lookup);
        merkle::root(second, &lookup);
    });
    let subtrees = resolve(pool, tenant, needed).await?;
    let lookup = |s: Subtree| subtrees[&s];
    Ok(ConsistencyProof {
        tenant: tenant.to_owned(),
        first,
        second,
        first_root: hex::encode(merkle::root(first, &lookup)),
        second_root: hex::encode(merkle::root(second, &lookup)),
        proof: merkle::consistency_proof(first, second, &lookup)
            .iter()
            .map(hex::encode)
            .collect(),
    })
}

/// The roots of the trees of `tenant`'s first `sizes` events (ascending),
/// recomputed from the log's own hashes in one pass: no projection row is
/// read, so a tree projection that is wrong cannot vouch for itself. A size
/// beyond the log has no root (`None`).
pub async fn roots_from_log(
    pool: &PgPool,
    tenant: &str,
    sizes: &[u64],
) -> Result<Vec<Option<Hash>>, sqlx::Error> {
    const PAGE: i64 = 10_000;
    let mut roots = Vec::with_capacity(sizes.len());
    let mut frontier = merkle::Frontier::default();
    let mut wanted = sizes.iter().copied().peekable();
    let last = sizes.iter().copied().max().unwrap_or(0);
    while wanted.peek() == Some(&0) {
        roots.push(None);
        wanted.next();
    }
    'pages: while frontier.size() < last {
        let page = sqlx::query!(
            "SELECT seq, hash FROM events WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            tenant,
            frontier.size() as i64,
            PAGE
        )
        .fetch_all(pool)
        .await?;
        if page.is_empty() {
            break;
        }
        for (seq, hash) in page.into_iter().map(|row| (row.seq, row.hash)) {
            if seq as u64 != frontier.size() + 1 {
                // A hole: leaves after it would sit at the wrong index.
                break 'pages;
            }
            frontier.push(&hash);
            while wanted.peek() == Some(&frontier.size()) {
                roots.push(frontier.root());
                wanted.next();
            }
        }
    }
    roots.extend(wanted.map(|_| None));
    Ok(roots)
}

async fn check_size(pool: &PgPool, tenant: &str, size: u64) -> Result<(), ProofError> {
    let events = log_size(pool, tenant).await?;
    if size == 0 || size > events {
        return Err(ProofError::OutOfRange(format!(
            "tree_size {size}: the log has {events} events (a tree has 1 to {events} leaves)"
        )));
    }
    Ok(())
}

/// The hashes of `needed` complete subtrees: stored ones in one statement,
/// the others computed.
async fn resolve(
    pool: &PgPool,
    tenant: &str,
    needed: BTreeSet<Subtree>,
) -> Result<HashMap<Subtree, Hash>, sqlx::Error> {
    let (levels, indexes): (Vec<i16>, Vec<i64>) = needed
        .iter()
        .filter(|(level, _)| *level >= STORED_LEVEL)
        .map(|(level, index)| (*level as i16, *index as i64))
        .unzip();
    let stored = sqlx::query!(
        "SELECT t.level, t.idx, t.hash FROM projections.event_tree t
           JOIN unnest($2::smallint[], $3::bigint[]) AS n (level, idx)
             ON t.level = n.level AND t.idx = n.idx
          WHERE t.tenant_id = $1",
        tenant,
        &levels,
        &indexes
    )
    .fetch_all(pool)
    .await?;
    let mut found: HashMap<Subtree, Hash> = stored
        .into_iter()
        .filter_map(|row| {
            Some((
                (row.level as u32, row.idx as u64),
                row.hash.try_into().ok()?,
            ))
        })
        .collect();
    for subtree in needed {
        if !found.contains_key(&subtree) {
            let hash = computed(pool, tenant, subtree, &mut found).await?;
            found.insert(subtree, hash);
        }
    }
    Ok(found)
}

/// A complete subtree the projection does not have: from its two halves
/// (stored, or computed in turn) down to blocks of `2^STORED_LEVEL` leaves,
/// which are read from the log.
fn computed<'a>(
    pool: &'a PgPool,
    tenant: &'a str,
    (level, index): Subtree,
    known: &'a mut HashMap<Subtree, Hash>,
) -> memd_projectors::projector::BoxFuture<'a, Result<Hash, sqlx::Error>> {
    Box::pin(async move {
        if let Some(hash) = known.get(&(level, index)) {
            return Ok(*hash);
        }
        if level > STORED_LEVEL {
            let stored: Option<Vec<u8>> = sqlx::query_scalar!(
                "SELECT hash FROM projections.event_tree WHERE tenant_id = $1 AND level = $2 AND idx = $3",
                tenant,
                level as i16,
                index as i64
            )
            .fetch_optional(pool)
            .await?;
            let hash = match stored.and_then(|h| Hash::try_from(h).ok()) {
                Some(hash) => hash,
                None => {
                    let left = computed(pool, tenant, (level - 1, 2 * index), known).await?;
                    let right = computed(pool, tenant, (level - 1, 2 * index + 1), known).await?;
                    merkle::node_hash(&left, &right)
                }
            };
            known.insert((level, index), hash);
            return Ok(hash);
        }
        let (from, to) = (index << level, (index + 1) << level);
        let hashes =
            event_tree::event_hashes(&mut *pool.acquire().await?, tenant, from, to).await?;
        let leaves: Vec<Hash> = hashes.iter().map(|h| merkle::leaf_hash(h)).collect();
        let hash = merkle::complete_root(&leaves);
        known.insert((level, index), hash);
        Ok(hash)
    })
}
