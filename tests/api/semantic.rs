//! Hybrid retrieval on the real daemon: vector candidates under the same
//! privacy and tenant rules as lexical ones, the embeddings projection
//! rebuilt byte for byte, the missing-model fallback, and the swap of
//! embedders without re-ingesting anything.

use std::{path::PathBuf, time::Duration};

use memd::{
    read::semantic::SemanticConfig,
    startup::{ProjectionConfig, ServeConfig},
};
use memd_embedder as embed;
use memd_embedder::{Embedder as _, ModelDirs};
use memd_projectors::{Schema, rebuild};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::section,
    helpers::{TestApp, memd_cli, spawn_daemon_with, wait_embedded, wait_projected, wait_until},
};

/// The model folder `ops/fetch-model.sh` fills (MEMD_MODEL_DIR overrides).
fn model_dir() -> PathBuf {
    std::env::var_os("MEMD_MODEL_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(ModelDirs::DEFAULT_MINILM),
        Into::into,
    )
}

/// The model folders, as `ops/fetch-model.sh` fills them.
fn models() -> ModelDirs {
    ModelDirs {
        minilm: model_dir(),
        mpnet: std::env::var_os("MEMD_MPNET_DIR").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(ModelDirs::DEFAULT_MPNET),
            Into::into,
        ),
    }
}

/// A daemon with `embedder`, sealing high memory at rest (so sealed
/// events are embedded from their opened text, and their vectors obey the
/// same privacy rules).
/// `config` without the warm-up before serving: a restart as cold as it
/// gets.
pub fn cold(config: ServeConfig) -> ServeConfig {
    ServeConfig {
        warm_up: Duration::ZERO,
        ..config
    }
}

pub fn semantic(embedder: &str) -> ServeConfig {
    ServeConfig {
        semantic: SemanticConfig {
            embedder: Some(embedder.to_owned()),
            models: models(),
            also: Vec::new(),
        },
        keyring: crate::helpers::test_keyring(),
        ..ServeConfig::default()
    }
}

fn said(session: &str, channel: &str, sensitivity: &str, text: &str) -> Value {
    json!({
        "session_id": session,
        "channel": channel,
        "sensitivity": sensitivity,
        "actor": {"type": "human", "id": "alice"},
        "kind": "message",
        "content": {"text": text},
    })
}

