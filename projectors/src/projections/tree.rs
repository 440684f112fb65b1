//! `event_tree`: the Merkle tree over each tenant's log ([`crate::merkle`]),
//! for inclusion and consistency proofs. Leaves are the events' chain
//! hashes in seq order (leaf `seq - 1`); the projection keeps the hash of
//! every complete subtree of `2^STORED_LEVEL` leaves and more, written as
//! soon as its last leaf arrives. Nothing in it depends on content, so
//! sealed events need no key here, and an erased subject's events are
//! leaves like any other: their chain hashes outlive the erasure.

use std::collections::HashMap;

use sqlx::PgConnection;

use crate::projector::{BoxFuture, Projector, Table};

use memd_core::{
    event::StoredEvent,
    merkle::{self, Hash, STORED_LEVEL},
};

const TABLES: &[Table] = &[Table {
    name: "event_tree",
    key: &["tenant_id", "level", "idx"],
}];

pub struct TreeProjector;

impl Projector for TreeProjector {
    fn name(&self) -> &'static str {
        "event_tree"
    }

    /// 2: erased events are leaves like any other (version 1 skipped them,
    /// so a tree rebuilt after an erasure moved every later leaf).
    fn version(&self) -> i32 {
        2
    }

    fn tables(&self) -> &'static [Table] {
        TABLES
    }

    fn reads_erased(&self) -> bool {
        true
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let Some(first) = events.first() else {
                return Ok(());
            };
            let block = 1_u64 << STORED_LEVEL;
            // Nothing to write until a block's last leaf arrives; most live
            // batches are a few events and complete none.
            let completes_a_block = events
                .iter()
                .any(|event| (event.seq as u64).is_multiple_of(block));
            if !completes_a_block {
                return Ok(());
            }
            // The leaves of the block this batch starts inside, from the log.
            let first_leaf = (first.seq - 1) as u64;
            let block_start = first_leaf - first_leaf % block;
            let mut leaves: Vec<Hash> = event_hashes(tx, tenant, block_start, first_leaf)
                .await?
                .iter()
                .map(|hash| merkle::leaf_hash(hash))
                .collect();
            // Nodes written by this batch, for the parents that follow.
            let mut written: HashMap<(u32, u64), Hash> = HashMap::new();
            let mut rows: (Vec<i16>, Vec<i64>, Vec<Vec<u8>>) = Default::default();
            for event in events {
                leaves.push(merkle::leaf_hash(&event.hash));
                let leaf = (event.seq - 1) as u64;
                if !(leaf + 1).is_multiple_of(block) {
                    continue;
                }
                let (mut level, mut index) = (STORED_LEVEL, leaf >> STORED_LEVEL);
                let mut hash = merkle::complete_root(&leaves);
                leaves.clear();
                loop {
                    written.insert((level, index), hash);
                    rows.0.push(level as i16);
                    rows.1.push(index as i64);
                    rows.2.push(hash.to_vec());
                    // A right child completes its parent.
                    if index % 2 == 0 {
                        break;
                    }
                    let left = match written.get(&(level, index - 1)) {
                        Some(left) => *left,
                        None => stored_node(tx, tenant, level, index - 1).await?,
                    };
                    hash = merkle::node_hash(&left, &hash);
                    level += 1;
                    index /= 2;
                }
            }
            if rows.0.is_empty() {
                return Ok(());
            }
            sqlx::query!(
                "INSERT INTO event_tree (tenant_id, level, idx, hash)
                 SELECT $1, * FROM unnest($2::smallint[], $3::bigint[], $4::bytea[])",
                tenant,
                &rows.0,
                &rows.1,
                &rows.2
            )
            .execute(&mut *tx)
            .await?;
            Ok(())
        })
    }
}

/// The chain hashes of leaves `from..to` (events `from+1..=to`), in order;
/// an error if the log does not hold them all. Also what proofs read for
/// subtrees this projection does not keep.
pub async fn event_hashes(
    tx: &mut PgConnection,
    tenant: &str,
    from: u64,
    to: u64,
) -> Result<Vec<Vec<u8>>, sqlx::Error> {
    if from >= to {
        return Ok(Vec::new());
    }
    let hashes: Vec<Vec<u8>> = sqlx::query_scalar!("SELECT hash FROM public.events WHERE tenant_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq", tenant, from as i64, to as i64)
    .fetch_all(&mut *tx)
    .await?;
    if hashes.len() as u64 != to - from {
        return Err(sqlx::Error::Protocol(format!(
            "event_tree of {tenant}: events {}..={to} are not all in the log",
            from + 1
        )));
    }
    Ok(hashes)
}

/// A node this projection wrote in an earlier batch.
async fn stored_node(
    tx: &mut PgConnection,
    tenant: &str,
    level: u32,
    index: u64,
) -> Result<Hash, sqlx::Error> {
    let hash: Vec<u8> = sqlx::query_scalar!(
        "SELECT hash FROM event_tree WHERE tenant_id = $1 AND level = $2 AND idx = $3",
        tenant,
        level as i16,
        index as i64
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| {
        sqlx::Error::Protocol(format!(
            "event_tree of {tenant}: node ({level}, {index}) missing; rebuild the projection"
        ))
    })?;
    hash.try_into()
        .map_err(|_| sqlx::Error::Protocol("event_tree: a hash is not 32 bytes".to_owned()))
}
