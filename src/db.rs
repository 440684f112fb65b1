//! The PostgreSQL connection pool and the embedded migrations.

use std::time::Duration;

use anyhow::Context;

use sqlx::{
    Postgres,
    migrate::{MigrateDatabase, Migrator},
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
};

pub mod private_server;
pub mod roles;

/// The schema in `migrations/`, compiled into the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!();

/// Applies memd's migrations, then creates the background-job tables of
/// apalis (in the `apalis` schema, with their own migration history).
///
/// Run as the database's owner, it also grants the daemon's role
/// ([`roles`]). Run as a role that may not change the schema (the daemon's
/// own), it changes nothing and only checks that every migration has been
/// applied, so `memd serve` can log in as `memd_app`.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    if !roles::owns_schema(pool).await? {
        let applied: Vec<i64> = sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success",
        )
        .fetch_all(pool)
        .await
        .context(
            "reading which migrations are applied (run `memd migrate` as the database owner)",
        )?;
        let pending: Vec<String> = MIGRATOR
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .map(|m| m.version.to_string())
            .collect();
        anyhow::ensure!(
            pending.is_empty(),
            "migrations {} are not applied and this role may not apply them: \
             run `memd migrate` as the database owner",
            pending.join(", ")
        );
        return Ok(());
    }
    MIGRATOR.run(pool).await.context("applying migrations")?;
    crate::admin::jobs::setup(pool)
        .await
        .context("creating the job queue tables")?;
    roles::grant(pool)
        .await
        .context("granting the daemon's role (memd_app)")?;
    Ok(())
}

/// Connects a pool to an existing database; a connection is waited for up
/// to 10 s (operator commands, which had rather wait than fail).
pub async fn connect(
    options: PgConnectOptions,
    max_connections: u32,
) -> Result<PgPool, sqlx::Error> {
    connect_waiting_at_most(options, max_connections, Duration::from_secs(10)).await
}

/// [`connect`], with a bound on the wait for a connection: the daemon's
/// requests fail fast (503) while the database is down instead of hanging.
pub async fn connect_waiting_at_most(
    options: PgConnectOptions,
    max_connections: u32,
    acquire_timeout: Duration,
) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect_with(options)
        .await
}

/// A pool for single-event appends beside `pool`: the same database, size
/// and acquire timeout, connecting only as appends need it, whose sessions
/// plan each prepared statement once for whatever values it gets
/// (`plan_cache_mode = force_generic_plan`).
///
/// Left to choose, PostgreSQL planned the one-statement append anew at
/// every execution, 0.36 ms of planning beside 0.95 ms of running it
/// (pg_stat_statements over single appends): it knows the length of an
/// array given as a value but not of a parameter, so the plan for any
/// values looks ten times dearer and is never chosen. Appends of several
/// events (batches, merged requests) stay on `pool`, planned for their
/// values: planning is shared by their rows, and with every statement of
/// the appender planned once they ran slower (`AppendPools`,
/// `lab/results/2026-12-04-warm-start/`). So do events with an idempotency key:
/// planned for any keys, the lookup of a key could read all of the
/// tenant's keys (`lab/results/2026-12-04-profile/`). Bundles keep `pool` too:
/// which search terms are common decides their plans.
pub fn for_appends(pool: &PgPool) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .options([("plan_cache_mode", "force_generic_plan")]);
    PgPoolOptions::new()
        .max_connections(pool.options().get_max_connections())
        .acquire_timeout(pool.options().get_acquire_timeout())
        .connect_lazy_with(options)
}

/// Whether `err` means the database cannot serve now but should again soon:
/// no connection to be had, or a session the server ended (a shutdown or
/// restart, an administrator's termination), or the server full.
pub fn unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // Class 08: connection exception. 57P01-57P03: admin shutdown,
            // crash shutdown, cannot connect now. 53300: too many connections.
            // 25006: a write reached a read-only server, which behind a
            // failover proxy is a demoted leader not yet taken out of the
            // leader port (ops/ha): the next connection reaches the new one.
            code.starts_with("08")
                || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300" | "25006")
        }),
        _ => false,
    }
}

/// The URL of database `name` on the server of `url` (its query kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(base, query)| (base, Some(query)));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

/// Creates the database named in `url` when it does not exist yet, so a first
/// `memd serve` works on a bare PostgreSQL server.
pub async fn create_database_if_missing(url: &str) -> Result<(), sqlx::Error> {
    if !Postgres::database_exists(url).await? {
        tracing::info!("creating the database");
        Postgres::create_database(url).await?;
    }
    Ok(())
}

/// A database created for one run (a benchmark, a scenario run) and
/// dropped at its end.
pub struct ScratchDatabase {
    admin: PgConnectOptions,
    pub name: String,
    pub options: PgConnectOptions,
}

impl ScratchDatabase {
    /// A new database on the server of `database_url`, named `<prefix>_<ulid>`.
    pub async fn create(database_url: &str, prefix: &str) -> anyhow::Result<Self> {
        Self::named(database_url, &crate::domain::new_id(prefix).to_lowercase()).await
    }

    /// The database `name` on the server of `database_url`, created if it
    /// does not exist: a benchmark's history kept between runs, to measure
    /// again without loading it again (the caller decides whether to drop it).
    pub async fn named(database_url: &str, name: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !name.is_empty()
                && name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "database name {name:?}: use 1 to 63 lowercase letters, digits and _"
        );
        let base: PgConnectOptions = database_url
            .parse()
            .context("DATABASE_URL is not a PostgreSQL URL")?;
        create_database_if_missing(&with_database(database_url, name))
            .await
            .context("connecting to PostgreSQL")?;
        Ok(Self {
            options: base.clone().database(name),
            admin: base.database("postgres"),
            name: name.to_owned(),
        })
    }

    pub async fn drop_now(self) -> anyhow::Result<()> {
        let pool = connect(self.admin, 1).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&pool)
        .await?;
        Ok(())
    }
}

/// Whether the database answers, and takes writes (`/readyz`): behind a
/// failover proxy the server answering can be a standby or a demoted
/// leader for a moment, reachable but read-only.
pub async fn writable(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'
              AS "writable!""#
    )
    .fetch_one(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Behind a failover proxy, a connection can reach the demoted leader
    /// (read-only now) for a moment: the client must be told to retry, as
    /// for any other connection trouble, not that memd failed.
    #[sqlx::test]
    async fn a_write_refused_by_a_read_only_server_is_unavailable(pool: PgPool) {
        let mut connection = pool.acquire().await.unwrap();
        sqlx::query("SET default_transaction_read_only = on")
            .execute(&mut *connection)
            .await
            .unwrap();
        let refused = sqlx::query("CREATE TABLE written (x int)")
            .execute(&mut *connection)
            .await
            .unwrap_err();
        assert!(unavailable(&refused), "{refused}");
        let bug = sqlx::query("SELECT * FROM no_such_table")
            .execute(&mut *connection)
            .await
            .unwrap_err();
        assert!(!unavailable(&bug), "{bug}");
    }

    #[sqlx::test]
    async fn a_read_only_server_is_reachable_but_not_writable(pool: PgPool) {
        assert!(writable(&pool).await.unwrap());
        let read_only = PgPoolOptions::new()
            .after_connect(|connection, _| {
                Box::pin(async move {
                    sqlx::query("SET default_transaction_read_only = on")
                        .execute(connection)
                        .await
                        .map(drop)
                })
            })
            .connect_with((*pool.connect_options()).clone())
            .await
            .unwrap();
        assert!(!writable(&read_only).await.unwrap());
    }
}