fn evidence_texts(acb: &Value) -> Vec<String> {
    section(acb, "retrieved_evidence")
        .iter()
        .map(|item| item["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Filler: Alice's everyday messages, sharing her name with everything.
const CHATTER: &[&str] = &[
    "Alice finished the quarterly budget spreadsheet this morning.",
    "Alice is flying to Lisbon for the conference next Tuesday.",
    "Alice asked the team to review the onboarding document.",
    "Alice will present the roadmap at the all-hands meeting.",
    "Alice prefers short status updates over long email threads.",
    "Alice fixed the flaky integration test in the billing service.",
];

#[sqlx::test]
async fn the_question_finds_memory_by_meaning_not_only_by_words(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    finds_memory_by_meaning(connect, "minilm").await;
}

#[sqlx::test]
async fn eight_bit_vectors_find_memory_by_meaning_too(_: PgPoolOptions, connect: PgConnectOptions) {
    finds_memory_by_meaning(connect, "minilm_int8").await;
}

#[sqlx::test]
async fn the_quality_tier_finds_memory_by_meaning_too(_: PgPoolOptions, connect: PgConnectOptions) {
    finds_memory_by_meaning(connect, "mpnet").await;
}

/// A candidate pool of 20, half of it for vector candidates: a word in a
/// few dozen memories fills its share of the lexical side, so older
/// memories holding it are found by meaning alone.
async fn small_pool(app: &TestApp, token: &str) {
    app.put_policy(
        token,
        &json!({"candidate_pool_max": 20, "retrieved_max": 20,
                "scoring": {"semantic_candidates": 10}}),
    )
    .await;
}

/// A chunk the lexical side did not reach (its word is common, so only the
/// newest of its matches are lexical candidates) but the vector side found
/// still counts the question's words it holds: its lexical score is
/// computed like any candidate's, not taken as 0.
#[sqlx::test]
async fn memory_found_by_meaning_alone_still_counts_the_words_it_holds(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect, semantic("hashed")).await;
    let token = app.tenant("acme").await;
    small_pool(&app, &token).await;
    const KEEPER: &str = "The lighthouse keeper painted the lighthouse door bright red.";
    let mut events = vec![said("s1", "private", "none", KEEPER)];
    events.extend((0..30).map(|i| {
        said(
            "s1",
            "private",
            "none",
            &format!("Lighthouse visit {i} logged."),
        )
    }));
    app.append(&token, &json!({ "events": events })).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;

    // "repainting" and "doorways" are other lexemes than "painted" and
    // "door": of the question's words the keeper's message holds only
    // "lighthouse", whose newest matches fill the lexical side.
    let acb = app
        .acb(
            &token,
            json!({"session_id": "other", "query_text": "Who was repainting the lighthouse doorways?",
                   "max_tokens": 2000}),
        )
        .await;
    let semantic = &acb["provenance"]["semantic"];
    assert_eq!(semantic["used"], true, "{semantic}");
    assert!(
        semantic["semantic_only"].as_u64().unwrap() >= 1,
        "{semantic}"
    );
    let evidence = section(&acb, "retrieved_evidence");
    let keeper = evidence
        .iter()
        .find(|item| item["text"].as_str().unwrap().contains("keeper"))
        .unwrap_or_else(|| panic!("{:#?}", evidence_texts(&acb)));
    assert!(keeper["semantic"].as_f64().unwrap() > 0.0, "{keeper}");
    assert!(keeper["lexical"].as_f64().unwrap() > 0.0, "{keeper}");
    app.stop().await;
}

/// The keeper's message (recorded with `sensitivity`), then 40 of Alice's
/// everyday ones, projected and embedded. With [`small_pool`], "Alice"
/// fills its share of the lexical side with the newer messages, so the
/// keeper's, which holds it, is found by meaning alone.
async fn keeper_among_chatter(app: &TestApp, token: &str, sensitivity: &str) {
    let mut events = vec![said(
        "s1",
        "private",
        sensitivity,
        "Alice's lighthouse keeper painted the door red.",
    )];
    events.extend((0..40).map(|i| {
        said(
            "s1",
            "private",
            "none",
            &format!("{} (note {i})", CHATTER[i % CHATTER.len()]),
        )
    }));
    app.append(token, &json!({ "events": events })).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(app, "acme", "hashed").await;
}

/// What a bundle holds, whatever way its rows were read: its evidence
/// with each item's scores, the pool's size, and how many candidates
/// meaning alone found.
fn held(acb: &Value) -> (Vec<[Value; 4]>, Value, Value) {
    let evidence = section(acb, "retrieved_evidence")
        .iter()
        .map(|item| ["id", "score", "lexical", "semantic"].map(|field| item[field].clone()))
        .collect();
    (
        evidence,
        acb["provenance"]["candidate_pool_size"].clone(),
        acb["provenance"]["semantic"]["semantic_only"].clone(),
    )
}

/// A bundle built while a core is idle reads the rows of the chunks found
/// by meaning beside its lexical statement; under load, after it, only
/// those the lexical side missed. Either way it is the same bundle.
#[sqlx::test]
async fn bundles_are_the_same_whether_semantic_rows_are_read_beside_or_after_the_lexical_ones(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect, semantic("hashed")).await;
    let token = app.tenant("acme").await;
    // The question's words the keeper's message holds are then read on
    // either path.
    small_pool(&app, &token).await;
    keeper_among_chatter(&app, &token, "none").await;
    let body = json!({"session_id": "other", "query_text": "Who was repainting Alice's doorways?",
                      "max_tokens": 2000});

    let alone = app.acb(&token, body.clone()).await;
    let semantic = &alone["provenance"]["semantic"];
    assert_eq!(semantic["used"], true);
    assert!(
        semantic["semantic_only"].as_u64().unwrap() >= 1,
        "{semantic}"
    );
    let keeper = section(&alone, "retrieved_evidence")
        .into_iter()
        .find(|item| item["text"].as_str().unwrap().contains("keeper"))
        .unwrap_or_else(|| panic!("{:#?}", evidence_texts(&alone)))
        .clone();
    assert!(keeper["lexical"].as_f64().unwrap() > 0.0, "{keeper}");
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(
        alone["provenance"]["diagnostics"]["read_beside_lexical"],
        cores > 1,
        "one bundle at a time leaves a core idle on {cores} cores"
    );
    assert_eq!(
        alone["provenance"]["diagnostics"]["vectors_compared"], semantic["vectors"],
        "{alone}"
    );
    // Asked again with nothing added: the same bundle, from the search
    // remembered, comparing the question with no vector.
    let again = app.acb(&token, body.clone()).await;
    assert_eq!(held(&again), held(&alone));
    assert_eq!(again["provenance"]["diagnostics"]["vectors_compared"], 0);
    // Four bundles a core at once: more than the cores are built together.
    let at_once = 4 * cores.max(4);
    let together: Vec<_> = (0..at_once)
        .map(|_| {
            let (client, url) = (
                app.client.clone(),
                format!("{}/api/v1/acb/build", app.base_url),
            );
            let (token, body) = (token.clone(), body.clone());
            tokio::spawn(async move {
                let response = client
                    .post(url)
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert!(response.status().is_success());
                response.json::<Value>().await.unwrap()
            })
        })
        .collect();
    let mut after = 0;
    for task in together {
        let acb = task.await.unwrap();
        assert_eq!(held(&acb), held(&alone));
        if acb["provenance"]["diagnostics"]["read_beside_lexical"] == false {
            after += 1;
        }
    }
    assert!(
        after > 0,
        "{at_once} bundles at once on {cores} cores: some read after the lexical side"
    );
    app.stop().await;
}

/// The rows of chunks found by meaning are remembered by the daemon's
/// vector index: a question that finds them again, the same one or
/// another, takes them from memory, and its bundle is the one a daemon
/// reading them from PostgreSQL builds. The words each chunk holds are
/// matched again for the new question, a sealed chunk's blinded ones too.
#[sqlx::test]
async fn rows_found_by_meaning_are_remembered_and_bundles_stay_the_same(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect.clone(), semantic("hashed")).await;
    let token = app.tenant("acme").await;
    small_pool(&app, &token).await;
    // Sealed at rest (high): its search vector holds its words blinded.
    keeper_among_chatter(&app, &token, "high").await;
    let ask =
        |question: &str| json!({"session_id": "other", "query_text": question, "max_tokens": 2000});
    let first = ask("Who was repainting Alice's doorways?");
    // Other words, the keeper holding none but "Alice" (now the second
    // lexeme, not the first): its row, remembered, is matched again.
    let second = ask("Who accidentally repainted Alice's doorways?");
    let remembered = |acb: &Value| {
        acb["provenance"]["diagnostics"]["rows_remembered"]
            .as_u64()
            .unwrap()
    };

    let first_acb = app.acb(&token, first.clone()).await;
    assert_eq!(first_acb["provenance"]["semantic"]["used"], true);
    assert_eq!(remembered(&first_acb), 0, "a new daemon remembers no row");
    let after_first = app.acb(&token, second.clone()).await;
    let report = &after_first["provenance"]["semantic"];
    assert!(remembered(&after_first) >= 1, "{report}");
    assert!(report["semantic_only"].as_u64().unwrap() >= 1, "{report}");
    let keeper = section(&after_first, "retrieved_evidence")
        .into_iter()
        .find(|item| item["text"].as_str().unwrap().contains("keeper"))
        .unwrap_or_else(|| panic!("{:#?}", evidence_texts(&after_first)))
        .clone();
    assert!(keeper["lexical"].as_f64().unwrap() > 0.0, "{keeper}");
    let again = app.acb(&token, first.clone()).await;
    assert_eq!(held(&again), held(&first_acb));
    app.stop().await;

    // A new daemon (not warmed up) reads every row from PostgreSQL: the
    // same bundle.
    let mut app = spawn_daemon_with(connect, cold(semantic("hashed"))).await;
    let fresh = app.acb(&token, second).await;
    assert_eq!(remembered(&fresh), 0);
    assert_eq!(held(&fresh), held(&after_first));
    app.stop().await;
}

