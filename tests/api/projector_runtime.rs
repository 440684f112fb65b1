//! The projector runtime's guarantees: every event applied exactly once, in
//! order, whatever crashes, concurrent workers, late commits, lost
//! notifications or dropped connections happen. A counting projector records
//! each application in a table without a unique key, so a repeat shows up as
//! a duplicate row and a skip as a missing one.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use memd::{
    db,
    domain::{
        event::{EventRequest, NewEvent},
        redact::Redactor,
        tenant::{Scope, TenantId},
    },
    tenants, write,
};
use memd_core::StoredEvent;
use memd_projectors::{
    Engine, Projector, Table,
    engine::Step,
    notifications::{Heard, Listener},
    projector::BoxFuture,
    runtime::{Runtime, RuntimeConfig},
};
use serde_json::json;
use sqlx::{
    PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

/// Appends one row per application of an event.
struct Counting;

const COUNTING_TABLES: &[Table] = &[Table {
    name: "applied",
    key: &["tenant_id", "seq"],
}];

impl Projector for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn version(&self) -> i32 {
        1
    }
    fn tables(&self) -> &'static [Table] {
        COUNTING_TABLES
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        tenant: &'a str,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
            sqlx::query("INSERT INTO applied (tenant_id, seq) SELECT $1, unnest($2::bigint[])")
                .bind(tenant)
                .bind(seqs)
                .execute(tx)
                .await?;
            Ok(())
        })
    }
}

async fn setup(connect: PgConnectOptions, tenants: &[&str]) -> PgPool {
    let pool = db::connect(connect, 10).await.unwrap();
    sqlx::query("CREATE TABLE projections.applied (tenant_id TEXT NOT NULL, seq BIGINT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    for tenant in tenants {
        tenants::create_tenant(&pool, &TenantId::parse(tenant).unwrap(), Scope::Admin)
            .await
            .unwrap();
    }
    pool
}

fn counting_engine() -> Engine {
    Engine::new(vec![Arc::new(Counting)])
}

fn messages(count: usize) -> Vec<NewEvent> {
    let redactor = Redactor::default();
    (0..count)
        .map(|i| {
            let request: EventRequest = serde_json::from_value(json!({
                "session_id": "s1", "channel": "private",
                "actor": {"type": "human", "id": "u"}, "kind": "message",
                "content": {"text": format!("message {i}")},
            }))
            .unwrap();
            NewEvent::parse(request, &redactor).unwrap()
        })
        .collect()
}

async fn append_messages(pool: &PgPool, tenant: &str, count: usize) {
    let events = messages(count);
    write::append(
        pool,
        &memd_core::seal::Keyring::none(),
        &TenantId::parse(tenant).unwrap(),
        events,
    )
    .await
    .unwrap();
}

/// Fails the test unless every event of `tenant` up to `head` was applied
/// exactly once.
async fn assert_exactly_once(pool: &PgPool, tenant: &str, head: i64) {
    let (rows, distinct, max): (i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT seq), max(seq) FROM projections.applied WHERE tenant_id = $1",
    )
    .bind(tenant)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(rows, distinct, "{tenant}: an event was applied twice");
    assert_eq!(
        (distinct, max),
        (head, Some(head)),
        "{tenant}: an event was skipped"
    );
}

