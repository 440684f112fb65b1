//! Retrieval filters on the real daemon: a bundle asked for one session,
//! time range, agent, kind or tag set retrieves only that memory, on the
//! lexical path and on the vector path, and says what it was narrowed to.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::section,
    helpers::{spawn_daemon, spawn_daemon_with, wait_embedded, wait_projected},
    semantic::semantic,
};

fn said(session: &str, ts: &str, agent: &str, tags: &[&str], text: &str) -> Value {
    json!({
        "session_id": session,
        "channel": "private",
        "ts": ts,
        "agent_id": agent,
        "tags": tags,
        "actor": {"type": "human", "id": "alice"},
        "kind": "message",
        "content": {"text": text},
    })
}

fn evidence(acb: &Value) -> Vec<String> {
    section(acb, "retrieved_evidence")
        .iter()
        .map(|item| item["text"].as_str().unwrap().trim_end().to_owned())
        .collect()
}

const RETRIEVER: &str = "Alice adopted a golden retriever named Max; the dog loves the lake.";
const BEAGLE: &str = "Bob brought home a beagle puppy called Rex last spring.";
const TRIP: &str = "Alice booked the train to Porto for the team offsite.";
const PLANT: &str = "Alice repotted the fern on the office windowsill.";

/// Four memories in two sessions, two months, two agents and a few tags;
/// Bob said the beagle's (a speaker is searched with the words).
fn memories() -> Value {
    let mut beagle = said(
        "may",
        "2026-05-04T10:00:00Z",
        "keeper",
        &["pets", "family"],
        BEAGLE,
    );
    beagle["actor"]["id"] = json!("bob");
    json!({"events": [
        said("march", "2026-03-02T10:00:00Z", "scout", &["pets"], RETRIEVER),
        said("march", "2026-03-03T10:00:00Z", "scout", &["travel"], TRIP),
        beagle,
        said("may", "2026-05-05T10:00:00Z", "keeper", &["office"], PLANT),
    ]})
}

#[sqlx::test]
async fn filters_restrict_lexical_and_vector_candidates_alike(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let mut app = spawn_daemon_with(connect, semantic("minilm")).await;
    let token = app.tenant("acme").await;
    app.append(&token, &memories()).await;
    wait_projected(&app.pool, "acme").await;
    wait_embedded(&app, "acme", "minilm").await;
    // "dog" and "Alice" find the retriever by its words; the beagle shares
    // no word with the question, so only its meaning can find it.
    let question = "Which dog does Alice have?";
    let ask = |filters: Value| json!({"session_id": "q", "query_text": question, "max_tokens": 2000, "filters": filters});

    let all = app.acb(&token, ask(json!({}))).await;
    assert!(all["provenance"].get("retrieval_filters").is_none());
    assert!(
        evidence(&all).iter().any(|t| t == RETRIEVER),
        "{:#?}",
        evidence(&all)
    );

    // One session: the retriever, best on both paths, is not a candidate
    // on either. The vector scan found May's two memories, the nearest it
    // could within the filter, where unfiltered it finds all four; the
    // beagle came by meaning alone.
    assert_eq!(all["provenance"]["semantic"]["semantic_candidates"], 4);
    let may = app.acb(&token, ask(json!({"sessions": ["may"]}))).await;
    let semantic = &may["provenance"]["semantic"];
    assert_eq!(semantic["used"], true, "{semantic}");
    assert_eq!(semantic["semantic_candidates"], 2, "{semantic}");
    assert_eq!(semantic["semantic_only"], 1, "{semantic}");
    assert_eq!(may["provenance"]["candidate_pool_size"], 2);
    let texts = evidence(&may);
    assert!(!texts.is_empty());
    assert!(
        texts.iter().all(|t| t == BEAGLE || t == PLANT),
        "{texts:#?}"
    );
    assert_eq!(
        may["provenance"]["retrieval_filters"],
        json!({"sessions": ["may"]})
    );
    // The standing sections are not narrowed: the session's recent window
    // is still its own (here, none).

    // A time range, an agent, tags: each alone leaves only what it names.
    for (filters, expected) in [
        (
            json!({"since": "2026-03-01T00:00:00Z", "until": "2026-04-01T00:00:00Z"}),
            vec![RETRIEVER, TRIP],
        ),
        (json!({"agents": ["keeper"]}), vec![BEAGLE, PLANT]),
        (
            json!({"tags_any": ["family", "travel"]}),
            vec![TRIP, BEAGLE],
        ),
        (json!({"tags_all": ["pets", "family"]}), vec![BEAGLE]),
    ] {
        let acb = app.acb(&token, ask(filters.clone())).await;
        let texts = evidence(&acb);
        assert!(
            texts.iter().all(|t| expected.contains(&t.as_str())),
            "{filters}: {texts:#?}"
        );
        assert!(!texts.is_empty(), "{filters}: nothing retrieved");
        assert_eq!(acb["provenance"]["retrieval_filters"], filters);
    }
    // No memory of the asked kind: nothing retrieved, by either path.
    let decisions = app.acb(&token, ask(json!({"kinds": ["decision"]}))).await;
    assert!(
        evidence(&decisions).is_empty(),
        "{:#?}",
        evidence(&decisions)
    );
    assert_eq!(decisions["provenance"]["candidate_pool_size"], 0);
    app.stop().await;
}

#[sqlx::test]
async fn pinned_memory_follows_the_filters_and_bad_ones_are_refused(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    let mut events = memories();
    events["events"].as_array_mut().unwrap().push(said(
        "march",
        "2026-03-04T10:00:00Z",
        "scout",
        &["pinned"],
        "Always answer Alice in Portuguese.",
    ));
    app.append(&token, &events).await;
    wait_projected(&app.pool, "acme").await;

    let ask =
        |filters: Value| json!({"query_text": "Alice dog", "max_tokens": 2000, "filters": filters});
    let march = app.acb(&token, ask(json!({"sessions": ["march"]}))).await;
    assert!(evidence(&march).iter().any(|t| t.contains("Portuguese")));
    let may = app.acb(&token, ask(json!({"sessions": ["may"]}))).await;
    let texts = evidence(&may);
    assert!(!texts.is_empty());
    assert!(
        texts.iter().all(|t| t == BEAGLE || t == PLANT),
        "pinned or other-session memory outside the filter: {texts:#?}"
    );

    for (filters, field) in [
        (
            json!({"since": "2026-05-01T00:00:00Z", "until": "2026-03-01T00:00:00Z"}),
            "filters.until",
        ),
        (
            json!({"sessions": (0..65).map(|i| format!("s{i}")).collect::<Vec<_>>()}),
            "filters.sessions",
        ),
        (json!({"tags_any": [""]}), "filters.tags_any"),
    ] {
        let (status, body) = app.post_acb(&token, &ask(filters)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    for filters in [
        json!({"kinds": ["gossip"]}),
        json!({"since": "last tuesday"}),
        json!({"session": ["may"]}),
        // serde would read a struct from an array of its fields in order.
        json!([null, null]),
    ] {
        let (status, body) = app.post_acb(&token, &ask(filters.clone())).await;
        assert!(status.is_client_error(), "{filters}: {status} {body}");
        assert!(
            body.to_string().contains("filters"),
            "{filters}: the error names the field: {body}"
        );
    }
    // Nothing was stored or changed by the refusals.
    let again = app.acb(&token, ask(json!({"sessions": ["may"]}))).await;
    assert_eq!(evidence(&again), texts);
}