/// A daemon with `embedder` whose tenant `acme` holds the [`CHATTER`],
/// projected and embedded, and that tenant's token.
async fn chatter_embedded(connect: PgConnectOptions, embedder: &str) -> (TestApp, String) {
    let app = spawn_daemon_with(connect, semantic(embedder)).await;
    let token = app.tenant("acme").await;
    let events: Vec<Value> = CHATTER
        .iter()
        .map(|t| said("s1", "private", "none", t))
        .collect();
    app.append(&token, &json!({ "events": events })).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", embedder).await;
    (app, token)
}

async fn finds_memory_by_meaning(connect: PgConnectOptions, embedder: &str) {
    let mut app = spawn_daemon_with(connect, semantic(embedder)).await;
    let token = app.tenant("acme").await;
    let mut events: Vec<Value> = CHATTER
        .iter()
        .map(|t| said("s1", "private", "none", t))
        .collect();
    events.insert(
        3,
        said(
            "s1",
            "private",
            "none",
            "Alice adopted a golden retriever puppy named Max last weekend.",
        ),
    );
    app.append(&token, &json!({ "events": events })).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", embedder).await;

    // Only "Alice" is shared with the answer, and with every other message.
    let question = "Which pet dog does Alice own?";
    let acb = app
        .acb(
            &token,
            json!({"session_id": "other", "query_text": question, "max_tokens": 2000}),
        )
        .await;
    let semantic = &acb["provenance"]["semantic"];
    assert_eq!(semantic["used"], true, "{semantic}");
    assert_eq!(semantic["embedder"], embedder);
    assert_eq!(semantic["lag_events"], 0);
    let evidence = section(&acb, "retrieved_evidence");
    assert!(
        evidence[0]["text"]
            .as_str()
            .unwrap()
            .contains("golden retriever"),
        "{:#?}",
        evidence_texts(&acb)
    );
    assert!(evidence[0]["semantic"].as_f64().unwrap() > 0.3);
    assert!(evidence[0]["lexical"].as_f64().is_some());

    // The same question with semantic retrieval off in the policy: only
    // the words count, and the answer is no better than the chatter.
    app.put_policy(&token, &json!({"scoring": {"semantic_weight": 0.0}}))
        .await;
    let lexical = app
        .acb(
            &token,
            json!({"session_id": "other", "query_text": question, "max_tokens": 2000}),
        )
        .await;
    assert_eq!(lexical["provenance"]["semantic"]["used"], false);
    assert!(
        lexical["provenance"]["semantic"]["reason"]
            .as_str()
            .unwrap()
            .contains("semantic_weight"),
    );
    app.stop().await;
}