async fn wait_for_cursor(pool: &PgPool, tenant: &str, seq: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let at: Option<i64> = sqlx::query_scalar(
            "SELECT seq FROM projections.cursors WHERE projector = 'counting' AND tenant_id = $1",
        )
        .bind(tenant)
        .fetch_optional(pool)
        .await
        .unwrap();
        if at >= Some(seq) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{tenant}: cursor at {at:?}, never reached {seq}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn fast_poll(listen: bool) -> RuntimeConfig {
    RuntimeConfig {
        poll_interval: Duration::from_millis(50),
        workers: 2,
        listen,
        ..RuntimeConfig::default()
    }
}

#[sqlx::test]
async fn a_crash_between_projection_write_and_cursor_advance_neither_skips_nor_repeats(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = setup(connect, &["acme"]).await;
    append_messages(&pool, "acme", 250).await;
    let crashes = Arc::new(AtomicUsize::new(0));
    let counter = crashes.clone();
    let engine = counting_engine()
        .with_batch_size(40)
        // Crash on the first three batches, and on every batch that ends on a multiple of 7.
        .with_failpoint(Arc::new(move |_, last_seq| {
            let crashed = counter.load(Ordering::SeqCst);
            let crash = crashed < 3 || (last_seq % 7 == 0 && crashed < 10);
            if crash {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            crash
        }));
    let runtime = Runtime::spawn(pool.clone(), Arc::new(engine), fast_poll(true));
    wait_for_cursor(&pool, "acme", 250).await;
    runtime.shutdown().await;
    assert!(crashes.load(Ordering::SeqCst) >= 3, "the failpoint fired");
    assert_exactly_once(&pool, "acme", 250).await;
}

#[sqlx::test]
async fn two_runtimes_on_one_database_never_apply_an_event_twice(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let tenants = ["t1", "t2", "t3"];
    let pool = setup(connect.clone(), &tenants).await;
    // Two "processes": separate pools, separate runtimes, small batches so
    // their transactions interleave.
    let other_pool = db::connect(connect, 10).await.unwrap();
    let engine = Arc::new(counting_engine().with_batch_size(5));
    let first = Runtime::spawn(pool.clone(), engine.clone(), fast_poll(true));
    let second = Runtime::spawn(other_pool.clone(), engine, fast_poll(true));
    let writers: Vec<_> = tenants
        .iter()
        .flat_map(|tenant| (0..4).map(move |w| (tenant.to_string(), w)))
        .map(|(tenant, w)| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for round in 0..10 {
                    append_messages(&pool, &tenant, 1 + (w + round) % 4).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    for tenant in tenants {
        let head: i64 = sqlx::query_scalar("SELECT seq FROM tenant_heads WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_one(&pool)
            .await
            .unwrap();
        wait_for_cursor(&pool, tenant, head).await;
        assert_exactly_once(&pool, tenant, head).await;
    }
    first.shutdown().await;
    second.shutdown().await;
}

/// Inserts an event row directly, as a writer without the head lock would.
async fn insert_raw(conn: &mut PgConnection, tenant: &str, seq: i64) {
    sqlx::query(
        "INSERT INTO events (tenant_id, seq, event_id, created_at, ts, session_id, channel,
                             actor_type, actor_id, kind, sensitivity, tags, content, refs,
                             prev_hash, hash)
         VALUES ($1, $2, 'evt_raw' || $2, now(), now(), 's', 'private', 'human', 'u', 'message',
                 'none', '{}', '{\"text\": \"raw\"}', '{}', '\\x00'::bytea || repeat('0', 31)::bytea,
                 '\\x00'::bytea || repeat('0', 31)::bytea)",
    )
    .bind(tenant)
    .bind(seq)
    .execute(conn)
    .await
    .unwrap();
}

/// How often the prepared statements of `pool`'s one connection whose text
/// holds `like` were run with a plan for any values (generic) and with one
/// made for the values (custom): `pg_prepared_statements` of that session.
async fn plans(pool: &PgPool, like: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(sum(generic_plans), 0)::bigint, coalesce(sum(custom_plans), 0)::bigint
           FROM pg_prepared_statements WHERE statement LIKE $1",
    )
    .bind(format!("%{like}%"))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A tenant's writer retires once its queue is empty, so an idle tenant
/// holds no task; the next append starts another, from the head it left.
#[sqlx::test]
async fn an_idle_tenants_writer_retires_and_the_next_append_starts_another(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = setup(connect, &["acme"]).await;
    let appender = write::Appender::new(
        write::AppendPools {
            by_values: pool.clone(),
            planned_once: db::for_appends(&pool),
        },
        memd_core::seal::Keyring::none(),
    );
    let acme = TenantId::parse("acme").unwrap();
    appender.append(&acme, messages(1)).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while appender.running_writers() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "an idle tenant's writer never retired"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let next = appender.append(&acme, messages(2)).await.unwrap();
    assert_eq!(next.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
    let chains = memd::audit::verify_chains(&pool, None).await.unwrap();
    assert!(
        chains.iter().all(|chain| chain.broken.is_none()),
        "{chains:?}"
    );
    assert_eq!(chains[0].events_ok, 3);
}

/// A single append and the live step that projects it each run their
/// statements on a plan made once: left to choose, PostgreSQL plans them
/// anew at every run, which cost single appends as much as running them.
/// A connection each, so the session's plan counts are the statements'.
#[sqlx::test]
async fn appends_and_live_steps_plan_their_statements_once(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    setup(connect.clone(), &["acme"]).await;
    let one = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(connect)
        .await
        .unwrap();
    let appends = db::for_appends(&one);
    let appender = write::Appender::new(
        write::AppendPools {
            by_values: one.clone(),
            planned_once: appends.clone(),
        },
        memd_core::seal::Keyring::none(),
    );
    let engine = counting_engine();
    let acme = TenantId::parse("acme").unwrap();
    for seq in 1..=8 {
        appender.append(&acme, messages(1)).await.unwrap();
        assert_eq!(
            engine.step(&one, "acme").await.unwrap(),
            Step::Advanced {
                from: seq - 1,
                to: seq
            }
        );
    }
    // The first append reads the head the long way; the other seven are
    // the one statement that extends the head it left.
    let (generic, custom) = plans(&appends, "UPDATE tenant_heads").await;
    assert_eq!(custom, 0, "the append statement was planned for its values");
    assert!(generic >= 7, "the append statement ran {generic} times");
    for statement in ["INSERT INTO applied", "FROM cursors"] {
        let (generic, custom) = plans(&one, statement).await;
        assert_eq!(custom, 0, "{statement}: planned for its values");
        assert!(generic >= 8, "{statement} ran {generic} times");
    }
    assert_exactly_once(&one, "acme", 8).await;

    // Several events in one statement are planned for their values: their
    // rows pay for it, and the plan counts them.
    appender.append(&acme, messages(3)).await.unwrap();
    let (_, custom) = plans(&one, "UPDATE tenant_heads").await;
    assert_eq!(
        custom, 1,
        "a batch's append statement was planned for its values"
    );

    // Appends without a key never look keys up. A single event with one is
    // planned for its values: a plan made once for any keys could read all
    // of the tenant's (lab/results/2026-12-04-profile/).
    let key_lookup = "e.idempotency_key = ANY";
    assert_eq!(plans(&appends, key_lookup).await, (0, 0));
    assert_eq!(plans(&one, key_lookup).await, (0, 0));
    let mut keyed = messages(1);
    keyed[0].idempotency_key = Some("turn-1".to_owned());
    let first = appender.append(&acme, keyed.clone()).await.unwrap();
    assert_eq!(plans(&appends, key_lookup).await, (0, 0));
    let (generic, custom) = plans(&one, key_lookup).await;
    assert_eq!(
        (generic, custom),
        (0, 1),
        "the key was looked up once, for its value"
    );
    let retry = appender.append(&acme, keyed).await.unwrap();
    assert!(retry[0].replayed);
    assert_eq!(
        (retry[0].seq, &retry[0].event_id),
        (first[0].seq, &first[0].event_id)
    );
}

#[sqlx::test]
async fn a_later_seq_committing_first_is_not_applied_before_the_earlier_one(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = setup(connect, &["acme"]).await;
    let engine = counting_engine();
    let mut early = memd_projectors::transaction::begin(&pool).await.unwrap();
    insert_raw(&mut early, "acme", 1).await;
    let mut late = memd_projectors::transaction::begin(&pool).await.unwrap();
    insert_raw(&mut late, "acme", 2).await;
    late.commit().await.unwrap();

    // Seq 2 is visible, seq 1 is not committed yet.
    assert_eq!(
        engine.step(&pool, "acme").await.unwrap(),
        Step::Gap { after: 0, next: 2 }
    );
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM projections.applied")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(applied, 0, "nothing is applied past the hole");

    early.commit().await.unwrap();
    assert_eq!(
        engine.step(&pool, "acme").await.unwrap(),
        Step::Advanced { from: 0, to: 2 }
    );
    assert_eq!(engine.step(&pool, "acme").await.unwrap(), Step::CaughtUp);
    assert_exactly_once(&pool, "acme", 2).await;
}

#[sqlx::test]
async fn polling_alone_catches_up_when_no_notification_arrives(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = setup(connect, &["acme"]).await;
    let runtime = Runtime::spawn(pool.clone(), Arc::new(counting_engine()), fast_poll(false));
    append_messages(&pool, "acme", 30).await;
    wait_for_cursor(&pool, "acme", 30).await;
    runtime.shutdown().await;
    assert_exactly_once(&pool, "acme", 30).await;
}

#[sqlx::test]
async fn notifications_alone_wake_the_workers(_: PgPoolOptions, connect: PgConnectOptions) {
    let pool = setup(connect, &["acme"]).await;
    let config = RuntimeConfig {
        poll_interval: Duration::from_secs(3600),
        ..fast_poll(true)
    };
    let runtime = Runtime::spawn(pool.clone(), Arc::new(counting_engine()), config);
    append_messages(&pool, "acme", 1).await;
    // The first event may be found by the start-up poll; once it is applied
    // the listener is up, and the next poll is an hour away.
    wait_for_cursor(&pool, "acme", 1).await;
    append_messages(&pool, "acme", 5).await;
    wait_for_cursor(&pool, "acme", 6).await;
    runtime.shutdown().await;
    assert_exactly_once(&pool, "acme", 6).await;
}

#[sqlx::test]
async fn workers_reconnect_after_losing_their_connections_and_catch_up(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = setup(connect, &["acme"]).await;
    let config = RuntimeConfig {
        poll_interval: Duration::from_secs(3600),
        ..fast_poll(true)
    };
    let runtime = Runtime::spawn(pool.clone(), Arc::new(counting_engine()), config);
    append_messages(&pool, "acme", 10).await;
    wait_for_cursor(&pool, "acme", 10).await;

    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()) k",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(killed >= 1, "the listener's connection was terminated");
    append_messages(&pool, "acme", 10).await;
    wait_for_cursor(&pool, "acme", 20).await;
    runtime.shutdown().await;
    assert_exactly_once(&pool, "acme", 20).await;
}

/// A projector whose version changed replays the tenant's log from zero, and
/// says so at commit as a rebuild does (`<tenant>:0`): readers drop what
/// they derived from the old projections on that notice alone, not on a
/// late notice of a seq they already read.
#[sqlx::test]
async fn a_projector_of_a_new_version_announces_that_projections_went_back(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = setup(connect, &["acme"]).await;
    let runtime = Runtime::spawn(pool.clone(), Arc::new(counting_engine()), fast_poll(true));
    append_messages(&pool, "acme", 3).await;
    wait_for_cursor(&pool, "acme", 3).await;
    runtime.shutdown().await;

    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener
        .listen(memd_projectors::PROJECTED_CHANNEL)
        .await
        .unwrap();
    // The cursor was written by an older version of the projector.
    sqlx::query("UPDATE projections.cursors SET version = 0 WHERE projector = 'counting'")
        .execute(&pool)
        .await
        .unwrap();
    let runtime = Runtime::spawn(pool.clone(), Arc::new(counting_engine()), fast_poll(true));
    append_messages(&pool, "acme", 1).await;
    let mut heard = Vec::new();
    while !heard.contains(&"acme:4".to_owned()) {
        let notice = tokio::time::timeout(Duration::from_secs(30), listener.recv())
            .await
            .expect("no notice of the projections within 30 s")
            .unwrap();
        heard.push(notice.payload().to_owned());
    }
    runtime.shutdown().await;
    assert_eq!(
        heard.first().map(String::as_str),
        Some("acme:0"),
        "{heard:?}"
    );
    // Replayed from zero: the three events before the change are applied
    // again (a reset empties the projector's tables), then the new one.
    assert_exactly_once(&pool, "acme", 4).await;
}

/// The next thing `heard` hears, within 10 s.
async fn next_heard(heard: &mut tokio::sync::mpsc::UnboundedReceiver<Heard>) -> Option<Heard> {
    tokio::time::timeout(Duration::from_secs(10), heard.recv())
        .await
        .expect("heard within 10 s")
}

fn notification(channel: &str, payload: &str) -> Option<Heard> {
    Some(Heard::Notification {
        channel: channel.to_owned(),
        payload: payload.to_owned(),
    })
}

async fn notify(pool: &PgPool, channel: &str, payload: &str) {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(pool)
        .await
        .unwrap();
}

/// Sessions of the test's database whose last statement LISTENed on a
/// channel named like `channel`.
async fn listening_sessions(pool: &PgPool, channel: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT query FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN%' AND query LIKE '%' || $1 || '%'",
    )
    .bind(channel)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn one_listener_hands_each_subscriber_its_channels_and_listens_again_after_losing_them(
    pool: PgPool,
) {
    let mut listener = Listener::default();
    let mut only_a = listener.subscribe(&["memd_test_a"]);
    let mut both = listener.subscribe(&["memd_test_a", "memd_test_b"]);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let listening = listener.spawn(pool.clone(), stopped);
    assert_eq!(next_heard(&mut only_a).await, Some(Heard::Listening));
    assert_eq!(next_heard(&mut both).await, Some(Heard::Listening));
    assert_eq!(listening_sessions(&pool, "memd_test_").await.len(), 1);

    notify(&pool, "memd_test_b", "1").await;
    notify(&pool, "memd_test_a", "2").await;
    assert_eq!(
        next_heard(&mut both).await,
        notification("memd_test_b", "1")
    );
    assert_eq!(
        next_heard(&mut both).await,
        notification("memd_test_a", "2")
    );
    // Not told of a channel it did not ask for.
    assert_eq!(
        next_heard(&mut only_a).await,
        notification("memd_test_a", "2")
    );

    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN%memd_test_a%') k",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(killed, 1);
    // Whatever was sent while it was away is lost: every subscriber hears
    // that it listens again, then what is sent after.
    assert_eq!(next_heard(&mut only_a).await, Some(Heard::Listening));
    assert_eq!(next_heard(&mut both).await, Some(Heard::Listening));
    notify(&pool, "memd_test_a", "3").await;
    assert_eq!(
        next_heard(&mut only_a).await,
        notification("memd_test_a", "3")
    );
    assert_eq!(
        next_heard(&mut both).await,
        notification("memd_test_a", "3")
    );

    stop.send(true).unwrap();
    listening.await.unwrap();
    assert_eq!(
        next_heard(&mut only_a).await,
        None,
        "a stopped listener says so"
    );
}

/// Each listening session costs every append's commit a signal and a
/// queue read: a daemon's projection workers, embeddings worker, caches and
/// admin job worker share one.
#[sqlx::test]
async fn a_daemon_hears_appends_projections_revocations_and_jobs_on_one_connection(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = crate::helpers::spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    app.append(&token, &crate::helpers::message("s1", "hello"))
        .await;
    crate::helpers::wait_projected(&app.pool, "acme").await;
    // Projected by the start-up poll, perhaps before anything listened.
    let mut sessions = listening_sessions(&app.pool, "").await;
    for _ in 0..100 {
        if !sessions.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        sessions = listening_sessions(&app.pool, "").await;
    }
    assert_eq!(sessions.len(), 1, "listening sessions: {sessions:?}");
    for channel in [
        memd_projectors::EVENTS_CHANNEL,
        memd_projectors::PROJECTED_CHANNEL,
        "memd_tokens",
        "apalis::job::insert",
    ] {
        assert!(
            sessions[0].contains(channel),
            "{channel} not in {:?}",
            sessions[0]
        );
    }
}

/// One projection that fails (its stored tree nodes deleted under it) holds
/// back only itself: the tenant's other projections reach the head, and the
/// failure is visible to operators.
#[sqlx::test]
async fn a_failing_projection_holds_back_only_itself(
    _: sqlx::postgres::PgPoolOptions,
    connect: sqlx::postgres::PgConnectOptions,
) {
    let app = crate::helpers::spawn_daemon(connect).await;
    let token = app.tenant("acme").await;
    for i in 1..=40 {
        app.append(&token, &crate::helpers::message("s1", &format!("note {i}")))
            .await;
    }
    crate::helpers::wait_projected(&app.pool, "acme").await;
    sqlx::query("DELETE FROM projections.event_tree WHERE tenant_id = 'acme'")
        .execute(&app.pool)
        .await
        .unwrap();
    // Seq 64 completes a block whose parent's left half (leaves 0-31) is
    // gone: the tree projector fails there.
    for i in 41..=70 {
        app.append(&token, &crate::helpers::message("s1", &format!("note {i}")))
            .await;
    }
    let cursor = |projector: &'static str| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT seq FROM projections.cursors WHERE tenant_id = 'acme' AND projector = $1",
            )
            .bind(projector)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let bound = std::time::Duration::from_secs(60);
    crate::helpers::wait_until(bound, "the other projections reach seq 70", || async {
        let (chunks, decisions) = (cursor("chunks").await, cursor("decisions").await);
        match chunks >= 70 && decisions >= 70 {
            true => Ok(()),
            false => Err(format!("chunks at {chunks}, decisions at {decisions}")),
        }
    })
    .await;
    assert!(
        cursor("event_tree").await < 64,
        "the tree cannot pass the hole"
    );
    let failed: String =
        sqlx::query_scalar("SELECT projector FROM projections.failures WHERE tenant_id = 'acme'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(failed, "event_tree");
    let (status, projections) = app.get_json("/api/v1/admin/projections", &token).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(
        projections.to_string().contains("event_tree"),
        "{projections}"
    );
    // Bundles still answer, from what the other projections hold.
    let acb = app
        .acb(
            &token,
            serde_json::json!({"session_id": "q", "query_text": "note 69"}),
        )
        .await;
    assert!(acb.to_string().contains("note 69"), "{acb}");
}
