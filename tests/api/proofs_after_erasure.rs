//! Proofs survive erasure: an erased subject's events stay leaves of the
//! Merkle tree (their chain hashes outlive the content), so a proof against
//! a checkpoint signed before the erasure still verifies after it and a
//! rebuild, a later checkpoint signs RFC 6962's root over the log's own
//! hashes, and `memd verify --checkpoint` recomputes that root from the log
//! and refuses a checkpoint whose signed root is another.

use std::path::Path;

use memd::audit::{
    checkpoint::Checkpoint,
    tree::{ConsistencyProof, InclusionProof},
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    helpers::{TestApp, memd_cli, message, spawn_daemon, test_keyring, wait_projected},
    proofs::{python_verifier, scratch_dir},
};

/// The subject's events: inside the first stored 16-leaf subtree, in the
/// second, and in the third (completed only after the erasure).
const SUBJECT_SEQS: &[i64] = &[10, 11, 12, 20, 35];

enum Erase {
    /// `memd erase`, which rebuilds the tenant's projections.
    Cli,
    /// `POST /api/v1/admin/erase`, then the rebuild job it queues.
    AdminRoute,
}

/// RFC 6962's Merkle tree hash, written from the RFC's definition (not from
/// memd's code) over the event hashes as leaves.
fn reference_root(event_hashes: &[Vec<u8>]) -> String {
    fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
        if leaves.len() == 1 {
            return leaves[0];
        }
        let mut k = 1;
        while k * 2 < leaves.len() {
            k *= 2;
        }
        let mut hasher = Sha256::new();
        hasher.update([1]);
        hasher.update(mth(&leaves[..k]));
        hasher.update(mth(&leaves[k..]));
        hasher.finalize().into()
    }
    let leaves: Vec<[u8; 32]> = event_hashes
        .iter()
        .map(|hash| {
            let mut hasher = Sha256::new();
            hasher.update([0]);
            hasher.update(hash);
            hasher.finalize().into()
        })
        .collect();
    hex::encode(mth(&leaves))
}