#[sqlx::test]
async fn vector_candidates_obey_channel_sensitivity_and_tenant(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect, semantic("minilm")).await;
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let secret = "The patient's diagnosis is early-stage melanoma; treatment starts in May.";
    let private = "My sister was admitted to the oncology ward for skin cancer surgery.";
    let public = "The clinic's opening hours are 9 to 5 on weekdays.";
    app.append(
        &acme,
        &json!({"events": [
            said("s1", "private", "high", secret),
            said("s1", "private", "none", private),
            said("s1", "public", "none", public),
        ]}),
    )
    .await;
    // Another tenant's memory matches the question best of all.
    app.append(
        &other,
        &json!({"events": [said("s9", "public", "none",
            "Which illness does the patient have? Melanoma, a skin cancer.")]}),
    )
    .await;
    for tenant in ["acme", "other"] {
        wait_projected(&app.pool, tenant).await;
        wait_embedded(&app, tenant, "minilm").await;
    }
    // Shares no word with the sensitive memory: only meaning finds it.
    let question = "What illness does the patient have?";
    let private_acb = app
        .acb(
            &acme,
            json!({"session_id": "q", "query_text": question, "channel": "private"}),
        )
        .await;
    let texts = evidence_texts(&private_acb);
    assert!(texts.iter().any(|t| t.contains("melanoma")), "{texts:#?}");
    assert!(
        private_acb["provenance"]["semantic"]["semantic_candidates"]
            .as_u64()
            .unwrap()
            >= 3
    );

    let public_acb = app
        .acb(
            &acme,
            json!({"session_id": "q", "query_text": question, "channel": "public"}),
        )
        .await;
    assert_eq!(public_acb["provenance"]["semantic"]["used"], true);
    let texts = evidence_texts(&public_acb);
    assert!(
        texts
            .iter()
            .all(|t| !t.contains("melanoma") && !t.contains("oncology")),
        "a public bundle got private or sensitive memory: {texts:#?}"
    );
    for acb in [&private_acb, &public_acb] {
        assert!(
            evidence_texts(acb)
                .iter()
                .all(|t| !t.contains("Which illness")),
            "another tenant's memory in a bundle"
        );
    }
    app.stop().await;
}

#[sqlx::test]
async fn the_embeddings_projection_rebuilds_to_the_same_bytes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    rebuilds_to_the_same_bytes(connect, "minilm").await;
}

#[sqlx::test]
async fn eight_bit_embeddings_rebuild_to_the_same_bytes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    rebuilds_to_the_same_bytes(connect, "minilm_int8").await;
}

#[sqlx::test]
async fn quality_tier_embeddings_rebuild_to_the_same_bytes(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    rebuilds_to_the_same_bytes(connect, "mpnet").await;
}

async fn rebuilds_to_the_same_bytes(connect: PgConnectOptions, embedder: &str) {
    let projector = format!("embeddings_{embedder}");
    let mut app = spawn_daemon_with(connect, semantic(embedder)).await;
    let token = app.tenant("acme").await;
    // Arriving one by one: the workers embed small, uneven batches.
    for (index, text) in CHATTER.iter().chain(CHATTER).enumerate() {
        let text = format!("{text} (note {index}: {})", "and more ".repeat(index));
        app.append(&token, &said("s1", "private", "none", &text))
            .await;
    }
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", embedder).await;
    app.stop().await;

    let engine = ProjectionConfig::default()
        .engine_with_embeddings(std::slice::from_ref(&projector), &models())
        .unwrap()
        .only(std::slice::from_ref(&projector))
        .unwrap();
    let live = rebuild::digests(&app.pool, &engine, &Schema::live(), "acme")
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM projections.{projector}"
    )))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(rows, 12);
    rebuild::rebuild(&app.pool, &engine, Some("acme"), &mut |_| {})
        .await
        .unwrap();
    let rebuilt = rebuild::digests(&app.pool, &engine, &Schema::live(), "acme")
        .await
        .unwrap();
    assert_eq!(live, rebuilt, "rebuild from zero differs from incremental");
}

#[sqlx::test]
async fn without_model_files_the_daemon_serves_lexical_bundles_and_says_why(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let config = ServeConfig {
        semantic: SemanticConfig {
            embedder: Some("minilm".into()),
            models: ModelDirs {
                minilm: PathBuf::from("/nonexistent/memd-model"),
                mpnet: PathBuf::from("/nonexistent/memd-mpnet"),
            },
            also: Vec::new(),
        },
        ..ServeConfig::default()
    };
    let mut app = spawn_daemon_with(connect, config).await;
    let ready = app.readyz().await;
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["semantic"]["enabled"], false);
    let reason = ready["semantic"]["reason"].as_str().unwrap();
    assert!(reason.contains("ops/fetch-model.sh"), "{reason}");
    // No key file either: said as plainly.
    assert_eq!(ready["encryption_at_rest"]["enabled"], false);
    let how = ready["encryption_at_rest"]["how_to_enable"]
        .as_str()
        .unwrap();
    assert!(how.contains("memd key generate"), "{how}");

    let token = app.tenant("acme").await;
    app.append(
        &token,
        &said(
            "s1",
            "private",
            "none",
            "The deploy key rotates every Friday.",
        ),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let acb = app
        .acb(
            &token,
            json!({"session_id": "q", "query_text": "when does the deploy key rotate?"}),
        )
        .await;
    assert_eq!(acb["provenance"]["path"], "retrieval");
    assert_eq!(acb["provenance"]["semantic"]["used"], false);
    assert!(
        acb["provenance"]["semantic"]["reason"]
            .as_str()
            .unwrap()
            .contains("ops/fetch-model.sh")
    );
    assert!(evidence_texts(&acb)[0].contains("deploy key"));
    app.stop().await;
}

