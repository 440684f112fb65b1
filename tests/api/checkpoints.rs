//! Signed checkpoints catch what the hash chain cannot: a rewrite by
//! someone who can write the database and recomputes every hash after it.

use memd::domain::hash_chain::ChainedEvent;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{
    PgPool, Row,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use crate::helpers::{memd_cli, message, spawn_daemon, test_keyring};

/// What a superuser can do: turn the append-only trigger off, change event
/// `seq`'s text, recompute the hash of it and of every event after it, and
/// move the head. `memd verify` cannot tell.
async fn rewrite_and_rehash(pool: &PgPool, tenant: &str, seq: i64, text: &str) {
    sqlx::query("ALTER TABLE events DISABLE TRIGGER events_append_only")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE events SET content = jsonb_build_object('text', $3::text)
          WHERE tenant_id = $1 AND seq = $2",
    )
    .bind(tenant)
    .bind(seq)
    .bind(text)
    .execute(pool)
    .await
    .unwrap();
    let mut prev: [u8; 32] = sqlx::query_scalar::<_, Vec<u8>>(
        "SELECT prev_hash FROM events WHERE tenant_id = $1 AND seq = $2",
    )
    .bind(tenant)
    .bind(seq)
    .fetch_one(pool)
    .await
    .unwrap()
    .try_into()
    .unwrap();
    let rows = sqlx::query(
        "SELECT seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id,
                agent_id, kind, sensitivity, tags, refs, idempotency_key, artifact_id,
                content::text AS content_text
           FROM events WHERE tenant_id = $1 AND seq >= $2 ORDER BY seq",
    )
    .bind(tenant)
    .bind(seq)
    .fetch_all(pool)
    .await
    .unwrap();
    for row in rows {
        let tags: Vec<String> = row.get("tags");
        let refs: Vec<String> = row.get("refs");
        let created_at: chrono::DateTime<chrono::Utc> = row.get("created_at");
        let ts: chrono::DateTime<chrono::Utc> = row.get("ts");
        let agent_id: Option<String> = row.get("agent_id");
        let idempotency_key: Option<String> = row.get("idempotency_key");
        let artifact_id: Option<String> = row.get("artifact_id");
        let hash = ChainedEvent {
            tenant_id: tenant,
            seq: row.get("seq"),
            event_id: row.get("event_id"),
            created_at_us: created_at.timestamp_micros(),
            ts_us: ts.timestamp_micros(),
            session_id: row.get("session_id"),
            channel: row.get("channel"),
            actor_type: row.get("actor_type"),
            actor_id: row.get("actor_id"),
            agent_id: agent_id.as_deref(),
            kind: row.get("kind"),
            sensitivity: row.get("sensitivity"),
            tags: &tags,
            refs: &refs,
            idempotency_key: idempotency_key.as_deref(),
            artifact_id: artifact_id.as_deref(),
            content_text: row.get("content_text"),
        }
        .hash(&prev);
        sqlx::query(
            "UPDATE events SET prev_hash = $3, hash = $4 WHERE tenant_id = $1 AND seq = $2",
        )
        .bind(tenant)
        .bind(row.get::<i64, _>("seq"))
        .bind(prev.as_slice())
        .bind(hash.as_slice())
        .execute(pool)
        .await
        .unwrap();
        prev = hash;
    }
    sqlx::query("UPDATE tenant_heads SET hash = $2 WHERE tenant_id = $1")
        .bind(tenant)
        .bind(prev.as_slice())
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE events ENABLE TRIGGER events_append_only")
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test]
async fn a_rehashed_rewrite_passes_the_chain_but_not_a_signed_checkpoint(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for i in 1..=5 {
        app.append(&token, &message("s1", &format!("we agreed on plan {i}")))
            .await;
    }
    let url = app.database_url().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("checkpoints-{}", ulid::Ulid::generate()));
    let dir_arg = dir.to_str().unwrap();
    let (code, out, err) = memd_cli(&url, &["checkpoint", "--out", dir_arg]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("checkpoint tenant=acme seq=5"), "{out}");
    let file = dir.join("acme-5.json");
    let file_arg = file.to_str().unwrap();

    // The same checkpoint over HTTP, signed by the key the key file names.
    let latest: Value = app
        .get("/api/v1/checkpoints/latest", &token)
        .await
        .json()
        .await
        .unwrap();
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(latest, kept);
    let public = test_keyring().public_key().unwrap();
    assert_eq!(latest["public_key"], public.as_str());
    let globex = app.tenant("globex").await;
    let theirs = app.get("/api/v1/checkpoints/latest", &globex).await;
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND, "acme's is acme's");
    let (code, printed, _) = memd_cli(&url, &["key", "public"]).await;
    assert_eq!((code, printed.trim()), (0, public.as_str()));

    // The log moves on and still extends the checkpoint.
    app.append(&token, &message("s1", "plan 6")).await;
    let (code, out, err) = memd_cli(&url, &["verify", "--checkpoint", file_arg]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ok      checkpoint tenant=acme seq=5"),
        "{out}"
    );
    app.stop().await;

    rewrite_and_rehash(&app.pool, "acme", 3, "we agreed on nothing").await;
    let (code, out, err) = memd_cli(&url, &["verify"]).await;
    assert_eq!(code, 0, "the rehash fools the chain alone: {out}{err}");
    let (code, out, err) = memd_cli(&url, &["verify", "--checkpoint", file_arg]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("BROKEN  checkpoint tenant=acme seq=5"),
        "{out}"
    );

    // A checkpoint proves something only under the key the auditor trusts,
    // and only as signed.
    let other = memd_projectors::seal::Keyring::from_bytes(&[7; 32])
        .public_key()
        .unwrap();
    let (code, out, _) = memd_cli(
        &url,
        &["verify", "--checkpoint", file_arg, "--public-key", &other],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        out.contains("UNSIGNED checkpoint tenant=acme seq=5"),
        "{out}"
    );
    let mut forged = kept.clone();
    forged["head_hash"] = json!("00".repeat(32));
    let forged_file = dir.join("forged.json");
    std::fs::write(&forged_file, forged.to_string()).unwrap();
    let (code, out, _) = memd_cli(
        &url,
        &["verify", "--checkpoint", forged_file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1);
    assert!(out.contains("UNSIGNED"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[sqlx::test]
async fn without_a_checkpoint_the_route_says_so(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let response = app.get("/api/v1/checkpoints/latest", &token).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
}
