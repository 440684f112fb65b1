//! A transaction whose caller goes away while `BEGIN` is on the wire leaves
//! no open transaction behind on the pooled connection (sqlx 0.9.0 did:
//! the next caller's statements ran inside it, uncommitted, holding locks).

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

#[sqlx::test]
async fn a_begin_cancelled_midway_leaves_the_connection_outside_any_transaction(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // One connection, so every round reuses the one the cancelled begin had.
    let pool = memd::db::connect(connect, 1).await.unwrap();
    let outside = async || -> bool {
        let mut conn = pool.acquire().await.unwrap();
        !memd_projectors::transaction::in_block(&mut conn).await
    };
    assert!(outside().await);
    // Dropped after 1 to 4 polls: one lands while BEGIN is on the wire
    // (the pool's health check goes first). A BEGIN that takes its time, so
    // the window is wide enough to land in every run.
    for polls in 1..=4 {
        let mut begin = Box::pin(memd_projectors::transaction::begin_with(
            &pool,
            "BEGIN; SELECT pg_sleep(0.05)",
        ));
        for _ in 0..polls {
            let begun = tokio::select! {
                biased;
                _ = &mut begin => true,
                () = async {} => false,
            };
            if begun {
                break;
            }
            // The runtime takes in the server's answer meanwhile; the
            // future reads it only when polled again.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(begin);
        assert!(
            outside().await,
            "dropped after {polls} polls: the connection came back inside a transaction"
        );
    }
}

#[sqlx::test]
async fn the_job_queues_pool_closes_a_connection_released_inside_a_transaction(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = memd::db::connect(connect, 2).await.unwrap();
    let queue = memd::admin::jobs::queue_pool(&pool);
    // What a cancelled BEGIN of apalis' leaves: a block sqlx does not know of.
    let mut conn = queue.acquire().await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut *conn).await.unwrap();
    drop(conn);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if open == 0 && queue.num_idle() as u32 == queue.size() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a session stayed in its transaction ({open}), or was not released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    queue.close().await;
}