#[sqlx::test]
async fn switching_embedders_rebuilds_only_the_embeddings_and_bundles_keep_working(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let (mut app, token) = chatter_embedded(connect, "hashed").await;
    let (_, status) = app.get_json("/api/v1/admin/embedder", &token).await;
    assert_eq!(status["active"], "hashed");
    let before = other_projections(&app).await;
    let events_before = app.count("SELECT count(*) FROM events").await;

    let response = app
        .client
        .put(format!("{}/api/v1/admin/embedder", app.base_url))
        .bearer_auth(&token)
        .json(&json!({"embedder": "minilm"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["building"], "minilm");
    // Bundles keep working while the new projection is built.
    let during = app
        .acb(
            &token,
            json!({"session_id": "q", "query_text": "Lisbon conference"}),
        )
        .await;
    assert!(evidence_texts(&during)[0].contains("Lisbon"));

    let status = wait_until(
        Duration::from_secs(60),
        "the switch to minilm",
        async || {
            let (_, status) = app.get_json("/api/v1/admin/embedder", &token).await;
            if status["active"] == "minilm" && status["building"].is_null() {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;
    assert_eq!(status["active_seq"], status["head_seq"]);
    let after = app
        .acb(
            &token,
            json!({"session_id": "q", "query_text": "Lisbon conference"}),
        )
        .await;
    assert_eq!(after["provenance"]["semantic"]["embedder"], "minilm");
    assert_eq!(after["provenance"]["semantic"]["used"], true);
    assert_eq!(
        app.count("SELECT count(*) FROM projections.embeddings_hashed")
            .await,
        0,
        "the old projection is dropped"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM projections.embeddings_minilm")
            .await,
        6
    );
    assert_eq!(
        app.count("SELECT count(*) FROM events").await,
        events_before
    );
    assert_eq!(
        other_projections(&app).await,
        before,
        "no other projection was touched"
    );

    // An unknown embedder is refused, naming the field.
    let refused = app
        .client
        .put(format!("{}/api/v1/admin/embedder", app.base_url))
        .bearer_auth(&token)
        .json(&json!({"embedder": "word2vec"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "embedder");
    app.stop().await;

    // The CLI switches back, building in its own process.
    let url = app.database_url().await;
    let (code, stdout, stderr) = memd_cli(
        &url,
        &[
            "embedder",
            "use",
            "hashed",
            "--tenant",
            "acme",
            "--embedder",
            "minilm",
            "--model-dir",
            model_dir().to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("tenant=acme embedder=hashed switched"),
        "{stdout}"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM projections.embeddings_hashed")
            .await,
        6
    );
    assert_eq!(
        app.count("SELECT count(*) FROM projections.embeddings_minilm")
            .await,
        0
    );
}

/// Digests of every other projection, and their cursors.
async fn other_projections(app: &TestApp) -> (Value, Vec<(String, i64)>) {
    let engine = ProjectionConfig::default().engine();
    let digests = rebuild::digests(&app.pool, &engine, &Schema::live(), "acme")
        .await
        .unwrap();
    let cursors = sqlx::query_as(
        "SELECT projector, seq FROM projections.cursors
          WHERE tenant_id = 'acme' AND projector NOT LIKE 'embeddings_%' ORDER BY projector",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    (json!(digests), cursors)
}

#[test]
fn every_embedder_has_a_projection() {
    for name in embed::NAMES {
        assert!(
            memd_projectors::projections::embeddings::projector_name(name).is_some(),
            "{name}"
        );
    }
}

#[sqlx::test]
async fn after_a_restart_a_large_index_loads_in_the_background_and_bundles_do_not_wait(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect.clone(), semantic("hashed")).await;
    let token = app.tenant("acme").await;
    // More events than a bundle catches up with itself.
    for batch in 0..6 {
        let events: Vec<Value> = (0..1_000)
            .map(|i| {
                said(
                    "s1",
                    "private",
                    "none",
                    &format!("Note {batch}-{i}: the export of account {i} finished."),
                )
            })
            .collect();
        app.append(&token, &json!({ "events": events })).await;
    }
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;
    app.stop().await;

    // Cold, as a daemon is without a warm-up (`tests/api/warm.rs` shows
    // what one changes).
    let mut app = spawn_daemon_with(connect, cold(semantic("hashed"))).await;
    let ask = json!({"session_id": "q", "query_text": "export of account 17"});
    let first = app.acb(&token, ask.clone()).await;
    let reason = first["provenance"]["semantic"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(first["provenance"]["semantic"]["used"], false, "{first:#}");
    assert!(reason.contains("loading"), "{reason}");
    assert!(
        !evidence_texts(&first).is_empty(),
        "lexical evidence meanwhile"
    );
    let later = wait_until(Duration::from_secs(30), "the index loaded", async || {
        let later = app.acb(&token, ask.clone()).await;
        if later["provenance"]["semantic"]["used"] == true {
            Ok(later)
        } else {
            Err(later["provenance"]["semantic"].to_string())
        }
    })
    .await;
    assert_eq!(later["provenance"]["semantic"]["vectors"], 6_000);
    app.stop().await;
}

/// A bundle reads the embeddings cursor with the log's head, and another
/// bundle may bring the vector index past that cursor before the first one
/// searches (agents appending and asking at once). The index is kept as it
/// is, where it used to start over from zero (every vector of the tenant
/// read again in the background while bundles went lexical: 11 s at a
/// million chunks, over and over under load), and the older bundle's search
/// leaves out what came after its cursor. A projection that really went
/// back (rebuilt) is read again.
#[sqlx::test]
async fn an_index_past_a_bundles_cursor_is_kept_and_searched_only_up_to_that_cursor(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    use memd::{
        domain::event::Channel,
        read::{
            privacy::Visibility,
            retrieve::Scope,
            vectors::{Current, VectorIndex},
        },
    };
    use memd_embedder::{Embedder, HashedEmbedder};

    const TABLE: &str = "embeddings_hashed";
    let mut app = spawn_daemon_with(connect, semantic("hashed")).await;
    let token = app.tenant("acme").await;
    let cursor = async |app: &TestApp| -> (i64, i32) {
        sqlx::query_as(
            "SELECT seq, version FROM projections.cursors WHERE tenant_id = 'acme' AND projector = $1",
        )
        .bind(TABLE)
        .fetch_one(&app.pool)
        .await
        .unwrap()
    };
    let notes = |from: usize| {
        let events: Vec<Value> = (from..from + 10)
            .map(|i| {
                said(
                    "s1",
                    "public",
                    "none",
                    &format!("Lighthouse keeper note {i}."),
                )
            })
            .collect();
        json!({ "events": events })
    };
    app.append(&token, &notes(0)).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;
    let (earlier, version) = cursor(&app).await;
    app.append(&token, &notes(10)).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "hashed").await;
    let (newest, _) = cursor(&app).await;
    assert!(newest > earlier);
    // The index is the test's own: nothing else moves the cursor now.
    app.stop().await;
    let rows_through = async |seq: i64| -> usize {
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM projections.embeddings_hashed WHERE tenant_id = 'acme' AND seq <= $1",
        )
        .bind(seq)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        count as usize
    };
    let (first_rows, all_rows) = (rows_through(earlier).await, rows_through(newest).await);
    assert!(first_rows >= 10 && all_rows > first_rows);

    let index = VectorIndex::default();
    let ready = async |seq: i64, version: i32| match index
        .current(&app.pool, "acme", TABLE, seq, version)
        .await
        .unwrap()
    {
        Current::Ready(entry) => entry,
        Current::Loading { .. } => panic!("the index started loading again at cursor {seq}"),
    };
    // One bundle brings the index to the newest cursor, then one that read
    // the cursor before it searches.
    let held = ready(newest, version).await.read().await.len();
    assert_eq!(held, all_rows);
    let entry = ready(earlier, version).await;
    let vectors = entry.read().await;
    assert_eq!((vectors.len(), vectors.loaded_seq), (held, newest));
    let question = HashedEmbedder
        .embed(&["Which note did the lighthouse keeper write?"])
        .unwrap()
        .remove(0);
    let visibility = Visibility::new(Channel::Public);
    let k = all_rows + 5;
    let through = vectors.searched_through(&question, k, visibility, &Scope::default(), earlier);
    assert_eq!(through.neighbours.len(), first_rows, "the first ten notes");
    assert!(through.neighbours.iter().all(|n| n.position.0 <= earlier));
    let all = vectors.searched_through(&question, k, visibility, &Scope::default(), newest);
    assert_eq!(all.neighbours.len(), all_rows);
    drop(vectors);

    // The projection went back (a rebuild in progress): read again.
    sqlx::query(
        "UPDATE projections.cursors SET seq = $1 WHERE tenant_id = 'acme' AND projector = $2",
    )
    .bind(earlier)
    .bind(TABLE)
    .execute(&app.pool)
    .await
    .unwrap();
    let entry = ready(earlier, version).await;
    let vectors = entry.read().await;
    assert_eq!((vectors.len(), vectors.loaded_seq), (first_rows, earlier));
}

/// A question about nothing the tenant holds gets no evidence: relevance
/// is relative to the pool, so the floor is absolute (a word of the
/// question, or a meaning at least the embedder's calibrated similarity),
/// and a question of stop words alone is not searched at all. Each says so
/// in an omission; a question about what the tenant holds still finds it.
#[sqlx::test]
async fn a_question_about_nothing_held_gets_no_evidence_and_is_told_why(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(connect, semantic("minilm")).await;
    let token = app.tenant("acme").await;
    let turns = [
        "We moved the standup to 9:30 because Dana drops her kids at school.",
        "The invoice exporter times out above 500 rows; pages of 200 work.",
        "Priya is on holiday in Lisbon until the 14th.",
        "The staging database is rebuilt every Sunday night.",
        "Remember to rotate the deploy key before the audit.",
        "Lunch on Friday is at the Thai place near the office.",
    ];
    let events: Vec<Value> = turns
        .iter()
        .map(|t| said("s1", "private", "none", t))
        .collect();
    app.append(&token, &json!({"events": events})).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "minilm").await;
    let ask =
        |question: &str| json!({"session_id": "other", "query_text": question, "max_tokens": 2000});

    let held = app
        .acb(&token, ask("when does the exporter time out?"))
        .await;
    assert!(
        evidence_texts(&held).iter().any(|t| t.contains("500 rows")),
        "{:#?}",
        evidence_texts(&held)
    );
    assert_eq!(held["provenance"]["semantic"]["similarity_floor"], 0.2);

    for question in ["quantum chromodynamics lattice", "the and of it"] {
        let acb = app.acb(&token, ask(question)).await;
        assert!(
            evidence_texts(&acb).is_empty(),
            "{question}: {:#?}",
            evidence_texts(&acb)
        );
        let nothing: Vec<&Value> = acb["omissions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["reason"] == "nothing_relevant")
            .collect();
        assert_eq!(nothing.len(), 1, "{question}: {:#?}", acb["omissions"]);
        assert_eq!(nothing[0]["section"], "retrieved_evidence");
    }
    let unrelated = app.acb(&token, ask("quantum chromodynamics lattice")).await;
    let omission = unrelated["omissions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["reason"] == "nothing_relevant")
        .unwrap();
    assert!(omission["unrelated"].as_u64().unwrap() > 0, "{omission}");
    assert!(
        omission["best_similarity"].as_f64().unwrap() < 0.2,
        "{omission}"
    );

    // The policy's own floor overrides the calibrated one.
    app.put_policy(&token, &json!({"scoring": {"min_similarity": -1.0}}))
        .await;
    let anything = app.acb(&token, ask("quantum chromodynamics lattice")).await;
    assert_eq!(anything["provenance"]["semantic"]["similarity_floor"], -1.0);
    assert!(!evidence_texts(&anything).is_empty());
}

/// Semantic parity: ranked by meaning alone (no lexical weight, recency,
/// importance, floors, dedupe or rerank), a bundle's evidence is the tenant's
/// chunks in the order of their cosine with the question, as a brute-force
/// search over the vectors the embeddings projection stored ranks them,
/// even when the vector search returns fewer candidates than the tenant
/// holds chunks.
#[sqlx::test]
async fn ranked_by_meaning_alone_evidence_is_the_exact_cosine_order(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    const SUBJECTS: &[&str] = &[
        "the garden",
        "our boat",
        "the piano",
        "a marathon",
        "the bakery",
        "my thesis",
        "the roof",
        "a puppy",
        "the camera",
        "our trip",
    ];
    const DOINGS: &[&str] = &[
        "needs repairs before winter",
        "was sold at the market",
        "won a small prize",
        "made everyone laugh",
        "took three weekends",
        "cost more than planned",
        "is finally finished",
        "got rained on twice",
    ];
    let mut app = spawn_daemon_with(connect, semantic(embed::HashedEmbedder::NAME)).await;
    let token = app.tenant("acme").await;
    let events: Vec<Value> = (0..240)
        .map(|i| {
            let text = format!(
                "{} {} (entry {i})",
                SUBJECTS[i % SUBJECTS.len()],
                DOINGS[(i / SUBJECTS.len() + i) % DOINGS.len()]
            );
            said("s1", "private", "none", &text)
        })
        .collect();
    app.append(&token, &json!({ "events": events })).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", embed::HashedEmbedder::NAME).await;
    app.put_policy(
        &token,
        &json!({
            "scoring": {"lexical_weight": 0.0, "semantic_weight": 1.0, "beta": 0.0, "gamma": 0.0,
                        "min_relevance": 0.0, "min_similarity": -1.0, "semantic_candidates": 60,
                        "neighbour_weight": 0.0},
            "duplicate_similarity": 1.0,
            "retrieved_max": 25,
        }),
    )
    .await;

    let question = "was the boat repaired before the winter rains?";
    let asked = embed::HashedEmbedder
        .embed_questions(&[question])
        .unwrap()
        .remove(0);
    let stored: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT chunk_id, vector FROM projections.embeddings_hashed WHERE tenant_id = 'acme'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored.len(), 240);
    let cosine: std::collections::HashMap<String, f32> = stored
        .into_iter()
        .map(|(chunk, bytes)| {
            let vector = embed::decode(&bytes);
            let dot = vector.iter().zip(&asked).map(|(a, b)| a * b).sum::<f32>();
            (chunk, dot)
        })
        .collect();
    let mut exact: Vec<f32> = cosine.values().copied().collect();
    exact.sort_by(|a, b| b.total_cmp(a));

    let acb = app
        .acb(
            &token,
            json!({"session_id": "other", "query_text": question, "max_tokens": 8000}),
        )
        .await;
    assert_eq!(acb["provenance"]["semantic"]["used"], true);
    let ranked: Vec<f32> = section(&acb, "retrieved_evidence")
        .iter()
        .map(|item| cosine[item["chunk_id"].as_str().unwrap()])
        .collect();
    assert_eq!(ranked.len(), 25, "{acb}");
    // The same cosines in the same places: equal rankings, up to ties.
    for (place, (memd, brute)) in ranked.iter().zip(&exact).enumerate() {
        assert!(
            (memd - brute).abs() < 1e-5,
            "place {place}: memd ranks a chunk of cosine {memd}, brute force one of {brute}\nmemd {ranked:?}\nexact {:?}",
            &exact[..25]
        );
    }
    app.stop().await;
}

/// A message's vector is the normalised sum of its transcript line embedded
/// alone and read after the message before it in its session: the units
/// `memd-bench locomo`'s parity row searches exactly (with the same
/// `embeddings::after_previous` and `with_context`). The first message of a
/// session has no message before it and is embedded alone.
#[sqlx::test]
async fn a_message_is_embedded_alone_and_after_the_message_before_it(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    use memd_projectors::projections::{chunks, embeddings};

    let app = spawn_daemon_with(connect, semantic("hashed")).await;
    let token = app.tenant("acme").await;
    let texts = [
        "What did you paint last week?",
        "A sunset over the lake, with my kids!",
    ];
    for text in texts {
        app.append(&token, &said("s1", "private", "low", text))
            .await;
    }
    wait_embedded(&app, "acme", "hashed").await;
    let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT e.actor_id, v.vector FROM projections.embeddings_hashed v
           JOIN public.events e ON e.tenant_id = v.tenant_id AND e.seq = v.seq
          WHERE v.tenant_id = 'acme' ORDER BY v.seq",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    let lines: Vec<String> = rows
        .iter()
        .zip(texts)
        .map(|((actor, _), text)| chunks::said(actor, text))
        .collect();
    assert_eq!(
        lines[1],
        format!("alice: {}", texts[1]),
        "a transcript line"
    );
    let embedder = embed::HashedEmbedder;
    let alone = embedder.embed(&[&lines[0], &lines[1]]).unwrap();
    let in_context = embedder
        .embed(&[&embeddings::after_previous(&lines[0], &lines[1])])
        .unwrap();
    let mut second = alone[1].clone();
    embeddings::with_context(&mut second, &in_context[0]);
    let close = |stored: &[u8], expected: &[f32]| {
        let stored = embed::decode(stored);
        stored.len() == expected.len()
            && stored
                .iter()
                .zip(expected)
                .all(|(a, b)| (a - b).abs() < 1e-6)
    };
    assert!(close(&rows[0].1, &alone[0]), "the first is embedded alone");
    assert!(
        close(&rows[1].1, &second),
        "the second, alone and after the first"
    );
    assert!(!close(&rows[1].1, &alone[1]), "context changed the vector");
}

/// `scoring.question_precision` decides which vector of the question the
/// tenant's vectors are compared with: `exact` the model's f32 one (the
/// arithmetic stored vectors are computed with), `int8` (the default) the
/// cheaper 8-bit one. Each evidence item's `semantic` is then the cosine
/// of its stored vector with that question vector, closer to it than to
/// the other one's (the index rescores with 8-bit copies of the stored
/// vectors, so not equal to the last digit); provenance says which.
#[sqlx::test]
async fn the_question_is_embedded_in_the_precision_the_policy_asks_for(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let (mut app, token) = chatter_embedded(connect, "minilm").await;
    let stored: std::collections::HashMap<String, Vec<f32>> =
        sqlx::query_as::<_, (String, Vec<u8>)>(
            "SELECT chunk_id, vector FROM projections.embeddings_minilm WHERE tenant_id = 'acme'",
        )
        .fetch_all(&app.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(chunk, bytes)| (chunk, embed::decode(&bytes)))
        .collect();
    let question = "Where is Alice travelling for work?";
    let model = embed::load("minilm", &models()).unwrap();
    let exact = model.embed(&[question]).unwrap().remove(0);
    let int8 = model.embed_questions(&[question]).unwrap().remove(0);
    assert_ne!(exact, int8);

    for (precision, asked, other) in [("exact", &exact, &int8), ("int8", &int8, &exact)] {
        app.put_policy(
            &token,
            &json!({"scoring": {"question_precision": precision, "min_similarity": -1.0}}),
        )
        .await;
        let acb = app
            .acb(
                &token,
                json!({"session_id": "other", "query_text": question, "max_tokens": 4000}),
            )
            .await;
        assert_eq!(
            acb["provenance"]["semantic"]["question_precision"], precision,
            "{}",
            acb["provenance"]["semantic"]
        );
        let evidence = section(&acb, "retrieved_evidence");
        assert!(evidence.len() >= 5, "{:#?}", evidence_texts(&acb));
        let (mut off_asked, mut off_other) = (0.0, 0.0);
        for item in &evidence {
            let vector = &stored[item["chunk_id"].as_str().unwrap()];
            let cosine = |q: &[f32]| vector.iter().zip(q).map(|(a, b)| a * b).sum::<f32>() as f64;
            let memd = item["semantic"].as_f64().unwrap();
            assert!(
                (memd - cosine(asked)).abs() < 0.01,
                "{precision}: {memd} against {}",
                cosine(asked)
            );
            off_asked += (memd - cosine(asked)).abs();
            off_other += (memd - cosine(other)).abs();
        }
        assert!(
            off_asked < off_other,
            "{precision}: {off_asked} from its own question vector, {off_other} from the other"
        );
    }
    app.stop().await;
}
