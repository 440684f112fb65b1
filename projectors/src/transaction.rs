//! Beginning a transaction in a way a cancelled caller cannot spoil.
//!
//! sqlx 0.9.0 counts a transaction as begun only once `BEGIN`'s answer has
//! been read. A future dropped before that (a client that hangs up, a
//! timeout, a worker told to stop) leaves the session inside a transaction
//! that nothing rolls back, and the pool hands that connection to its next
//! caller: whose statements then run inside it, are never committed, and
//! hold their locks (sqlx issues 4385 and 4393, fixed upstream after
//! 0.9.0). memd's tests met it as a test that hung on a lock held by the
//! pool's own idle connection.
//!
//! Here `BEGIN` runs in a task of its own. A caller that goes away drops
//! the task's answer, a transaction sqlx knows it began, and rolls it back.
//! The other ways to begin (`Pool::begin`, `Connection::begin`, savepoints
//! through `Acquire::begin`, ...) are refused by clippy (`clippy.toml`).
//!
//! The task also waits for the connection: a caller cancelled while the
//! pool is exhausted still takes one when it frees up (or gives up at the
//! pool's acquire timeout), and hands it straight back. Splitting the
//! acquire from the `BEGIN` would need sqlx's hidden `Transaction::begin`;
//! memd's begins are rarely cancelled (appends run in their tenant's
//! writer task, projection steps only at shutdown), so this stays simple.

use sqlx::{PgConnection, PgPool, Postgres, Row, Transaction};

/// `pool.begin()`, safe to cancel.
pub async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    begin_with(pool, "BEGIN").await
}

/// `pool.begin_with(statement)` (a `BEGIN` with settings), safe to cancel.
pub async fn begin_with(
    pool: &PgPool,
    statement: impl sqlx::SqlSafeStr + Send + 'static,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let pool = pool.clone();
    #[allow(clippy::disallowed_methods)]
    let begun = tokio::spawn(async move { pool.begin_with(statement).await });
    begun.await.map_err(task_failed)?
}

fn task_failed(err: tokio::task::JoinError) -> sqlx::Error {
    sqlx::Error::Protocol(format!("beginning a transaction: {err}"))
}

/// Whether the session is inside a transaction block, whatever sqlx
/// believes: `now()` (the transaction's start) equals
/// `statement_timestamp()` only in a transaction's first statement. Sent
/// as one simple-protocol message, since the extended protocol's parse,
/// bind and execute each restart the statement's clock. An error (a block
/// already aborted) counts as inside.
pub async fn in_block(conn: &mut PgConnection) -> bool {
    !sqlx::raw_sql("SELECT now() = statement_timestamp()")
        .fetch_one(conn)
        .await
        .and_then(|row| row.try_get::<bool, _>(0))
        .unwrap_or(false)
}
