//! Signed checkpoints catch what the hash chain cannot: a rewrite by
//! someone who can write the database and recomputes every hash after it.

use memd::{audit::checkpoint, domain::tenant::TenantId};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{memd_cli, message, rewrite_and_rehash, spawn_daemon, test_keyring};

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
    let other = memd_core::seal::Keyring::from_bytes(&[7; 32])
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

/// Signs the tenant's head now, as `memd checkpoint` would, and returns it
/// as an auditor keeps it.
async fn checkpoint_now(pool: &sqlx::PgPool, tenant: &str) -> Value {
    let tenant = TenantId::parse(tenant).unwrap();
    let taken = checkpoint::take(pool, &test_keyring(), Some(&tenant))
        .await
        .unwrap();
    serde_json::to_value(&taken.signed[0]).unwrap()
}

#[sqlx::test]
async fn the_verify_job_checks_pasted_checkpoints_and_catches_a_rehashed_rewrite(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut kept = Vec::new();
    for i in 1..=5 {
        app.append(&token, &message("s1", &format!("we agreed on plan {i}")))
            .await;
        if i == 2 || i == 5 {
            kept.push(checkpoint_now(&app.pool, "acme").await);
        }
    }
    let public = test_keyring().public_key().unwrap();
    let verify = async |body: Value| {
        let (status, queued) = app.post_admin("verify", &token, Some(body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
        let job = app
            .wait_job(&token, queued["job_id"].as_str().unwrap())
            .await;
        assert_eq!(job["status"], "done", "{job}");
        job["result"].clone()
    };
    let with_checkpoints = json!({"checkpoints": kept, "public_key": public});
    let result = verify(with_checkpoints.clone()).await;
    assert_eq!(result["ok"], true, "{result}");
    let findings: Vec<&Value> = result["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["finding"])
        .collect();
    assert_eq!(findings, [&json!("holds"), &json!("holds")]);

    rewrite_and_rehash(&app.pool, "acme", 3, "we agreed on nothing").await;
    let alone = verify(json!({})).await;
    assert_eq!(
        alone["ok"], true,
        "the rehash fools the chain alone: {alone}"
    );
    let result = verify(with_checkpoints).await;
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(result["broken"], Value::Null, "the chain itself verifies");
    let [before, after] = result["checkpoints"].as_array().unwrap().as_slice() else {
        panic!("two checkpoints: {result}");
    };
    assert_eq!(
        (&before["seq"], &before["finding"]),
        (&json!(2), &json!("holds"))
    );
    assert_eq!(
        (&after["seq"], &after["finding"]),
        (&json!(5), &json!("broken"))
    );
    assert_eq!(after["last_holding_seq"], 2, "the rewrite is after seq 2");
    let line = after["line"].as_str().unwrap();
    assert!(
        line.starts_with("BROKEN  checkpoint tenant=acme seq=5"),
        "{line}"
    );

    // Under a key the auditor does not trust, a checkpoint proves nothing.
    let other = memd_core::seal::Keyring::from_bytes(&[7; 32])
        .public_key()
        .unwrap();
    let result = verify(json!({"checkpoints": [kept[0]], "public_key": other})).await;
    assert_eq!(result["ok"], false);
    assert_eq!(result["checkpoints"][0]["finding"], "bad_signature");

    // Bad requests name the field, and nothing is queued for them.
    let globex = app.tenant("globex").await;
    app.append(&globex, &message("s1", "theirs")).await;
    let theirs = checkpoint_now(&app.pool, "globex").await;
    let mut missing_seq = kept[0].clone();
    missing_seq.as_object_mut().unwrap().remove("seq");
    for (body, field) in [
        (
            json!({"checkpoints": [kept[0], theirs], "public_key": public}),
            "checkpoints[1].tenant",
        ),
        (json!({"checkpoints": [kept[0]]}), "public_key"),
        (
            json!({"checkpoints": [kept[0]], "public_key": "zz"}),
            "public_key",
        ),
        (
            json!({"checkpoints": [missing_seq], "public_key": public}),
            "checkpoints[0].seq",
        ),
        (
            json!({"checkpoints": kept[0], "public_key": public}),
            "checkpoints",
        ),
        (json!({"tenant": "globex"}), "tenant"),
    ] {
        let (status, answer) = app.post_admin("verify", &token, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
}

/// A superuser rewrites the log and rehashes the chain consistently: the
/// chain alone passes, but nothing new is signed with the real key. The
/// daemon's signer and `memd checkpoint` both refuse (the log no longer
/// extends the newest signed checkpoint), the metrics count it and
/// `/readyz` names the tenant.
#[sqlx::test]
async fn a_rewritten_and_rehashed_log_is_never_signed(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = crate::helpers::spawn_daemon_with(
        connect,
        memd::startup::ServeConfig {
            keyring: test_keyring(),
            checkpoint_interval: std::time::Duration::from_millis(100),
            metrics_listen: Some("127.0.0.1:0".into()),
            ..memd::startup::ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    for i in 1..=10 {
        app.append(&token, &message("s1", &format!("we agreed on plan {i}")))
            .await;
    }
    let signed = |seq: i64| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM checkpoints WHERE tenant_id = 'acme' AND seq >= $1",
            )
            .bind(seq)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let bound = std::time::Duration::from_secs(30);
    crate::helpers::wait_until(bound, "the signer signs seq 10", || async {
        match signed(10).await {
            0 => Err("no checkpoint at seq 10".to_owned()),
            _ => Ok(()),
        }
    })
    .await;

    rewrite_and_rehash(&app.pool, "acme", 3, "we agreed on nothing").await;
    app.append(&token, &message("s1", "and then more happened"))
        .await;
    let chain = memd::audit::verify_chains(&app.pool, None).await.unwrap();
    assert!(
        chain.iter().all(|r| r.broken.is_none()),
        "the chain alone passes"
    );

    let refusal = crate::helpers::wait_until(bound, "/readyz names the refusal", || async {
        let ready = app.readyz().await;
        match ready["refused_checkpoints"]["acme"].as_str() {
            Some(reason) => Ok(reason.to_owned()),
            None => Err(ready.to_string()),
        }
    })
    .await;
    assert!(refusal.contains("now has hash"), "{refusal}");
    let scraped = app
        .client
        .get(format!("{}/metrics", app.metrics_url.as_ref().unwrap()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        scraped.contains("memd_checkpoints_refused_total{tenant=\"acme\"}"),
        "{scraped}"
    );
    let (code, out, err) = memd_cli(
        &app.database_url().await,
        &["checkpoint", "--tenant", "acme"],
    )
    .await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("REFUSED tenant=acme (newest checkpoint seq=10)"),
        "{out}"
    );
    assert_eq!(signed(11).await, 0, "nothing past the rewrite was signed");
}
