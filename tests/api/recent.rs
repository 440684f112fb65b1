//! The recent window kept between bundles: a session's events that
//! projections had reached are read from the log once, and every later
//! bundle of the session reads only what came after them, yet shows what a
//! daemon reading the whole window afresh would.

use std::time::Duration;

use memd::{
    domain::tenant::{Scope, TenantId},
    startup::ServeConfig,
    tenants,
};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    acb::{section, texts},
    helpers::{
        memd_cli, message, rewrite_and_rehash, spawn_daemon, spawn_daemon_with, test_keyring,
        wait_projected, wait_until,
    },
};

fn recent(acb: &Value) -> (u64, u64) {
    let report = &acb["provenance"]["recent_window"];
    (
        report["events"].as_u64().expect("events"),
        report["read"].as_u64().expect("read"),
    )
}

fn continue_in(session: &str) -> Value {
    json!({"session_id": session, "intent": "continue"})
}

#[sqlx::test]
async fn a_window_is_read_from_the_log_only_past_what_an_earlier_bundle_kept(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect.clone()).await;
    let token = app.tenant("acme").await;
    for text in ["First point.", "Second point.", "Third point."] {
        app.append(&token, &message("s1", text)).await;
    }
    app.append(&token, &message("s2", "Another conversation."))
        .await;
    wait_projected(&app.pool, "acme").await;

    let first = app.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&first), (3, 3), "{first:#}");
    let second = app.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&second), (3, 0), "nothing new: nothing read");
    assert_eq!(
        section(&first, "recent_window"),
        section(&second, "recent_window")
    );

    // One new event: only it is read, and it shows, newest last.
    app.append(&token, &message("s1", "Fourth point.")).await;
    wait_projected(&app.pool, "acme").await;
    let third = app.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&third), (4, 1), "{third:#}");
    assert_eq!(
        texts(&third, "recent_window"),
        [
            "First point.\n",
            "Second point.\n",
            "Third point.\n",
            "Fourth point.\n"
        ]
    );
    let fourth = app.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&fourth), (4, 0));

    // A daemon that kept nothing reads the whole window and shows the same.
    let fresh = spawn_daemon(connect).await;
    let afresh = fresh.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&afresh), (4, 4));
    assert_eq!(
        section(&afresh, "recent_window"),
        section(&fourth, "recent_window")
    );
    assert_eq!(afresh["omissions"], fourth["omissions"]);

    // A window is the session's own and as long as the policy says.
    let other = app.acb(&token, continue_in("s2")).await;
    assert_eq!(texts(&other, "recent_window"), ["Another conversation.\n"]);
    app.put_policy(&token, &json!({"recent_window_events": 2}))
        .await;
    let shorter = app.acb(&token, continue_in("s1")).await;
    assert_eq!(
        texts(&shorter, "recent_window"),
        ["Third point.\n", "Fourth point.\n"]
    );
}

/// Events the projections have not reached are shown from the log's content
/// and are not kept: every bundle reads them again until projections reach
/// them (they then cite their chunks too), and only then are they kept.
#[sqlx::test]
async fn events_not_projected_yet_are_read_again_until_they_are(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon_with(
        connect.clone(),
        ServeConfig {
            keyring: test_keyring(),
            projection: None,
            ..ServeConfig::default()
        },
    )
    .await;
    let token = app.tenant("acme").await;
    app.append(&token, &message("s1", "Said before projection."))
        .await;
    app.append(&token, &message("s1", "Also before.")).await;
    for _ in 0..2 {
        let lagging = app.acb(&token, continue_in("s1")).await;
        assert_eq!(recent(&lagging), (2, 2), "{lagging:#}");
        let refs = &section(&lagging, "recent_window")[0]["refs"];
        assert_eq!(refs.as_array().unwrap().len(), 1, "the event alone: {refs}");
    }

    // Another daemon's workers project them.
    let worker = spawn_daemon(connect).await;
    wait_projected(&worker.pool, "acme").await;
    let projected = app.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&projected), (2, 2));
    let refs = &section(&projected, "recent_window")[0]["refs"];
    assert_eq!(refs.as_array().unwrap().len(), 2, "chunk and event: {refs}");
    let kept = app.acb(&token, continue_in("s1")).await;
    assert_eq!(recent(&kept), (2, 0));
    assert_eq!(
        section(&kept, "recent_window"),
        section(&projected, "recent_window")
    );
}

