//! Inclusion and consistency proofs: an auditor holding a signed checkpoint
//! checks that one event is in the log, with memd's verifier and with the
//! standalone Python script, and that a later log extends an earlier one.

use std::path::{Path, PathBuf};

use memd::audit::tree::{ConsistencyProof, InclusionProof};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{memd_cli, message, spawn_daemon, wait_projected};

pub(crate) fn scratch_dir() -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("proofs-{}", ulid::Ulid::generate()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `ops/verify_proof.py PROOF CHECKPOINT`: its exit code and output.
pub(crate) async fn python_verifier(proof: &Path, checkpoint: &Path) -> (i32, String) {
    python_verifier_with(proof, checkpoint, &[]).await
}

/// [`python_verifier`] with more arguments.
async fn python_verifier_with(proof: &Path, checkpoint: &Path, more: &[&str]) -> (i32, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ops/verify_proof.py");
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new("python3")
            .arg(script)
            .arg(proof)
            .arg(checkpoint)
            .args(more)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python verifier ran past 60 s")
    .expect("python3 runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

#[sqlx::test]
async fn an_event_is_proven_against_a_signed_checkpoint_and_a_changed_proof_is_not(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut ids = Vec::new();
    // 40 events: stored subtrees of 16 and 32 leaves, and a partial tail.
    for i in 1..=40 {
        let appended = app
            .append(&token, &message("s1", &format!("decision number {i}")))
            .await;
        ids.push(appended["event_id"].as_str().unwrap().to_owned());
    }
    wait_projected(&app.pool, "acme").await;
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM projections.event_tree WHERE tenant_id = 'acme'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(stored, 3, "nodes of leaves 0-15, 16-31 and 0-31");

    let url = app.database_url().await;
    let dir = scratch_dir();
    let (code, out, err) = memd_cli(&url, &["checkpoint", "--out", dir.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}{err}");
    let checkpoint_file = dir.join("acme-40.json");
    let checkpoint: Value =
        serde_json::from_str(&std::fs::read_to_string(&checkpoint_file).unwrap()).unwrap();
    assert_eq!(checkpoint["format"], "memd-checkpoint-v2");

    // Event 7, as of the checkpoint; the log moves on meanwhile.
    app.append(&token, &message("s1", "after the checkpoint"))
        .await;
    let response = app
        .get(
            &format!("/api/v1/events/{}/proof?tree_size=40", ids[6]),
            &token,
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let proof: Value = response.json().await.unwrap();
    assert_eq!(proof["root"], checkpoint["tree_root"]);
    assert_eq!(
        (proof["seq"].as_i64(), proof["leaf_index"].as_u64()),
        (Some(7), Some(6))
    );
    assert_eq!(
        proof["path"].as_array().unwrap().len(),
        6,
        "log2(40) rounded up"
    );
    let event: Value = app
        .get(&format!("/api/v1/events/{}", ids[6]), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        proof["event_hash"], event["hash"],
        "the leaf is the event's chain hash"
    );
    let typed: InclusionProof = serde_json::from_value(proof.clone()).unwrap();
    assert!(typed.holds());

    let proof_file = dir.join("proof.json");
    std::fs::write(&proof_file, proof.to_string()).unwrap();
    let verify = |proof: PathBuf| {
        let (url, checkpoint) = (url.clone(), checkpoint_file.clone());
        async move {
            memd_cli(
                &url,
                &[
                    "verify-proof",
                    "--proof",
                    proof.to_str().unwrap(),
                    "--checkpoint",
                    checkpoint.to_str().unwrap(),
                ],
            )
            .await
        }
    };
    let (code, out, err) = verify(proof_file.clone()).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok      event"), "{out}");
    let (code, out) = python_verifier(&proof_file, &checkpoint_file).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok      event"), "{out}");
    // The proof binds the hash; with the event in hand the script ties the
    // hash to its content too, and a changed text does not pass.
    let event_file = dir.join("event.json");
    std::fs::write(&event_file, event.to_string()).unwrap();
    let (code, out) = python_verifier_with(
        &proof_file,
        &checkpoint_file,
        &["--event", event_file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("its content (--event) hashes to the proven hash"),
        "{out}"
    );
    let mut altered = event.clone();
    altered["content"]["text"] = json!("decision number 70");
    std::fs::write(&event_file, altered.to_string()).unwrap();
    let (code, out) = python_verifier_with(
        &proof_file,
        &checkpoint_file,
        &["--event", event_file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("hashes to"), "{out}");

    // Changed: one hash of the path, the event's hash, the signed root.
    let mut changed_path = proof.clone();
    changed_path["path"][2] = json!("ab".repeat(32));
    let mut other_event = proof.clone();
    other_event["event_hash"] = json!("cd".repeat(32));
    for (name, changed) in [("path", changed_path), ("event", other_event)] {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, changed.to_string()).unwrap();
        let (code, out, _) = verify(file.clone()).await;
        assert_eq!(code, 1, "{name}: {out}");
        assert!(out.starts_with("FAILED"), "{out}");
        let (code, out) = python_verifier(&file, &checkpoint_file).await;
        assert_eq!(code, 1, "{name}: {out}");
    }
    let mut forged = checkpoint.clone();
    forged["tree_root"] = json!("ef".repeat(32));
    let forged_file = dir.join("forged-checkpoint.json");
    std::fs::write(&forged_file, forged.to_string()).unwrap();
    let (code, out) = python_verifier(&proof_file, &forged_file).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signature"), "{out}");

    // The projection is disposable: without its rows, the proof is the same
    // (computed from the log's hashes).
    sqlx::query("DELETE FROM projections.event_tree WHERE tenant_id = 'acme'")
        .execute(&app.pool)
        .await
        .unwrap();
    let again: Value = app
        .get(
            &format!("/api/v1/events/{}/proof?tree_size=40", ids[6]),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again, proof);
    let _ = std::fs::remove_dir_all(&dir);
}

#[sqlx::test]
async fn a_later_log_is_proven_to_extend_an_earlier_one(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for i in 1..=37 {
        app.append(&token, &message("s1", &format!("note {i}")))
            .await;
    }
    wait_projected(&app.pool, "acme").await;
    let response = app
        .get("/api/v1/tree/consistency?first=21&second=37", &token)
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let proof: ConsistencyProof = response.json().await.unwrap();
    assert!(proof.holds());
    let earlier: InclusionProof = app
        .get(
            &format!(
                "/api/v1/events/{}/proof?tree_size=21",
                first_event_id(&app, "acme").await
            ),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(proof.first_root, earlier.root, "the same tree of 21");
    let mut rewritten = proof.clone();
    rewritten.first_root = "00".repeat(32);
    assert!(!rewritten.holds());
    // `second` defaults to the whole log.
    let whole: ConsistencyProof = app
        .get("/api/v1/tree/consistency?first=21", &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole, proof);
}

async fn first_event_id(app: &crate::helpers::TestApp, tenant: &str) -> String {
    sqlx::query_scalar("SELECT event_id FROM events WHERE tenant_id = $1 AND seq = 1")
        .bind(tenant)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn proofs_outside_the_log_or_the_tenant_are_refused_naming_the_field(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let other = app.tenant("globex").await;
    let mut last = Value::Null;
    for i in 1..=5 {
        last = app
            .append(&token, &message("s1", &format!("note {i}")))
            .await;
    }
    let id = last["event_id"].as_str().unwrap();
    for (query, field) in [
        ("tree_size=0", "tree_size"),
        ("tree_size=6", "tree_size"),
        ("tree_size=4", "tree_size"),
        ("tree_size=x", "tree_size"),
    ] {
        let response = app
            .get(&format!("/api/v1/events/{id}/proof?{query}"), &token)
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    for (query, field) in [
        ("first=0&second=5", "first"),
        ("first=5&second=9", "second"),
    ] {
        let response = app
            .get(&format!("/api/v1/tree/consistency?{query}"), &token)
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let theirs = app.get(&format!("/api/v1/events/{id}/proof"), &other).await;
    assert_eq!(
        theirs.status(),
        StatusCode::NOT_FOUND,
        "another tenant's event"
    );
}