/// The log's hashes in seq order, straight from `events`.
async fn log_hashes(app: &TestApp, tenant: &str) -> Vec<(i64, Vec<u8>)> {
    sqlx::query_as("SELECT seq, hash FROM events WHERE tenant_id = $1 ORDER BY seq")
        .bind(tenant)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn proofs_hold_across_an_erasure(app: &TestApp, erase: Erase) {
    let token = app.tenant("acme").await;
    let mut ids = Vec::new();
    for seq in 1..=40_i64 {
        let mut event = message("s1", &format!("note {seq} about the quarterly plan"));
        if SUBJECT_SEQS.contains(&seq) {
            event["subject_id"] = json!("carol");
            event["content"]["text"] = json!(format!("Carol's phone is 555-01{seq}"));
        }
        let appended = app.append(&token, &event).await;
        ids.push(appended["event_id"].as_str().unwrap().to_owned());
    }
    wait_projected(&app.pool, "acme").await;
    let url = app.database_url().await;
    let dir = scratch_dir();
    let (code, out, err) = memd_cli(&url, &["checkpoint", "--out", dir.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}{err}");
    let before_file = dir.join("acme-40.json");
    let before = read_json(&before_file);

    match erase {
        Erase::Cli => {
            let (code, out, err) = memd_cli(
                &url,
                &[
                    "erase",
                    "--tenant",
                    "acme",
                    "--subject",
                    "carol",
                    "--by",
                    "ops",
                ],
            )
            .await;
            assert_eq!(code, 0, "{out}{err}");
            assert!(out.contains("rebuilt tenant=acme"), "{out}");
        }
        Erase::AdminRoute => {
            app.erase_and_rebuild(&token, json!({"subject_id": "carol"}))
                .await;
        }
    }
    for i in 1..=20 {
        app.append(&token, &message("s1", &format!("after the erasure {i}")))
            .await;
    }
    wait_projected(&app.pool, "acme").await;
    let (_, erased_event) = app
        .get_json(&format!("/api/v1/events/{}", ids[10]), &token)
        .await;
    assert_eq!(erased_event["erased"], true, "{erased_event}");

    // Event 40 and an erased event, as of the checkpoint signed before.
    for (index, name) in [(39, "last"), (10, "erased")] {
        let (status, proof) = app
            .get_json(
                &format!("/api/v1/events/{}/proof?tree_size=40", ids[index]),
                &token,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{proof}");
        assert_eq!(proof["root"], before["tree_root"], "{name}: {proof}");
        let typed: InclusionProof = serde_json::from_value(proof.clone()).unwrap();
        assert!(typed.holds(), "{name}");
        let proof_file = dir.join(format!("{name}.json"));
        std::fs::write(&proof_file, proof.to_string()).unwrap();
        let (code, out, err) = memd_cli(
            &url,
            &[
                "verify-proof",
                "--proof",
                proof_file.to_str().unwrap(),
                "--checkpoint",
                before_file.to_str().unwrap(),
            ],
        )
        .await;
        assert_eq!(code, 0, "{name}: {out}{err}");
        let (code, out) = python_verifier(&proof_file, &before_file).await;
        assert_eq!(code, 0, "{name}: {out}");
    }

    // A checkpoint after it signs the RFC's root over the log's own hashes.
    let (code, out, err) = memd_cli(&url, &["checkpoint", "--out", dir.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}{err}");
    let log = log_hashes(app, "acme").await;
    let head = log.len() as u64;
    assert_eq!(head, 61, "40, the erasure record, 20 more");
    let after_file = dir.join(format!("acme-{head}.json"));
    let after = read_json(&after_file);
    let hashes: Vec<Vec<u8>> = log.iter().map(|(_, hash)| hash.clone()).collect();
    assert_eq!(after["tree_root"], json!(reference_root(&hashes)));
    assert_eq!(before["tree_root"], json!(reference_root(&hashes[..40])));

    // The later tree extends the earlier one.
    let (status, consistency) = app
        .get_json(
            &format!("/api/v1/tree/consistency?first=40&second={head}"),
            &token,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{consistency}");
    let consistency: ConsistencyProof = serde_json::from_value(consistency).unwrap();
    assert!(consistency.holds());
    assert_eq!(json!(consistency.first_root), before["tree_root"]);
    assert_eq!(json!(consistency.second_root), after["tree_root"]);

    let (code, out, err) = memd_cli(
        &url,
        &[
            "verify",
            "--checkpoint",
            before_file.to_str().unwrap(),
            "--checkpoint",
            after_file.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches("ok      checkpoint").count(), 2, "{out}");

    // A checkpoint signed with the real key over another tree (the one a
    // tree without the erased leaves has) does not pass for the log's.
    let without_erased: Vec<Vec<u8>> = log
        .iter()
        .filter(|(seq, _)| !SUBJECT_SEQS.contains(seq))
        .map(|(_, hash)| hash.clone())
        .collect();
    let mut forged: Checkpoint = serde_json::from_value(after.clone()).unwrap();
    forged.tree_root = Some(reference_root(&without_erased));
    forged.signature = test_keyring().sign(forged.message().as_bytes()).unwrap();
    let forged_file = dir.join("forged.json");
    std::fs::write(&forged_file, serde_json::to_string(&forged).unwrap()).unwrap();
    let (code, out, err) = memd_cli(
        &url,
        &["verify", "--checkpoint", forged_file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("BROKEN  checkpoint"), "{out}");
    assert!(out.contains("recomputed from the log"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[sqlx::test]
async fn proofs_signed_before_an_erasure_hold_after_memd_erase_rebuilds(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    proofs_hold_across_an_erasure(&app, Erase::Cli).await;
}

#[sqlx::test]
async fn proofs_signed_before_an_erasure_hold_after_the_admin_routes_rebuild_job(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    proofs_hold_across_an_erasure(&app, Erase::AdminRoute).await;
}