/// A window is kept once for everyone who asks in the session, and each
/// bundle is given only what its own agent and channel may see of it.
#[sqlx::test]
async fn a_kept_window_shows_each_agent_only_its_own_private_memory(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let operator = app.tenant("acme").await;
    let tenant = TenantId::parse("acme").unwrap();
    let agent = |name: &'static str| {
        let pool = app.pool.clone();
        let tenant = tenant.clone();
        async move {
            tenants::issue_token(&pool, &tenant, Scope::Write, Some(name))
                .await
                .unwrap()
                .expect("the tenant exists")
                .expose()
                .to_string()
        }
    };
    let (ada, bob) = (agent("ada").await, agent("bob").await);
    app.append(&ada, &message("s1", "Ada's own note on the heron."))
        .await;
    app.append(&bob, &message("s1", "Bob's own note on the kestrel."))
        .await;
    app.append(
        &operator,
        &json!({"session_id": "s1", "channel": "team", "actor": {"type": "human", "id": "lead"},
                "kind": "message", "content": {"text": "Team note for everyone."}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    // The operator's bundle keeps the whole window...
    let all = app.acb(&operator, continue_in("s1")).await;
    assert_eq!(recent(&all), (3, 3));
    assert_eq!(texts(&all, "recent_window").len(), 3);
    // ...which each agent's bundle then uses, seeing its own part of it.
    let for_ada = app.acb(&ada, continue_in("s1")).await;
    assert_eq!(recent(&for_ada), (3, 0));
    assert_eq!(
        texts(&for_ada, "recent_window"),
        [
            "Ada's own note on the heron.\n",
            "Team note for everyone.\n"
        ]
    );
    let for_bob = app.acb(&bob, continue_in("s1")).await;
    assert!(!for_bob.to_string().contains("heron"), "{for_bob:#}");
    // A public bundle is given no private or team memory, and names what
    // it left out, as when the window is read afresh.
    let public = app
        .acb(
            &operator,
            json!({"session_id": "s1", "intent": "continue", "channel": "public"}),
        )
        .await;
    assert!(texts(&public, "recent_window").is_empty(), "{public:#}");
    let privacy: Vec<&Value> = public["omissions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["reason"] == "privacy" && o["section"] == "recent_window")
        .collect();
    assert_eq!(privacy.len(), 1, "{public:#}");
    assert_eq!(privacy[0]["count"], 3);
}

/// A rebuild makes projections anew, perhaps from a changed log or a new
/// chunker: the kept windows of the tenant are dropped when its
/// notification arrives, and the next bundle reads its window afresh.
#[sqlx::test]
async fn a_rebuild_drops_the_kept_windows(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    app.append(&token, &message("s1", "We ship on Friday."))
        .await;
    app.append(&token, &message("s1", "Agreed.")).await;
    wait_projected(&app.pool, "acme").await;
    assert_eq!(recent(&app.acb(&token, continue_in("s1")).await), (2, 2));
    assert_eq!(recent(&app.acb(&token, continue_in("s1")).await), (2, 0));

    // What a superuser could do to the log; the rebuild projects what the
    // log says now.
    rewrite_and_rehash(&app.pool, "acme", 1, "We ship on Monday.").await;
    let (code, _, stderr) =
        memd_cli(&app.database_url().await, &["rebuild", "--tenant", "acme"]).await;
    assert_eq!(code, 0, "{stderr}");
    wait_until(
        Duration::from_secs(10),
        "the window read again after the rebuild",
        async || {
            let acb = app.acb(&token, continue_in("s1")).await;
            if texts(&acb, "recent_window")[0] == "We ship on Monday.\n" {
                Ok(())
            } else {
                Err(format!("the window kept before the rebuild: {acb:#}"))
            }
        },
    )
    .await;
}
